// The part of tc-netem(8)'s grammar the userspace netem (tests/testing/netem_relay.cc) emulates:
// shared by the relay (its --netem option) and NetworkLab::netem (tests/testing/netns.h).
//
//   delay TIME          TIME as tc reads it: a number with s|sec|secs, ms|msec|msecs,
//                       us|usec|usecs or ns|nsec|nsecs; a bare number is microseconds
//   loss [random] P     P a percentage, "1%" or "1" (tc's parse_percent: the % is optional)
//
// Either, both or neither (an empty spec is no impairment, as `tc qdisc ... netem` alone). Jitter,
// correlation, distributions, duplication, reordering, corruption and rate are not emulated: a
// spec using them is refused, never half applied.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace tessera::testing {

struct NetemImpairment {
  std::int64_t delay_ns = 0;
  std::uint32_t loss_ppm = 0;  // parts per million: 1% is 10000
};

namespace netem_spec_internal {

inline bool parse_number(const std::string& text, double* value, std::string* suffix) {
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.')) return false;
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(*value) || *value < 0) return false;
  *suffix = end;
  return true;
}

}  // namespace netem_spec_internal

// Parses `spec` into `out`; false with `why` set when it is not in the grammar above.
inline bool parse_netem_spec(const std::string& spec, NetemImpairment* out, std::string* why) {
  using netem_spec_internal::parse_number;
  std::vector<std::string> w;
  std::stringstream s(spec);
  for (std::string word; s >> word;) w.push_back(word);
  NetemImpairment result;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (w[i] == "delay") {
      double t = 0;
      std::string unit;
      if (i + 1 >= w.size() || !parse_number(w[i + 1], &t, &unit)) {
        *why = "delay needs a time (e.g. 500us, 10ms)";
        return false;
      }
      double per_unit;
      if (unit.empty() || unit == "us" || unit == "usec" || unit == "usecs") per_unit = 1e3;
      else if (unit == "s" || unit == "sec" || unit == "secs") per_unit = 1e9;
      else if (unit == "ms" || unit == "msec" || unit == "msecs") per_unit = 1e6;
      else if (unit == "ns" || unit == "nsec" || unit == "nsecs") per_unit = 1;
      else {
        *why = "unknown time unit in '" + w[i + 1] + "'";
        return false;
      }
      if (t * per_unit > 60e9) {
        *why = "delay over a minute: '" + w[i + 1] + "'";
        return false;
      }
      result.delay_ns = static_cast<std::int64_t>(std::llround(t * per_unit));
      ++i;
      // A jitter would follow as another time: not emulated.
      double ignored;
      std::string unit2;
      if (i + 1 < w.size() && parse_number(w[i + 1], &ignored, &unit2)) {
        *why = "delay jitter and correlation are not emulated";
        return false;
      }
    } else if (w[i] == "loss") {
      std::size_t at = i + 1;
      if (at < w.size() && w[at] == "random") ++at;
      double p = 0;
      std::string rest;
      if (at >= w.size() || !parse_number(w[at], &p, &rest) || !(rest.empty() || rest == "%") || p > 100) {
        *why = "loss needs a percentage from 0 to 100 (e.g. 1%)";
        return false;
      }
      result.loss_ppm = static_cast<std::uint32_t>(std::llround(p * 1e4));
      i = at;
      double ignored;
      std::string unit2;
      if (i + 1 < w.size() && parse_number(w[i + 1], &ignored, &unit2)) {
        *why = "loss correlation is not emulated";
        return false;
      }
    } else {
      *why = "'" + w[i] + "' is not emulated (only delay TIME and loss [random] PERCENT)";
      return false;
    }
  }
  *out = result;
  return true;
}

}  // namespace tessera::testing
