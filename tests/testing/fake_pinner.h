// A host block pinner for tests (Note [Pinned host blocks] in core/host_blocks.cc): it records the
// blocks it pins and unpins instead of page-locking them, and can be made to fail.
//
//   FakePinner::Scope pinning(64 << 20);   // installed, with a 64 MiB limit, until the scope ends
//   ... FakePinner::pins() ...
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "core/host_blocks.h"

namespace tessera::testing {

struct FakePinner {
  using Block = std::pair<void*, std::size_t>;
  static inline std::mutex mu;
  static inline std::vector<Block> pinned;    // guarded by mu
  static inline std::vector<Block> unpinned;  // guarded by mu
  static inline std::atomic<bool> fail{false};

  static bool pin(void* block, std::size_t size) {
    if (fail.load()) return false;
    std::lock_guard<std::mutex> l(mu);
    pinned.emplace_back(block, size);
    return true;
  }
  static void unpin(void* block, std::size_t size) {
    std::lock_guard<std::mutex> l(mu);
    unpinned.emplace_back(block, size);
  }
  static std::size_t pins() {
    std::lock_guard<std::mutex> l(mu);
    return pinned.size();
  }
  static std::size_t unpins() {
    std::lock_guard<std::mutex> l(mu);
    return unpinned.size();
  }

  // Installs the fake pinner with a pinned-bytes limit, cleared; puts the old pinner and limit back.
  class Scope {
   public:
    explicit Scope(uint64_t limit_bytes) {
      {
        std::lock_guard<std::mutex> l(mu);
        pinned.clear();
        unpinned.clear();
      }
      fail = false;
      old_pinner_ = internal::set_host_block_pinner({&FakePinner::pin, &FakePinner::unpin});
      old_limit_ = internal::set_pinned_host_limit(limit_bytes);
    }
    ~Scope() {
      internal::set_host_block_pinner(old_pinner_);
      internal::set_pinned_host_limit(old_limit_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    internal::HostBlockPinner old_pinner_;
    uint64_t old_limit_ = 0;
  };
};

}  // namespace tessera::testing
