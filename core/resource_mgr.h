// Per-task state that outlives a step: variables, queues, epoch counters. Keyed by name; an op
// finds its resource with lookup_or_create(). Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <typeindex>

#include "core/status.h"

namespace tessera::internal {

class ResourceBase {
 public:
  virtual ~ResourceBase() = default;
  virtual std::string debug_string() const = 0;
  // Called when the owning session or server closes: wake every waiter with `reason`.
  virtual void cancel_all(const Status& /*reason*/) {}
};

class ResourceMgr {
 public:
  template <class T>
  StatusOr<std::shared_ptr<T>> lookup(const std::string& name) const {
    std::lock_guard<std::mutex> l(mu_);
    auto it = resources_.find(name);
    if (it == resources_.end()) return errors::not_found("resource '{}' not found", name);
    auto typed = std::dynamic_pointer_cast<T>(it->second);
    if (!typed) return errors::invalid_argument("resource '{}' has another type", name);
    return typed;
  }
  // Creates with `make` when absent (under the lock, so exactly once).
  template <class T>
  StatusOr<std::shared_ptr<T>> lookup_or_create(const std::string& name,
                                                const std::function<StatusOr<std::shared_ptr<T>>()>& make) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = resources_.find(name);
    if (it != resources_.end()) {
      auto typed = std::dynamic_pointer_cast<T>(it->second);
      if (!typed) return errors::invalid_argument("resource '{}' has another type", name);
      return typed;
    }
    auto made = make();
    if (!made.ok()) return made.status();
    resources_[name] = made.value();
    return made;
  }
  void cancel_all(const Status& reason);
  void clear();
  std::vector<std::string> names() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<ResourceBase>> resources_;  // guarded by mu_
};

// The resource a kernel acts on, looked up once and then kept: a kernel lives no longer than the
// session (or server) whose resources it uses, so the pointer stays valid. Thread-safe.
template <class T>
class CachedResource {
 public:
  // `lookup` returns StatusOr<std::shared_ptr<T>>; it runs until one call succeeds.
  template <class Lookup>
  StatusOr<T*> get(Lookup&& lookup) {
    if (T* p = cached_.load(std::memory_order_acquire)) return p;
    auto found = lookup();
    if (!found.ok()) return found.status();
    std::lock_guard<std::mutex> l(mu_);
    if (!holder_) {
      holder_ = found.value();
      cached_.store(holder_.get(), std::memory_order_release);
    }
    return holder_.get();
  }

 private:
  std::mutex mu_;
  std::shared_ptr<T> holder_;  // guarded by mu_
  std::atomic<T*> cached_{nullptr};
};

}  // namespace tessera::internal
