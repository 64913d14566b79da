// The spans of a traced step (RunMetadata::trace_json, Chrome trace-event JSON), each with the
// device (the trace's process) and lane (its thread: a stream's name, or an executing thread) it
// ran on: what tests check placement, streams and replays with.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::testing {

struct TracedSpan {
  std::string name, category, device, lane;
  int64_t dur = 0;
};

inline std::vector<TracedSpan> traced_spans(const std::string& trace_json) {
  auto trace = nlohmann::json::parse(trace_json);
  std::map<int, std::string> process;
  std::map<std::pair<int, int>, std::string> lane;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") process[e["pid"]] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "thread_name") lane[{e["pid"], e["tid"]}] = e["args"]["name"];
  }
  std::vector<TracedSpan> spans;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    spans.push_back(TracedSpan{e["name"], e["cat"], process[e["pid"]], lane[{e["pid"], e["tid"]}],
                               e["dur"].get<int64_t>()});
  }
  return spans;
}

// Spans on the compute streams of devices whose name contains `device` ("SIM:0", "GPU"): graph
// launches (category "graph") and ops run one by one (everything but copies).
struct ComputeSpans {
  int graph = 0;
  int ops = 0;
};
inline ComputeSpans compute_stream_spans(const std::string& trace_json, const std::string& device) {
  ComputeSpans s;
  for (const TracedSpan& span : traced_spans(trace_json)) {
    if (span.lane.find(device) == std::string::npos || span.lane.find("compute") == std::string::npos) continue;
    if (span.category == "graph") {
      ++s.graph;
    } else if (span.category != "copy") {
      ++s.ops;
    }
  }
  return s;
}

}  // namespace tessera::testing
