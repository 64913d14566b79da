// Workload executor, impl tessera: the executor's per-op overhead on graphs of 10,000 tiny ops.
//
//   BM_executor_wide_10k/tessera    10,000 independent add(a, b) of two int32 scalar constants,
//                                   run through one group (no_op with 10,000 control inputs)
//   BM_executor_chain_10k/tessera   x = add(x, 1) 10,000 times from x = 0, the last x fetched
//
// The graph, session and plan are built and warmed up before timing; each iteration is one
// Session::run. per_op = time per iteration / 10,000 (the two constants and the group node are
// counted in the time but not in the op count, like the TBB source/sink nodes in tbb.cc).
#include <tessera/tessera.h>

#include <memory>
#include <string>
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
  state.SetItemsProcessed(state.iterations() * executor_bench::kOps);
  state.counters["per_op"] = tessera_bench::per_unit(state, executor_bench::kOps);
}

void BM_executor_chain_10k(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  Graph g;
  auto one = ops::constant(g, int32_t{1}, "one");
  Output x = ops::constant(g, int32_t{0}, "x0");
  for (int i = 0; i < executor_bench::kOps; ++i) x = ops::add(x, one);
  Session s(g);

  if (!tessera_bench::check(state, s.run(x).scalar<int32_t>() == executor_bench::kOps,
                            "chain result != 10000")) {
    return;
  }
  for (int i = 0; i < 3; ++i) s.run(x);  // warm-up
  for (auto _ : state) {
    Tensor t = s.run(x);
    benchmark::DoNotOptimize(t);
  }
  state.SetItemsProcessed(state.iterations() * executor_bench::kOps);
  state.counters["per_op"] = tessera_bench::per_unit(state, executor_bench::kOps);
}

// sim_chain_100 (issue: GPU ops stream-ordered; the CPU stand-in for gpu_chain_100): 100 dependent
// tiny elementwise ops (x = x + one over 16 float32) on a simulated accelerator, a step fed from
// and fetched to the host, against the same chain on the host CPU. per_op = time per step / 100:
// what each op on a device stream costs beyond the host's own per-op price.
void BM_sim_chain_100(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  constexpr int kChain = 100;
  constexpr int64_t kWidth = 16;
  std::string device = "/device:CPU:0";
  if (std::string(impl) == "tessera") {
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
  Session s(g);
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
  state.SetItemsProcessed(state.iterations() * kChain);
  state.counters["per_op"] = tessera_bench::per_unit(state, kChain);
}

}  // namespace

BENCHMARK_CAPTURE(BM_sim_chain_100, tessera, "tessera")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_sim_chain_100, cpu, "cpu")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_executor_wide_10k, tessera, "tessera")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_executor_chain_10k, tessera, "tessera")->Unit(benchmark::kMicrosecond)->UseRealTime();
