// Workload placement quality: how close the cost policy's placements come to the best possible
// ones. 200 random DAGs of 8 to 14 ops (small_random_dag in random_graphs.h, seeded; matrix sizes
// 16 to 1024) on a CPU and one simulated accelerator (the documented default profiles). For each
// graph: the simulated makespan of the kCost, kGpuFirst and kCpuOnly placements (place_nodes), and
// the optimum over every assignment of the ops to the two devices (2^n, placeholders on the host
// as placement requires: feeds arrive in host memory), all with simulate_makespan.
//
// Goals: >= 90% of graphs within 10% of the optimum, median ratio within 3%, and no graph where
// the cost policy is more than 2% worse than the better baseline. Exits 1 when one is missed.
//
//   placement_quality [graphs] [seed]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "placement/random_graphs.h"

namespace {

using tessera::Graph;
using namespace tessera::internal;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : 0.5 * (v[k - 1] + v[k]);
}

}  // namespace

int main(int argc, char** argv) {
  const int graphs = argc > 1 ? std::atoi(argv[1]) : 200;
  const unsigned seed = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 2024;
  const auto devices = placement_bench::devices(1);
  const int64_t sizes[] = {16, 32, 64, 128, 256, 512, 1024};
  std::mt19937 rng(seed);

  std::vector<double> cost_ratio, gpu_ratio, cpu_ratio;
  int within_10 = 0, worse_than_baseline = 0, cost_uses_both = 0;
  double place_seconds = 0;
  for (int t = 0; t < graphs; ++t) {
    Graph g;
    const int num_nodes = 8 + static_cast<int>(rng() % 7);
    placement_bench::small_random_dag(g, rng, num_nodes, sizes[rng() % 7]);
    const auto nodes = placement_bench::all_nodes(g);

    double span[3];
    const PlacementPolicy policies[] = {PlacementPolicy::kCost, PlacementPolicy::kGpuFirst,
                                        PlacementPolicy::kCpuOnly};
    for (int k = 0; k < 3; ++k) {
      PlacementOptions options;
      options.policy = policies[k];
      options.has_kernel = placement_bench::cpu_kernels_everywhere;
      const auto t0 = std::chrono::steady_clock::now();
      auto p = place_nodes(nodes, devices, options);
      if (k == 0) place_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!p.ok()) {
        std::fprintf(stderr, "graph %d: %s\n", t, p.status().to_string().c_str());
        return 2;
      }
      span[k] = simulate_makespan(nodes, devices, p.value().device_of);
      if (k == 0) {
        bool cpu = false, sim = false;
        for (const auto& [node, d] : p.value().device_of) (d == 0 ? cpu : sim) = true;
        cost_uses_both += cpu && sim;
      }
    }

    // The optimum: every assignment of the non-placeholder ops.
    std::vector<const Node*> free_nodes;
    std::unordered_map<const Node*, int> assignment;
    for (const Node* n : nodes) {
      if (n->type == "Placeholder") {
        assignment[n] = 0;
      } else {
        free_nodes.push_back(n);
      }
    }
    double best = 1e300;
    for (uint32_t mask = 0; mask < (1u << free_nodes.size()); ++mask) {
      for (std::size_t i = 0; i < free_nodes.size(); ++i) assignment[free_nodes[i]] = (mask >> i) & 1;
      best = std::min(best, simulate_makespan(nodes, devices, assignment));
    }

    cost_ratio.push_back(span[0] / best);
    gpu_ratio.push_back(span[1] / best);
    cpu_ratio.push_back(span[2] / best);
    within_10 += span[0] <= 1.10 * best;
    worse_than_baseline += span[0] > 1.02 * std::min(span[1], span[2]);
  }

  const double frac = static_cast<double>(within_10) / graphs;
  const double med = median(cost_ratio);
  const double worst = *std::max_element(cost_ratio.begin(), cost_ratio.end());
  std::printf("placement quality: %d random DAGs of 8-14 ops (seed %u), CPU + SIM, makespan / optimum\n\n",
              graphs, seed);
  std::printf("| policy | within 10%% of optimum | median ratio | worst ratio |\n|---|---|---|---|\n");
  auto row = [&](const char* name, const std::vector<double>& r) {
    int w = 0;
    for (double x : r) w += x <= 1.10;
    std::printf("| %s | %.1f%% | %.4f | %.3f |\n", name, 100.0 * w / graphs, median(r),
                *std::max_element(r.begin(), r.end()));
  };
  row("cost", cost_ratio);
  row("gpu_first", gpu_ratio);
  row("cpu_only", cpu_ratio);
  std::printf("\ncost worse than min(gpu_first, cpu_only) by > 2%%: %d graphs\n", worse_than_baseline);
  std::printf("cost placements using both devices: %d of %d graphs\n", cost_uses_both, graphs);
  std::printf("mean cost-policy placement time: %.1f us per graph\n\n", 1e6 * place_seconds / graphs);
  const bool met = frac >= 0.90 && med <= 1.03 && worse_than_baseline == 0;
  std::printf("goals (>= 90%% within 10%%, median <= 1.03, 0 worse than a baseline): %s\n",
              met ? "met" : "NOT MET");
  (void)worst;
  return met ? 0 : 1;
}
