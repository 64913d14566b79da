// The exchange between the partitions of one step (Note [Graph partition] in graph_partition.cc):
// a _Send puts a tensor under a key, the matching _Recv takes it (now, or through a callback when
// it arrives). One Rendezvous per step.
//
// A key is either a slot (a dense index the in-process partitioner assigns, one per transfer
// between two devices of this process) or a name ("send_device;recv_device;tensor", a transfer
// between two tasks of a cluster, which the distributed layer's rendezvous carries).
//
//   LocalRendezvous r(2);                   // slots 0 and 1; named keys go nowhere
//   r.recv_async(RendezvousKey::slot(0), nullptr, [](const Status& s, Tensor t) { ... });
//   r.send(RendezvousKey::slot(0), t).ignore();   // runs the callback above on this thread
//
// Thread-safe.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/cancellation.h"
#include "core/status.h"
#include "tessera/tensor.h"

namespace tessera::internal {

struct RendezvousKey {
  int slot = -1;     // >= 0: a transfer inside this process's plan
  std::string name;  // slot < 0: "send_device;recv_device;tensor", a transfer between tasks

  static RendezvousKey of_slot(int s) { return RendezvousKey{s, {}}; }
  static RendezvousKey named(std::string n) { return RendezvousKey{-1, std::move(n)}; }
  // The name a transfer between tasks goes by (each device named in full).
  static std::string name_of(const std::string& send_device, const std::string& recv_device,
                             const std::string& tensor) {
    return send_device + ";" + recv_device + ";" + tensor;
  }
  // "slot 3" or the name, for messages.
  std::string debug_string() const { return slot >= 0 ? "slot " + std::to_string(slot) : "'" + name + "'"; }
};

class Rendezvous {
 public:
  using Callback = std::function<void(const Status&, Tensor)>;
  virtual ~Rendezvous() = default;

  // Delivers `value` to the key's receiver (running its callback on this thread if it is waiting).
  // Internal error for an unknown key or a second send; the abort status after abort().
  virtual Status send(const RendezvousKey& key, Tensor value) = 0;
  // Calls `done` once: with the value as soon as it is sent, or with the abort status. Runs on
  // this thread when the value is already there, else on the sender's (or aborter's) thread. A
  // wait that may be long (from another task) also ends when `cancellation` (may be null) fires.
  virtual void recv_async(const RendezvousKey& key, CancellationManager* cancellation, Callback done) = 0;
  // Fails every waiting receiver and every later send and receive with `status` (first call wins).
  virtual void abort(const Status& status) = 0;
};

// The in-process rendezvous: `num_slots` slots; named keys go to `remote` (a cluster step's
// rendezvous; not owned, may be null: a named key is then an internal error).
class LocalRendezvous final : public Rendezvous {
 public:
  explicit LocalRendezvous(int num_slots, Rendezvous* remote = nullptr);
  LocalRendezvous(const LocalRendezvous&) = delete;
  LocalRendezvous& operator=(const LocalRendezvous&) = delete;

  Status send(const RendezvousKey& key, Tensor value) override;
  void recv_async(const RendezvousKey& key, CancellationManager* cancellation, Callback done) override;
  // Aborts the slots only: the remote rendezvous belongs to the cluster step, whose owner aborts it.
  void abort(const Status& status) override;

 private:
  struct Slot {
    bool sent = false;
    bool received = false;
    Tensor value;
    Callback waiter;
  };
  Rendezvous* const remote_;
  std::mutex mu_;
  std::vector<Slot> slots_;  // guarded by mu_
  Status aborted_;           // guarded by mu_
};

}  // namespace tessera::internal
