// Clusters on real network hosts: each task (`tessera server` processes) and the client in a Linux
// network namespace of its own, joined by a bridge (tests/testing/netns.h), so the traffic leaves
// loopback and every task needs CURVE keys, as in production. Training across the bridge, under
// netem delay and loss (the kernel's, or the lab's userspace relay where it has none), a worker
// partitioned from a ps and healed, a MonitoredTrainingSession recovering from a partition and
// from a ps killed mid-step and restarted, and a master cut off while a step blocks on a worker.
//
// Each test makes its namespaces and removes them (with whatever runs in them) when it ends, and
// skips with the reason where namespaces cannot be made (no root, no `ip`). The test body runs in
// a child process inside the client's namespace (TESSERA_ENTER_NETWORK_LAB). Every wait is
// bounded: runs carry RunOptions::timeout, sessions SessionOptions::rpc_timeout, and the whole
// child a limit; timing assertions are generous upper bounds only.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "host/child_process.h"
#include "testing/netns.h"
#include "testing/test_util.h"
#include "tessera/server_process.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
using testing::NetworkLab;

// Every task listens on this port of its own address: the namespaces cannot clash, so no port is
// picked in advance and none can be taken meanwhile.
constexpr int kPort = 2222;
// How long a failure may take to surface as UnavailableError: the heartbeat timeout (3 s) plus
// generous slack for a loaded machine. An upper bound only.
constexpr auto kFailureBound = 30s;
// Every run's own deadline: a step that hangs fails DeadlineExceeded instead of stalling the test.
constexpr auto kRunTimeout = 60s;

RunOptions bounded() {
  RunOptions o;
  o.timeout = kRunTimeout;
  return o;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A cluster whose tasks run in the lab's namespaces, each a CURVE server with a key pair made by
// `tessera keygen`; one cluster keys file lists every task (by host:port) and the clients given
// (by name), except those in `unlisted`. Not thread-safe: the test's main thread drives it.
class SecureCluster {
 public:
  SecureCluster(NetworkLab& lab, std::map<std::string, std::vector<std::string>> jobs,
                const std::vector<std::string>& clients, const std::vector<std::string>& unlisted = {})
      : lab_(lab), jobs_(std::move(jobs)) {
    std::map<std::string, std::vector<std::string>> addresses;
    std::string keys_text = "# the lab's cluster\n";
    for (const auto& [job, hosts] : jobs_) {
      for (std::size_t i = 0; i < hosts.size(); ++i) {
        addresses[job].push_back(lab.endpoint(hosts[i], kPort));
        task_of_[hosts[i]] = {job, static_cast<int>(i)};
        keys_text += keygen(hosts[i]) + " " + lab.endpoint(hosts[i], kPort) + "\n";
      }
    }
    for (const auto& c : clients) {
      const std::string key = keygen(c);
      if (std::find(unlisted.begin(), unlisted.end(), c) == unlisted.end()) keys_text += key + " " + c + "\n";
    }
    cluster_keys_ = lab.dir() + "/cluster.keys";
    std::ofstream(cluster_keys_) << keys_text;
    cluster_json_ = train::ClusterSpec(addresses).to_json();
  }

  // Starts (or restarts) the task on `host` in its namespace; returns once it listens.
  void start(const std::string& host) {
    const auto& [job, index] = task_of_.at(host);
    train::ServerProcessOptions o;
    o.args = {"--keys", key_file_.at(host), "--cluster-keys", cluster_keys_};
    o.start_timeout = 30000ms;
    tasks_.erase(host);  // kills and reaps a previous one
    tasks_.emplace(host, train::ServerProcess(lab_.wrapper(host, TESSERA_CLI_PATH), cluster_json_, job, index, o));
  }
  void start_all() {
    for (const auto& [host, task] : task_of_) start(host);
  }
  train::ServerProcess& task(const std::string& host) { return tasks_.at(host); }

  // "tessera://10.X.Y.Z:2222"
  std::string target(const std::string& host) const { return "tessera://" + lab_.endpoint(host, kPort); }
  // A client's session options: its key pair, the cluster's keys, a short RPC deadline.
  SessionOptions client(const std::string& name) const {
    SessionOptions o;
    o.rpc_timeout = 5000ms;
    o.security.key_file = key_file_.at(name);
    o.security.cluster_keys_file = cluster_keys_;
    return o;
  }
  const std::string& cluster_json() const { return cluster_json_; }

 private:
  // `tessera keygen --out <lab dir>/<name>`; the public key.
  std::string keygen(const std::string& name) {
    const std::string prefix = lab_.dir() + "/" + name;
    internal::ChildProcess child({TESSERA_CLI_PATH, "keygen", "--out", prefix});
    child.rest_of_stdout(20s);
    auto status = child.wait_exit(20s);
    EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "tessera keygen: " << child.stderr_text();
    key_file_[name] = prefix + ".key";
    std::string key = read_text(prefix + ".pub");
    while (!key.empty() && (key.back() == '\n' || key.back() == ' ')) key.pop_back();
    EXPECT_FALSE(key.empty()) << prefix << ".pub";
    return key;
  }

  NetworkLab& lab_;
  std::map<std::string, std::vector<std::string>> jobs_;
  std::map<std::string, std::pair<std::string, int>> task_of_;
  std::map<std::string, std::string> key_file_;
  std::map<std::string, train::ServerProcess> tasks_;
  std::string cluster_keys_, cluster_json_;
};

// y = 3x + 2 learned by gradient descent: w and the global step
// on ps 0, b on ps 1 (when there is one), the batch and the gradients on the worker `worker`
// (the session's master), the updates on the variables' tasks.
struct LinearModel {
  Graph g;
  Variable w, b, global_step;
  Output loss;
  Output step_after;  // the global step this step's increment made (part of train)
  Operation train;

  LinearModel(int worker, int ps_tasks) {
    const std::string ps1 = ps_tasks > 1 ? "/job:ps/task:1" : "/job:ps/task:0";
    {
      auto scope = g.device("/job:ps/task:0");
      w = Variable(g, Tensor::scalar(0.0f), "w");
      global_step = Variable(g, Tensor::scalar<int64_t>(0), "global_step", /*trainable=*/false);
    }
    {
      auto scope = g.device(ps1);
      b = Variable(g, Tensor::scalar(0.0f), "b");
    }
    Output grad_w, grad_b;
    {
      auto scope = g.device("/job:worker/task:" + std::to_string(worker));
      const uint64_t seed = 11 + static_cast<uint64_t>(worker);
      auto x = ops::random_uniform(g, {64}, DType::Float32, seed);
      auto noise = ops::random_normal(g, {64}, DType::Float32, seed + 100, 0.0f, 0.1f);
      auto y = ops::add(ops::add(ops::mul(x, ops::constant(g, 3.0f)), ops::constant(g, 2.0f)), noise);
      auto err = ops::sub(ops::add(ops::mul(x, w.value()), b.value()), y);
      loss = ops::reduce_mean(ops::square(err), {}, false, "loss");
      auto lr = ops::constant(g, 0.3f);
      grad_w = ops::mul(lr, ops::mul(ops::constant(g, 2.0f), ops::reduce_mean(ops::mul(err, x))));
      grad_b = ops::mul(lr, ops::mul(ops::constant(g, 2.0f), ops::reduce_mean(err)));
    }
    Operation update_w, update_b, count;
    {
      auto scope = g.device("/job:ps/task:0");
      update_w = w.assign_sub(grad_w).op();
      step_after = global_step.assign_add(ops::constant(g, Tensor::scalar<int64_t>(1)));
      count = step_after.op();
    }
    {
      auto scope = g.device(ps1);
      update_b = b.assign_sub(grad_b).op();
    }
    train = ops::group({update_w, update_b, count}, "train");
  }
};

// `steps` steps of `model` on `session`; each bounded. Returns the first and last loss.
std::pair<float, float> train_steps(LinearModel& model, Session& session, int steps) {
  float first = -1, last = -1;
  for (int i = 0; i < steps; ++i) {
    const float l = session.run({model.loss}, {}, {model.train}, bounded())[0].scalar<float>();
    if (i == 0) first = l;
    last = l;
  }
  return {first, last};
}

// The cluster of tests a and b: 2 ps and 2 workers, each worker's client training the shared
// model (between-graph replication) on its own thread; checks convergence and that the tensors
// crossed the bridge.
void train_two_workers_and_check(NetworkLab& lab, SecureCluster& cluster, int steps_per_worker) {
  std::vector<std::unique_ptr<LinearModel>> models;
  std::vector<std::unique_ptr<Session>> sessions;
  for (int i = 0; i < 2; ++i) {
    models.push_back(std::make_unique<LinearModel>(i, 2));
    sessions.push_back(std::make_unique<Session>(models[i]->g, cluster.target("w" + std::to_string(i)),
                                                 cluster.client("client")));
  }
  sessions[0]->run(std::vector<Output>{}, {}, {global_variables_initializer(models[0]->g)}, bounded());
  const NetworkLab::Counters before = lab.counters("ps0");

  std::mutex mu;
  std::vector<std::pair<float, float>> losses(2);
  std::vector<std::string> failures;
  testing::run_threads(2, [&](int i) {
    try {
      auto l = train_steps(*models[i], *sessions[i], steps_per_worker);
      std::lock_guard<std::mutex> lock(mu);
      losses[i] = l;
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(mu);
      failures.push_back("worker " + std::to_string(i) + ": " + std::string(error_code_name(e.code())) + ": " + e.what());
    }
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
  ASSERT_TRUE(failures.empty());

  auto values = sessions[0]->run({models[0]->w.value(), models[0]->b.value(), models[0]->global_step.value()}, {}, {},
                                 bounded());
  const float w = values[0].scalar<float>(), b = values[1].scalar<float>();
  EXPECT_NEAR(w, 3.0f, 0.2f);
  EXPECT_NEAR(b, 2.0f, 0.2f);
  EXPECT_EQ(values[2].scalar<int64_t>(), 2 * steps_per_worker);  // every update applied on the ps
  for (int i = 0; i < 2; ++i) EXPECT_LT(losses[i].second, losses[i].first) << "worker " << i;

  // The variables' reads and updates went over ps 0's link to the bridge: at least a few hundred
  // bytes per step each way (CURVE frames, headers, tensors), far more than stray ARP.
  const NetworkLab::Counters after = lab.counters("ps0");
  EXPECT_GT(after.rx_bytes - before.rx_bytes, 100LL * 2 * steps_per_worker);
  EXPECT_GT(after.tx_bytes - before.tx_bytes, 100LL * 2 * steps_per_worker);
  for (auto& s : sessions) s->close();
}

// ---- a. training across the bridge, CURVE required ----

TEST(NetnsClusterTest, PsTrainingAcrossTheBridgeConvergesWithCurveKeys) {
  TESSERA_ENTER_NETWORK_LAB(lab, "client", 200s, "ps0", "ps1", "w0", "w1", "client");
  SecureCluster cluster(*lab, {{"ps", {"ps0", "ps1"}}, {"worker", {"w0", "w1"}}}, {"client", "mallory"},
                        /*unlisted=*/{"mallory"});
  cluster.start_all();
  // The tasks report the lab's addresses, not loopback.
  for (const char* host : {"ps0", "ps1", "w0", "w1"}) {
    EXPECT_EQ(cluster.task(host).target(), cluster.target(host));
    EXPECT_EQ(cluster.target(host), "tessera://" + lab->address(host) + ":" + std::to_string(kPort));
    EXPECT_EQ(cluster.target(host).rfind("tessera://10.", 0), 0u) << cluster.target(host);  // not 127.x
  }
  train_two_workers_and_check(*lab, cluster, 100);

  // A client whose key is not listed is refused, fast, with a typed error.
  Graph g;
  auto c = ops::add(ops::constant(g, 40), ops::constant(g, 2));
  auto t0 = Clock::now();
  EXPECT_THROW_MSG(Session(g, cluster.target("w0"), cluster.client("mallory")), UnavailableError, "authentication");
  EXPECT_LT(Clock::now() - t0, kFailureBound);
  // So is a client without keys.
  SessionOptions plain;
  plain.rpc_timeout = 5000ms;
  t0 = Clock::now();
  EXPECT_THROW_MSG(Session(g, cluster.target("w0"), plain), UnavailableError, "authentication");
  EXPECT_LT(Clock::now() - t0, kFailureBound);
  // And a task without keys will not serve a lab address at all.
  EXPECT_THROW_MSG(train::Server(train::ClusterSpec({{"worker", {lab->endpoint("client", kPort)}}}), "worker", 0),
                   FailedPreconditionError, "without authentication");
  // The listed client still is served.
  Session ok(g, cluster.target("w1"), cluster.client("client"));
  EXPECT_EQ(ok.run({c}, {}, {}, bounded())[0].scalar<int32_t>(), 42);
}

// ---- b. under netem: delay and loss ----

// Puts `spec` on every host's link (each direction of a path crosses two links' egress: a delay of
// d on each makes a round trip of 2d), then trains as test a does. The lab is impairable: tc netem
// where the kernel has it, else the userspace relay (tests/testing/netem_relay.cc), so these run
// on kernels without sch_netem too.
void train_under_netem(NetworkLab& lab, const std::string& spec) {
  for (const auto& host : lab.hosts()) {
    ASSERT_TRUE(lab.netem(host, spec)) << "an impairable lab always takes netem";
  }
  SecureCluster cluster(lab, {{"ps", {"ps0", "ps1"}}, {"worker", {"w0", "w1"}}}, {"client"});
  cluster.start_all();
  train_two_workers_and_check(lab, cluster, 60);
}

TEST(NetnsClusterTest, NetemDelayOneMillisecondRoundTrip) {
  TESSERA_ENTER_IMPAIRABLE_NETWORK_LAB(lab, "client", 220s, "ps0", "ps1", "w0", "w1", "client");
  train_under_netem(*lab, "delay 500us");
}

TEST(NetnsClusterTest, NetemDelayTwentyMillisecondsRoundTrip) {
  TESSERA_ENTER_IMPAIRABLE_NETWORK_LAB(lab, "client", 220s, "ps0", "ps1", "w0", "w1", "client");
  train_under_netem(*lab, "delay 10ms");
}

TEST(NetnsClusterTest, NetemOnePercentLoss) {
  TESSERA_ENTER_IMPAIRABLE_NETWORK_LAB(lab, "client", 220s, "ps0", "ps1", "w0", "w1", "client");
  train_under_netem(*lab, "loss 1%");
}

// ---- c. a worker partitioned from a ps, then healed ----

// One step adds 1 (computed on worker 1) to two variables on each ps: a and b on ps 0, c and d on
// ps 1. Each ps applies its two updates from the one received tensor, so a == b and c == d always
// hold unless an update was half-applied. Across the two ps a step is not atomic (nor is it in
// TensorFlow): a failed step may have been applied on one ps and not the other.
struct CounterModel {
  Graph g;
  Variable a, b, c, d;
  Operation step;

  CounterModel() {
    {
      auto scope = g.device("/job:ps/task:0");
      a = Variable(g, Tensor::scalar(0.0f), "a");
      b = Variable(g, Tensor::scalar(0.0f), "b");
    }
    {
      auto scope = g.device("/job:ps/task:1");
      c = Variable(g, Tensor::scalar(0.0f), "c");
      d = Variable(g, Tensor::scalar(0.0f), "d");
    }
    Output one;
    {
      auto scope = g.device("/job:worker/task:1");
      one = ops::identity(ops::constant(g, 1.0f), "one");
    }
    Operation on_ps0, on_ps1;
    {
      auto scope = g.device("/job:ps/task:0");
      on_ps0 = ops::group({a.assign_add(one).op(), b.assign_add(one).op()}, "step_ps0");
    }
    {
      auto scope = g.device("/job:ps/task:1");
      on_ps1 = ops::group({c.assign_add(one).op(), d.assign_add(one).op()}, "step_ps1");
    }
    step = ops::group({on_ps0, on_ps1}, "step");
  }
  std::vector<float> values(Session& s) {
    std::vector<float> out;
    for (const auto& t : s.run({a.value(), b.value(), c.value(), d.value()}, {}, {}, bounded())) {
      out.push_back(t.scalar<float>());
    }
    return out;
  }
};

// Trains the counter model through worker 0 (the master), checkpoints, runs `cut` (a partition),
// expects steps to fail Unavailable within the bound, runs `mend`, expects steps to succeed again,
// and checks the variables and the checkpoint. `what` names the cut in messages.
void fail_and_recover(NetworkLab* lab, const std::string& what, const std::function<void()>& cut,
                      const std::function<void()>& mend) {
  SecureCluster cluster(*lab, {{"ps", {"ps0", "ps1"}}, {"worker", {"w0", "w1"}}}, {"client"});
  cluster.start_all();
  CounterModel m;
  Session s(m.g, cluster.target("w0"), cluster.client("client"));
  s.run(std::vector<Output>{}, {}, {global_variables_initializer(m.g)}, bounded());
  for (int i = 0; i < 5; ++i) s.run(std::vector<Output>{}, {}, {m.step}, bounded());

  // A checkpoint the client writes before the failure.
  train::Saver saver(m.g, {m.a, m.b, m.c, m.d});
  const std::string checkpoint = saver.save(s, lab->dir() + "/model", 5);
  ASSERT_EQ(m.values(s), (std::vector<float>{5, 5, 5, 5}));

  int attempts = 0, successes = 0;  // steps after the checkpoint
  auto step = [&] {
    ++attempts;
    s.run(std::vector<Output>{}, {}, {m.step}, bounded());
    ++successes;
  };
  for (int i = 0; i < 3; ++i) step();

  cut();
  const auto cut_at = Clock::now();
  std::optional<ErrorCode> code;
  std::string message;
  while (!code && Clock::now() - cut_at < kFailureBound) {
    try {
      step();
    } catch (const Error& e) {
      code = e.code();
      message = e.what();
    }
  }
  ASSERT_TRUE(code) << "steps kept succeeding for " << seconds_since(cut_at) << " s with " << what;
  EXPECT_EQ(*code, ErrorCode::kUnavailable) << message;
  EXPECT_LT(Clock::now() - cut_at, kFailureBound) << message;
  std::cout << what << ": the first step failed after " << seconds_since(cut_at) << " s: " << message << std::endl;
  // Still partitioned: another step fails too, also bounded.
  const auto again = Clock::now();
  try {
    step();
    ADD_FAILURE() << "a step succeeded with " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << e.what();
  }
  EXPECT_LT(Clock::now() - again, kFailureBound);

  // Healed: new runs succeed (after the channels reconnect: retried, bounded).
  mend();
  const auto healed = Clock::now();
  bool recovered = false;
  std::string last_error;
  while (!recovered && Clock::now() - healed < 60s) {
    try {
      step();
      recovered = true;
    } catch (const Error& e) {
      last_error = std::string(error_code_name(e.code())) + ": " + e.what();
      std::cout << "after healing, after " << seconds_since(healed) << " s: " << last_error << std::endl;
      ASSERT_EQ(e.code(), ErrorCode::kUnavailable) << last_error;
      std::this_thread::sleep_for(200ms);
    }
  }
  ASSERT_TRUE(recovered) << "no step succeeded within 60 s of healing: " << last_error;
  std::cout << "healed: a step succeeded after " << seconds_since(healed) << " s" << std::endl;
  for (int i = 0; i < 5; ++i) step();

  // Intact: on each ps both variables agree (no half-applied update), and each is the checkpoint's
  // value plus whole steps: every step that succeeded, and at most every step attempted.
  const std::vector<float> v = m.values(s);
  std::cout << "after healing: a b c d = " << v[0] << " " << v[1] << " " << v[2] << " " << v[3] << " (checkpoint 5; "
            << successes << " of " << attempts << " steps since succeeded)" << std::endl;
  EXPECT_EQ(v[0], v[1]) << "ps 0 applied half a step";
  EXPECT_EQ(v[2], v[3]) << "ps 1 applied half a step";
  for (float x : v) {
    EXPECT_EQ(x, std::floor(x));
    EXPECT_GE(x, 5.0f + static_cast<float>(successes));
    EXPECT_LE(x, 5.0f + static_cast<float>(attempts));
  }
  // The checkpoint written before the partition reads back whole, with its values.
  auto saved = train::read_checkpoint(checkpoint);
  for (const char* name : {"a", "b", "c", "d"}) {
    ASSERT_TRUE(saved.count(name)) << name;
    EXPECT_EQ(saved.at(name).scalar<float>(), 5.0f) << name;
  }
  // And restoring it sets every variable back.
  saver.restore(s, checkpoint);
  EXPECT_EQ(m.values(s), (std::vector<float>{5, 5, 5, 5}));
  s.close();
}

TEST(NetnsClusterTest, WorkerPartitionedFromAPsFailsUnavailableThenRecoversWithVariablesIntact) {
  TESSERA_ENTER_NETWORK_LAB(lab, "client", 200s, "ps0", "ps1", "w0", "w1", "client");
  // Worker 1 (which computes the update) and ps 0 cannot reach each other; the master reaches both.
  fail_and_recover(
      lab.get(), "worker 1 cut off from ps 0", [&] { lab->partition("w1", "ps0"); },
      [&] { lab->heal("w1", "ps0"); });
}

TEST(NetnsClusterTest, PsCablePulledFailsUnavailableThenRecoversWithVariablesIntact) {
  TESSERA_ENTER_NETWORK_LAB(lab, "client", 200s, "ps0", "ps1", "w0", "w1", "client");
  // Ps 0 reaches nobody (its link to the bridge is down) and comes back.
  fail_and_recover(lab.get(), "ps 0's cable pulled", [&] { lab->unplug("ps0"); }, [&] { lab->plug("ps0"); });
}

// ---- d. recovery through a MonitoredTrainingSession: a partition healed, a ps killed ----

// What the trainer's hook saw: each session the monitored session made (the first, and one per
// recovery) and the global step each started from, and the latest step a run returned.
struct RecoveryLog {
  std::atomic<int64_t> step{0};
  std::mutex mu;
  std::vector<int64_t> session_starts;            // global step right after each session was made
  std::vector<std::optional<int64_t>> latest_at;  // the latest checkpoint's step at that moment
};

// The monitored session's checkpoints: every this many global steps.
constexpr int kSaveEvery = 10;

// A hook recording into a RecoveryLog (after_create_session runs after the chief restored or
// initialized the model, so the global step read there is what the session starts from).
class RecoveryProbe : public train::SessionRunHook::Impl {
 public:
  RecoveryProbe(RecoveryLog& log, Variable global_step, std::string dir)
      : log_(log), global_step_(global_step), dir_(std::move(dir)) {}
  void after_create_session(Session& s) override {
    const int64_t step = s.run({global_step_.value()}, {}, {}, bounded())[0].scalar<int64_t>();
    std::optional<int64_t> latest;
    if (auto path = train::latest_checkpoint(dir_)) latest = std::stoll(path->substr(path->rfind('-') + 1));
    std::lock_guard<std::mutex> lock(log_.mu);
    log_.session_starts.push_back(step);
    log_.latest_at.push_back(latest);
  }

 private:
  RecoveryLog& log_;
  Variable global_step_;
  std::string dir_;
};

// Trains `model` through a chief MonitoredTrainingSession on `target` until the global step reaches
// `target_step` (StopAtStepHook), a checkpoint every `save_every` steps in `dir`; what it went
// through lands in `log`. The recovery from a lost task is the monitored session's, not ours: any
// error reaches the caller.
int64_t train_monitored(LinearModel& model, const std::string& target, const SessionOptions& options,
                        const std::string& dir, int64_t target_step, int save_every, RecoveryLog& log) {
  train::MonitoredTrainingSessionOptions o;
  o.master = target;
  o.is_chief = true;
  o.checkpoint_dir = dir;
  o.save_checkpoint_steps = save_every;
  o.recovery_wait = 120s;
  o.config = options;
  o.hooks = {train::StopAtStepHook(target_step),
             train::SessionRunHook(std::make_shared<RecoveryProbe>(log, model.global_step, dir))};
  train::MonitoredTrainingSession session(model.g, o);
  int64_t step = 0;
  while (!session.should_stop()) {
    auto out = session.run({model.step_after}, {}, {model.train});
    if (!out[0].is_null()) log.step = step = out[0].scalar<int64_t>();
  }
  session.close();
  return step;
}

// Runs train_monitored on a thread of its own; join() gives its result or error.
class Trainer {
 public:
  Trainer(LinearModel& model, SecureCluster& cluster, const std::string& dir, int64_t target_step, RecoveryLog& log)
      : thread_([&, dir, target_step] {
          try {
            reached_ = train_monitored(model, cluster.target("w0"), cluster.client("client"), dir, target_step,
                                       kSaveEvery, log);
          } catch (const Error& e) {
            error_ = std::string(error_code_name(e.code())) + ": " + e.what();
          }
          done_ = true;
        }) {}
  ~Trainer() {
    if (thread_.joinable()) thread_.join();
  }
  bool done() const { return done_; }
  // The step reached, or the error that ended the training.
  std::pair<std::optional<int64_t>, std::string> join() {
    thread_.join();
    return {reached_, error_};
  }

 private:
  std::optional<int64_t> reached_;
  std::string error_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// After a training that went through recoveries: the monitored session made two sessions or more,
// every one after the first restored the latest checkpoint of its moment (its global step is that
// checkpoint's, a multiple of kSaveEvery), the target was reached, the model trained, and the last
// checkpoint is the target step's.
void check_recovered(LinearModel& model, SecureCluster& cluster, const std::string& dir, RecoveryLog& log,
                     std::pair<std::optional<int64_t>, std::string> result, int64_t target_step) {
  ASSERT_TRUE(result.second.empty()) << result.second;
  ASSERT_TRUE(result.first);
  EXPECT_EQ(*result.first, target_step);
  {
    std::lock_guard<std::mutex> lock(log.mu);
    ASSERT_GE(log.session_starts.size(), 2u) << "the monitored session never made a new session";
    EXPECT_EQ(log.session_starts[0], 0);
    for (std::size_t i = 1; i < log.session_starts.size(); ++i) {
      std::cout << "session " << i + 1 << " started from global step " << log.session_starts[i] << std::endl;
      ASSERT_TRUE(log.latest_at[i]) << "a recovered session with no checkpoint to restore";
      EXPECT_EQ(log.session_starts[i], *log.latest_at[i]) << "session " << i + 1 << " did not restore the latest checkpoint";
      EXPECT_EQ(log.session_starts[i] % kSaveEvery, 0);
    }
  }
  Session s(model.g, cluster.target("w0"), cluster.client("client"));
  auto v = s.run({model.w.value(), model.b.value(), model.global_step.value()}, {}, {}, bounded());
  EXPECT_NEAR(v[0].scalar<float>(), 3.0f, 0.2f);
  EXPECT_NEAR(v[1].scalar<float>(), 2.0f, 0.2f);
  EXPECT_EQ(v[2].scalar<int64_t>(), target_step);
  auto latest = train::latest_checkpoint(dir);
  ASSERT_TRUE(latest);
  EXPECT_EQ(fs::path(*latest).filename().string(), "model.ckpt-" + std::to_string(target_step));
  // The checkpoint reads back whole, with the values the ps hold.
  auto saved = train::read_checkpoint(*latest);
  ASSERT_TRUE(saved.count("global_step"));
  EXPECT_EQ(saved.at("global_step").scalar<int64_t>(), target_step);
  ASSERT_TRUE(saved.count("w"));
  EXPECT_EQ(saved.at("w").scalar<float>(), v[0].scalar<float>());
  s.close();
}

// Trains the linear model through a monitored session on 2 ps and a worker (the master) until the
// global step reaches `target_step`; once a checkpoint exists and training goes on (step 25),
// runs `disrupt` (given what the trainer reports); then checks the recovery (check_recovered).
void train_through(NetworkLab& lab, int64_t target_step,
                   const std::function<void(SecureCluster&, const RecoveryLog&)>& disrupt) {
  SecureCluster cluster(lab, {{"ps", {"ps0", "ps1"}}, {"worker", {"w0"}}}, {"client"});
  cluster.start_all();
  const std::string dir = lab.dir() + "/checkpoints";
  LinearModel model(0, 2);
  RecoveryLog log;
  Trainer trainer(model, cluster, dir, target_step, log);
  const bool progressed = testing::wait_until([&] { return log.step >= 25 || trainer.done(); }, 120s);
  EXPECT_TRUE(progressed && !trainer.done()) << "training did not reach step 25 and go on";
  std::cout << "disrupting at step " << log.step.load() << std::endl;
  disrupt(cluster, log);
  check_recovered(model, cluster, dir, log, trainer.join(), target_step);
}

TEST(NetnsClusterTest, MonitoredSessionRecoversAfterAPartitionBetweenItsMasterAndAPsIsHealed) {
  TESSERA_ENTER_NETWORK_LAB(lab, "client", 240s, "ps0", "ps1", "w0", "client");
  // The master (worker 0, which runs the model's worker ops) is cut off from ps 0 (w and the global
  // step): steps cannot succeed until the heal.
  train_through(*lab, 150, [&](SecureCluster&, const RecoveryLog& log) {
    lab->partition("w0", "ps0");
    // Past the heartbeat bound the monitored session has seen the failure and is retrying.
    std::this_thread::sleep_for(8s);
    const int64_t during = log.step;
    std::this_thread::sleep_for(4s);
    EXPECT_EQ(log.step.load(), during) << "steps succeeded while the master was cut off from ps 0";
    lab->heal("w0", "ps0");
  });
}

TEST(NetnsClusterTest, PsKilledMidStepAndRestartedTrainingContinuesFromTheLatestCheckpoint) {
  TESSERA_ENTER_NETWORK_LAB(lab, "client", 240s, "ps0", "ps1", "w0", "client");
  // Kill -9 the ps holding w and the global step while steps run back to back. It comes back at
  // the same address, empty; the monitored session restores the latest checkpoint into it.
  train_through(*lab, 150, [](SecureCluster& cluster, const RecoveryLog&) {
    cluster.task("ps0").kill(SIGKILL);
    cluster.task("ps0").wait(10s);
    std::this_thread::sleep_for(2s);
    cluster.start("ps0");
  });
}

// ---- e. a partitioned master ----

// The client's master (worker 0) is cut off while the client's step blocks in a dequeue on worker
// 1's empty queue: the client's run fails Unavailable, and worker 1 cancels the blocked step, so an
// element enqueued afterwards stays in the queue (a dequeue left blocked would take it).
//
// The worker learns of it when the connection of the RunGraph call that started the step is lost
// (Note [Masters that vanish] in distributed/worker.cc): at the heartbeat bound for a cut-off
// master.
TEST(NetnsClusterTest, PartitionedMasterBlockedRunOnAWorkerIsCancelled) {
  TESSERA_ENTER_NETWORK_LAB(lab, "client", 150s, "w0", "w1", "client");
  SecureCluster cluster(*lab, {{"worker", {"w0", "w1"}}}, {"client"});
  cluster.start_all();
  Graph g;
  FIFOQueue queue;
  {
    auto scope = g.device("/job:worker/task:1");
    queue = FIFOQueue(g, 10, {DType::Float32}, {Shape{}}, "blocked_queue", "blocked_queue");
  }
  auto value = ops::placeholder(g, DType::Float32, Shape{}, "value");
  auto enqueue = queue.enqueue({value});
  auto dequeue = queue.dequeue()[0];
  auto size = queue.size();

  Session through_w0(g, cluster.target("w0"), cluster.client("client"));
  std::optional<ErrorCode> blocked_code;
  std::string blocked_message;
  std::atomic<bool> blocked_done{false};
  std::thread blocked;
  // Joined however the test ends (an exception past a failed check too); bounded: its run has a
  // deadline, and its master is plugged back in first.
  struct JoinAtExit {
    NetworkLab& lab;
    std::thread& t;
    ~JoinAtExit() {
      if (!t.joinable()) return;
      try {
        lab.plug("w0");
      } catch (...) {
      }
      t.join();
    }
  } join_at_exit{*lab, blocked};
  blocked = std::thread([&] {
    try {
      through_w0.run({dequeue}, {}, {}, bounded());
      blocked_message = "the dequeue returned a value";
    } catch (const Error& e) {
      blocked_code = e.code();
      blocked_message = e.what();
    }
    blocked_done = true;
  });
  // Give the step time to reach worker 1 and block there (nothing observable says it has).
  std::this_thread::sleep_for(2s);
  ASSERT_FALSE(blocked_done) << blocked_message;
  lab->unplug("w0");
  const auto cut = Clock::now();
  const bool failed = testing::wait_until([&] { return blocked_done.load(); }, kFailureBound);
  EXPECT_TRUE(failed) << "the client's run was still blocked " << kFailureBound.count()
                      << " s after its master was cut off";
  if (failed) {
    EXPECT_EQ(blocked_code, std::optional<ErrorCode>(ErrorCode::kUnavailable)) << blocked_message;
    std::cout << "master cut off: the client's run failed after " << seconds_since(cut) << " s: " << blocked_message
              << std::endl;
  }
  // Worker 1 notices its caller is gone within the heartbeat timeout (3 s): wait well past it.
  std::this_thread::sleep_for(10s);
  Session through_w1(g, cluster.target("w1"), cluster.client("client"));
  through_w1.run(std::vector<Output>{}, {{value, Tensor::scalar(7.0f)}}, {enqueue}, bounded());
  std::this_thread::sleep_for(1s);  // a dequeue still blocked there would take it now
  const int32_t left = through_w1.run({size}, {}, {}, bounded())[0].scalar<int32_t>();
  EXPECT_EQ(left, 1) << "the step blocked on worker 1 took the element after its master was cut off";
  if (left == 1) {
    EXPECT_EQ(through_w1.run({dequeue}, {}, {}, bounded())[0].scalar<float>(), 7.0f);
  }

  // Plugged back in, worker 0 serves new sessions again.
  lab->plug("w0");
  bool served = false;
  for (auto start = Clock::now(); !served && Clock::now() - start < kFailureBound;) {
    try {
      Session again(g, cluster.target("w0"), cluster.client("client"));
      served = again.run({size}, {}, {}, bounded())[0].scalar<int32_t>() >= 0;
    } catch (const UnavailableError&) {
      std::this_thread::sleep_for(200ms);
    }
  }
  EXPECT_TRUE(served) << "worker 0 served nothing within " << kFailureBound.count() << " s of being plugged back in";
  through_w1.close();
}

}  // namespace
}  // namespace tessera
