#include "core/trace_json.h"

#include <algorithm>
#include <map>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tessera::internal {

std::string trace_to_json(std::vector<TraceRecord> records, int64_t origin_us) {
  std::sort(records.begin(), records.end(),
            [](const TraceRecord& a, const TraceRecord& b) { return a.start_us < b.start_us; });
  nlohmann::json events = nlohmann::json::array();
  std::map<std::string, int> pids;
  std::map<std::pair<int, std::string>, int> tids;
  for (const TraceRecord& r : records) {
    auto [pit, new_pid] = pids.emplace(r.device, static_cast<int>(pids.size()) + 1);
    const int pid = pit->second;
    if (new_pid) {
      events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", r.device}}}});
    }
    const std::string lane = r.lane.empty() ? fmt::format("thread {}", r.thread % 100000) : r.lane;
    auto [tit, new_tid] = tids.emplace(std::make_pair(pid, lane), static_cast<int>(tids.size()) + 1);
    const int tid = tit->second;
    if (new_tid) {
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", lane}}}});
    }
    events.push_back({{"name", r.name},
                      {"cat", r.category},
                      {"ph", "X"},
                      {"ts", r.start_us - origin_us},
                      {"dur", std::max<int64_t>(0, r.end_us - r.start_us)},
                      {"pid", pid},
                      {"tid", tid},
                      {"args", {{"op", r.category}, {"device", r.device}, {"lane", lane}}}});
  }
  nlohmann::json trace = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return trace.dump();
}

}  // namespace tessera::internal
