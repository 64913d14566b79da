// Workload executor, impl tbb: the same graph shapes as tessera.cc on a oneTBB flow graph, as the
// baseline for the executor's per-op overhead.
//
//   BM_executor_wide_10k/tbb    broadcast_node -> 10,000 continue_nodes, each storing a + b (int)
//                               into its own slot -> one continue_node that waits for them all
//   BM_executor_chain_10k/tbb   10,000 function_node<int, int> returning x + 1, chained by edges;
//                               0 is put into the first, the last stores its result
//   BM_executor_chain_300k/tbb_1thread, BM_executor_chain_10k_cold/tbb_1thread: the chain's
//                               variants of tessera.cc (300,000 nodes; caches emptied before each run)
//
// The flow graph is built once before timing; each iteration is try_put + wait_for_all. Impl
// "tbb" runs on TBB's default arena (one worker per hardware thread); impl "tbb_1thread" limits TBB
// to one thread (tbb::global_control), like tessera, which runs cheap ops inline on the caller.
#include <tbb/flow_graph.h>
#include <tbb/global_control.h>

#include <atomic>
#include <memory>
#include <numeric>
#include <string_view>
#include <vector>

#include "common/bench_common.h"
#include "executor/shapes.h"

namespace {

using tbb::flow::continue_msg;
using tbb::flow::continue_node;
using tbb::flow::function_node;

// For impl "tbb_1thread", limits TBB to one thread while the result lives; null for "tbb".
std::unique_ptr<tbb::global_control> thread_limit_for(const char* impl) {
  if (std::string_view(impl) != "tbb_1thread") return nullptr;
  return std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, 1);
}

// Runs `once` three times to warm up, then once per timed iteration (cold: executor/shapes.h).
template <class Fn>
void warm_up_and_time(benchmark::State& state, Fn&& once, bool cold = false) {
  for (int i = 0; i < 3; ++i) once();
  executor_bench::time_runs(state, cold, once);
}

void BM_executor_wide_10k(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  const auto one_thread = thread_limit_for(impl);
  constexpr int n = executor_bench::kOps;
  tbb::flow::graph g;
  // Operands the optimizer cannot see through (DoNotOptimize), so the adds are not folded.
  std::vector<int> operands{1, 2};
  benchmark::DoNotOptimize(operands.data());
  std::vector<int> out(n, 0);
  tbb::flow::broadcast_node<continue_msg> start(g);
  std::vector<std::unique_ptr<continue_node<continue_msg>>> nodes;
  nodes.reserve(n);
  int finished = 0;
  continue_node<continue_msg> all(g, [&](const continue_msg&) { ++finished; });
  for (int i = 0; i < n; ++i) {
    nodes.push_back(std::make_unique<continue_node<continue_msg>>(
        g, [&out, &operands, i](const continue_msg&) { out[i] = operands[0] + operands[1]; }));
    tbb::flow::make_edge(start, *nodes.back());
    tbb::flow::make_edge(*nodes.back(), all);
  }

  // Checked once: every node computed 1 + 2 and the sink ran once.
  start.try_put(continue_msg());
  g.wait_for_all();
  const long sum = std::accumulate(out.begin(), out.end(), 0L);
  if (!tessera_bench::check(state, sum == 3L * n && finished == 1, "sum of the wide adds")) return;

  warm_up_and_time(state, [&] {
    start.try_put(continue_msg());
    g.wait_for_all();
  });
  benchmark::DoNotOptimize(out.data());
  tessera_bench::report_per_op(state, n);
}

// `n` function_nodes chained; cold: the caches emptied before each run (executor/shapes.h).
void chain(benchmark::State& state, const char* impl, int n, bool cold) {
  tessera_bench::set_impl(state, impl);
  const auto one_thread = thread_limit_for(impl);
  tbb::flow::graph g;
  int result = -1;
  std::vector<std::unique_ptr<function_node<int, int>>> nodes;
  nodes.reserve(n);
  for (int i = 0; i < n; ++i) {
    const bool last = i == n - 1;
    nodes.push_back(std::make_unique<function_node<int, int>>(
        g, tbb::flow::unlimited, [&result, last](int x) {
          const int y = x + 1;
          if (last) result = y;
          return y;
        }));
    if (i > 0) tbb::flow::make_edge(*nodes[i - 1], *nodes[i]);
  }

  nodes.front()->try_put(0);
  g.wait_for_all();
  if (!tessera_bench::check(state, result == n, "chain result != its length")) return;

  warm_up_and_time(
      state,
      [&] {
        nodes.front()->try_put(0);
        g.wait_for_all();
      },
      cold);
  benchmark::DoNotOptimize(result);
  tessera_bench::report_per_op(state, n);
}

const bool kChainsRegistered = [] {
  executor_bench::register_chain(executor_bench::kChain10k, "tbb", chain);
  for (const auto& v : executor_bench::kChains) executor_bench::register_chain(v, "tbb_1thread", chain);
  return true;
}();

}  // namespace

BENCHMARK_CAPTURE(BM_executor_wide_10k, tbb, "tbb")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_executor_wide_10k, tbb_1thread, "tbb_1thread")->Unit(benchmark::kMicrosecond)->UseRealTime();
