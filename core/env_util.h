// Sizes from the environment, as tessera's TESSERA_*_MB variables give them.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>

namespace tessera::internal {

// The bytes of environment variable `name`, a whole number of MiB; nullopt when it is unset, empty
// or not a whole number (the caller's default applies).
inline std::optional<uint64_t> env_mebibytes(const char* name) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return std::nullopt;
  char* end = nullptr;
  const unsigned long long mb = std::strtoull(env, &end, 10);
  if (end == nullptr || *end != '\0') return std::nullopt;
  return static_cast<uint64_t>(mb) << 20;
}

}  // namespace tessera::internal
