// Workload queue, impl tessera: element throughput of a FIFOQueue (capacity 1000, int32 scalars)
// between N producer threads running session.run(enqueue) (as QueueRunner threads do) and N
// consumer threads running session.run(dequeue), on one session.
//
//   BM_queue_1to1/tessera   1 producer, 1 consumer
//   BM_queue_4to4/tessera   4 producers, 4 consumers
//
// Each iteration moves 20,000 elements (harness.h); manual time covers only the transfer, not
// thread start-up. items_per_second is the element throughput. The first transfer is checked
// (every element arrives exactly once: the sum of the dequeued 1s is 20,000, the queue ends
// empty); every timed iteration is checked again the same way.
#include <tessera/tessera.h>

#include <string_view>
#include <vector>

#include "common/bench_common.h"
#include "queue/harness.h"

namespace {

using namespace tessera;

void run_queue(benchmark::State& state, int n) {
  Graph g;
  FIFOQueue q(g, queue_bench::kCapacity, {DType::Int32}, {Shape{}}, "", "q");
  Operation enqueue = q.enqueue({ops::constant(g, int32_t{1}, "one")});
  Output dequeue = q.dequeue()[0];
  Output size = q.size();
  Session s(g);

  auto produce = [&] { s.run(enqueue); };
  auto consume = [&] { return static_cast<int64_t>(s.run(dequeue).scalar<int32_t>()); };

  // Warm-up and check: one full transfer, not timed.
  auto first = queue_bench::run_threads(n, produce, consume);
  if (!tessera_bench::check(state, first.sum == queue_bench::kItems && s.run(size).scalar<int32_t>() == 0,
                            "elements lost or duplicated")) {
    return;
  }
  bool all_ok = true;
  for (auto _ : state) {
    auto r = queue_bench::run_threads(n, produce, consume);
    state.SetIterationTime(r.seconds);
    all_ok = all_ok && r.sum == queue_bench::kItems;
  }
  tessera_bench::check(state, all_ok, "a timed transfer lost or duplicated elements");
  state.SetItemsProcessed(state.iterations() * queue_bench::kItems);
}

// The same transfer in batches: each producer run enqueue_many's kBatch elements, each consumer
// run dequeue_many's kBatch (how TensorFlow input pipelines move data: a run per batch, not per
// element).
void run_queue_batched(benchmark::State& state, int n) {
  Graph g;
  FIFOQueue q(g, queue_bench::kCapacity, {DType::Int32}, {Shape{}}, "", "q");
  Operation enqueue = q.enqueue_many(
      {ops::constant(g, Tensor::from_vector(std::vector<int32_t>(queue_bench::kBatch, 1), Shape{queue_bench::kBatch}))});
  Output dequeue = q.dequeue_many(queue_bench::kBatch)[0];
  Output size = q.size();
  Session s(g);

  auto produce = [&] { s.run(enqueue); };
  auto consume = [&] {
    int64_t sum = 0;
    for (int32_t v : s.run(dequeue).to_vector<int32_t>()) sum += v;
    return sum;
  };
  auto first = queue_bench::run_threads(n, produce, consume, queue_bench::kBatch);
  if (!tessera_bench::check(state, first.sum == queue_bench::kItems && s.run(size).scalar<int32_t>() == 0,
                            "elements lost or duplicated")) {
    return;
  }
  bool all_ok = true;
  for (auto _ : state) {
    auto r = queue_bench::run_threads(n, produce, consume, queue_bench::kBatch);
    state.SetIterationTime(r.seconds);
    all_ok = all_ok && r.sum == queue_bench::kItems;
  }
  tessera_bench::check(state, all_ok, "a timed transfer lost or duplicated elements");
  state.SetItemsProcessed(state.iterations() * queue_bench::kItems);
}

void BM_queue_1to1(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  if (std::string_view(impl) == "tessera") run_queue(state, 1);
  else run_queue_batched(state, 1);
}

void BM_queue_4to4(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  if (std::string_view(impl) == "tessera") run_queue(state, 4);
  else run_queue_batched(state, 4);
}

}  // namespace

BENCHMARK_CAPTURE(BM_queue_1to1, tessera, "tessera")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_queue_4to4, tessera, "tessera")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_queue_1to1, tessera_batch50, "tessera_batch50")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_queue_4to4, tessera_batch50, "tessera_batch50")->UseManualTime()->Unit(benchmark::kMillisecond);
