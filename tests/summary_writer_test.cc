// summary::FileWriter and the TFRecord framing of event files (host/event_file.h,
// Note [Event files] in host/summary_writer.cc): records against known bytes, corrupted and torn
// files, the file_version record, summaries and graphs read back, flush without close, writers
// racing, two writers in one directory, and the errors: unwritable directories at construction,
// tensors that are not summaries, use after close, and a directory removed (or made unwritable)
// mid-run, whose events end up in a new file, with one warning. Cases after TensorFlow's
// events_writer_test.cc and writer_test.py.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/logging.h"
#include "core/summary.pb.h"
#include "host/event_file.h"
#include "tessera/ops.h"
#include "tessera/session.h"
#include "tessera/summary.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
namespace tb = tessera::tensorboard;
using internal::LogLevel;
using summary::FileWriter;

// ---- Framing ----

// Computed independently of tessera (a bitwise CRC-32C and struct.pack in Python): the record of
// "abc" and the empty record, byte for byte.
const unsigned char kRecordAbc[] = {0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xb0, 0x99,
                                    0x49, 0x0e, 0x61, 0x62, 0x63, 0x6e, 0x57, 0xf1, 0x21};
const unsigned char kRecordEmpty[] = {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                      0x29, 0x03, 0x98, 0x07, 0xd8, 0xea, 0x82, 0xa2};

std::string bytes_of(const unsigned char* p, std::size_t n) { return std::string(reinterpret_cast<const char*>(p), n); }

TEST(TfRecordTest, MaskedCrcOfKnownValues) {
  EXPECT_EQ(internal::crc32c::value("123456789", 9), 0xE3069283u);
  EXPECT_EQ(internal::mask_crc(0xE3069283u), 0xc78ab0e5u);
  EXPECT_EQ(internal::mask_crc(0), 0xa282ead8u);
  for (uint32_t c : {0u, 1u, 0xE3069283u, 0xffffffffu, 0x80000000u}) {
    EXPECT_EQ(internal::unmask_crc(internal::mask_crc(c)), c);
    EXPECT_NE(internal::mask_crc(c), c);
  }
}

TEST(TfRecordTest, RecordsAreTheKnownBytes) {
  EXPECT_EQ(internal::tfrecord("abc"), bytes_of(kRecordAbc, sizeof(kRecordAbc)));
  EXPECT_EQ(internal::tfrecord(""), bytes_of(kRecordEmpty, sizeof(kRecordEmpty)));
  std::string both;
  internal::append_tfrecord(both, "abc");
  internal::append_tfrecord(both, "");
  EXPECT_EQ(both, bytes_of(kRecordAbc, sizeof(kRecordAbc)) + bytes_of(kRecordEmpty, sizeof(kRecordEmpty)));
  auto back = internal::parse_tfrecords(both, "test");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back.value(), (std::vector<std::string>{"abc", ""}));
  auto none = internal::parse_tfrecords("", "test");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none.value().empty());
}

class TfRecordFileTest : public testing::TempDirTest {
 protected:
  TfRecordFileTest() : TempDirTest("tessera_tfrecord") {}
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
};

TEST_F(TfRecordFileTest, EveryCorruptedByteIsDataLoss) {
  std::string good;
  internal::append_tfrecord(good, "hello");
  internal::append_tfrecord(good, std::string(300, 'x'));
  auto ok = internal::read_tfrecords(write("good", good));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  ASSERT_EQ(ok.value().size(), 2u);
  EXPECT_EQ(ok.value()[1], std::string(300, 'x'));
  for (std::size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x20);
    auto r = internal::parse_tfrecords(bad, "bad");
    ASSERT_FALSE(r.ok()) << "byte " << i << " changed and not noticed";
    EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss) << r.status().to_string();
  }
  // Through a file: the message names the file and the offset of the bad record (the second,
  // which starts after the first's 16 + 5 bytes).
  std::string bad = good;
  bad[21 + 12 + 7] = static_cast<char>(bad[21 + 12 + 7] ^ 1);
  const std::string path = write("bad", bad);
  auto r = internal::read_tfrecords(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss);
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("offset 21"), std::string::npos) << r.status().message();
}

TEST_F(TfRecordFileTest, TruncatedFileIsDataLoss) {
  std::string good;
  internal::append_tfrecord(good, "first");
  const std::size_t boundary = good.size();
  internal::append_tfrecord(good, "second record");
  for (std::size_t n = 0; n < good.size(); ++n) {
    auto r = internal::parse_tfrecords(std::string_view(good).substr(0, n), "torn");
    if (n == 0 || n == boundary) {
      ASSERT_TRUE(r.ok()) << n;
      EXPECT_EQ(r.value().size(), n == 0 ? 0u : 1u);
    } else {
      ASSERT_FALSE(r.ok()) << "cut at " << n << " not noticed";
      EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss);
    }
  }
  const std::string path = write("torn", good.substr(0, good.size() - 1));
  auto r = internal::read_tfrecords(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss);
  EXPECT_NE(r.status().message().find(fmt::format("offset {}", boundary)), std::string::npos) << r.status().message();
  // A length whose checksum is right but which claims more than the file holds.
  std::string huge;
  internal::append_tfrecord(huge, std::string(64, 'y'));
  auto h = internal::parse_tfrecords(std::string_view(huge).substr(0, 40), "short");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("truncated"), std::string::npos) << h.status().message();
  EXPECT_EQ(internal::read_tfrecords((dir_ / "missing").string()).status().code(), ErrorCode::kNotFound);
}

// ---- The writer ----

Tensor summary_tensor(const std::string& tag, float value) {
  tb::Summary s;
  auto* v = s.add_value();
  v->set_tag(tag);
  v->set_simple_value(value);
  return Tensor::scalar(s.SerializeAsString());
}

std::vector<tb::Event> events_of(const std::string& path) {
  std::vector<tb::Event> events;
  auto records = internal::read_tfrecords(path);
  EXPECT_TRUE(records.ok()) << records.status().to_string();
  if (!records.ok()) return events;
  for (const std::string& r : records.value()) {
    tb::Event e;
    EXPECT_TRUE(e.ParseFromString(r));
    events.push_back(std::move(e));
  }
  return events;
}

std::vector<std::string> event_files(const fs::path& dir) {
  std::vector<std::string> files;
  if (!fs::exists(dir)) return files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().find("tfevents") != std::string::npos) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The events of the one event file in `dir`; none, and a test failure, where it holds another
// number of event files.
std::vector<tb::Event> events_of_the_one_file(const fs::path& dir) {
  const auto files = event_files(dir);
  EXPECT_EQ(files.size(), 1u);
  return files.size() == 1 ? events_of(files[0]) : std::vector<tb::Event>{};
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void expect_file_version(const tb::Event& e) {
  EXPECT_EQ(e.what_case(), tb::Event::kFileVersion);
  EXPECT_EQ(e.file_version(), "brain.Event:2");
  EXPECT_EQ(e.step(), 0);
  EXPECT_LT(std::fabs(e.wall_time() - now_seconds()), 60.0);
}

// Captures the log (the writer's warnings) and restores the threshold and the sink.
class FileWriterTest : public testing::TempDirTest {
 protected:
  FileWriterTest() : TempDirTest("tessera_summary_writer") {}
  void SetUp() override {
    TempDirTest::SetUp();
    saved_level_ = internal::log_level();
    internal::set_log_level(LogLevel::kInfo);
    internal::set_log_sink([this](LogLevel level, std::string_view text) {
      std::lock_guard<std::mutex> l(mu_);
      if (text.find("FileWriter") != std::string_view::npos) logged_.push_back({level, std::string(text)});
    });
  }
  void TearDown() override {
    internal::set_log_sink(nullptr);
    internal::set_log_level(saved_level_);
    // A test that made a directory unreadable gives it back, so the fixture can remove it.
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir_, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    }
    TempDirTest::TearDown();
  }
  std::vector<std::string> logged(LogLevel level) {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<std::string> out;
    for (const auto& [lv, text] : logged_) {
      if (lv == level) out.push_back(text);
    }
    return out;
  }

 private:
  LogLevel saved_level_ = LogLevel::kInfo;
  std::mutex mu_;
  std::vector<std::pair<LogLevel, std::string>> logged_;
};

TEST_F(FileWriterTest, TheFileIsNamedAsTensorFlowsAndStartsWithTheFileVersion) {
  const fs::path logdir = dir_ / "a" / "b" / "run1";  // parents made too
  FileWriter w(logdir.string());
  EXPECT_EQ(w.logdir(), logdir.string());
  const fs::path path(w.path());
  EXPECT_EQ(path.parent_path(), logdir);
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  EXPECT_TRUE(std::regex_match(path.filename().string(),
                               std::regex(std::string("events\\.out\\.tfevents\\.[0-9]{10}\\.") + host)))
      << path;
  // Written at construction (TF's NameClose), before any event or flush.
  auto events = events_of(path.string());
  ASSERT_EQ(events.size(), 1u);
  expect_file_version(events[0]);
  w.close();
  EXPECT_EQ(w.path(), "");
  events = events_of(path.string());
  ASSERT_EQ(events.size(), 1u);
}

TEST_F(FileWriterTest, SummariesReadBackWithTheirStepsAndValues) {
  FileWriter w(dir_.string());
  const double before = now_seconds();
  w.add_summary(summary_tensor("foo", 3.14159f), 34);
  w.add_summary(summary_tensor("bar", -42.0f), 35);
  w.add_summary(summary_tensor("loss/total", 0.5f), 1LL << 40);
  const std::string path = w.path();
  w.close();
  auto events = events_of(path);
  ASSERT_EQ(events.size(), 4u);
  expect_file_version(events[0]);
  const std::vector<std::pair<std::string, float>> want = {{"foo", 3.14159f}, {"bar", -42.0f}, {"loss/total", 0.5f}};
  const std::vector<int64_t> steps = {34, 35, 1LL << 40};
  for (std::size_t i = 0; i < want.size(); ++i) {
    const tb::Event& e = events[i + 1];
    ASSERT_EQ(e.what_case(), tb::Event::kSummary);
    EXPECT_EQ(e.step(), steps[i]);
    ASSERT_EQ(e.summary().value_size(), 1);
    EXPECT_EQ(e.summary().value(0).tag(), want[i].first);
    EXPECT_EQ(e.summary().value(0).simple_value(), want[i].second);
    EXPECT_GE(e.wall_time(), before - 1);
    EXPECT_GE(e.wall_time(), events[i].wall_time());
  }
  // A multi-value Summary (merge's output) stays one event.
  tb::Summary merged;
  merged.add_value()->set_tag("a");
  merged.add_value()->set_tag("b");
  FileWriter w2((dir_ / "merged").string());
  w2.add_summary(Tensor::scalar(merged.SerializeAsString()), 7);
  const std::string path2 = w2.path();
  w2.close();
  events = events_of(path2);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].summary().value_size(), 2);
  EXPECT_EQ(events[1].step(), 7);
}

TEST_F(FileWriterTest, FlushMakesRecordsReadableWithoutClose) {
  FileWriter w(dir_.string(), /*max_queue=*/100, std::chrono::seconds(3600));
  w.add_summary(summary_tensor("x", 1), 1);
  w.add_summary(summary_tensor("x", 2), 2);
  w.flush();
  auto events = events_of(w.path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].step(), 2);
  w.add_summary(summary_tensor("x", 3), 3);
  w.flush();
  EXPECT_EQ(events_of(w.path()).size(), 4u);
  w.flush();  // nothing queued
  EXPECT_EQ(events_of(w.path()).size(), 4u);
}

TEST_F(FileWriterTest, AFullQueueIsWrittenWithoutAFlush) {
  FileWriter w(dir_.string(), /*max_queue=*/5, std::chrono::seconds(3600));
  for (int i = 0; i < 5; ++i) w.add_summary(summary_tensor("x", static_cast<float>(i)), i);
  const std::string path = w.path();
  EXPECT_TRUE(testing::wait_until([&] {
    auto records = internal::read_tfrecords(path);
    return records.ok() && records.value().size() == 6;
  })) << "5 events with max_queue 5 were not written";
}

TEST_F(FileWriterTest, EventsAreWrittenEveryFlushSecs) {
  FileWriter w(dir_.string(), /*max_queue=*/100, std::chrono::seconds(1));
  w.add_summary(summary_tensor("x", 1), 1);
  const std::string path = w.path();
  EXPECT_TRUE(testing::wait_until([&] {
    auto records = internal::read_tfrecords(path);
    return records.ok() && records.value().size() == 2;
  })) << "an event was not written within 10 s with flush_secs 1";
}

TEST_F(FileWriterTest, TheDestructorWritesWhatIsQueued) {  // TF's WriteDelete
  std::string path;
  {
    FileWriter w(dir_.string(), 100, std::chrono::seconds(3600));
    w.add_summary(summary_tensor("x", 1), 5);
    path = w.path();
  }
  auto events = events_of(path);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step(), 5);
}

TEST_F(FileWriterTest, ManyThreadsAddingAtOnceLoseNothing) {
  constexpr int kPerThread = 300;
  for (int threads : testing::kThreadCounts) {
    SCOPED_TRACE(threads);
    FileWriter w((dir_ / std::to_string(threads)).string(), /*max_queue=*/3, std::chrono::seconds(1));
    std::atomic<int> flushes{0};
    testing::run_threads(threads, [&](int t) {
      for (int i = 0; i < kPerThread; ++i) {
        const std::string tag = std::string("t").append(std::to_string(t));
        w.add_summary(summary_tensor(tag, static_cast<float>(i)), t * kPerThread + i);
        if (i % 97 == t) {
          w.flush();
          ++flushes;
        }
      }
    });
    const std::string path = w.path();
    w.close();
    auto events = events_of(path);
    ASSERT_EQ(events.size(), static_cast<std::size_t>(threads * kPerThread + 1));
    std::set<int64_t> steps;
    std::vector<int> last(static_cast<std::size_t>(threads), -1);
    for (std::size_t i = 1; i < events.size(); ++i) {
      steps.insert(events[i].step());
      // Each thread's own events stay in its order.
      const int t = static_cast<int>(events[i].step() / kPerThread);
      const int v = static_cast<int>(events[i].summary().value(0).simple_value());
      EXPECT_GT(v, last[static_cast<std::size_t>(t)]);
      last[static_cast<std::size_t>(t)] = v;
    }
    EXPECT_EQ(steps.size(), static_cast<std::size_t>(threads * kPerThread));
    EXPECT_GT(flushes.load(), 0);
  }
  EXPECT_TRUE(logged(LogLevel::kWarning).empty());
}

TEST_F(FileWriterTest, TwoWritersInOneDirectoryWriteTwoFiles) {
  FileWriter a(dir_.string());
  FileWriter b(dir_.string());  // most likely in the same second: the name gets ".<pid>.<n>"
  FileWriter c(dir_.string());
  EXPECT_NE(a.path(), b.path());
  EXPECT_NE(b.path(), c.path());
  EXPECT_NE(a.path(), c.path());
  a.add_summary(summary_tensor("a", 1), 1);
  b.add_summary(summary_tensor("b", 2), 2);
  const std::string pa = a.path(), pb = b.path();
  a.close();
  b.close();
  c.close();
  EXPECT_EQ(event_files(dir_).size(), 3u);
  auto ea = events_of(pa), eb = events_of(pb);
  ASSERT_EQ(ea.size(), 2u);
  ASSERT_EQ(eb.size(), 2u);
  EXPECT_EQ(ea[1].summary().value(0).tag(), "a");
  EXPECT_EQ(eb[1].summary().value(0).tag(), "b");
}

const tb::NodeDef* find_node(const tb::GraphDef& def, const std::string& name) {
  for (const auto& n : def.node()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

std::vector<int64_t> dims_of(const tb::TensorShapeProto& s) {
  std::vector<int64_t> dims;
  for (const auto& d : s.dim()) dims.push_back(d.size());
  return dims;
}

tb::GraphDef graph_of(const tb::Event& e) {
  tb::GraphDef def;
  EXPECT_EQ(e.what_case(), tb::Event::kGraphDef);
  EXPECT_TRUE(def.ParseFromString(e.graph_def()));
  return def;
}

TEST_F(FileWriterTest, AddGraphWritesTheGraphDef) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {-1, 2}, "x");
  auto any = ops::placeholder(g, DType::Int32, Shape::unknown(), "any");
  auto c = ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2), "c");
  Output y;
  {
    auto scope = g.device("/device:CPU:0");
    y = ops::add(x, ops::matmul(x, c), "y");
  }
  auto parts = ops::split(c, 2, 0, "split");
  Operation ctrl = ops::no_op(g, "ctrl");
  Output z;
  {
    auto scope = g.control_dependencies({ctrl});
    z = ops::identity(parts[1], "z");
  }
  (void)any;
  (void)z;
  FileWriter w(dir_.string());
  w.add_graph(g);
  w.flush();
  auto events = events_of(w.path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step(), 0);
  tb::GraphDef def = graph_of(events[1]);
  EXPECT_EQ(def.versions().producer(), 27);
  EXPECT_EQ(def.node_size(), g.num_operations());

  const tb::NodeDef* nx = find_node(def, "x");
  ASSERT_NE(nx, nullptr);
  EXPECT_EQ(nx->op(), "Placeholder");
  EXPECT_EQ(nx->input_size(), 0);
  ASSERT_TRUE(nx->attr().count("dtype"));
  EXPECT_EQ(nx->attr().at("dtype").type(), tb::DT_FLOAT);
  ASSERT_TRUE(nx->attr().count("shape"));
  EXPECT_EQ(dims_of(nx->attr().at("shape").shape()), (std::vector<int64_t>{-1, 2}));
  ASSERT_TRUE(nx->attr().count("_output_shapes"));
  ASSERT_EQ(nx->attr().at("_output_shapes").list().shape_size(), 1);
  EXPECT_EQ(dims_of(nx->attr().at("_output_shapes").list().shape(0)), (std::vector<int64_t>{-1, 2}));

  const tb::NodeDef* nany = find_node(def, "any");
  ASSERT_NE(nany, nullptr);
  EXPECT_EQ(nany->attr().at("dtype").type(), tb::DT_INT32);
  EXPECT_TRUE(nany->attr().at("_output_shapes").list().shape(0).unknown_rank());

  const tb::NodeDef* nc = find_node(def, "c");
  ASSERT_NE(nc, nullptr);
  EXPECT_EQ(nc->op(), "Const");
  const tb::TensorProto& value = nc->attr().at("value").tensor();
  EXPECT_EQ(value.dtype(), tb::DT_FLOAT);
  EXPECT_EQ(dims_of(value.tensor_shape()), (std::vector<int64_t>{2, 2}));
  const float want[] = {1, 2, 3, 4};
  EXPECT_EQ(value.tensor_content(), std::string(reinterpret_cast<const char*>(want), sizeof(want)));

  const tb::NodeDef* ny = find_node(def, "y");
  ASSERT_NE(ny, nullptr);
  EXPECT_EQ(ny->op(), "Add");
  EXPECT_EQ(ny->device(), "/device:CPU:0");
  ASSERT_EQ(ny->input_size(), 2);
  EXPECT_EQ(ny->input(0), "x");
  EXPECT_EQ(dims_of(ny->attr().at("_output_shapes").list().shape(0)), (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(nx->device(), "");  // no request, no session yet

  const tb::NodeDef* nsplit = find_node(def, "split");
  ASSERT_NE(nsplit, nullptr);
  EXPECT_EQ(nsplit->attr().at("num_split").i(), 2);
  EXPECT_EQ(nsplit->attr().at("_output_shapes").list().shape_size(), 2);

  const tb::NodeDef* nz = find_node(def, "z");
  ASSERT_NE(nz, nullptr);
  EXPECT_EQ(nz->op(), "Identity");
  ASSERT_EQ(nz->input_size(), 2);
  EXPECT_EQ(nz->input(0), "split:1");
  EXPECT_EQ(nz->input(1), "^ctrl");  // control inputs after the data inputs, as TF's
  ASSERT_NE(find_node(def, "ctrl"), nullptr);
  EXPECT_EQ(find_node(def, "ctrl")->op(), "NoOp");

  // After a session placed the ops, the placement is the device.
  Session s(g);
  s.run({y}, {{x, Tensor::matrix<float>({1, 1}, 1, 2)}});
  const std::string placed = y.op().assigned_device();
  ASSERT_FALSE(placed.empty());
  w.add_graph(g);
  const std::string path = w.path();
  w.close();
  events = events_of(path);
  ASSERT_EQ(events.size(), 3u);
  def = graph_of(events[2]);
  EXPECT_EQ(find_node(def, "y")->device(), placed);
  EXPECT_EQ(find_node(def, "x")->device(), x.op().assigned_device());
}

// ---- Errors ----

TEST_F(FileWriterTest, ALogdirUnderARegularFileFailsAtConstruction) {
  const fs::path file = dir_ / "plain";
  std::ofstream(file) << "not a directory";
  EXPECT_THROW_MSG(FileWriter((file / "logs").string()), FailedPreconditionError,
                   fmt::format("cannot make directory '{}': Not a directory (making '{}')", file.string(),
                               (file / "logs").string()));
  EXPECT_THROW_MSG(FileWriter(file.string()), FailedPreconditionError, "Not a directory");
  EXPECT_THROW_MSG(FileWriter(""), InvalidArgumentError, "empty");
  EXPECT_THROW_MSG(FileWriter(dir_.string(), 0), InvalidArgumentError, "max_queue");
  EXPECT_THROW_MSG(FileWriter(dir_.string(), 10, std::chrono::seconds(0)), InvalidArgumentError, "flush_secs");
  EXPECT_TRUE(event_files(dir_).empty());
}

TEST_F(FileWriterTest, AnUnwritableDirectoryIsPermissionDenied) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into a mode 000 directory";
  const fs::path locked = dir_ / "locked";
  fs::create_directories(locked);
  fs::permissions(locked, fs::perms::none);
  EXPECT_THROW_MSG(FileWriter(locked.string()), PermissionDeniedError, locked.string());
  EXPECT_THROW_MSG(FileWriter((locked / "sub").string()), PermissionDeniedError, "Permission denied");
}

TEST_F(FileWriterTest, ATensorThatIsNotASummaryIsInvalidArgument) {
  FileWriter w(dir_.string());
  EXPECT_THROW_MSG(w.add_summary(Tensor::scalar<float>(1.5f), 1), InvalidArgumentError, "String scalar");
  EXPECT_THROW_MSG(w.add_summary(Tensor::vector({std::string("a"), std::string("b")}), 1), InvalidArgumentError,
                   "String scalar");
  EXPECT_THROW_MSG(w.add_summary(Tensor(), 1), InvalidArgumentError, "null");
  // Field 1 (Summary.value) claiming 5 bytes of which 2 follow.
  EXPECT_THROW_MSG(w.add_summary(Tensor::scalar(std::string("\x0a\x05" "ab", 4)), 1), InvalidArgumentError,
                   "does not hold a serialized Summary");
  const std::string path = w.path();
  w.close();
  EXPECT_EQ(events_of(path).size(), 1u);  // none of them written
}

TEST_F(FileWriterTest, AddAfterCloseIsFailedPreconditionAndReopenMakesANewFile) {
  FileWriter w(dir_.string());
  w.add_summary(summary_tensor("x", 1), 1);
  const std::string first = w.path();
  w.close();
  w.close();  // idempotent
  w.flush();  // nothing to do
  EXPECT_EQ(w.path(), "");
  EXPECT_THROW_MSG(w.add_summary(summary_tensor("x", 2), 2), FailedPreconditionError, "closed");
  Graph g;
  EXPECT_THROW_MSG(w.add_graph(g), FailedPreconditionError, "closed");
  w.reopen();
  const std::string second = w.path();
  EXPECT_NE(second, "");
  EXPECT_NE(second, first);
  w.reopen();  // open: nothing to do
  EXPECT_EQ(w.path(), second);
  w.add_summary(summary_tensor("x", 3), 3);
  w.close();
  EXPECT_EQ(event_files(dir_).size(), 2u);
  auto events = events_of(second);
  ASSERT_EQ(events.size(), 2u);
  expect_file_version(events[0]);
  EXPECT_EQ(events[1].step(), 3);
  EXPECT_EQ(events_of(first).size(), 2u);
}

TEST_F(FileWriterTest, AMovedWriterKeepsWriting) {
  FileWriter a(dir_.string());
  a.add_summary(summary_tensor("x", 1), 1);
  FileWriter b(std::move(a));
  b.add_summary(summary_tensor("x", 2), 2);
  EXPECT_THROW_MSG(a.add_summary(summary_tensor("x", 3), 3), FailedPreconditionError, "moved");  // NOLINT
  EXPECT_EQ(a.path(), "");                                                                      // NOLINT
  a.close();                                                                                    // NOLINT
  FileWriter c((dir_ / "other").string());
  const std::string path = b.path();
  c = std::move(b);  // c's own file is closed
  c.close();
  EXPECT_EQ(events_of(path).size(), 3u);
  EXPECT_EQ(events_of(event_files(dir_ / "other").at(0)).size(), 1u);
}

TEST_F(FileWriterTest, ARemovedDirectoryIsRemadeAndNothingIsLost) {
  const fs::path logdir = dir_ / "run";
  FileWriter w(logdir.string(), 100, std::chrono::seconds(3600));
  w.add_summary(summary_tensor("x", 1), 1);
  w.flush();
  const std::string old_path = w.path();
  ASSERT_EQ(events_of(old_path).size(), 2u);
  fs::remove_all(logdir);
  w.add_summary(summary_tensor("x", 2), 2);  // never raises into the training loop
  w.add_summary(summary_tensor("x", 3), 3);
  w.flush();
  const auto files = event_files(logdir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0], w.path());
  auto events = events_of(files[0]);
  ASSERT_EQ(events.size(), 3u);
  expect_file_version(events[0]);
  EXPECT_EQ(events[1].step(), 2);
  EXPECT_EQ(events[2].step(), 3);
  auto warnings = logged(LogLevel::kWarning);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(old_path), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("gone"), std::string::npos) << warnings[0];
  // And it goes on in the new file.
  w.add_summary(summary_tensor("x", 4), 4);
  w.close();
  EXPECT_EQ(events_of(files[0]).size(), 4u);
  EXPECT_EQ(logged(LogLevel::kWarning).size(), 1u);
}

TEST_F(FileWriterTest, ADeletedFileIsReplacedAtTheNextFlush) {  // TF's FailFlush, made to recover
  FileWriter w(dir_.string(), 100, std::chrono::seconds(3600));
  const std::string old_path = w.path();
  w.add_summary(summary_tensor("x", 1), 1);
  ASSERT_TRUE(fs::remove(old_path));
  w.flush();
  auto events = events_of_the_one_file(dir_);
  ASSERT_EQ(events.size(), 2u);
  expect_file_version(events[0]);
  EXPECT_EQ(events[1].step(), 1);
  EXPECT_EQ(logged(LogLevel::kWarning).size(), 1u);
}

TEST_F(FileWriterTest, EventsAreKeptWhileTheDirectoryCannotBeMadeAndWrittenOnceItCan) {
  const fs::path logdir = dir_ / "run";
  FileWriter w(logdir.string(), 2, std::chrono::seconds(3600));
  w.add_summary(summary_tensor("x", 0), 0);
  w.flush();
  fs::remove_all(logdir);
  std::ofstream(logdir) << "a file where the directory was";  // make_dirs fails: ENOTDIR
  for (int step = 1; step <= 10; ++step) {
    w.add_summary(summary_tensor("x", static_cast<float>(step)), step);
    if (step % 3 == 0) w.flush();  // each retry fails; one warning for all of them
  }
  w.flush();
  auto warnings = logged(LogLevel::kWarning);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(logdir.string()), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("Not a directory"), std::string::npos) << warnings[0];
  ASSERT_TRUE(fs::remove(logdir));
  w.flush();
  auto events = events_of_the_one_file(logdir);
  ASSERT_EQ(events.size(), 11u);
  for (int step = 1; step <= 10; ++step) EXPECT_EQ(events[static_cast<std::size_t>(step)].step(), step);
  EXPECT_EQ(logged(LogLevel::kWarning).size(), 1u);
  auto infos = logged(LogLevel::kInfo);
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_NE(infos[0].find("10 kept events"), std::string::npos) << infos[0];
  w.close();
  EXPECT_TRUE(logged(LogLevel::kError).empty());
}

TEST_F(FileWriterTest, WhatCloseCannotWriteIsLoggedAsLost) {
  const fs::path logdir = dir_ / "run";
  FileWriter w(logdir.string(), 100, std::chrono::seconds(3600));
  fs::remove_all(logdir);
  std::ofstream(logdir) << "in the way";
  w.add_summary(summary_tensor("x", 1), 1);
  w.add_summary(summary_tensor("x", 2), 2);
  w.close();
  auto errors = logged(LogLevel::kError);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("2 events"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("lost"), std::string::npos) << errors[0];
}

}  // namespace
}  // namespace tessera
