// The state behind tessera::RandomShuffleQueue: a QueueResource (kernels/queue_resource.h) whose
// dequeues take uniformly random elements and, while it is open, leave min_after_dequeue queued
// (Note [Queue stores] in kernels/queue_resource.cc).
//
//   auto q = std::make_shared<RandomShuffleQueueResource>(
//       "q", /*capacity=*/10, /*min_after_dequeue=*/2, /*seed=*/7,
//       std::vector<DType>{DType::Float32}, std::vector<Shape>{Shape{}});
//
// Thread-safe, as QueueResource.
#pragma once

#include <random>

#include "kernels/queue_resource.h"

namespace tessera::internal {

class RandomShuffleQueueResource final : public QueueResource {
 public:
  // `capacity` < 0: unbounded, else > min_after_dequeue >= 0. `seed` 0: drawn from
  // std::random_device; else the same operations in the same order take the same elements.
  RandomShuffleQueueResource(std::string name, int64_t capacity, int64_t min_after_dequeue,
                             uint64_t seed, std::vector<DType> dtypes, std::vector<Shape> shapes);

 private:
  void push_locked(Chunk chunk) override;
  void take_locked(int64_t k, std::vector<Chunk>* out) override;
  void put_back_locked(std::vector<Chunk> taken) override;

  // Guarded by the base's lock: single elements in no particular order, and the generator that
  // picks among them.
  std::vector<Chunk> elements_;
  std::mt19937_64 rng_;
};

}  // namespace tessera::internal
