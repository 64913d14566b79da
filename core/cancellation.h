// Cancellation of a step: blocking kernels register a callback that aborts their wait; a session
// close or a deadline calls start_cancel(), which runs every callback once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "core/status.h"

namespace tessera::internal {

class CancellationManager {
 public:
  using Token = int64_t;
  static constexpr Token kInvalidToken = -1;
  using Callback = std::function<void(const Status& reason)>;

  // Registers `cb`; returns kInvalidToken when already cancelled (the caller must then fail
  // at once with reason()).
  Token register_callback(Callback cb);
  // Removes a callback; returns false when it already ran or is running (then it is the
  // callback's job to finish the op).
  bool deregister_callback(Token token);
  // Runs every registered callback once, outside the lock. Later calls do nothing.
  void start_cancel(Status reason);
  bool is_cancelled() const;
  Status reason() const;

 private:
  mutable std::mutex mu_;
  // Written under mu_ (after reason_), read without it: is_cancelled() is on every step's path.
  std::atomic<bool> cancelled_{false};
  Status reason_;           // guarded by mu_
  Token next_ = 0;
  std::unordered_map<Token, Callback> callbacks_;  // guarded by mu_
};

}  // namespace tessera::internal
