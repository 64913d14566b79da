// The state behind tessera::FIFOQueue: a QueueResource (kernels/queue_resource.h) whose dequeues
// take the oldest elements (Note [Queue stores] in kernels/queue_resource.cc).
//
//   auto q = std::make_shared<FIFOQueueResource>("q", /*capacity=*/2,
//                                                std::vector<DType>{DType::Float32},
//                                                std::vector<Shape>{Shape{}});
//
// Thread-safe, as QueueResource.
#pragma once

#include <deque>

#include "kernels/queue_resource.h"

namespace tessera::internal {

class FIFOQueueResource final : public QueueResource {
 public:
  // `capacity` < 0: unbounded. `shapes` empty: element shapes unconstrained; else one (possibly
  // partial) shape per component.
  FIFOQueueResource(std::string name, int64_t capacity, std::vector<DType> dtypes,
                    std::vector<Shape> shapes);

 private:
  void push_locked(Chunk chunk) override;
  void take_locked(int64_t k, std::vector<Chunk>* out) override;
  void put_back_locked(std::vector<Chunk> taken) override;

  std::deque<Chunk> elements_;  // guarded by the base's lock, oldest first
};

}  // namespace tessera::internal
