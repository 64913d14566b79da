// train::ClusterSpec, its JSON, the Slurm list expansions and the environment resolvers (TF_CONFIG,
// Slurm): the behaviours of TensorFlow's server_lib_test.py, slurm_cluster_resolver_test.py and
// tfconfig_cluster_resolver_test.py, plus tessera's validation.
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tessera/tessera.h"
#include "transport/hostlist.h"
#include "tests/testing/test_util.h"

namespace tessera::train {

// Readable failures: a spec prints as its JSON, a task as job:index.
void PrintTo(const ClusterSpec& spec, std::ostream* os) { *os << spec.to_json(); }
void PrintTo(const TaskSpec& task, std::ostream* os) { *os << task.job << ":" << task.index; }

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Strings = std::vector<std::string>;

using tessera::testing::error_of;

// ---- Construction ----

// The sparse constructor takes exactly SparseJobs; other maps (and the dense type) go elsewhere.
static_assert(std::is_constructible_v<ClusterSpec, ClusterSpec::SparseJobs>);
static_assert(std::is_constructible_v<ClusterSpec, const ClusterSpec::SparseJobs&>);
static_assert(std::is_constructible_v<ClusterSpec, ClusterSpec::DenseJobs>);
static_assert(!std::is_constructible_v<ClusterSpec, std::map<std::string, std::map<long, std::string>>>);
static_assert(!std::is_constructible_v<ClusterSpec, std::map<std::string, std::string>>);

// Addresses that would misbehave later are refused where the spec is made: a port with a leading
// zero (printed and matched in keys files as written), two tasks on one address (the second
// server could never bind), and a huge host name is quoted by a prefix only.
TEST(ClusterSpecTest, LeadingZeroPortsSharedAddressesAndHugeHostsAreRefused) {
  try {
    ClusterSpec({{"worker", {"localhost:0023001"}}});
    ADD_FAILURE() << "a port with a leading zero was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("leading zero (write 23001)"));
  }
  try {
    ClusterSpec({{"worker", {"localhost:2222"}}, {"ps", {"localhost:2222"}}});
    ADD_FAILURE() << "two tasks on one address were accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("have the same address \"localhost:2222\""));
  }
  EXPECT_NO_THROW(ClusterSpec({{"worker", {"localhost:2222", "localhost:2223"}}}));
  const std::string huge = std::string(3 << 20, 'h') + "!:2222";
  try {
    ClusterSpec({{"worker", {huge}}});
    ADD_FAILURE() << "a 3 MB host was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_LT(std::string(e.what()).size(), 1000u) << "the host is not echoed whole";
  }
}

TEST(ClusterSpecTest, BracedListIsTheDenseForm) {
  ClusterSpec spec({{"ps", {"ps0:2222"}}, {"worker", {"w0:2222", "w1:2222"}}});
  EXPECT_THAT(spec.jobs(), ElementsAre("ps", "worker"));
  EXPECT_EQ(spec.num_tasks("ps"), 1);
  EXPECT_EQ(spec.num_tasks("worker"), 2);
  EXPECT_THAT(spec.task_indices("worker"), ElementsAre(0, 1));
  EXPECT_EQ(spec.task_address("worker", 0), "w0:2222");
  EXPECT_EQ(spec.task_address("worker", 1), "w1:2222");
  EXPECT_THAT(spec.job_tasks("worker"), ElementsAre("w0:2222", "w1:2222"));
  EXPECT_THAT(spec.job_tasks("ps"), ElementsAre("ps0:2222"));
}

TEST(ClusterSpecTest, BracedFormsCompileWithOneOrManyAddresses) {
  // One address per job: {"job", {"a:1"}} also fits std::map's iterator-pair constructor; the
  // initializer-list overload keeps this unambiguous (and correct).
  ClusterSpec one({{"local", {"localhost:2222"}}});
  EXPECT_EQ(one.task_address("local", 0), "localhost:2222");
  ClusterSpec two({{"job", {"a:1", "b:2"}}});
  EXPECT_THAT(two.job_tasks("job"), ElementsAre("a:1", "b:2"));
  // As a by-value parameter (how Server takes it) and copy-list-initialized.
  auto count = [](ClusterSpec s) { return s.num_tasks("job"); };
  EXPECT_EQ(count({{"job", {"a:1", "b:2"}}}), 2);
  EXPECT_EQ(count({{"job", {"a:1"}}}), 1);
  ClusterSpec copy_init = {{"job", {"a:1", "b:2", "c:3"}}};
  EXPECT_EQ(copy_init.num_tasks("job"), 3);
}

TEST(ClusterSpecTest, DenseMapConstructor) {
  ClusterSpec::DenseJobs jobs{{"worker", {"a:1", "b:2"}}, {"ps", {"c:3"}}};
  ClusterSpec spec(jobs);
  EXPECT_THAT(spec.jobs(), ElementsAre("ps", "worker"));
  EXPECT_EQ(spec.task_address("worker", 1), "b:2");
  EXPECT_EQ(spec, ClusterSpec({{"worker", {"a:1", "b:2"}}, {"ps", {"c:3"}}}));
}

TEST(ClusterSpecTest, SparseJobsKeepTheirIndicesAndJobTasksHasHoles) {
  ClusterSpec::SparseJobs jobs{{"worker", {{1, "w1:2222"}, {4, "w4:2222"}}}, {"ps", {{0, "ps0:2222"}}}};
  ClusterSpec spec(jobs);
  EXPECT_EQ(spec.num_tasks("worker"), 2);
  EXPECT_THAT(spec.task_indices("worker"), ElementsAre(1, 4));
  EXPECT_EQ(spec.task_address("worker", 4), "w4:2222");
  // TensorFlow returns [None, 'w1', None, None, 'w4']; here the holes are "".
  EXPECT_THAT(spec.job_tasks("worker"), ElementsAre("", "w1:2222", "", "", "w4:2222"));
  std::string msg = error_of<InvalidArgumentError>([&] { spec.task_address("worker", 0); });
  EXPECT_THAT(msg, HasSubstr("no task 0 in job \"worker\""));
  EXPECT_THAT(msg, HasSubstr("task indices: 1, 4"));
}

TEST(ClusterSpecTest, SparseRvalueAndConstLvalue) {
  const ClusterSpec::SparseJobs jobs{{"worker", {{2, "h:1"}}}};
  ClusterSpec from_const(jobs);
  ClusterSpec from_rvalue(ClusterSpec::SparseJobs{{"worker", {{2, "h:1"}}}});
  EXPECT_EQ(from_const, from_rvalue);
  EXPECT_THAT(from_const.task_indices("worker"), ElementsAre(2));
}

TEST(ClusterSpecTest, EqualityIgnoresHowTheSpecWasSpelled) {
  ClusterSpec dense({{"worker", {"a:1", "b:2"}}});
  ClusterSpec sparse(ClusterSpec::SparseJobs{{"worker", {{0, "a:1"}, {1, "b:2"}}}});
  EXPECT_EQ(dense, sparse);
  EXPECT_NE(dense, ClusterSpec({{"worker", {"b:2", "a:1"}}}));
  EXPECT_NE(dense, ClusterSpec(ClusterSpec::SparseJobs{{"worker", {{0, "a:1"}, {2, "b:2"}}}}));
  EXPECT_NE(dense, ClusterSpec({{"worker", {"a:1", "b:2"}}, {"ps", {"c:3"}}}));
  ClusterSpec copy = dense;
  EXPECT_EQ(copy, dense);
}

TEST(ClusterSpecTest, EmptyJobsAndEmptyCluster) {
  ClusterSpec spec({{"worker", {}}});
  EXPECT_EQ(spec.num_tasks("worker"), 0);
  EXPECT_TRUE(spec.task_indices("worker").empty());
  EXPECT_TRUE(spec.job_tasks("worker").empty());
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { spec.task_address("worker", 0); }),
              HasSubstr("the job has no tasks"));
  ClusterSpec none(ClusterSpec::DenseJobs{});
  EXPECT_TRUE(none.jobs().empty());
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { none.num_tasks("worker"); }),
              HasSubstr("the cluster has no jobs"));
}

TEST(ClusterSpecTest, UnknownJobNamesItAndListsTheJobs) {
  ClusterSpec spec({{"ps", {"c:3"}}, {"worker", {"a:1", "b:2"}}});
  for (auto call : std::vector<std::function<void()>>{
           [&] { spec.num_tasks("chief"); }, [&] { spec.task_indices("chief"); },
           [&] { spec.task_address("chief", 0); }, [&] { spec.job_tasks("chief"); }}) {
    std::string msg = error_of<InvalidArgumentError>(call);
    EXPECT_THAT(msg, HasSubstr("no job \"chief\""));
    EXPECT_THAT(msg, HasSubstr("jobs: ps, worker"));
  }
  try {
    spec.num_tasks("chief");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

TEST(ClusterSpecTest, UnknownTaskIndexNamesItAndListsTheIndices) {
  ClusterSpec spec({{"worker", {"a:1", "b:2"}}});
  std::string msg = error_of<InvalidArgumentError>([&] { spec.task_address("worker", 2); });
  EXPECT_THAT(msg, HasSubstr("no task 2 in job \"worker\""));
  EXPECT_THAT(msg, HasSubstr("task indices: 0, 1"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { spec.task_address("worker", -1); }),
              HasSubstr("no task -1"));
}

TEST(ClusterSpecTest, LongListsInErrorsAreCutShort) {
  std::vector<std::string> addrs;
  for (int i = 0; i < 30; ++i) addrs.push_back(std::string("h").append(std::to_string(i)).append(":1"));
  ClusterSpec spec(ClusterSpec::DenseJobs{{"worker", addrs}});
  std::string msg = error_of<InvalidArgumentError>([&] { spec.task_address("worker", 99); });
  EXPECT_THAT(msg, HasSubstr("0, 1, 2"));
  EXPECT_THAT(msg, HasSubstr("... (30 in all)"));
  EXPECT_THAT(msg, ::testing::Not(HasSubstr("25")));
}

TEST(ClusterSpecTest, JobNamesFollowTensorFlowsRule) {
  for (const char* good : {"a", "worker", "ps", "w_2", "job9"}) {
    EXPECT_NO_THROW((ClusterSpec({{good, {"h:1"}}}))) << good;
  }
  for (const char* bad : {"", "Worker", "1worker", "_w", "work-er", "w.x", "w x", "w\xc3\xb6rker"}) {
    std::string msg = error_of<InvalidArgumentError>([&] { ClusterSpec({{bad, {"h:1"}}}); });
    EXPECT_THAT(msg, HasSubstr("invalid job name")) << bad;
    EXPECT_THAT(msg, HasSubstr("[a-z][a-z0-9_]*")) << bad;
  }
}

TEST(ClusterSpecTest, AddressesAreHostColonPort) {
  for (const char* good : {"localhost:1", "localhost:0", "h:65535", "10.0.0.1:2222", "node-01.cluster_a:8888", "[::1]:2222",
                           "[fe80::1]:80", "[::ffff:10.0.0.1]:9"}) {
    EXPECT_NO_THROW((ClusterSpec({{"w", {good}}}))) << good;
  }
  const std::map<std::string, std::string> bad = {
      {"", "it is empty"},
      {"host", "no ':port'"},
      {":2222", "no host"},
      {"host:", "port ''"},
      {"host:00", "port '00' has a leading zero"},
      {"host:65536", "port '65536'"},
      {"host:22a", "port '22a'"},
      {"host:-1", "port '-1'"},
      {"::1:2222", "needs brackets"},
      {"[::1]", "no ':port'"},
      {"[::1:2222", "'['"},
      {"[zz]:1", "not an IPv6 address"},
      {"[]:1", "not an IPv6 address"},
      {"ho st:1", "characters other than"},
      {"tcp://h:1", "characters other than"},
  };
  for (const auto& [addr_binding, why] : bad) {
    const std::string& addr = addr_binding;  // (clang before 16 cannot capture a structured binding)
    std::string msg = error_of<InvalidArgumentError>([&] { ClusterSpec({{"worker", {"ok:1", addr}}}); });
    EXPECT_THAT(msg, HasSubstr("for task 1 of job 'worker'")) << addr;
    EXPECT_THAT(msg, HasSubstr(why)) << addr;
  }
}

// Port 0 (API.md, Clusters): the task binds a free port when it starts. Several tasks may have
// one such address (each gets its own port), as TensorFlow's {"local": ["localhost:0", ...]}.
TEST(ClusterSpecTest, PortZeroIsValidAndMayBeShared) {
  ClusterSpec dense({{"local", {"localhost:0", "localhost:0"}}});
  EXPECT_EQ(dense.task_address("local", 1), "localhost:0");
  ClusterSpec sparse(ClusterSpec::SparseJobs{{"local", {{37, "localhost:0"}}}});
  EXPECT_EQ(sparse.task_indices("local"), std::vector<int>{37});
  EXPECT_EQ(ClusterSpec::from_json(sparse.to_json()), sparse);
  // Other shared addresses are still refused.
  EXPECT_THROW((ClusterSpec({{"local", {"localhost:10", "localhost:10"}}})), InvalidArgumentError);
}

TEST(ClusterSpecTest, SparseIndicesMustBeNonNegative) {
  std::string msg = error_of<InvalidArgumentError>([&] {
    ClusterSpec(ClusterSpec::SparseJobs{{"worker", {{-1, "h:1"}, {0, "h:2"}}}});
  });
  EXPECT_THAT(msg, HasSubstr("job 'worker' has task index -1"));
  EXPECT_THAT(msg, HasSubstr(">= 0"));
}

TEST(ClusterSpecTest, BracedListRejectsAJobGivenTwice) {
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                ClusterSpec({{"w", {"a:1"}}, {"w", {"b:2"}}});
              }),
              HasSubstr("job \"w\" is given twice"));
}

// ---- JSON ----

TEST(ClusterSpecJsonTest, ReadsTensorFlowsDenseForm) {
  auto spec = ClusterSpec::from_json(R"({"worker": ["a:1", "b:2"], "ps": ["c:3"]})");
  EXPECT_EQ(spec, ClusterSpec({{"worker", {"a:1", "b:2"}}, {"ps", {"c:3"}}}));
}

TEST(ClusterSpecJsonTest, ReadsTheSparseObjectForm) {
  auto spec = ClusterSpec::from_json(R"({"worker": {"0": "a:1", "3": "b:2"}, "ps": ["c:3"]})");
  EXPECT_THAT(spec.task_indices("worker"), ElementsAre(0, 3));
  EXPECT_EQ(spec.task_address("worker", 3), "b:2");
  EXPECT_THAT(spec.job_tasks("worker"), ElementsAre("a:1", "", "", "b:2"));
}

TEST(ClusterSpecJsonTest, WritesListsForDenseJobsAndObjectsInIndexOrderForSparse) {
  ClusterSpec spec(ClusterSpec::SparseJobs{{"worker", {{1, "a:1"}, {10, "b:2"}, {2, "x:9"}}},
                                           {"ps", {{0, "c:3"}, {1, "d:4"}}}});
  EXPECT_EQ(spec.to_json(), R"({"ps":["c:3","d:4"],"worker":{"1":"a:1","2":"x:9","10":"b:2"}})");
  EXPECT_EQ(ClusterSpec({{"worker", {}}}).to_json(), R"({"worker":[]})");
  EXPECT_EQ(ClusterSpec(ClusterSpec::DenseJobs{}).to_json(), "{}");
}

TEST(ClusterSpecJsonTest, RoundTrips) {
  std::vector<ClusterSpec> specs = {
      ClusterSpec({{"ps", {"ps0:2222", "ps1:2222"}}, {"worker", {"w0:2222"}}}),
      ClusterSpec(
          ClusterSpec::SparseJobs{{"worker", {{1, "w1:2222"}, {7, "w7:2222"}}}, {"chief", {{0, "c:1"}}}}),
      ClusterSpec({{"local", {"[::1]:2222"}}, {"empty", {}}}),
      ClusterSpec(ClusterSpec::DenseJobs{}),
  };
  for (const auto& spec : specs) {
    ClusterSpec back = ClusterSpec::from_json(spec.to_json());
    EXPECT_EQ(back, spec) << spec.to_json();
    EXPECT_EQ(back.to_json(), spec.to_json());
  }
}

TEST(ClusterSpecJsonTest, MalformedJsonAndWrongTypesAreInvalidArguments) {
  const std::map<std::string, std::string> bad = {
      {"", "not valid JSON"},
      {"{", "not valid JSON"},
      {R"({"worker": ["a:1"]} x)", "not valid JSON"},
      {R"({'worker': ['a:1']})", "not valid JSON"},
      {"[1, 2]", "must be an object from job name to tasks, got array"},
      {"\"worker\"", "got string"},
      {R"({"worker": "a:1"})", "the tasks of job 'worker' must be a list of addresses or an object"},
      {R"({"worker": 3})", "got a whole number"},
      {R"({"worker": [1]})", "task 0 of job 'worker' must be an address string, got a whole number"},
      {R"({"worker": ["a:1", null]})", "task 1 of job 'worker' must be an address string, got null"},
      {R"({"worker": {"x": "a:1"}})", "job 'worker' has task index \"x\""},
      {R"({"worker": {"-1": "a:1"}})", "job 'worker' has task index \"-1\""},
      {R"({"worker": {"99999999999": "a:1"}})", "task index \"99999999999\""},
      {R"({"worker": {"0": ["a:1"]}})", "task 0 of job 'worker' must be an address string, got array"},
      {R"({"worker": {"0": "a:1", "00": "b:2"}})", "defines task 0 twice"},
      {R"({"worker": ["a:1"], "worker": ["b:2"]})", "repeats the key \"worker\""},
      {R"({"worker": {"1": "a:1", "1": "b:2"}})", "repeats the key \"1\""},
      {R"({"Worker": ["a:1"]})", "invalid job name \"Worker\""},
      {R"({"worker": ["a"]})", "invalid address \"a\" for task 0 of job 'worker'"},
      {R"({"cluster": {"worker": ["a:1"]}})", "is this TF_CONFIG?"},
  };
  for (const auto& [text_binding, why] : bad) {
    const std::string& text = text_binding;  // (clang before 16 cannot capture a structured binding)
    std::string msg = error_of<InvalidArgumentError>([&] { ClusterSpec::from_json(text); });
    EXPECT_THAT(msg, HasSubstr("cluster JSON")) << text;
    EXPECT_THAT(msg, HasSubstr(why)) << text;
  }
}

TEST(ClusterSpecJsonTest, SameKeysInDifferentObjectsAreFine) {
  auto spec = ClusterSpec::from_json(R"({"ps": {"0": "a:1"}, "worker": {"0": "b:2"}})");
  EXPECT_EQ(spec.task_address("worker", 0), "b:2");
  EXPECT_EQ(spec.task_address("ps", 0), "a:1");
}

// ---- Slurm lists ----

using internal::expand_hostlist;
using internal::expand_tasks_per_node;

Strings hosts_of(std::string_view list) {
  auto r = expand_hostlist(list);
  EXPECT_TRUE(r.ok()) << list << ": " << r.status().to_string();
  return r.ok() ? r.value() : Strings{};
}

TEST(ClusterSpecHostlistTest, ExpandsTensorFlowsCases) {
  EXPECT_THAT(hosts_of("n1"), ElementsAre("n1"));
  EXPECT_THAT(hosts_of("n[1,3]"), ElementsAre("n1", "n3"));
  EXPECT_THAT(hosts_of("n[1-3]"), ElementsAre("n1", "n2", "n3"));
  EXPECT_THAT(hosts_of("n[1-2],m5,o[3-4,6,7-9]"),
              ElementsAre("n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"));
  EXPECT_THAT(hosts_of("t02n13,t02n41,t02n43"), ElementsAre("t02n13", "t02n41", "t02n43"));
}

TEST(ClusterSpecHostlistTest, KeepsZeroPaddingOfTheLowerBound) {
  EXPECT_THAT(hosts_of("node[01-03]"), ElementsAre("node01", "node02", "node03"));
  EXPECT_THAT(hosts_of("tux[0008-0010]"), ElementsAre("tux0008", "tux0009", "tux0010"));
  EXPECT_THAT(hosts_of("n[8-10]"), ElementsAre("n8", "n9", "n10"));
  EXPECT_THAT(hosts_of("node[001-003,007],gpu-a[1-2]"),
              ElementsAre("node001", "node002", "node003", "node007", "gpu-a1", "gpu-a2"));
}

TEST(ClusterSpecHostlistTest, CommasInsideBracketsAndSeveralGroups) {
  EXPECT_THAT(hosts_of("a[1,3-4],b"), ElementsAre("a1", "a3", "a4", "b"));
  EXPECT_THAT(hosts_of("r[1-2]n[1-2]"), ElementsAre("r1n1", "r1n2", "r2n1", "r2n2"));
  EXPECT_THAT(hosts_of("n[1-2]-ib,x"), ElementsAre("n1-ib", "n2-ib", "x"));
  EXPECT_THAT(hosts_of("[1-2]"), ElementsAre("1", "2"));
  EXPECT_THAT(hosts_of("a,a"), ElementsAre("a", "a"));  // no deduplication here
}

TEST(ClusterSpecHostlistTest, RejectsMalformedLists) {
  const std::map<std::string, std::string> bad = {
      {"", "empty host name"},
      {"a,,b", "empty host name"},
      {",a", "empty host name"},
      {"a,", "empty host name"},
      {"n[1-3", "'[' without a matching ']'"},
      {"n1-3]", "']' without a matching '['"},
      {"n[[1]]", "cannot nest"},
      {"n[3-1]", "goes downwards"},
      {"n[a-b]", "not a number"},
      {"n[]", "not a number"},
      {"n[1-]", "not a number"},
      {"n[1-2-3]", "not a number"},
      {"n[0-99999999]", "more than"},
      {"n[0-999]m[0-9999]", "more than"},
      {"n 1", "whitespace"},
  };
  for (const auto& [list, why] : bad) {
    auto r = expand_hostlist(list);
    ASSERT_FALSE(r.ok()) << list;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << list;
    EXPECT_THAT(r.status().message(), HasSubstr("invalid host list \"" + list + "\"")) << list;
    EXPECT_THAT(r.status().message(), HasSubstr(why)) << list;
  }
}

TEST(ClusterSpecHostlistTest, ExpandsTasksPerNode) {
  auto tpn = [](std::string_view s) {
    auto r = expand_tasks_per_node(s);
    EXPECT_TRUE(r.ok()) << s << ": " << r.status().to_string();
    return r.ok() ? r.value() : std::vector<int>{};
  };
  EXPECT_THAT(tpn("2"), ElementsAre(2));
  EXPECT_THAT(tpn("2,1,3"), ElementsAre(2, 1, 3));
  EXPECT_THAT(tpn("2(x3),1"), ElementsAre(2, 2, 2, 1));
  EXPECT_THAT(tpn("3(x2),2,11(x4)"), ElementsAre(3, 3, 2, 11, 11, 11, 11));
  EXPECT_EQ(tpn("13(x10)"), std::vector<int>(10, 13));
}

TEST(ClusterSpecHostlistTest, RejectsMalformedTasksPerNode) {
  for (const char* bad :
       {"", "0", "2(x0)", "2(3)", "x", "2(x3", "2,,1", "-1", "2(x)", "2(x3)1", " 2", "99999999999"}) {
    auto r = expand_tasks_per_node(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("invalid tasks-per-node list")) << bad;
  }
}

// Found with the slurm_hostlist fuzz target (fuzz/corpus/slurm_hostlist/oom-long-name-million-hosts):
// a 3 KB list, a million-host range times a 3000-character name, used to allocate 3 GB. Names are
// capped at kMaxHostNameLength, checked before the names grow.
TEST(ClusterSpecHostlistTest, RejectsHostNamesLongerThanTheMaximumBeforeExpanding) {
  const std::string long_name(3000, 'a');
  for (const std::string& list : {"[0-999999]" + long_name, long_name + "[0-999999]",
                                  "n[0-9]" + std::string(internal::kMaxHostNameLength, 'x')}) {
    auto r = expand_hostlist(list);
    ASSERT_FALSE(r.ok()) << list.size();
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("host names longer than 255 characters"));
  }
  // Up to the limit is fine, also through several groups.
  const std::string longest = std::string(internal::kMaxHostNameLength - 4, 'h') + "[1-2]x[1-2]";
  auto r = expand_hostlist(longest);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().size(), 4u);
  EXPECT_EQ(r.value()[0].size(), internal::kMaxHostNameLength - 1);
  EXPECT_FALSE(expand_hostlist(std::string(internal::kMaxHostNameLength - 1, 'h') + "[10-11]").ok());
}

// ---- Environment ----

// Clears every variable the resolvers read, and puts them back afterwards.
class ClusterSpecEnvTest : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {"TF_CONFIG",
                                          "SLURM_PROCID",
                                          "SLURM_STEP_NODELIST",
                                          "SLURM_STEP_TASKS_PER_NODE",
                                          "SLURM_STEP_NUM_TASKS",
                                          "TESSERA_SLURM_JOBS",
                                          "TESSERA_SLURM_PORT_BASE"};
  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_[v] = old ? std::optional<std::string>(old) : std::nullopt;
      unsetenv(v);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  static void set(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }
  // A Slurm step: 3 nodes, 2+2+1 tasks (TensorFlow's testMultiTaskPerNodeRetrieval).
  static void set_slurm_step(const std::string& procid = "1") {
    set("SLURM_PROCID", procid);
    set("SLURM_STEP_NUM_TASKS", "5");
    set("SLURM_STEP_TASKS_PER_NODE", "2(x2),1");
    set("SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43");
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST_F(ClusterSpecEnvTest, NeitherSourceIsAFailedPreconditionSayingWhatToSet) {
  std::string msg = error_of<FailedPreconditionError>([] { resolve_cluster_from_env(); });
  EXPECT_THAT(msg, HasSubstr("TF_CONFIG"));
  EXPECT_THAT(msg, HasSubstr("SLURM_PROCID"));
  EXPECT_THAT(msg, HasSubstr("srun"));
  EXPECT_THAT(error_of<FailedPreconditionError>([] { ClusterSpec::from_env(); }), HasSubstr("TF_CONFIG"));
  set("TF_CONFIG", "");  // empty counts as unset
  error_of<FailedPreconditionError>([] { resolve_cluster_from_env(); });
}

TEST_F(ClusterSpecEnvTest, TfConfigGivesTheClusterAndTask) {
  set("TF_CONFIG", R"({"cluster": {"worker": ["a:1", "b:2"], "ps": ["c:3"]},
                       "task": {"type": "worker", "index": 1},
                       "rpc_layer": "grpc", "environment": "cloud"})");
  ResolvedCluster r = resolve_cluster_from_env();
  EXPECT_EQ(r.cluster, ClusterSpec({{"worker", {"a:1", "b:2"}}, {"ps", {"c:3"}}}));
  ASSERT_TRUE(r.task.has_value());
  EXPECT_EQ(*r.task, (TaskSpec{"worker", 1}));
  EXPECT_EQ(r.source, "TF_CONFIG");
  EXPECT_EQ(ClusterSpec::from_env(), r.cluster);
}

TEST_F(ClusterSpecEnvTest, TfConfigTaskIndexMayBeAString) {
  set("TF_CONFIG", R"({"cluster": {"ps": ["c:3", "d:4"]}, "task": {"type": "ps", "index": "1"}})");
  EXPECT_EQ(resolve_cluster_from_env().task, (TaskSpec{"ps", 1}));
}

TEST_F(ClusterSpecEnvTest, TfConfigWithoutTaskHasNoTask) {
  set("TF_CONFIG", R"({"cluster": {"worker": {"2": "w2:1"}}})");
  ResolvedCluster r = resolve_cluster_from_env();
  EXPECT_FALSE(r.task.has_value());
  EXPECT_THAT(r.cluster.task_indices("worker"), ElementsAre(2));
  set("TF_CONFIG", R"({"cluster": {"worker": ["a:1"]}, "task": {}})");
  EXPECT_FALSE(resolve_cluster_from_env().task.has_value());
}

TEST_F(ClusterSpecEnvTest, TfConfigTaskMustBeInTheCluster) {
  set("TF_CONFIG",
      R"({"cluster": {"worker": ["a:1", "b:2"], "ps": ["c:3"]}, "task": {"type": "chief", "index": 0}})");
  std::string msg = error_of<InvalidArgumentError>([] { resolve_cluster_from_env(); });
  EXPECT_THAT(msg, HasSubstr("TF_CONFIG task type 'chief'"));
  EXPECT_THAT(msg, HasSubstr("jobs: ps, worker"));
  set("TF_CONFIG", R"({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 5}})");
  msg = error_of<InvalidArgumentError>([] { resolve_cluster_from_env(); });
  EXPECT_THAT(msg, HasSubstr("TF_CONFIG task index 5"));
  EXPECT_THAT(msg, HasSubstr("task indices: 0, 1"));
}

TEST_F(ClusterSpecEnvTest, MalformedTfConfigIsAnInvalidArgumentNamingIt) {
  const std::map<std::string, std::string> bad = {
      {"not json", "TF_CONFIG is not valid JSON"},
      {"[]", "TF_CONFIG must be a JSON object"},
      {R"({"task": {"type": "worker", "index": 0}})", "TF_CONFIG has no \"cluster\""},
      {R"({"cluster": {}})", "TF_CONFIG \"cluster\" names no jobs"},
      {R"({"cluster": ["a:1"]})", "TF_CONFIG \"cluster\" must be an object"},
      {R"({"cluster": {"worker": ["a"]}})", "TF_CONFIG \"cluster\": invalid address \"a\""},
      {R"({"cluster": {"worker": [1]}})", "TF_CONFIG \"cluster\": task 0 of job 'worker'"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": "worker"})", "TF_CONFIG \"task\" must be an object"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}})", "needs an \"index\""},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}})", "got -1"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0.5}})", "got 0.5"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "one"}})", "got \"one\""},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"index": 0}})", "needs a string \"type\""},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": 3, "index": 0}})", "needs a string \"type\""},
  };
  for (const auto& [text, why] : bad) {
    set("TF_CONFIG", text);
    std::string msg = error_of<InvalidArgumentError>([] { resolve_cluster_from_env(); });
    EXPECT_THAT(msg, HasSubstr(why)) << text;
  }
}

TEST_F(ClusterSpecEnvTest, TfConfigWinsOverSlurm) {
  set_slurm_step();
  set("TF_CONFIG", R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})");
  ResolvedCluster r = resolve_cluster_from_env();
  EXPECT_EQ(r.source, "TF_CONFIG");
  EXPECT_EQ(r.cluster, ClusterSpec({{"worker", {"a:1"}}}));
  // Even a broken Slurm environment is not looked at.
  set("SLURM_STEP_NODELIST", "n[1-");
  EXPECT_EQ(resolve_cluster_from_env().source, "TF_CONFIG");
  // An empty TF_CONFIG counts as unset: Slurm decides.
  set("TF_CONFIG", "");
  set("SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43");
  EXPECT_EQ(resolve_cluster_from_env().source, "SLURM");
}

TEST_F(ClusterSpecEnvTest, SlurmDefaultsToOneWorkerJob) {
  // TensorFlow's testSimpleRetrievalFromEnv.
  set("SLURM_PROCID", "1");
  set("SLURM_STEP_NUM_TASKS", "3");
  set("SLURM_STEP_TASKS_PER_NODE", "1(x3)");
  set("SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43");
  ResolvedCluster r = resolve_cluster_from_env();
  EXPECT_EQ(r.source, "SLURM");
  EXPECT_EQ(r.cluster, ClusterSpec({{"worker", {"t02n13:8888", "t02n41:8888", "t02n43:8888"}}}));
  EXPECT_EQ(r.task, (TaskSpec{"worker", 1}));
  EXPECT_EQ(ClusterSpec::from_env(), r.cluster);
}

TEST_F(ClusterSpecEnvTest, SlurmSplitsTasksIntoJobsWithPortsPerNode) {
  // TensorFlow's testMultiTaskPerNodeRetrieval: ps:1, worker:4 over 2+2+1 tasks.
  set_slurm_step("1");
  set("TESSERA_SLURM_JOBS", "ps:1,worker:4");
  ResolvedCluster r = resolve_cluster_from_env();
  EXPECT_EQ(r.cluster,
            ClusterSpec({{"ps", {"t02n13:8888"}},
                         {"worker", {"t02n13:8889", "t02n41:8888", "t02n41:8889", "t02n43:8888"}}}));
  EXPECT_EQ(r.task, (TaskSpec{"worker", 0}));
  set("SLURM_PROCID", "0");
  EXPECT_EQ(resolve_cluster_from_env().task, (TaskSpec{"ps", 0}));
  set("SLURM_PROCID", "4");
  EXPECT_EQ(resolve_cluster_from_env().task, (TaskSpec{"worker", 3}));
}

TEST_F(ClusterSpecEnvTest, SlurmJobsAreCutInTheOrderGiven) {
  set_slurm_step("4");
  set("TESSERA_SLURM_JOBS", "worker:4,chief:1");
  ResolvedCluster r = resolve_cluster_from_env();
  EXPECT_EQ(r.cluster.task_address("worker", 0), "t02n13:8888");
  EXPECT_EQ(r.cluster.task_address("chief", 0), "t02n43:8888");
  EXPECT_EQ(r.task, (TaskSpec{"chief", 0}));
}

TEST_F(ClusterSpecEnvTest, SlurmCompressedNodelistInListOrderWithPortBase) {
  // Rank order follows the node list (block distribution), not sorted names: gpu10 comes after
  // gpu9, and gpu nodes after node nodes.
  set("SLURM_PROCID", "6");
  set("SLURM_STEP_NUM_TASKS", "7");
  set("SLURM_STEP_TASKS_PER_NODE", "2(x2),1(x3)");
  set("SLURM_STEP_NODELIST", "node[01-02],gpu[9-10,011]");
  set("TESSERA_SLURM_PORT_BASE", "3000");
  ResolvedCluster r = resolve_cluster_from_env();
  EXPECT_THAT(r.cluster.job_tasks("worker"),
              ElementsAre("node01:3000", "node01:3001", "node02:3000", "node02:3001", "gpu9:3000",
                          "gpu10:3000", "gpu011:3000"));
  EXPECT_EQ(r.task, (TaskSpec{"worker", 6}));
}

TEST_F(ClusterSpecEnvTest, SlurmNumTasksIsOptionalButChecked) {
  set_slurm_step("2");
  unsetenv("SLURM_STEP_NUM_TASKS");
  EXPECT_EQ(resolve_cluster_from_env().cluster.num_tasks("worker"), 5);
  set("SLURM_STEP_NUM_TASKS", "4");
  std::string msg = error_of<InvalidArgumentError>([] { resolve_cluster_from_env(); });
  EXPECT_THAT(msg, HasSubstr("SLURM_STEP_NUM_TASKS=4"));
  EXPECT_THAT(msg, HasSubstr("adds up to 5"));
}

TEST_F(ClusterSpecEnvTest, SlurmWithoutAStepIsAFailedPrecondition) {
  set("SLURM_PROCID", "0");
  std::string msg = error_of<FailedPreconditionError>([] { resolve_cluster_from_env(); });
  EXPECT_THAT(msg, HasSubstr("SLURM_STEP_NODELIST"));
  EXPECT_THAT(msg, HasSubstr("srun"));
  set("SLURM_STEP_NODELIST", "n1");
  EXPECT_THAT(error_of<FailedPreconditionError>([] { resolve_cluster_from_env(); }),
              HasSubstr("SLURM_STEP_TASKS_PER_NODE is not"));
}

TEST_F(ClusterSpecEnvTest, MalformedSlurmValuesNameTheVariable) {
  struct Case {
    const char* var;
    const char* value;
    const char* why;
  };
  const std::vector<Case> cases = {
      {"SLURM_PROCID", "x", "SLURM_PROCID=\"x\" is not a task rank from 0 to 4"},
      {"SLURM_PROCID", "-1", "SLURM_PROCID=\"-1\""},
      {"SLURM_PROCID", "5", "SLURM_PROCID=\"5\" is not a task rank from 0 to 4"},
      {"SLURM_STEP_NODELIST", "n[1-", "SLURM_STEP_NODELIST: invalid host list"},
      {"SLURM_STEP_NODELIST", "n[1-2]",
       "names 2 nodes but SLURM_STEP_TASKS_PER_NODE=\"2(x2),1\" gives task counts for 3"},
      {"SLURM_STEP_NODELIST", "n1,n2,n1", "SLURM_STEP_NODELIST=\"n1,n2,n1\" names node 'n1' twice"},
      {"SLURM_STEP_NODELIST", "n1,n@2,n3", "SLURM_STEP_NODELIST=\"n1,n@2,n3\": invalid address \"n@2:8888\""},
      {"SLURM_STEP_TASKS_PER_NODE", "2(x", "SLURM_STEP_TASKS_PER_NODE: invalid tasks-per-node list"},
      {"SLURM_STEP_NUM_TASKS", "five", "SLURM_STEP_NUM_TASKS=\"five\" is not a whole number"},
      {"TESSERA_SLURM_JOBS", "ps:1,worker", "TESSERA_SLURM_JOBS=\"ps:1,worker\": 'worker' has no ':count'"},
      {"TESSERA_SLURM_JOBS", "ps:0,worker:5", "the count of job 'ps' is not a whole number >= 1"},
      {"TESSERA_SLURM_JOBS", "Ps:1,worker:4", "'Ps' is not a job name"},
      {"TESSERA_SLURM_JOBS", "ps:1,ps:4", "job 'ps' is listed twice"},
      {"TESSERA_SLURM_JOBS", "ps:1,worker:1", "asks for 2 tasks but the Slurm step has 5"},
      {"TESSERA_SLURM_JOBS", "ps:1,,worker:4", "'' has no ':count'"},
      {"TESSERA_SLURM_PORT_BASE", "0", "TESSERA_SLURM_PORT_BASE=\"0\" is not a port"},
      {"TESSERA_SLURM_PORT_BASE", "70000", "TESSERA_SLURM_PORT_BASE=\"70000\" is not a port"},
      {"TESSERA_SLURM_PORT_BASE", "http", "TESSERA_SLURM_PORT_BASE=\"http\" is not a port"},
      {"TESSERA_SLURM_PORT_BASE", "65535", "ports would run past 65535"},
  };
  for (const auto& c : cases) {
    set_slurm_step("1");
    unsetenv("TESSERA_SLURM_JOBS");
    unsetenv("TESSERA_SLURM_PORT_BASE");
    set(c.var, c.value);
    std::string msg = error_of<InvalidArgumentError>([] { resolve_cluster_from_env(); });
    EXPECT_THAT(msg, HasSubstr(c.why)) << c.var << "=" << c.value;
  }
  // The last port still fits: base 65534 with 2 tasks per node.
  set_slurm_step("1");
  unsetenv("TESSERA_SLURM_JOBS");
  set("TESSERA_SLURM_PORT_BASE", "65534");
  EXPECT_EQ(resolve_cluster_from_env().cluster.task_address("worker", 1), "t02n13:65535");
}

}  // namespace
}  // namespace tessera::train
