// What wire.cc and wire_headers.cc both check messages with. Private to distributed/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <google/protobuf/message_lite.h>

#include "core/status.h"

namespace tessera::internal::wire {

// OK when `version` is kWireVersion, else InvalidArgument naming `what` and both versions.
Status check_version(uint32_t version, std::string_view what);
// Parses `size` bytes at `data` into `out`; InvalidArgument naming `what` when they do not parse
// or are too many for protobuf (INT_MAX).
Status parse_message(const void* data, std::size_t size, google::protobuf::MessageLite* out,
                     std::string_view what);

}  // namespace tessera::internal::wire
