// Workload variables, impl tessera: contended assign_add on one scalar float variable.
//
//   BM_assign_add_8threads/tessera/real_time/threads:{1,2,4,8}
//     every benchmark thread runs the target `v.assign_add(1.0f)` on one shared session
//
// Checked once before timing: 8 threads x 1000 updates move the variable from 0 to exactly 8000.
#include <tessera/tessera.h>

#include <memory>

#include "common/bench_common.h"
#include "variables/threads.h"

namespace {

using namespace tessera;

struct Counter {
  Graph g;
  Variable v;
  Operation update;
  Operation init;
  std::unique_ptr<Session> s;
  bool ok = false;

  Counter() {
    v = Variable(g, Tensor::scalar(0.0f), "counter");
    update = v.assign_add(ops::constant(g, 1.0f, "one")).op();
    init = global_variables_initializer(g);
    s = std::make_unique<Session>(g);
    s->run(init);
    variables_bench::hammer(variables_bench::kCheckThreads, variables_bench::kCheckUpdatesPerThread,
                            [&] { s->run(update); });
    ok = s->run(v.value()).scalar<float>() ==
         static_cast<float>(variables_bench::kCheckThreads * variables_bench::kCheckUpdatesPerThread);
    s->run(init);
    for (int i = 0; i < 1000; ++i) s->run(update);  // warm-up
  }
};

Counter& shared_counter() {
  static Counter* c = new Counter();  // leaked on purpose: shared by the benchmark threads
  return *c;
}

void BM_assign_add_8threads(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  Counter& c = shared_counter();
  if (!tessera_bench::check(state, c.ok, "8 x 1000 concurrent assign_add != 8000")) return;
  for (auto _ : state) c.s->run(c.update);
  state.SetItemsProcessed(state.iterations());
  state.counters["per_update"] = tessera_bench::per_unit(state, 1);
}

}  // namespace

BENCHMARK_CAPTURE(BM_assign_add_8threads, tessera, "tessera")
    ->Threads(1)
    ->Threads(2)
    ->Threads(4)
    ->Threads(8)
    ->UseRealTime();
