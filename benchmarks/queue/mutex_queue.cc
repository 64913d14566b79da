// Workload queue, impl mutex_queue: the baseline, a plain bounded queue (std::mutex and two
// condition variables over a ring buffer) of the same capacity and element type, moved through
// by the same threads and element count as tessera.cc.
//
//   BM_queue_1to1/mutex_queue   1 producer, 1 consumer
//   BM_queue_4to4/mutex_queue   4 producers, 4 consumers
#include <condition_variable>
#include <functional>
#include <string_view>
#include <cstdint>
#include <mutex>
#include <vector>

#include "common/bench_common.h"
#include "queue/harness.h"

namespace {

class BoundedQueue {
 public:
  explicit BoundedQueue(int capacity) : ring_(capacity) {}

  void push(int32_t v) {
    std::unique_lock<std::mutex> l(mu_);
    not_full_.wait(l, [&] { return size_ < ring_.size(); });
    ring_[(head_ + size_) % ring_.size()] = v;
    ++size_;
    l.unlock();
    not_empty_.notify_one();
  }

  int32_t pop() {
    std::unique_lock<std::mutex> l(mu_);
    not_empty_.wait(l, [&] { return size_ > 0; });
    const int32_t v = ring_[head_];
    head_ = (head_ + 1) % ring_.size();
    --size_;
    l.unlock();
    not_full_.notify_one();
    return v;
  }

  // The batched twins: `n` elements in one critical section each (waiting for room or elements
  // as a whole, so a batch is never split).
  void push_many(int32_t v, std::size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    not_full_.wait(l, [&] { return size_ + n <= ring_.size(); });
    for (std::size_t i = 0; i < n; ++i) ring_[(head_ + size_ + i) % ring_.size()] = v;
    size_ += n;
    l.unlock();
    not_empty_.notify_all();
  }

  int64_t pop_many(std::size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    not_empty_.wait(l, [&] { return size_ >= n; });
    int64_t sum = 0;
    for (std::size_t i = 0; i < n; ++i) sum += ring_[(head_ + i) % ring_.size()];
    head_ = (head_ + n) % ring_.size();
    size_ -= n;
    l.unlock();
    not_full_.notify_all();
    return sum;
  }

  std::size_t size() {
    std::lock_guard<std::mutex> l(mu_);
    return size_;
  }

 private:
  std::mutex mu_;
  std::condition_variable not_full_;
  std::condition_variable not_empty_;
  std::vector<int32_t> ring_;  // guarded by mu_
  std::size_t head_ = 0;       // guarded by mu_
  std::size_t size_ = 0;       // guarded by mu_
};

void run_queue(benchmark::State& state, int n, int batch) {
  BoundedQueue q(queue_bench::kCapacity);
  std::function<void()> produce = [&] { q.push(1); };
  std::function<int64_t()> consume = [&] { return static_cast<int64_t>(q.pop()); };
  if (batch > 1) {
    produce = [&] { q.push_many(1, batch); };
    consume = [&] { return q.pop_many(batch); };
  }

  auto first = queue_bench::run_threads(n, produce, consume, batch);
  if (!tessera_bench::check(state, first.sum == queue_bench::kItems && q.size() == 0,
                            "elements lost or duplicated")) {
    return;
  }
  bool all_ok = true;
  for (auto _ : state) {
    auto r = queue_bench::run_threads(n, produce, consume, batch);
    state.SetIterationTime(r.seconds);
    all_ok = all_ok && r.sum == queue_bench::kItems;
  }
  tessera_bench::check(state, all_ok, "a timed transfer lost or duplicated elements");
  state.SetItemsProcessed(state.iterations() * queue_bench::kItems);
}

int batch_of(const char* impl) { return std::string_view(impl) == "mutex_queue" ? 1 : queue_bench::kBatch; }

void BM_queue_1to1(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  run_queue(state, 1, batch_of(impl));
}

void BM_queue_4to4(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  run_queue(state, 4, batch_of(impl));
}

}  // namespace

BENCHMARK_CAPTURE(BM_queue_1to1, mutex_queue, "mutex_queue")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_queue_4to4, mutex_queue, "mutex_queue")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_queue_1to1, mutex_queue_batch50, "mutex_queue_batch50")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_queue_4to4, mutex_queue_batch50, "mutex_queue_batch50")->UseManualTime()->Unit(benchmark::kMillisecond);
