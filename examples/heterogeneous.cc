// One step of a two-layer network on the host and an accelerator: the placement pass decides
// which ops go where, the partitioner joins the devices with copies on the copy streams, and the
// same step under `cost`, `gpu_first` and `cpu_only` gives the same numbers at different speeds
// (bit for bit on the CPU and simulated accelerators, which run the CPU's kernels; within float32
// rounding, a relative 1e-4, where a GPU sums in its own order).
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

int heterogeneous(std::ostream& out, const std::string& trace_file) {
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
  std::string cost_device;  // where `cost` put the first MatMul
  const struct {
    const char* name;
    PlacementPolicy policy;
  } policies[] = {{"cost", PlacementPolicy::cost}, {"gpu_first", PlacementPolicy::gpu_first},
                  {"cpu_only", PlacementPolicy::cpu_only}};
  for (const auto& p : policies) {
    SessionOptions options;
    options.placement_policy = p.policy;
    options.log_device_placement = p.policy == PlacementPolicy::cost;  // the table, once, on stderr
    out << std::flush;  // the placement table goes to stderr: keep the two in order
    Session s(g, options);
    s.run(global_variables_initializer(g));
    RunOptions ro;
    ro.trace = p.policy == PlacementPolicy::cost && !trace_file.empty();
    RunMetadata md;
    auto first = s.run({loss, steps}, feeds, {}, ro, &md);
    const float value = first[0].scalar<float>();
    if (p.policy == PlacementPolicy::cost) {
      reference = value;
      cost_device = logits.op().assigned_device();
    }
    const bool same = std::abs(value - reference) <= 1e-4f * std::abs(reference);
    rc |= same ? 0 : 1;
    out << std::left << std::setw(10) << p.name << " matmul on " << std::setw(42)
        << logits.op().assigned_device() << " loss " << std::setprecision(6) << value
        << (same ? "" : "  MISMATCH") << "   median step " << std::setprecision(3)
        << median_step_ms(s, {loss}, feeds, 15) << " ms\n";
    if (ro.trace) {
      std::ofstream f(trace_file);
      f << md.trace_json;
      out << "trace of the cost-placed step written to " << trace_file
          << " (open it in https://ui.perfetto.dev or chrome://tracing)\n";
    }
  }
  if (cost_device.find("/device:SIM:") != std::string::npos) {
    out << "(a simulated accelerator runs the CPU kernels on its own stream threads: its step times show\n"
           " the cost of bridging devices, not a speed-up; on a GPU the same graph runs its matmuls there)\n";
  }
  return rc;
}

}  // namespace tessera::examples
