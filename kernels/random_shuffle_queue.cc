#include "kernels/random_shuffle_queue.h"

namespace tessera::internal {

namespace {

uint64_t seed_or_random(uint64_t seed) {
  if (seed != 0) return seed;
  std::random_device device;
  return (uint64_t{device()} << 32) | device();
}

}  // namespace

RandomShuffleQueueResource::RandomShuffleQueueResource(std::string name, int64_t capacity,
                                                       int64_t min_after_dequeue, uint64_t seed,
                                                       std::vector<DType> dtypes,
                                                       std::vector<Shape> shapes)
    : QueueResource("RandomShuffleQueue", std::move(name), capacity, min_after_dequeue,
                    std::move(dtypes), std::move(shapes)),
      rng_(seed_or_random(seed)) {
  TESSERA_CHECK(capacity < 0 || min_after_dequeue < capacity);
}

void RandomShuffleQueueResource::push_locked(Chunk chunk) {
  if (chunk.size() == 1) {
    elements_.push_back(std::move(chunk));
    return;
  }
  // Rows of a batch: each becomes a one-row view of the same tensors (no copy), so any one of
  // them can be taken alone.
  for (int64_t i = chunk.begin; i < chunk.end; ++i) {
    Chunk row = chunk;
    row.begin = i;
    row.end = i + 1;
    elements_.push_back(std::move(row));
  }
}

void RandomShuffleQueueResource::take_locked(int64_t k, std::vector<Chunk>* out) {
  for (; k > 0; --k) {
    // A uniform index in [0, size): the high 64 bits of a 64-bit draw times size (bias below
    // size / 2^64), then the element swapped to the back and popped.
    const auto n = static_cast<uint64_t>(elements_.size());
    const auto i = static_cast<std::size_t>((static_cast<unsigned __int128>(rng_()) * n) >> 64);
    std::swap(elements_[i], elements_.back());
    out->push_back(std::move(elements_.back()));
    elements_.pop_back();
  }
}

void RandomShuffleQueueResource::put_back_locked(std::vector<Chunk> taken) {
  for (Chunk& c : taken) elements_.push_back(std::move(c));
}

}  // namespace tessera::internal
