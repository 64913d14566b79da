// The exchange between the partitions of one step: a _Send puts a tensor under a key, the
// matching _Recv takes it (now, or through a callback when it arrives). Keys are dense integers
// the partitioner assigns, one per (tensor, destination device). One Rendezvous per step.
//
//   Rendezvous r(2);
//   r.recv_async(0, [](const Status& s, Tensor t) { ... });   // runs when key 0 is sent
//   r.send(0, t).ignore();
//
// Thread-safe.
#pragma once

#include <functional>
#include <mutex>
#include <vector>

#include "core/status.h"
#include "tessera/tensor.h"

namespace tessera::internal {

class Rendezvous {
 public:
  using Callback = std::function<void(const Status&, Tensor)>;

  explicit Rendezvous(int num_keys);
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  // Delivers `value` to the key's receiver (running its callback on this thread if it is
  // waiting). Internal error for a bad key or a second send; the abort status after abort().
  Status send(int key, Tensor value);
  // Calls `done` once: with the value as soon as it is sent, or with the abort status. Runs on
  // this thread when the value is already there, else on the sender's (or aborter's) thread.
  void recv_async(int key, Callback done);
  // Fails every waiting receiver and every later send and receive with `status` (first call wins).
  void abort(const Status& status);

 private:
  struct Slot {
    bool sent = false;
    bool received = false;
    Tensor value;
    Callback waiter;
  };
  std::mutex mu_;
  std::vector<Slot> slots_;  // guarded by mu_
  Status aborted_;           // guarded by mu_
};

}  // namespace tessera::internal
