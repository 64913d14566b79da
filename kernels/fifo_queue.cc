#include "kernels/fifo_queue.h"

#include <algorithm>

namespace tessera::internal {

FIFOQueueResource::FIFOQueueResource(std::string name, int64_t capacity, std::vector<DType> dtypes,
                                     std::vector<Shape> shapes)
    : QueueResource("FIFOQueue", std::move(name), capacity, /*min_after_dequeue=*/0,
                    std::move(dtypes), std::move(shapes)) {}

void FIFOQueueResource::push_locked(Chunk chunk) { elements_.push_back(std::move(chunk)); }

void FIFOQueueResource::take_locked(int64_t k, std::vector<Chunk>* out) {
  while (k > 0) {
    Chunk& front = elements_.front();
    const int64_t n = std::min(front.size(), k);
    if (n == front.size()) {
      out->push_back(std::move(front));
      elements_.pop_front();
    } else {  // the first rows of a queued batch
      Chunk part = front;
      part.end = front.begin + n;
      front.begin += n;
      out->push_back(std::move(part));
    }
    k -= n;
  }
}

void FIFOQueueResource::put_back_locked(std::vector<Chunk> taken) {
  // They were the oldest: back at the front, in order (Note [Queue attempts]).
  for (auto it = taken.rbegin(); it != taken.rend(); ++it) elements_.push_front(std::move(*it));
}

}  // namespace tessera::internal
