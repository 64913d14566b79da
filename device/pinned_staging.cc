#include "device/pinned_staging.h"

#include <bit>
#include <cstdlib>
#include <utility>

#include "core/logging.h"

namespace tessera::internal {

// ----- HostStagingBacking -----

StatusOr<void*> HostStagingBacking::allocate(std::size_t bytes) {
  constexpr std::size_t kPage = 4096;
  std::size_t rounded = (bytes + kPage - 1) / kPage * kPage;
  if (rounded == 0) rounded = kPage;
  void* p = std::aligned_alloc(kPage, rounded);
  if (p == nullptr) return errors::resource_exhausted("no host memory for a staging buffer of {} bytes", bytes);
  return p;
}

void HostStagingBacking::deallocate(void* ptr, std::size_t) { std::free(ptr); }

// ----- Buffer -----

PinnedStagingPool::Buffer& PinnedStagingPool::Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = std::exchange(o.pool_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    pinned_ = std::exchange(o.pinned_, false);
  }
  return *this;
}

void PinnedStagingPool::Buffer::release() {
  if (pool_ == nullptr) return;
  pool_->give_back(data_, size_, pinned_);
  pool_ = nullptr;
  data_ = nullptr;
  size_ = 0;
  pinned_ = false;
}

// ----- PinnedStagingPool -----

PinnedStagingPool::PinnedStagingPool(std::string name, std::unique_ptr<StagingBacking> pinned,
                                     std::unique_ptr<StagingBacking> fallback, PinnedStagingOptions options)
    : name_(std::move(name)), options_(options), pinned_(std::move(pinned)), fallback_(std::move(fallback)) {
  TESSERA_CHECK(pinned_ != nullptr && fallback_ != nullptr);
  TESSERA_CHECK(std::has_single_bit(options_.min_buffer_bytes));
}

PinnedStagingPool::~PinnedStagingPool() {
  trim();
  std::lock_guard<std::mutex> lock(mu_);
  if (stats_.in_use_bytes != 0 || stats_.fallbacks_in_use != 0) {
    TESSERA_LOG(kError, "staging pool {} destroyed with buffers in use ({} pinned bytes, {} fallback buffers)", name_,
                static_cast<long long>(stats_.in_use_bytes), static_cast<long long>(stats_.fallbacks_in_use));
    std::abort();
  }
}

std::size_t PinnedStagingPool::size_class(std::size_t bytes) const {
  return bytes <= options_.min_buffer_bytes ? options_.min_buffer_bytes : std::bit_ceil(bytes);
}

StatusOr<PinnedStagingPool::Buffer> PinnedStagingPool::acquire(std::size_t bytes) {
  if (bytes > options_.max_pooled_bytes || bytes > (std::size_t{1} << 62)) return fallback(bytes);
  const std::size_t size = size_class(bytes);
  if (size > options_.max_pooled_bytes) return fallback(bytes);
  std::vector<std::pair<void*, std::size_t>> evicted;
  bool fits = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& same = cached_[size];
    if (!same.empty()) {
      Buffer b(this, same.back(), size, /*pinned=*/true);
      same.pop_back();
      ++stats_.reuses;
      stats_.cached_bytes -= static_cast<int64_t>(size);
      stats_.in_use_bytes += static_cast<int64_t>(size);
      return b;
    }
    // When the buffers in use leave no room, evicting cached ones would not help: fall back.
    fits = static_cast<std::size_t>(stats_.in_use_bytes) + size <= options_.max_pooled_bytes;
    if (fits) {
      // Make room under the bound by returning cached buffers of other sizes, largest first.
      for (auto it = cached_.rbegin();
           it != cached_.rend() &&
           static_cast<std::size_t>(stats_.pooled_bytes) + size > options_.max_pooled_bytes;
           ++it) {
        while (!it->second.empty() &&
               static_cast<std::size_t>(stats_.pooled_bytes) + size > options_.max_pooled_bytes) {
          evicted.emplace_back(it->second.back(), it->first);
          it->second.pop_back();
          stats_.pooled_bytes -= static_cast<int64_t>(it->first);
          stats_.cached_bytes -= static_cast<int64_t>(it->first);
          ++stats_.num_pinned_frees;
        }
      }
      // Reserved now, allocated below without the lock (pinned allocation is slow).
      stats_.pooled_bytes += static_cast<int64_t>(size);
      stats_.in_use_bytes += static_cast<int64_t>(size);
    }
  }
  for (auto& [p, n] : evicted) pinned_->deallocate(p, n);
  if (!fits) return fallback(bytes);
  auto memory = pinned_->allocate(size);
  if (!memory.ok() || memory.value() == nullptr) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.pooled_bytes -= static_cast<int64_t>(size);
      stats_.in_use_bytes -= static_cast<int64_t>(size);
    }
    return fallback(bytes);
  }
  Buffer b(this, memory.value(), size, /*pinned=*/true);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.num_pinned_allocs;
  return b;
}

StatusOr<PinnedStagingPool::Buffer> PinnedStagingPool::fallback(std::size_t bytes) {
  const std::size_t size = bytes == 0 ? 1 : bytes;
  auto memory = fallback_->allocate(size);
  if (!memory.ok()) return memory.status();
  if (memory.value() == nullptr) {
    return errors::resource_exhausted("staging pool {}: no memory for {} bytes", name_, bytes);
  }
  Buffer b(this, memory.value(), size, /*pinned=*/false);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.fallbacks;
  ++stats_.fallbacks_in_use;
  return b;
}

void PinnedStagingPool::give_back(void* data, std::size_t size, bool pinned) {
  if (!pinned) {
    fallback_->deallocate(data, size);
    std::lock_guard<std::mutex> lock(mu_);
    --stats_.fallbacks_in_use;
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  cached_[size].push_back(data);
  stats_.in_use_bytes -= static_cast<int64_t>(size);
  stats_.cached_bytes += static_cast<int64_t>(size);
}

std::size_t PinnedStagingPool::trim() {
  std::vector<std::pair<void*, std::size_t>> freed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, buffers] : cached_) {
      for (void* p : buffers) freed.emplace_back(p, size);
      stats_.pooled_bytes -= static_cast<int64_t>(size * buffers.size());
      stats_.cached_bytes -= static_cast<int64_t>(size * buffers.size());
      stats_.num_pinned_frees += static_cast<int64_t>(buffers.size());
      buffers.clear();
    }
  }
  std::size_t bytes = 0;
  for (auto& [p, size] : freed) {
    pinned_->deallocate(p, size);
    bytes += size;
  }
  return bytes;
}

PinnedStagingStats PinnedStagingPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace tessera::internal
