// The random graphs both placement programs build (bench_placement.cc, placement_quality.cc) and
// tests/placement_test.cc places, and the devices they place on.
#pragma once

#include <tessera/tessera.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/node.h"
#include "core/op_registry.h"
#include "core/placement.h"
#include "device/sim_device.h"
#include "core/calibration.h"

namespace placement_bench {

using tessera::internal::PlacementDevice;

inline const std::string kLocal = "/job:localhost/replica:0/task:0/device:";

// The CPU with the documented default profile (not this machine's calibration, so that figures
// compare across machines) and `sims` simulated accelerators.
inline std::vector<PlacementDevice> devices(int sims) {
  std::vector<PlacementDevice> d = {{kLocal + "CPU:0", "CPU", tessera::internal::kCpuCostProfile}};
  for (int i = 0; i < sims; ++i) {
    d.push_back({kLocal + "SIM:" + std::to_string(i), "SIM", tessera::internal::kSimCostProfile});
  }
  return d;
}

// The registry's kernels, with every accelerator running what the CPU runs except host-only ops
// (the SIM kernel adapter's rule, whether or not this build registers it).
inline bool cpu_kernels_everywhere(const tessera::internal::Node& n, const PlacementDevice& d) {
  if (!tessera::internal::OpRegistry::global().has_kernel(n.type, "CPU")) return false;
  return d.is_host() || n.def == nullptr || !n.def->host_only;
}

inline std::vector<const tessera::internal::Node*> all_nodes(const tessera::Graph& g) {
  std::vector<const tessera::internal::Node*> out;
  for (tessera::internal::Node* n : g.impl().nodes()) out.push_back(n);
  return out;
}

// A small random DAG of `num_nodes` ops over [n,n] matrices, [n,1] vectors and scalars, fed by
// one or two [n,n] placeholders (host memory): matmuls (matrix-matrix and matrix-vector),
// broadcasting elementwise ops and reductions, so the op sizes within one graph span n^3 down to
// 1 and both devices matter. Each op is drawn from `matmul_weight` + 5 equal chances, of which
// `matmul_weight` are a matmul (an add where the operands do not fit) and one each an add, tanh,
// mul, reduce_sum and relu: the programs use 2, tests/placement_test.cc 1. The same generator
// state and arguments give the same graph.
inline void small_random_dag(tessera::Graph& g, std::mt19937& rng, int num_nodes, int64_t n,
                             unsigned matmul_weight = 2) {
  using namespace tessera;
  std::vector<Output> pool;
  const int feeds = 1 + static_cast<int>(rng() % 2);
  for (int i = 0; i < feeds; ++i) {
    pool.push_back(ops::placeholder(g, DType::Float32, Shape{n, n}, "feed" + std::to_string(i)));
  }
  auto pick = [&] {
    // Recent outputs more often, for depth; any output sometimes, for width.
    const int k = static_cast<int>(pool.size());
    return pool[rng() % 2 ? k - 1 - static_cast<int>(rng() % std::min(k, 3)) : static_cast<int>(rng() % k)];
  };
  while (g.num_operations() < num_nodes) {
    Output x = pick();
    Output y = pick();
    const bool x_matrix = x.shape().rank() == 2 && x.shape().dim(1) == n;
    const unsigned r = static_cast<unsigned>(rng() % (matmul_weight + 5));
    if (r < matmul_weight && x_matrix && y.shape().rank() == 2) {
      pool.push_back(ops::matmul(x, y));
      continue;
    }
    switch (r < matmul_weight ? 0 : r - matmul_weight) {
      case 0:
        pool.push_back(ops::add(x, y));
        break;
      case 1:
        pool.push_back(ops::tanh(x));
        break;
      case 2:
        pool.push_back(ops::mul(x, y));
        break;
      case 3:
        pool.push_back(x_matrix ? ops::reduce_sum(x, {1}, true) : ops::reduce_sum(x));
        break;
      default:
        pool.push_back(ops::relu(x));
        break;
    }
  }
}

// A large layered DAG of about `num_nodes` ops, `width` per layer, in three size classes (feature
// sizes 64, 256 and 1024 over a batch of 128): each op reads the previous layers of its class;
// scalars (full reductions) cross classes through broadcasting adds. A quarter matmuls, the rest
// elementwise and reductions.
inline void layered_random_dag(tessera::Graph& g, std::mt19937& rng, int num_nodes, int width = 64) {
  using namespace tessera;
  constexpr int kClasses = 3;
  const int64_t features[kClasses] = {64, 256, 1024};
  constexpr int64_t kBatch = 128;
  std::vector<Output> weights[kClasses];  // [f, f]: matmul right-hand sides
  std::vector<Output> prev[kClasses], cur[kClasses];
  std::vector<Output> scalars;
  for (int c = 0; c < kClasses; ++c) {
    prev[c].push_back(ops::placeholder(g, DType::Float32, Shape{kBatch, features[c]}));
    weights[c].push_back(ops::placeholder(g, DType::Float32, Shape{features[c], features[c]}));
  }
  int in_layer = 0;
  while (g.num_operations() < num_nodes) {
    const int c = static_cast<int>(rng() % kClasses);
    const Output x = prev[c][rng() % prev[c].size()];
    Output out;
    const unsigned r = rng() % 20;
    if (r < 5) {
      out = ops::matmul(x, weights[c][rng() % weights[c].size()]);
    } else if (r < 9) {
      out = ops::add(x, prev[c][rng() % prev[c].size()]);
    } else if (r < 11 && !scalars.empty()) {
      out = ops::mul(x, scalars[rng() % scalars.size()]);
    } else if (r < 13) {
      out = ops::tanh(x);
    } else if (r < 16) {
      out = ops::relu(x);
    } else if (r < 17) {
      scalars.push_back(ops::reduce_mean(x));
      if (scalars.size() > 16) scalars.erase(scalars.begin());
      continue;
    } else {
      out = ops::sigmoid(x);
    }
    cur[c].push_back(out);
    if (++in_layer == width) {
      for (int k = 0; k < kClasses; ++k) {
        if (!cur[k].empty()) prev[k] = std::move(cur[k]);
        cur[k].clear();
      }
      in_layer = 0;
    }
  }
}

}  // namespace placement_bench
