// Workload placement, impl tessera: the time place_nodes takes to place random layered graphs of
// 200, 1,000, 10,000 and 100,000 ops (a quarter of them matmuls, in three size classes; see
// layered_random_dag in random_graphs.h) on a CPU and two simulated accelerators, cost policy.
//
//   BM_placement/tessera/200    BM_placement/tessera/1000   BM_placement/tessera/10000
//   BM_placement/tessera/100000
//
// The graph is built outside the timing loop; each iteration is one place_nodes call (groups,
// candidates, HEFT, the two baselines' simulations; graphs over 200 ops get no greedy passes).
// per_node = time per iteration / ops. The goal is under 50 ms for 10,000 ops.
#include <random>

#include "common/bench_common.h"
#include "placement/random_graphs.h"

namespace {

using tessera::Graph;
using namespace tessera::internal;

void BM_placement(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  const int num_nodes = static_cast<int>(state.range(0));
  Graph g;
  std::mt19937 rng(42);
  placement_bench::layered_random_dag(g, rng, num_nodes);
  const auto nodes = placement_bench::all_nodes(g);
  const auto devices = placement_bench::devices(2);
  PlacementOptions options;
  options.has_kernel = placement_bench::cpu_kernels_everywhere;

  // Checked once: every op placed, accelerators used, and no worse than either baseline.
  auto checked = place_nodes(nodes, devices, options);
  if (!tessera_bench::check(state, checked.ok(), "place_nodes failed")) return;
  int on_accelerators = 0;
  for (const auto& [node, d] : checked.value().device_of) on_accelerators += d != 0;
  double baseline = 1e300;
  for (auto policy : {PlacementPolicy::kGpuFirst, PlacementPolicy::kCpuOnly}) {
    PlacementOptions o = options;
    o.policy = policy;
    baseline = std::min(baseline, place_nodes(nodes, devices, o).value().estimated_makespan);
  }
  if (!tessera_bench::check(state,
                            checked.value().device_of.size() == nodes.size() && on_accelerators > 0 &&
                                checked.value().estimated_makespan <= baseline,
                            "placement incomplete, all on the host, or worse than a baseline")) {
    return;
  }

  for (auto _ : state) {
    auto p = place_nodes(nodes, devices, options);
    benchmark::DoNotOptimize(p);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(nodes.size()));
  state.counters["per_node"] = tessera_bench::per_unit(state, static_cast<double>(nodes.size()));
  state.counters["on_accelerators"] = on_accelerators;
  state.counters["speedup_vs_best_baseline"] = baseline / checked.value().estimated_makespan;
}

}  // namespace

BENCHMARK_CAPTURE(BM_placement, tessera, "tessera")
    ->Arg(200)  // the largest graphs that get the greedy passes
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
