// Workloads on a cluster of `tessera server` processes (loopback, free ports), started by the
// benchmark and stopped at exit:
//
//   BM_step_two_tasks/tessera   the fixed cost of one step spanning two tasks: c = a + b with b
//                               computed on task 1 and c on task 0, run through task 0's master
//                               (client -> master -> two workers -> tensor task 1 -> task 0 ->
//                               master -> client)
//   BM_step_one_task/tessera    the same graph on one task (client -> master -> worker), for
//                               comparison
//   BM_ps_steps/tessera/W       parameter-server training steps per second with W = 1, 2, 4 worker
//                               processes, each driven by its own client with its own graph;
//                               variables (a 256x256 weight matrix and a bias) on the ps
//   BM_step_two_tasks/tessera_busy_poll, BM_ps_steps/tessera_busy_poll/W
//                               the same with every task and client busy-polling (kBusyPoll)
//   BM_session_transfer_<size>/tessera
//                               TensorFlow's transfer workload as its sessions run it (1MiB,
//                               16MiB, 64MiB): an int32 variable of that size on the ps read by an
//                               Identity on worker 0, run as a target through worker 0's master by
//                               4 threads at once (4 steps in flight), so the tensor crosses from
//                               the ps to worker 0 once a step and reaches neither the master's
//                               client nor the master. bench_transport's transfer rows time the
//                               RPC path alone; this is what a session adds to it.
#include <signal.h>

#include <tessera/server_process.h>
#include <tessera/tessera.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/bench_common.h"
#include "transport/transfer_bench.h"

namespace {

using namespace tessera;
using namespace std::chrono_literals;


// Impl tessera_busy_poll: every task started with `--busy-poll`, and the clients' sessions with
// SessionOptions::busy_poll, both kBusyPoll (train::ServerOptions::busy_poll: the tasks' servers
// and channels, and the clients' channels, look for the next message that long before they sleep).
constexpr std::chrono::microseconds kBusyPoll{100};

SessionOptions session_options(bool busy_poll) {
  SessionOptions options;
  if (busy_poll) options.busy_poll = kBusyPoll;
  return options;
}

// A ps task and `workers` worker tasks, as processes.
class Cluster {
 public:
  explicit Cluster(int workers, bool busy_poll = false) {
    try {
      std::vector<std::string> addresses;
      for (int i = 0; i <= workers; ++i) addresses.push_back(train::free_loopback_address());
      std::string json = fmt::format("{{\"ps\": [\"{}\"], \"worker\": [", addresses[0]);
      for (int i = 1; i <= workers; ++i) json += fmt::format("{}\"{}\"", i > 1 ? ", " : "", addresses[i]);
      json += "]}";
      train::ServerProcessOptions options;
      options.forward_stderr = false;  // the tasks' logs stay out of the benchmark's output
      if (busy_poll) options.args = {"--busy-poll", std::to_string(kBusyPoll.count())};
      for (int i = 0; i <= workers; ++i) {
        children_.emplace_back(TESSERA_CLI_PATH, json, i == 0 ? "ps" : "worker", i == 0 ? 0 : i - 1, options);
        if (i > 0) targets.push_back(children_.back().target());
      }
    } catch (const Error& e) {
      fmt::print(stderr, "bench_cluster: {}\n", e.what());
      ok = false;  // the fixtures skip their benchmarks with an error
    }
  }
  ~Cluster() {
    for (auto& c : children_) c.kill(SIGTERM);
    for (auto& c : children_) c.wait(5s);
  }
  bool ok = true;
  std::vector<std::string> targets;

 private:
  std::vector<train::ServerProcess> children_;
};

// The fixtures live for the whole program (Google Benchmark calls a benchmark function several
// times) and are destroyed at exit: sessions first, then the processes.
struct StepFixture {
  Cluster cluster;
  Graph g;
  Output c;
  std::unique_ptr<Session> s;
  bool ok = false;
  StepFixture(bool two_tasks, bool busy_poll) : cluster(2, busy_poll) {
    if (!cluster.ok) return;
    auto a = ops::constant(g, 1.0f, "a");
    Output b;
    {
      auto scope = g.device(two_tasks ? "/job:worker/task:1" : "/job:worker/task:0");
      b = ops::add(ops::constant(g, 1.0f), ops::constant(g, 1.0f), "b");
    }
    c = ops::add(a, b, "c");
    s = std::make_unique<Session>(g, cluster.targets[0], session_options(busy_poll));
    ok = s->run(c).scalar<float>() == 3.0f;
    for (int i = 0; i < 200; ++i) s->run(c);  // warm-up
  }
  ~StepFixture() { s.reset(); }
};

// Every benchmark here reports its session steps per second: Google Benchmark's CSV reporter
// aborts ("All counters must be present in each run") when the runs of one invocation name
// different counters.
benchmark::Counter steps_per_second(int steps_per_iteration) {
  return benchmark::Counter(static_cast<double>(steps_per_iteration), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_step(benchmark::State& state, bool two_tasks, bool busy_poll) {
  tessera_bench::set_impl(state, busy_poll ? "tessera_busy_poll" : "tessera");
  static std::map<std::pair<bool, bool>, std::unique_ptr<StepFixture>> fixtures;
  auto& fixture = fixtures[{two_tasks, busy_poll}];
  if (!fixture) fixture = std::make_unique<StepFixture>(two_tasks, busy_poll);
  StepFixture& f = *fixture;
  if (!tessera_bench::check(state, f.ok, "the cluster did not start, or c != 3")) return;
  for (auto _ : state) {
    Tensor t = f.s->run(f.c);
    benchmark::DoNotOptimize(t);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["steps_per_second"] = steps_per_second(1);
}

// One worker's client: y = relu(x W + b) loss on a 64x256 batch, SGD on W and b (on the ps).
struct Client {
  Graph g;
  Variable w, b;
  Output loss;
  Operation train;
  std::unique_ptr<Session> s;
  Client(const std::string& target, bool busy_poll) {
    {
      auto ps = g.device("/job:ps/task:0");
      w = Variable(g, Tensor::from_vector(std::vector<float>(256 * 256, 0.001f), Shape{256, 256}), "w");
      b = Variable(g, Tensor::from_vector(std::vector<float>(256, 0.0f), Shape{256}), "b");
    }
    auto x = ops::random_uniform(g, {64, 256}, DType::Float32, 3);
    auto h = ops::add(ops::matmul(x, w.value()), b.value());
    loss = ops::reduce_mean(ops::square(h), {}, false, "loss");
    auto g_h = ops::mul(ops::constant(g, 2.0f / (64 * 256)), h);
    auto g_w = ops::matmul(x, g_h, /*transpose_a=*/true);
    auto g_b = ops::reduce_sum(g_h, {0});
    auto lr = ops::constant(g, 0.01f);
    train = ops::group({w.assign_sub(ops::mul(lr, g_w)).op(), b.assign_sub(ops::mul(lr, g_b)).op()});
    s = std::make_unique<Session>(g, target, session_options(busy_poll));
  }
};

struct PsFixture {
  Cluster cluster;
  std::vector<std::unique_ptr<Client>> clients;
  bool ok = false;
  PsFixture(int workers, bool busy_poll) : cluster(workers, busy_poll) {
    if (!cluster.ok) return;
    for (int i = 0; i < workers; ++i) {
      clients.push_back(std::make_unique<Client>(cluster.targets[static_cast<std::size_t>(i)], busy_poll));
    }
    clients[0]->s->run(global_variables_initializer(clients[0]->g));
    const float before = clients[0]->s->run(clients[0]->loss).scalar<float>();
    for (auto& c : clients) {
      for (int i = 0; i < 20; ++i) c->s->run(c->train);  // warm-up (plans registered)
    }
    ok = clients[0]->s->run(clients[0]->loss).scalar<float>() < before;
  }
  ~PsFixture() { clients.clear(); }
};

void BM_ps_steps(benchmark::State& state, bool busy_poll) {
  tessera_bench::set_impl(state, busy_poll ? "tessera_busy_poll" : "tessera");
  const int workers = static_cast<int>(state.range(0));
  static std::map<std::pair<int, bool>, std::unique_ptr<PsFixture>> fixtures;
  auto& fixture = fixtures[{workers, busy_poll}];
  if (!fixture) fixture = std::make_unique<PsFixture>(workers, busy_poll);
  if (!tessera_bench::check(state, fixture->ok, "the cluster did not start, or the loss did not fall")) return;
  auto& clients = fixture->clients;
  constexpr int kStepsPerWorker = 20;
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (auto& c : clients) {
      threads.emplace_back([&c] {
        for (int i = 0; i < kStepsPerWorker; ++i) c->s->run(c->train);
      });
    }
    for (auto& t : threads) t.join();
  }
  state.SetItemsProcessed(state.iterations() * workers * kStepsPerWorker);
  state.counters["steps_per_second"] = steps_per_second(workers * kStepsPerWorker);
}

struct TransferFixture {
  Cluster cluster{1};
  Graph g;
  std::map<std::string, Output> pulled;  // by size name: the Identity on worker 0
  std::unique_ptr<Session> s;
  bool ok = false;
  TransferFixture() {
    if (!cluster.ok) return;
    std::vector<std::pair<Operation, FeedMap>> inits;
    for (const transport_bench::Size& size : transport_bench::kSizes) {
      if (size.bytes < (std::size_t{1} << 20)) continue;
      const std::string name = size.name;
      Tensor pattern(DType::Int32, Shape{static_cast<int64_t>(size.bytes / 4)});
      transport_bench::fill_pattern(pattern.raw_mutable_data(), size.bytes);
      Output value;
      {
        auto ps = g.device("/job:ps/task:0");
        auto feed = ops::placeholder(g, DType::Int32, pattern.shape(), "pattern_" + name);
        Variable v(feed, "src_" + name);
        inits.push_back({v.initializer(), FeedMap{{feed, pattern}}});
        value = v.value();
      }
      auto scope = g.device("/job:worker/task:0");
      pulled[name] = ops::identity(value, "pulled_" + name);
    }
    s = std::make_unique<Session>(g, cluster.targets[0]);
    ok = true;
    for (auto& [init, feed] : inits) s->run(init, feed);
    for (const transport_bench::Size& size : transport_bench::kSizes) {
      auto it = pulled.find(size.name);
      if (it == pulled.end()) continue;
      // Checked once: every byte arrives (fetched back to the client, which the timed runs skip).
      const Tensor got = s->run(it->second);
      ok = ok && got.dtype() == DType::Int32 && transport_bench::has_pattern(got.raw_data(), got.bytes(), size.bytes);
      for (int i = 0; i < 3; ++i) s->run(it->second.op());  // warm-up: the plan is registered
    }
  }
  ~TransferFixture() { s.reset(); }
};

void BM_session_transfer(benchmark::State& state, const transport_bench::Size& size) {
  tessera_bench::set_impl(state, "tessera");
  static TransferFixture f;
  if (!tessera_bench::check(state, f.ok, "the cluster did not start, or a pulled tensor differs")) return;
  const Operation op = f.pulled[size.name].op();
  std::mutex mu;
  std::string error;  // the first failed step's, guarded by mu
  for (auto _ : state) {
    // size.transfers steps per iteration, kWindow threads taking them from one counter.
    std::atomic<int> left{size.transfers};
    std::vector<std::thread> threads;
    for (int t = 0; t < transport_bench::kWindow; ++t) {
      threads.emplace_back([&] {
        try {
          while (left.fetch_sub(1) > 0) f.s->run(op);
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> l(mu);
          if (error.empty()) error = e.what();
          left = 0;
        }
      });
    }
    for (auto& t : threads) t.join();
    if (!error.empty()) {
      state.SkipWithError(error.c_str());
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * size.transfers * static_cast<int64_t>(size.bytes));
  state.SetItemsProcessed(state.iterations() * size.transfers);
  state.counters["steps_per_second"] = steps_per_second(size.transfers);
}

BENCHMARK_CAPTURE(BM_step, two_tasks, true, false)->Name("BM_step_two_tasks/tessera")->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_step, one_task, false, false)->Name("BM_step_one_task/tessera")->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_ps_steps, tessera, false)
    ->Name("BM_ps_steps/tessera")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_step, two_tasks_busy_poll, true, true)
    ->Name("BM_step_two_tasks/tessera_busy_poll")
    ->UseRealTime()
    ->MinTime(1.0);
BENCHMARK_CAPTURE(BM_ps_steps, tessera_busy_poll, true)
    ->Name("BM_ps_steps/tessera_busy_poll")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_session_transfer, 1MiB, transport_bench::kSizes[2])
    ->Name("BM_session_transfer_1MiB/tessera")->UseRealTime()->MinTime(0.5);
BENCHMARK_CAPTURE(BM_session_transfer, 16MiB, transport_bench::kSizes[3])
    ->Name("BM_session_transfer_16MiB/tessera")->UseRealTime()->MinTime(0.5);
BENCHMARK_CAPTURE(BM_session_transfer, 64MiB, transport_bench::kSizes[4])
    ->Name("BM_session_transfer_64MiB/tessera")->UseRealTime()->MinTime(0.5);

}  // namespace
