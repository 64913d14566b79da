#include "core/device_name.h"

#include <cctype>
#include <charconv>
#include <vector>

namespace tessera::internal {

namespace {

bool parse_int(const std::string& s, int* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && *out >= 0;
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool valid_type(const std::string& t) {
  if (t.empty()) return false;
  for (char c : t) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

StatusOr<DeviceSpec> DeviceSpec::parse(const std::string& spec) {
  DeviceSpec d;
  if (spec.empty()) return d;
  auto bad = [&](const std::string& why) {
    return errors::invalid_argument("malformed device spec '{}': {}", spec, why);
  };
  if (spec[0] != '/') return bad("must start with '/'");
  std::vector<std::string> parts;
  std::size_t pos = 1;
  while (pos <= spec.size()) {
    std::size_t next = spec.find('/', pos);
    if (next == std::string::npos) next = spec.size();
    parts.push_back(spec.substr(pos, next - pos));
    pos = next + 1;
  }
  for (const auto& part : parts) {
    if (part.empty()) return bad("empty component");
    auto colon = part.find(':');
    if (colon == std::string::npos) return bad("component '" + part + "' has no ':'");
    std::string key = part.substr(0, colon);
    std::string value = part.substr(colon + 1);
    int n = 0;
    if (key == "job") {
      if (value.empty()) return bad("empty job name");
      d.job = value;
    } else if (key == "replica") {
      if (!parse_int(value, &n)) return bad("replica must be a number");
      d.replica = n;
    } else if (key == "task") {
      if (!parse_int(value, &n)) return bad("task must be a number");
      d.task = n;
    } else if (key == "device") {
      auto c2 = value.find(':');
      std::string type = c2 == std::string::npos ? value : value.substr(0, c2);
      if (!valid_type(type)) return bad("invalid device type '" + type + "'");
      d.type = upper(type);
      if (c2 != std::string::npos) {
        std::string id = value.substr(c2 + 1);
        if (id != "*") {
          if (!parse_int(id, &n)) return bad("device id must be a number or '*'");
          d.id = n;
        }
      }
    } else if (key == "cpu" || key == "gpu" || key == "CPU" || key == "GPU" || key == "sim" ||
               key == "SIM") {
      d.type = upper(key);
      if (value != "*") {
        if (!parse_int(value, &n)) return bad("device id must be a number or '*'");
        d.id = n;
      }
    } else {
      return bad("unknown component '" + key + "'");
    }
  }
  return d;
}

DeviceSpec DeviceSpec::merged_with(const DeviceSpec& inner) const {
  DeviceSpec d = *this;
  if (inner.job) d.job = inner.job;
  if (inner.replica) d.replica = inner.replica;
  if (inner.task) d.task = inner.task;
  if (inner.type) {
    if (d.type != inner.type) d.id.reset();
    d.type = inner.type;
  }
  if (inner.id) d.id = inner.id;
  return d;
}

bool DeviceSpec::matches(const DeviceSpec& full) const {
  if (job && full.job != job) return false;
  if (replica && full.replica != replica) return false;
  if (task && full.task != task) return false;
  if (type && full.type != type) return false;
  if (id && full.id != id) return false;
  return true;
}

bool DeviceSpec::compatible_with(const DeviceSpec& other) const {
  auto agree = [](const auto& a, const auto& b) { return !a || !b || *a == *b; };
  return agree(job, other.job) && agree(replica, other.replica) && agree(task, other.task) &&
         agree(type, other.type) && agree(id, other.id);
}

std::string DeviceSpec::to_string() const {
  std::string s;
  if (job) s += "/job:" + *job;
  if (replica) s += "/replica:" + std::to_string(*replica);
  if (task) s += "/task:" + std::to_string(*task);
  if (type) s += "/device:" + *type + ":" + (id ? std::to_string(*id) : std::string("*"));
  return s;
}

}  // namespace tessera::internal
