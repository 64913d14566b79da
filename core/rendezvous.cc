#include "core/rendezvous.h"

namespace tessera::internal {

Rendezvous::Rendezvous(int num_keys) : slots_(static_cast<std::size_t>(num_keys)) {}

Status Rendezvous::send(int key, Tensor value) {
  Callback waiter;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!aborted_.ok()) return aborted_;
    if (key < 0 || key >= static_cast<int>(slots_.size())) {
      return errors::internal("rendezvous: send to unknown key {}", key);
    }
    Slot& s = slots_[static_cast<std::size_t>(key)];
    if (s.sent) return errors::internal("rendezvous: key {} sent twice in one step", key);
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

void Rendezvous::recv_async(int key, Callback done) {
  Tensor value;
  Status status;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!aborted_.ok()) {
      status = aborted_;
    } else if (key < 0 || key >= static_cast<int>(slots_.size())) {
      status = errors::internal("rendezvous: receive from unknown key {}", key);
    } else {
      Slot& s = slots_[static_cast<std::size_t>(key)];
      if (s.received) {
        status = errors::internal("rendezvous: key {} received twice in one step", key);
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

void Rendezvous::abort(const Status& status) {
  std::vector<Callback> waiters;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!aborted_.ok()) return;
    aborted_ = status.ok() ? errors::internal("rendezvous aborted") : status;
    for (Slot& s : slots_) {
      if (s.waiter) waiters.push_back(std::move(s.waiter));
      s.waiter = nullptr;
      s.value.reset();
    }
  }
  for (auto& w : waiters) w(status, Tensor());
}

}  // namespace tessera::internal
