// Slurm host lists and tasks-per-node lists, expanded.
#include "transport/hostlist.h"

#include <algorithm>
#include <charconv>
#include <cstdint>

#include <fmt/format.h>

namespace tessera::internal {
namespace {

// A run of decimal digits as a number; false for anything else (signs, spaces, empty, overflow).
template <class T>
bool parse_digits(std::string_view s, T* out) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// One bracket group, e.g. "[001-003,7]": its numbers, already formatted with their padding.
StatusOr<std::vector<std::string>> expand_range_group(std::string_view group) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    std::size_t comma = group.find(',', start);
    std::string_view part =
        group.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    std::size_t dash = part.find('-');
    std::string_view lo_text = part.substr(0, dash);
    std::string_view hi_text = dash == std::string_view::npos ? lo_text : part.substr(dash + 1);
    uint64_t lo = 0, hi = 0;
    if (lo_text.size() > 18 || hi_text.size() > 18 || !parse_digits(lo_text, &lo) ||
        !parse_digits(hi_text, &hi)) {
      return errors::invalid_argument("range '{}' is not a number or a range of numbers like 1-3", part);
    }
    if (lo > hi) return errors::invalid_argument("range '{}' goes downwards", part);
    if (hi - lo >= static_cast<uint64_t>(kMaxHosts) ||
        out.size() + (hi - lo + 1) > static_cast<std::size_t>(kMaxHosts)) {
      return errors::invalid_argument("range '{}' names more than {} hosts", part, kMaxHosts);
    }
    // Slurm pads to the width of the lower bound: [0008-0010] is 0008, 0009, 0010.
    const int width = static_cast<int>(lo_text.size());
    for (uint64_t v = lo; v <= hi; ++v) out.push_back(fmt::format("{:0{}}", v, width));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// One host expression: literal text and bracket groups, all combinations, the last group fastest.
Status expand_host(std::string_view item, std::vector<std::string>* hosts) {
  std::vector<std::string> partial{""};
  std::size_t longest = 0;  // the longest name in `partial`, checked before any of them grows
  auto too_long = [&](std::size_t more) {
    return longest + more > kMaxHostNameLength
               ? errors::invalid_argument("'{}' gives host names longer than {} characters", item,
                                          kMaxHostNameLength)
               : Status::ok_status();
  };
  std::size_t i = 0;
  while (i < item.size()) {
    if (item[i] == '[') {
      std::size_t close = item.find(']', i);  // the splitter checked that brackets balance
      auto values = expand_range_group(item.substr(i + 1, close - i - 1));
      if (!values.ok()) return values.status();
      if (partial.size() * values.value().size() + hosts->size() > static_cast<std::size_t>(kMaxHosts)) {
        return errors::invalid_argument("'{}' names more than {} hosts", item, kMaxHosts);
      }
      std::size_t widest = 0;
      for (const auto& v : values.value()) widest = std::max(widest, v.size());
      TESSERA_RETURN_IF_ERROR(too_long(widest));
      longest += widest;
      std::vector<std::string> next;
      next.reserve(partial.size() * values.value().size());
      for (const auto& prefix : partial) {
        for (const auto& v : values.value()) next.push_back(prefix + v);
      }
      partial = std::move(next);
      i = close + 1;
    } else {
      std::size_t end = item.find('[', i);
      std::string_view literal =
          item.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i);
      TESSERA_RETURN_IF_ERROR(too_long(literal.size()));
      longest += literal.size();
      for (auto& prefix : partial) prefix += literal;
      i += literal.size();
    }
  }
  for (auto& h : partial) hosts->push_back(std::move(h));
  return Status::ok_status();
}

}  // namespace

StatusOr<std::vector<std::string>> expand_hostlist(std::string_view hostlist) {
  auto fail = [&](const Status& why) {
    return errors::invalid_argument("invalid host list \"{}\": {}", hostlist, why.message());
  };
  // Split at commas outside brackets, checking the brackets as we go.
  std::vector<std::string_view> items;
  bool in_brackets = false;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= hostlist.size(); ++i) {
    const char c = i < hostlist.size() ? hostlist[i] : ',';
    if (in_brackets) {
      if (c == '[') return fail(errors::invalid_argument("brackets cannot nest"));
      if (c == ']') {
        in_brackets = false;
      } else if (i == hostlist.size()) {
        return fail(errors::invalid_argument("'[' without a matching ']'"));
      }
    } else if (c == '[') {
      in_brackets = true;
    } else if (c == ']') {
      return fail(errors::invalid_argument("']' without a matching '['"));
    } else if (c == ',') {
      if (i == start) return fail(errors::invalid_argument("empty host name at position {}", i));
      items.push_back(hostlist.substr(start, i - start));
      start = i + 1;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      return fail(errors::invalid_argument("whitespace at position {}", i));
    }
  }
  std::vector<std::string> hosts;
  for (std::string_view item : items) {
    Status s = expand_host(item, &hosts);
    if (!s.ok()) return fail(s);
  }
  return hosts;
}

StatusOr<std::vector<int>> expand_tasks_per_node(std::string_view tasks_per_node) {
  auto fail = [&](std::string_view part) {
    return errors::invalid_argument(
        "invalid tasks-per-node list \"{}\": '{}' is not a positive count, optionally repeated "
        "as in 2(x3)",
        tasks_per_node, part);
  };
  std::vector<int> out;
  std::size_t start = 0;
  while (true) {
    std::size_t comma = tasks_per_node.find(',', start);
    std::string_view part = tasks_per_node.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    std::string_view count_text = part;
    int repeat = 1;
    if (std::size_t paren = part.find('('); paren != std::string_view::npos) {
      count_text = part.substr(0, paren);
      std::string_view rep = part.substr(paren);
      if (rep.size() < 4 || rep.substr(0, 2) != "(x" || rep.back() != ')' ||
          !parse_digits(rep.substr(2, rep.size() - 3), &repeat) || repeat < 1) {
        return fail(part);
      }
    }
    int count = 0;
    if (!parse_digits(count_text, &count) || count < 1) return fail(part);
    if (out.size() + static_cast<std::size_t>(repeat) > static_cast<std::size_t>(kMaxHosts)) {
      return errors::invalid_argument("invalid tasks-per-node list \"{}\": more than {} nodes",
                                      tasks_per_node, kMaxHosts);
    }
    out.insert(out.end(), static_cast<std::size_t>(repeat), count);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace tessera::internal
