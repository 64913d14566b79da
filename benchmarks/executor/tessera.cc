// Workload executor, impl tessera: the executor's per-op overhead on graphs of 10,000 tiny ops.
//
//   BM_executor_wide_10k/tessera    10,000 independent add(a, b) of two int32 scalar constants,
//                                   run through one group (no_op with 10,000 control inputs)
//   BM_executor_chain_10k/tessera   x = add(x, 1) 10,000 times from x = 0, the last x fetched
//   BM_executor_chain_300k/tessera  the same, 300,000 times: a plan past the caches
//   BM_executor_chain_10k_cold/tessera  the 10,000, each run after the caches were emptied
//
// The graph, session and plan are built and warmed up before timing; each iteration is one
// Session::run. per_op = time per iteration / 10,000 (the two constants and the group node are
// counted in the time but not in the op count, like the TBB source/sink nodes in tbb.cc).
#include <tessera/tessera.h>

#include <memory>
#include <vector>

#include "common/bench_common.h"
#include "executor/shapes.h"

namespace {

using namespace tessera;

void BM_executor_wide_10k(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  Graph g;
  auto a = ops::constant(g, int32_t{1}, "a");
  auto b = ops::constant(g, int32_t{2}, "b");
  std::vector<Output> outs;
  std::vector<Operation> adds;
  outs.reserve(executor_bench::kOps);
  adds.reserve(executor_bench::kOps);
  for (int i = 0; i < executor_bench::kOps; ++i) {
    outs.push_back(ops::add(a, b));
    adds.push_back(outs.back().op());
  }
  Operation all = ops::group(adds, "all");
  Session s(g);

  // Checked once: every op computed 1 + 2.
  int64_t sum = 0;
  for (const Tensor& t : s.run(outs)) sum += t.scalar<int32_t>();
  if (!tessera_bench::check(state, sum == 3LL * executor_bench::kOps, "sum of the wide adds")) return;

  for (int i = 0; i < 3; ++i) s.run(all);  // warm-up (the plan for this target is cached)
  for (auto _ : state) s.run(all);
  tessera_bench::report_per_op(state, executor_bench::kOps);
}

// x = add(x, 1) `n` times; cold: the caches emptied before each run (executor/shapes.h).
void chain(benchmark::State& state, const char* impl, int n, bool cold) {
  tessera_bench::set_impl(state, impl);
  Graph g;
  auto one = ops::constant(g, int32_t{1}, "one");
  Output x = ops::constant(g, int32_t{0}, "x0");
  for (int i = 0; i < n; ++i) x = ops::add(x, one);
  Session s(g);

  if (!tessera_bench::check(state, s.run(x).scalar<int32_t>() == n, "chain result != its length")) return;
  for (int i = 0; i < 3; ++i) s.run(x);  // warm-up
  executor_bench::time_runs(state, cold, [&] {
    Tensor t = s.run(x);
    benchmark::DoNotOptimize(t);
  });
  tessera_bench::report_per_op(state, n);
}

const bool kChainsRegistered = [] {
  for (const auto& v : executor_bench::kChains) executor_bench::register_chain(v, "tessera", chain);
  return true;
}();

}  // namespace

BENCHMARK_CAPTURE(BM_executor_wide_10k, tessera, "tessera")->Unit(benchmark::kMicrosecond)->UseRealTime();
