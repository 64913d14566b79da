// Workload sim_chain_100, impls tessera (on a simulated accelerator, its partition replayed from a
// capture: SessionOptions::cuda_graphs), tessera_eager (the same, every op issued on its own) and
// cpu (the same chain on the host). See the function's comment.
#include <tessera/tessera.h>

#include <string>

#include "common/bench_common.h"

namespace {

using namespace tessera;

// sim_chain_100 (issue: GPU ops stream-ordered; the CPU stand-in for gpu_chain_100): 100 dependent
// tiny elementwise ops (x = x + one over 16 float32) on a simulated accelerator, a step fed from
// and fetched to the host, against the same chain on the host CPU. per_op = time per step / 100:
// what each op on a device stream costs beyond the host's own per-op price.
void BM_sim_chain_100(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  constexpr int kChain = 100;
  constexpr int64_t kWidth = 16;
  std::string device = "/device:CPU:0";
  const bool eager = std::string(impl) == "tessera_eager";
  if (std::string(impl) == "tessera" || eager) {
    device.clear();
    for (const DeviceInfo& d : list_devices()) {
      if (d.type == "SIM" && device.empty()) device = d.name;
    }
    if (device.empty()) device = add_simulated_accelerators(1).front();
  }
  Graph g;
  auto x0 = ops::placeholder(g, DType::Float32, Shape{kWidth}, "x0");
  Output x = x0;
  {
    auto scope = g.device(device);
    Tensor ones(DType::Float32, Shape{kWidth});
    for (int64_t i = 0; i < kWidth; ++i) ones.mutable_data<float>()[i] = 1.0f;
    auto one = ops::constant(g, ones, "one");
    for (int i = 0; i < kChain; ++i) x = ops::add(x, one);
  }
  SessionOptions options;
  options.cuda_graphs = !eager;
  Session s(g, options);
  Tensor in(DType::Float32, Shape{kWidth});
  for (int64_t i = 0; i < kWidth; ++i) in.mutable_data<float>()[i] = static_cast<float>(i);
  const Tensor out = s.run({x}, {{x0, in}}).front();
  if (!tessera_bench::check(state, out.data<float>()[kWidth - 1] == static_cast<float>(kWidth - 1 + kChain),
                            "chain result != x0 + 100")) {
    return;
  }
  for (int i = 0; i < 3; ++i) s.run({x}, {{x0, in}});  // warm-up
  for (auto _ : state) {
    auto t = s.run({x}, {{x0, in}});
    benchmark::DoNotOptimize(t);
  }
  tessera_bench::report_per_op(state, kChain);
}

}  // namespace

// Both impls in one registration list: interleaved repetitions compare them side by side.
BENCHMARK_CAPTURE(BM_sim_chain_100, tessera, "tessera")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_sim_chain_100, tessera_eager, "tessera_eager")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_sim_chain_100, cpu, "cpu")->Unit(benchmark::kMicrosecond)->UseRealTime();
