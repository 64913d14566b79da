#include "core/rendezvous.h"

namespace tessera::internal {

LocalRendezvous::LocalRendezvous(int num_slots, Rendezvous* remote)
    : remote_(remote), slots_(static_cast<std::size_t>(num_slots)) {}

Status LocalRendezvous::send(const RendezvousKey& key, Tensor value) {
  if (key.slot < 0) {
    if (remote_ == nullptr) {
      return errors::internal("rendezvous: key {} crosses tasks, and this step runs in one process", key.debug_string());
    }
    return remote_->send(key, std::move(value));
  }
  Callback waiter;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!aborted_.ok()) return aborted_;
    if (key.slot >= static_cast<int>(slots_.size())) {
      return errors::internal("rendezvous: send to unknown {}", key.debug_string());
    }
    Slot& s = slots_[static_cast<std::size_t>(key.slot)];
    if (s.sent) return errors::internal("rendezvous: {} sent twice in one step", key.debug_string());
    s.sent = true;
    if (!s.waiter) {
      s.value = std::move(value);
      return Status::ok_status();
    }
    waiter = std::move(s.waiter);
    s.waiter = nullptr;
  }
  waiter(Status::ok_status(), std::move(value));
  return Status::ok_status();
}

void LocalRendezvous::recv_async(const RendezvousKey& key, CancellationManager* cancellation, Callback done) {
  if (key.slot < 0) {
    if (remote_ == nullptr) {
      return done(errors::internal("rendezvous: key {} crosses tasks, and this step runs in one process",
                                   key.debug_string()),
                  Tensor());
    }
    return remote_->recv_async(key, cancellation, std::move(done));
  }
  Tensor value;
  Status status;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!aborted_.ok()) {
      status = aborted_;
    } else if (key.slot >= static_cast<int>(slots_.size())) {
      status = errors::internal("rendezvous: receive from unknown {}", key.debug_string());
    } else {
      Slot& s = slots_[static_cast<std::size_t>(key.slot)];
      if (s.received) {
        status = errors::internal("rendezvous: {} received twice in one step", key.debug_string());
      } else {
        s.received = true;
        if (!s.sent) {
          s.waiter = std::move(done);
          return;
        }
        value = std::move(s.value);
      }
    }
  }
  done(status, std::move(value));
}

void LocalRendezvous::abort(const Status& status) {
  std::vector<Callback> waiters;
  Status reason;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!aborted_.ok()) return;
    aborted_ = status.ok() ? errors::internal("rendezvous aborted") : status;
    reason = aborted_;
    for (Slot& s : slots_) {
      if (s.waiter) waiters.push_back(std::move(s.waiter));
      s.waiter = nullptr;
      s.value.reset();
    }
  }
  for (auto& w : waiters) w(reason, Tensor());
}

}  // namespace tessera::internal
