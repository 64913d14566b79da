// Workload session_run: the fixed cost of one Session::run on a trivial graph, c = a + b of two
// scalar float constants.
//
//   BM_session_run_add/tessera            one thread calling run
//   BM_session_run_add_8threads/tessera   8 threads calling run on one shared session; the reported
//                                         time is wall time / total runs (inverse throughput)
//   BM_session_callable_add/tessera       one thread calling a Callable of the same signature
//                                         (Session::make_callable, issue 22's goal: <= 100 ns)
//   BM_session_callable_add_8threads/tessera  8 threads calling that one Callable
//   BM_session_run_cond/tessera           one thread calling run on y = cond(p, x * 2, -x) of a
//                                         scalar float constant x, the bool p fed, true and false
//                                         in turn: a Switch, a Merge and one branch per run
//   BM_session_run_while/tessera          one thread calling run on a while loop of 1000 iterations
//                                         (i + 1 and s + x, scalars): the reported per_iteration is
//                                         the run's time over its 1000 iterations
//   BM_session_run_map_fn/tessera         one thread calling run on map_fn(x * 2) over a [1000, 256]
//                                         float32 constant: an element read from one TensorArray and
//                                         written into another per iteration; per_element is the
//                                         run's time over its 1000 elements (a write that copied the
//                                         1 MiB array would cost about 1000x more per element)
#include <tessera/tessera.h>

#include <memory>
#include <vector>

#include "common/bench_common.h"

namespace {

using namespace tessera;

struct AddGraph {
  Graph g;
  Output c;
  std::unique_ptr<Session> s;
  Callable f;  // of c, shared by the callable benchmarks' threads
  bool ok = false;

  AddGraph() {
    auto a = ops::constant(g, 1.0f, "a");
    auto b = ops::constant(g, 2.0f, "b");
    c = ops::add(a, b, "c");
    s = std::make_unique<Session>(g);
    ok = s->run(c).scalar<float>() == 3.0f;     // checked once, before timing
    for (int i = 0; i < 1000; ++i) s->run(c);   // warm-up: plan cache, allocator, pool
    f = s->make_callable({c});
  }
};

// One session shared by every benchmark thread (built once, thread-safe static init).
AddGraph& shared_add_graph() {
  static AddGraph* graph = new AddGraph();  // leaked on purpose: threads may still use it at exit
  return *graph;
}

void BM_session_run_add(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  AddGraph& ag = shared_add_graph();
  if (!tessera_bench::check(state, ag.ok, "c = 1 + 2 != 3")) return;
  for (auto _ : state) {
    Tensor t = ag.s->run(ag.c);
    benchmark::DoNotOptimize(t);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["per_run"] = tessera_bench::per_unit(state, 1);
}

void BM_session_run_add_8threads(benchmark::State& state, const char* impl) {
  BM_session_run_add(state, impl);
}

void BM_session_callable_add(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  AddGraph& ag = shared_add_graph();
  const Callable& f = ag.f;
  const bool ok = ag.ok && f()[0].scalar<float>() == 3.0f;
  if (!tessera_bench::check(state, ok, "callable: c = 1 + 2 != 3")) return;
  for (auto _ : state) {
    auto t = f();
    benchmark::DoNotOptimize(t);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["per_run"] = tessera_bench::per_unit(state, 1);
}

void BM_session_callable_add_8threads(benchmark::State& state, const char* impl) {
  BM_session_callable_add(state, impl);
}

void BM_session_run_cond(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  Graph g;
  Output p = ops::placeholder(g, DType::Bool, Shape{}, "p");
  Output x = ops::constant(g, 3.0f, "x");
  Output y = ops::cond(
      p, [&] { return ops::mul(x, ops::constant(g, 2.0f)); }, [&] { return ops::neg(x); });
  Session s(g);
  const FeedMap on_true = {{p, Tensor::scalar(true)}}, on_false = {{p, Tensor::scalar(false)}};
  const bool ok = s.run(y, on_true).scalar<float>() == 6.0f && s.run(y, on_false).scalar<float>() == -3.0f;
  if (!tessera_bench::check(state, ok, "cond(p, 2x, -x) of x = 3 is not 6 and -3")) return;
  for (int i = 0; i < 1000; ++i) s.run(y, i % 2 == 0 ? on_true : on_false);  // warm-up
  bool pick = true;
  for (auto _ : state) {
    Tensor t = s.run(y, pick ? on_true : on_false);
    benchmark::DoNotOptimize(t);
    pick = !pick;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["per_run"] = tessera_bench::per_unit(state, 1);
}

void BM_session_run_while(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  constexpr int kIterations = 1000;
  Graph g;
  Output x = ops::constant(g, 0.5f, "x");
  Output n = ops::constant(g, kIterations, "n");
  std::vector<Output> r = ops::while_loop(
      [&](const std::vector<Output>& v) { return ops::less(v[0], n); },
      [&](const std::vector<Output>& v) {
        return std::vector<Output>{ops::add(v[0], ops::constant(g, 1)), ops::add(v[1], x)};
      },
      {ops::constant(g, 0), ops::constant(g, 0.0f)});
  Session s(g);
  const bool ok = s.run(r[1]).scalar<float>() == 500.0f;
  if (!tessera_bench::check(state, ok, "1000 iterations of s + 0.5 from 0 is not 500")) return;
  for (int i = 0; i < 20; ++i) s.run(r[1]);  // warm-up
  for (auto _ : state) {
    Tensor t = s.run(r[1]);
    benchmark::DoNotOptimize(t);
  }
  state.SetItemsProcessed(state.iterations() * kIterations);
  state.counters["per_iteration"] = tessera_bench::per_unit(state, kIterations);
}

void BM_session_run_map_fn(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  constexpr int kElements = 1000, kWidth = 256;
  Graph g;
  std::vector<float> values(static_cast<std::size_t>(kElements) * kWidth);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 7);
  Output x = ops::constant(g, Tensor::matrix<float>(values, kElements, kWidth), "x");
  Output two = ops::constant(g, 2.0f, "two");
  Output y = ops::map_fn([&](Output e) { return ops::mul(e, two); }, x);
  Output check = ops::reduce_sum(y);
  Session s(g);
  double want = 0;
  for (float v : values) want += 2.0 * v;
  const bool ok = s.run(check).scalar<float>() == static_cast<float>(want);
  if (!tessera_bench::check(state, ok, "sum(map_fn(x * 2)) is not 2 * sum(x)")) return;
  for (int i = 0; i < 5; ++i) s.run(y);  // warm-up
  for (auto _ : state) {
    Tensor t = s.run(y);
    benchmark::DoNotOptimize(t);
  }
  state.SetItemsProcessed(state.iterations() * kElements);
  state.counters["per_element"] = tessera_bench::per_unit(state, kElements);
}

}  // namespace

BENCHMARK_CAPTURE(BM_session_run_add, tessera, "tessera")->UseRealTime();
BENCHMARK_CAPTURE(BM_session_run_cond, tessera, "tessera")->UseRealTime();
BENCHMARK_CAPTURE(BM_session_run_while, tessera, "tessera")->UseRealTime();
BENCHMARK_CAPTURE(BM_session_run_map_fn, tessera, "tessera")->UseRealTime();
BENCHMARK_CAPTURE(BM_session_callable_add, tessera, "tessera")->UseRealTime();
BENCHMARK_CAPTURE(BM_session_run_add_8threads, tessera, "tessera")
    ->Threads(8)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_session_callable_add_8threads, tessera, "tessera")
    ->Threads(8)
    ->UseRealTime();
