// One step of a two-layer network on the host and an accelerator: the placement pass decides
// which ops go where, the partitioner joins the devices with copies on the copy streams, and the
// same step under `cost`, `gpu_first` and `cpu_only` gives the same numbers at different speeds
// (bit for bit on the CPU and simulated accelerators, which run the CPU's kernels; within float32
// rounding, a relative 1e-4, where a GPU sums in its own order). A simulated accelerator's speed is
// that of the extra CPU threads it runs kernels on, which the part says when it ends.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <string>
#include <vector>

#include "examples/examples.h"
#include "tessera/tessera.h"

namespace tessera::examples {
namespace {

double median_step_ms(Session& s, const std::vector<Output>& fetches, const FeedMap& feeds, int steps) {
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    s.run(fetches, feeds);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int heterogeneous(std::ostream& out, const std::string& trace_file, bool log_placement) {
  constexpr int kBatch = 256, kIn = 512, kHidden = 512, kOut = 16;
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {kBatch, kIn}, "x");
  Variable w1(ops::random_normal(g, {kIn, kHidden}, DType::Float32, 1, 0.0f, 0.05f), "w1");
  Variable w2(ops::random_normal(g, {kHidden, kOut}, DType::Float32, 2, 0.0f, 0.05f), "w2");
  auto hidden = ops::relu(ops::matmul(x, w1.value()));
  auto logits = ops::matmul(hidden, w2.value());
  auto loss = ops::reduce_mean(ops::square(logits), {}, false, "loss");
  auto steps = ops::add(ops::constant(g, 1), ops::constant(g, 1), "step_counter");  // tiny: host

  std::vector<float> xs(static_cast<std::size_t>(kBatch) * kIn);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 37) % 101) / 101.0f - 0.5f;
  FeedMap feeds{{x, Tensor::matrix<float>(xs, kBatch, kIn)}};

  int rc = 0;
  float reference = 0;
  bool simulated = false;  // whether a policy put the logits' MatMul on a simulated accelerator
  const struct {
    const char* name;
    PlacementPolicy policy;
  } policies[] = {{"cost", PlacementPolicy::cost}, {"gpu_first", PlacementPolicy::gpu_first},
                  {"cpu_only", PlacementPolicy::cpu_only}};
  for (const auto& p : policies) {
    SessionOptions options;
    options.placement_policy = p.policy;
    Session s(g, options);
    s.run(global_variables_initializer(g));
    RunOptions ro;
    ro.trace = p.policy == PlacementPolicy::cost && !trace_file.empty();
    RunMetadata md;
    auto first = s.run({loss, steps}, feeds, {}, ro, &md);
    const float value = first[0].scalar<float>();
    if (p.policy == PlacementPolicy::cost) reference = value;
    simulated = simulated || logits.op().assigned_device().find("/device:SIM:") != std::string::npos;
    const bool same = std::abs(value - reference) <= 1e-4f * std::abs(reference);
    rc |= same ? 0 : 1;
    out << std::left << std::setw(10) << p.name << " matmul on " << std::setw(15)
        << short_device(logits.op().assigned_device()) << " loss " << std::setprecision(6) << value
        << (same ? "" : "  MISMATCH") << "   median step " << std::setprecision(3)
        << median_step_ms(s, {loss}, feeds, 15) << " ms\n";
    if (p.policy == PlacementPolicy::cost) {
      // The graph holds the latest session's placement: report cost's before the next one places.
      out << "  cost's ";
      report_placement(out, g, log_placement);
    }
    if (ro.trace) {
      std::ofstream f(trace_file);
      f << md.trace_json;
      out << "trace of the cost-placed step written to " << trace_file
          << " (open it in https://ui.perfetto.dev or chrome://tracing)\n";
    }
  }
  if (simulated) {
    out << "What the step times mean: the simulated accelerator is this machine's CPU. It runs the CPU\n"
           "kernels on worker threads of its own, beside the session's CPU threads, so a step split over\n"
           "the host and SIM runs on more threads at once than cpu_only's (and copies tensors between\n"
           "them). A step faster or slower than cpu_only's is that parallelism of the simulation on this\n"
           "machine, not a prediction of a GPU's speed; what the part shows is where each policy puts\n"
           "the ops, and that all three compute the same loss. On a GPU (a CUDA build) the same graph\n"
           "runs its matmuls there.\n";
  }
  return rc;
}

}  // namespace tessera::examples
