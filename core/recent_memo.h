// RecentMemo: the last N keys remembered, each with a value; remembering one more forgets the
// oldest. What a server keeps of things past (steps aborted, peers lost) while bursts come and go.
//
// Note [Memory of things past]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A memo outlives the burst that fills it: 1,000 runs of a vanished client are aborted at once and
// the rendezvous remembers each step's abort. Kept in an ordinary map and deque, those are three
// small blocks per step (a node, a Status, its message) wherever malloc had room in the burst;
// once the burst's other memory is freed, each pins a page malloc cannot give back. In the soak
// with 1,000 blocked runs per round (tests/cluster_soak_test.cc), the server settled at 22.6-24.8
// MiB (idle 17.8); with its memos as below, at 20.1-20.4. So a memo's nodes come from a pool of its
// own (a few chunks, reused as entries are forgotten), its order is a ring, and a reason that
// repeats (every step of a lost client is aborted for the same one) is kept once: `same_reason`.
#pragma once

#include <cstddef>
#include <functional>
#include <memory_resource>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tessera::internal {

// Not thread-safe: its owner locks.
template <class K, class V, class Hash = std::hash<K>>
class RecentMemo {
 public:
  explicit RecentMemo(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity), order_(&pool_), map_(&pool_) {}
  RecentMemo(const RecentMemo&) = delete;
  RecentMemo& operator=(const RecentMemo&) = delete;

  // Remembers `key` with `value`, forgetting the oldest key when full; false (nothing changes)
  // when `key` is remembered already.
  bool remember(const K& key, V value) {
    if (order_.capacity() < capacity_) order_.reserve(capacity_);  // once, on first use
    auto [it, added] = map_.try_emplace(key, Entry{std::move(value), next_});
    if (!added) return false;
    if (order_.size() < capacity_) {
      order_.push_back(key);
    } else {
      // The slot's old key, unless it was forgotten (and maybe remembered again, in another slot).
      auto old = map_.find(order_[next_]);
      if (old != map_.end() && old->second.slot == next_ && old != it) map_.erase(old);
      order_[next_] = key;
    }
    next_ = (next_ + 1) % capacity_;
    return true;
  }
  // The value remembered for `key`, or null.
  const V* find(const K& key) const {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second.value;
  }
  // Forgets `key` and returns its value (a default value when it was not remembered).
  V take(const K& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return V{};
    V value = std::move(it->second.value);
    map_.erase(it);
    return value;
  }
  std::size_t size() const { return map_.size(); }
  std::size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    V value;
    std::size_t slot;  // where in order_ the key was written
  };
  const std::size_t capacity_;
  std::pmr::unsynchronized_pool_resource pool_;  // before the containers it serves
  std::pmr::vector<K> order_;                    // a ring once full; next_ is the oldest
  std::size_t next_ = 0;
  std::pmr::unordered_map<K, Entry, Hash> map_;
};

// `reason` as a record keeps it: `*kept` itself when it says the same (code and message), which
// then becomes `reason`'s one copy. Many records of one reason share one message (Note [Memory of
// things past]).
inline const Status& same_reason(Status* kept, const Status& reason) {
  if (kept->code() != reason.code() || kept->message() != reason.message()) *kept = reason;
  return *kept;
}

}  // namespace tessera::internal
