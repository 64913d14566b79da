// Device names: "/job:NAME/replica:R/task:T/device:TYPE:ID", any part omitted, "*" as a wildcard
// id, and TensorFlow's legacy lowercase "/cpu:0" and "/gpu:0".
#pragma once

#include <optional>
#include <string>

#include "core/status.h"

namespace tessera::internal {

struct DeviceSpec {
  std::optional<std::string> job;
  std::optional<int> replica;
  std::optional<int> task;
  std::optional<std::string> type;  // upper case: "CPU", "GPU", "SIM"
  std::optional<int> id;            // empty = any (also "*")

  // InvalidArgumentError naming the spec when malformed.
  static StatusOr<DeviceSpec> parse(const std::string& spec);
  // Fields set in `inner` override this one's.
  DeviceSpec merged_with(const DeviceSpec& inner) const;
  // True when every field set here matches the full name `other`.
  bool matches(const DeviceSpec& full) const;
  // True when no field is set differently in the two specs, so that one device can satisfy both
  // (placement merges the requests of a colocation group with this).
  bool compatible_with(const DeviceSpec& other) const;
  std::string to_string() const;  // canonical form of the fields that are set
  bool empty() const { return !job && !replica && !task && !type && !id; }
};

}  // namespace tessera::internal
