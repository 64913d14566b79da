// Small helpers for the standard associative containers.
#pragma once

#include <utility>

namespace tessera::internal {

// Removes `key` from `map` and returns what it held (a default value when it held nothing).
template <class Map>
typename Map::mapped_type take(Map& map, const typename Map::key_type& key) {
  auto it = map.find(key);
  if (it == map.end()) return typename Map::mapped_type{};
  typename Map::mapped_type value = std::move(it->second);
  map.erase(it);
  return value;
}

// Gives back the bucket array of an unordered container that a burst grew and that is now mostly
// empty (erasing never shrinks it): rehashes it to fit once it holds under 1/16 of its buckets.
// Rehashing to fit leaves room for 16x as many before the next shrink, so the cost is amortized.
template <class Map>
void shrink_if_sparse(Map& map) {
  if (map.bucket_count() > 1024 && map.size() < map.bucket_count() / 16) map.rehash(0);
}

}  // namespace tessera::internal
