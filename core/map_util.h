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

}  // namespace tessera::internal
