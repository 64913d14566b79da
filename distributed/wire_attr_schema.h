// The attrs each op may carry on the wire, with their types: the schema decode_graph
// (distributed/wire.cc) checks every received node against before any op sees its attrs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/node.h"

namespace tessera::internal::wire {

// Index of T among AttrValue's alternatives.
template <class T, class... Ts>
constexpr std::size_t index_in(const std::variant<Ts...>*) {
  constexpr bool matches[] = {std::is_same_v<T, Ts>...};
  for (std::size_t i = 0; i < sizeof...(Ts); ++i) {
    if (matches[i]) return i;
  }
  return sizeof...(Ts);
}
template <class T>
inline constexpr std::size_t kKind = index_in<T>(static_cast<const AttrValue*>(nullptr));

inline constexpr std::string_view kKindNames[] = {"int",    "float",  "bool",      "type",       "shape",
                                                  "string", "tensor", "list(int)", "list(type)", "list(shape)"};
static_assert(std::size(kKindNames) == std::variant_size_v<AttrValue>);

// The attrs each op reads (its shape function, kernels, placement), with their types. An attr a
// node carries must be listed for its op; required ones must be present. Shape functions and
// kernels read attrs with std::get and TESSERA_CHECK, which a peer must never be able to trip, so
// an op missing here cannot be decoded (the wire test checks that every registered op is listed).
// Value checks (n >= 0, shapes fully defined, ...) are the shape functions'.
struct AttrSpec {
  std::string_view name;
  std::size_t kind;
  bool required = true;
};

// Each op's AttrSpecs, by op type; an op not listed cannot be received.
const std::unordered_map<std::string_view, std::vector<AttrSpec>>& op_attr_schema();

}  // namespace tessera::internal::wire
