// Workload variables, impl mutex: the baseline for contended assign_add, a float += 1 guarded by
// a std::mutex, from the same thread counts.
//
//   BM_assign_add_8threads/mutex/real_time/threads:{1,2,4,8}
#include <mutex>

#include "common/bench_common.h"
#include "variables/threads.h"

namespace {

struct Counter {
  std::mutex mu;
  float value = 0.0f;  // guarded by mu
  bool ok = false;

  void add(float delta) {
    std::lock_guard<std::mutex> l(mu);
    value += delta;
  }
  float read() {
    std::lock_guard<std::mutex> l(mu);
    return value;
  }

  Counter() {
    variables_bench::hammer(variables_bench::kCheckThreads, variables_bench::kCheckUpdatesPerThread,
                            [&] { add(1.0f); });
    ok = read() == static_cast<float>(variables_bench::kCheckThreads *
                                      variables_bench::kCheckUpdatesPerThread);
  }
};

Counter& shared_counter() {
  static Counter* c = new Counter();
  return *c;
}

void BM_assign_add_8threads(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  Counter& c = shared_counter();
  if (!tessera_bench::check(state, c.ok, "8 x 1000 concurrent increments != 8000")) return;
  // The increment is opaque to the optimizer (DoNotOptimize), like the variable's update.
  float one = 1.0f;
  for (auto _ : state) {
    benchmark::DoNotOptimize(one);
    c.add(one);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["per_update"] = tessera_bench::per_unit(state, 1);
}

}  // namespace

BENCHMARK_CAPTURE(BM_assign_add_8threads, mutex, "mutex")
    ->Threads(1)
    ->Threads(2)
    ->Threads(4)
    ->Threads(8)
    ->UseRealTime();
