#include "core/io_continuations.h"

#include <exception>
#include <utility>

#include "core/logging.h"

namespace tessera::internal {
namespace {

// The open scope's list on this thread; null outside scopes and while a scope runs its list.
thread_local std::vector<std::function<void()>>* tls_deferred = nullptr;

}  // namespace

IoCompletionScope::IoCompletionScope() : outer_(tls_deferred) { tls_deferred = &deferred_; }

IoCompletionScope::~IoCompletionScope() {
  tls_deferred = nullptr;  // a continuation's own completions go elsewhere
  // By index: a continuation cannot add to the list (nothing accepts), but the loop does not
  // rely on that.
  for (std::size_t i = 0; i < deferred_.size(); ++i) {
    try {
      deferred_[i]();
    } catch (const std::exception& e) {
      TESSERA_LOG(kError, "a continuation deferred to an I/O thread threw (ignored): {}", e.what());
    } catch (...) {
      TESSERA_LOG(kError, "a continuation deferred to an I/O thread threw (ignored)");
    }
  }
  tls_deferred = outer_;
}

bool defer_to_io_thread(std::function<void()>& fn) {
  if (tls_deferred == nullptr) return false;
  tls_deferred->push_back(std::move(fn));
  return true;
}

}  // namespace tessera::internal
