// Steps' traces as Chrome trace-event JSON (RunMetadata::trace_json; chrome://tracing, Perfetto).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/op_kernel.h"

namespace tessera::internal {

// RunMetadata::trace_json of `records`: Chrome trace-event JSON, one complete ("X") event per
// span with `ts` in microseconds since `origin_us` (their clock's value at the step's start), one
// process per device and one thread per stream or executing thread, named by metadata events.
std::string trace_to_json(std::vector<TraceRecord> records, int64_t origin_us);

}  // namespace tessera::internal
