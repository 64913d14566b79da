// RpcCompletionQueue (rpc.h): calls whose replies the thread waiting in next() receives itself,
// as a synchronous caller does (Note [RPC channel] in rpc_channel.cc).
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

#include "transport/rpc.h"
#include "transport/rpc_channel_core.h"
#include "transport/socket_io.h"

namespace tessera::internal {

void RpcChannelCore::queue_call(RpcWaiter* queue, RpcMessage request, std::chrono::milliseconds deadline,
                                uint64_t tag) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  bool wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (Status st = admit(request); !st.ok()) {
      queue->completions.push_back(RpcCompletion{tag, st});
      wake_waiter_locked(queue);
      return;
    }
    ++queue->calls;
    // Sent as a synchronous call is: the socket is served at once, and the replies wait for the
    // queue's thread (or the I/O thread) on the socket.
    wake = start_locked(std::move(request), Clock::now() + deadline,
                        Pending{nullptr, queue, deadline, false, false, tag});
  }
  if (wake) signal_wake_fd(wake_fd_);
}

// GCC 12 warns that the returned completion's message vector "may be used uninitialized" (moved
// into the StatusOr's optional; -Wmaybe-uninitialized false positive, at -O2 and -O3 alike).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
StatusOr<RpcCompletion> RpcChannelCore::queue_next(RpcWaiter* queue, std::chrono::milliseconds timeout) {
  if (on_io_thread()) {
    return errors::failed_precondition("waiting on a completion queue of {} from the channel's own completion "
                                       "callback would deadlock",
                                       endpoint_);
  }
  std::unique_lock<std::mutex> l(mu_);
  if (queue->completions.empty()) {
    if (queue->calls == 0) {
      return errors::out_of_range("no call of this completion queue on {} is pending", endpoint_);
    }
    if (queue->wake_fd >= 0) {
      return errors::failed_precondition("another thread waits on this completion queue of {}", endpoint_);
    }
    wait_locked(l, queue, false, Clock::now() + timeout);
    if (queue->completions.empty()) {
      return errors::deadline_exceeded("no call of this completion queue on {} completed within {} ms", endpoint_,
                                       timeout.count());
    }
  }
  return queue->completions.pop_front();
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

void RpcChannelCore::queue_forget(RpcWaiter* queue) {
  std::lock_guard<std::mutex> l(mu_);
  TESSERA_CHECK(queue->wake_fd < 0);  // no thread waits in next() on a queue being destroyed
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.waiter == queue) {
      assembling_.erase(it->first);
      it = pending_.erase(it);  // its deadline entry is skipped; its outbox entry is dropped unsent
    } else {
      ++it;
    }
  }
  queue->calls = 0;
}

int RpcChannelCore::queue_pending(const RpcWaiter* queue) const {
  std::lock_guard<std::mutex> l(mu_);
  return queue->calls + static_cast<int>(queue->completions.size());
}

RpcCompletionQueue::RpcCompletionQueue(RpcChannel& channel)
    : core_(channel.core_), waiter_(std::make_unique<RpcWaiter>()) {
  waiter_->queue = true;
}

RpcCompletionQueue::~RpcCompletionQueue() { core_->queue_forget(waiter_.get()); }

void RpcCompletionQueue::call(RpcMessage request, std::chrono::milliseconds deadline, uint64_t tag) {
  core_->queue_call(waiter_.get(), std::move(request), deadline, tag);
}

StatusOr<RpcCompletion> RpcCompletionQueue::next(std::chrono::milliseconds timeout) {
  return core_->queue_next(waiter_.get(), timeout);
}

int RpcCompletionQueue::pending() const { return core_->queue_pending(waiter_.get()); }

}  // namespace tessera::internal
