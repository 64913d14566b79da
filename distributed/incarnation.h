// Note [Incarnations]
// ~~~~~~~~~~~~~~~~~~~
// A task restarted at the same address is a new run of its server, and the handles the old run
// gave out (graph handles of its Worker, session handles of its Master) must not name anything of
// the new one. Counters alone begin again at 1: a master still holding '/job:ps/.../graph/6' from
// before a ps restarted deregistered, when its session closed, the graph the restarted ps had
// registered for another session under the same handle, and that session's run in flight failed
// "attempted to use a closed session" (`tessera demo`, part 4, once in a while under load). So each
// Master and Worker draws a random incarnation once and writes it into every handle it makes:
// "<task>/graph/<incarnation>-<n>", "<task>/session/<incarnation>-<n>". A handle of an earlier
// run then matches nothing, and its calls get the errors of an unknown handle (Aborted: the
// caller's monitored session makes a new session).
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include <fmt/format.h>

namespace tessera::internal {

// 16 hex digits from std::random_device.
inline std::string new_incarnation() {
  std::random_device device;
  const uint64_t value = (uint64_t{device()} << 32) | device();
  return fmt::format("{:016x}", value);
}

}  // namespace tessera::internal
