// train::ClusterSpec (validation, JSON) and the environment resolvers (TF_CONFIG, Slurm).
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "core/status.h"
#include "tessera/cluster.h"
#include "tessera/errors.h"
#include "transport/hostlist.h"

namespace tessera::train {
namespace {

using internal::expand_hostlist;
using internal::expand_tasks_per_node;
using Json = nlohmann::json;
using Tasks = std::map<int, std::string>;

constexpr int kDefaultSlurmPortBase = 8888;  // SlurmClusterResolver's port_base
constexpr std::size_t kMaxListed = 20;       // names listed in an error before "..."

// ---- Validation ----

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_alpha(char c) { return is_lower(c) || (c >= 'A' && c <= 'Z'); }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

template <class T>
bool parse_digits(std::string_view s, T* out) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), is_digit)) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// The text of a value inside an error message, cut short if long.
std::string quote(std::string_view s) {
  constexpr std::size_t kMax = 200;
  if (s.size() <= kMax) return fmt::format("\"{}\"", s);
  return fmt::format("\"{}...\" ({} characters)", s.substr(0, kMax), s.size());
}

// TensorFlow's job names (DeviceNameUtils): [a-z][a-z0-9_]*.
Status validate_job_name(std::string_view name) {
  bool ok = !name.empty() && is_lower(name[0]) && std::all_of(name.begin(), name.end(), [](char c) {
    return is_lower(c) || is_digit(c) || c == '_';
  });
  if (ok) return Status::ok_status();
  return errors::invalid_argument("invalid job name {}: a job name matches [a-z][a-z0-9_]*", quote(name));
}

// Why `addr` is not host:port, or "" when it is.
std::string address_problem(std::string_view addr) {
  if (addr.empty()) return "it is empty";
  std::string_view host, port;
  if (addr[0] == '[') {
    std::size_t close = addr.find(']');
    if (close == std::string_view::npos) return "'[' without a matching ']'";
    host = addr.substr(1, close - 1);
    std::string_view rest = addr.substr(close + 1);
    if (rest.empty() || rest[0] != ':') return "no ':port' after the bracketed IPv6 address";
    port = rest.substr(1);
    if (host.empty() || host.find(':') == std::string_view::npos ||
        !std::all_of(host.begin(), host.end(), [](char c) { return is_hex(c) || c == ':' || c == '.'; })) {
      return fmt::format("{} is not an IPv6 address", internal::quoted_prefix(host, 64));
    }
  } else {
    std::size_t colon = addr.rfind(':');
    if (colon == std::string_view::npos) return "no ':port'";
    host = addr.substr(0, colon);
    port = addr.substr(colon + 1);
    if (host.empty()) return "no host before ':'";
    if (host.size() > 253) return fmt::format("the host has {} characters (a DNS name has at most 253)", host.size());
    if (host.find(':') != std::string_view::npos &&
        std::all_of(host.begin(), host.end(), [](char c) { return is_hex(c) || c == ':' || c == '.'; })) {
      return "an IPv6 host needs brackets, as in [::1]:2222";
    }
    if (!std::all_of(host.begin(), host.end(),
                     [](char c) { return is_alpha(c) || is_digit(c) || c == '.' || c == '-' || c == '_'; })) {
      return fmt::format("host {} has characters other than letters, digits, '.', '-' and '_'",
                         internal::quoted_prefix(host, 64));
    }
  }
  int p = 0;
  if (!parse_digits(port, &p) || p < 0 || p > 65535) {
    return fmt::format("port {} is not a number from 0 to 65535", internal::quoted_prefix(port, 16));
  }
  // "0023001" would work, and be printed and matched (in keys files) as written, not as 23001.
  if (port[0] == '0' && port.size() > 1) return fmt::format("port '{}' has a leading zero (write {})", port, p);
  return "";
}

Status validate_jobs(const ClusterSpec::SparseJobs& jobs) {
  std::map<std::string_view, std::pair<std::string_view, int>> task_at;  // address -> (job, task)
  for (const auto& [name, tasks] : jobs) {
    for (const auto& [index, addr] : tasks) {
      // Port 0: each such task binds a free port of its own when it starts (Server::start).
      if (addr.ends_with(":0")) continue;
      auto [it, fresh] = task_at.try_emplace(addr, name, index);
      if (!fresh) {
        // Two servers cannot listen on one address: the second task could never start.
        return errors::invalid_argument("tasks {}:{} and {}:{} have the same address {}", it->second.first,
                                        it->second.second, name, index, quote(addr));
      }
    }
  }
  for (const auto& [name, tasks] : jobs) {
    TESSERA_RETURN_IF_ERROR(validate_job_name(name));
    for (const auto& [index, addr] : tasks) {
      if (index < 0) {
        return errors::invalid_argument("job '{}' has task index {}: task indices are >= 0", name, index);
      }
      std::string why = address_problem(addr);
      if (!why.empty()) {
        return errors::invalid_argument(
            "invalid address {} for task {} of job '{}': {}; expected host:port with a port from 0 to "
            "65535 (0: the task binds a free port; IPv6 in brackets, as in [::1]:2222)",
            quote(addr), index, name, why);
      }
    }
  }
  return Status::ok_status();
}

template <class Range, class Fmt>
std::string list_some(const Range& items, Fmt&& format_one) {
  std::string out;
  std::size_t n = 0;
  for (const auto& item : items) {
    if (n == kMaxListed) {
      out += fmt::format(", ... ({} in all)", std::size(items));
      break;
    }
    if (n++ > 0) out += ", ";
    out += format_one(item);
  }
  return out;
}

std::string list_jobs(const ClusterSpec::SparseJobs& jobs) {
  if (jobs.empty()) return "the cluster has no jobs";
  return "jobs: " + list_some(jobs, [](const auto& kv) { return kv.first; });
}

std::string list_indices(const Tasks& tasks) {
  if (tasks.empty()) return "the job has no tasks";
  return "task indices: " + list_some(tasks, [](const auto& kv) { return std::to_string(kv.first); });
}

// ---- JSON ----

std::string_view type_name(const Json& j) {
  if (j.is_number_integer()) return "a whole number";
  if (j.is_number()) return "a number";
  return j.type_name();
}

// Parses `text`; InvalidArgument (prefixed by `what`) for malformed JSON or a key repeated in one
// object, which nlohmann::json would otherwise keep silently (the last one wins).
// Bounded too: a cluster is a few levels deep and a few hundred kilobytes at most, and a file of
// a million '[' would otherwise cost gigabytes (core/file_util.h).
constexpr std::size_t kMaxClusterJsonBytes = std::size_t{16} << 20;
constexpr int kMaxClusterJsonDepth = 16;
struct TooDeep {};

StatusOr<Json> parse_json(std::string_view text, std::string_view what) {
  if (text.size() > kMaxClusterJsonBytes) {
    return errors::invalid_argument("{} is too large ({} bytes; at most {})", what, text.size(), kMaxClusterJsonBytes);
  }
  std::vector<std::set<std::string>> keys;  // one set per object being parsed
  std::optional<std::string> duplicate;
  Json::parser_callback_t watch = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > kMaxClusterJsonDepth) throw TooDeep{};
    if (event == Json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (event == Json::parse_event_t::key && !keys.empty() && !duplicate) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(key).second) duplicate = key;
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), watch);
  } catch (const TooDeep&) {
    return errors::invalid_argument("{} nests deeper than {} levels", what, kMaxClusterJsonDepth);
  } catch (const Json::exception& e) {
    // "[json.exception.parse_error.101] parse error at ..." -> "parse error at ..."
    std::string_view why = e.what();
    if (!why.empty() && why[0] == '[') {
      if (std::size_t end = why.find("] "); end != std::string_view::npos) why.remove_prefix(end + 2);
    }
    return errors::invalid_argument("{} is not valid JSON: {} (in {})", what, why, quote(text));
  }
  if (duplicate) {
    return errors::invalid_argument("{} repeats the key \"{}\" in one object", what, *duplicate);
  }
  return j;
}

// A job's tasks from its JSON: a list of addresses, or an object from index ("0") to address.
StatusOr<Tasks> parse_job(const std::string& name, const Json& tasks, std::string_view what) {
  Tasks out;
  if (tasks.is_array()) {
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      if (!tasks[i].is_string()) {
        return errors::invalid_argument("{}: task {} of job '{}' must be an address string, got {}", what, i,
                                        name, type_name(tasks[i]));
      }
      out.emplace(static_cast<int>(i), tasks[i].get<std::string>());
    }
    return out;
  }
  if (tasks.is_object()) {
    for (const auto& [key, addr] : tasks.items()) {
      int index = -1;
      if (!parse_digits(key, &index)) {
        std::string hint;
        if (name == "cluster") hint = " (is this TF_CONFIG? pass the object under \"cluster\")";
        return errors::invalid_argument("{}: job '{}' has task index \"{}\", not a whole number >= 0{}", what,
                                        name, key, hint);
      }
      if (!addr.is_string()) {
        return errors::invalid_argument("{}: task {} of job '{}' must be an address string, got {}", what,
                                        index, name, type_name(addr));
      }
      if (!out.emplace(index, addr.get<std::string>()).second) {
        return errors::invalid_argument("{}: job '{}' defines task {} twice", what, name, index);
      }
    }
    return out;
  }
  return errors::invalid_argument(
      "{}: the tasks of job '{}' must be a list of addresses or an object from task index to address, got {}",
      what, name, type_name(tasks));
}

StatusOr<ClusterSpec::SparseJobs> parse_cluster(const Json& j, std::string_view what) {
  if (!j.is_object()) {
    return errors::invalid_argument("{} must be an object from job name to tasks, got {}", what,
                                    type_name(j));
  }
  ClusterSpec::SparseJobs jobs;
  for (const auto& [name, tasks] : j.items()) {
    auto parsed = parse_job(name, tasks, what);
    if (!parsed.ok()) return parsed.status();
    jobs.emplace(name, std::move(parsed).value());
  }
  Status s = validate_jobs(jobs);
  if (!s.ok()) return s.with_prefix(fmt::format("{}: ", what));
  return jobs;
}

// ---- Environment ----

// The variable's value; nullopt when unset or empty.
std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

StatusOr<ResolvedCluster> resolve_tf_config(const std::string& text) {
  auto parsed = parse_json(text, "TF_CONFIG");
  if (!parsed.ok()) return parsed.status();
  const Json& config = parsed.value();
  if (!config.is_object()) {
    return errors::invalid_argument(
        "TF_CONFIG must be a JSON object like {{\"cluster\": {{...}}, \"task\": {{...}}}}, got {}",
        type_name(config));
  }
  auto cluster_it = config.find("cluster");
  if (cluster_it == config.end()) {
    return errors::invalid_argument(
        "TF_CONFIG has no \"cluster\": expected {{\"cluster\": {{\"worker\": [\"host:port\", ...]}}, ...}}");
  }
  auto jobs = parse_cluster(*cluster_it, "TF_CONFIG \"cluster\"");
  if (!jobs.ok()) return jobs.status();
  if (jobs.value().empty()) return errors::invalid_argument("TF_CONFIG \"cluster\" names no jobs");

  std::optional<TaskSpec> task;
  if (auto task_it = config.find("task"); task_it != config.end() && !task_it->is_null()) {
    const Json& t = *task_it;
    if (!t.is_object()) {
      return errors::invalid_argument(
          "TF_CONFIG \"task\" must be an object like {{\"type\": \"worker\", \"index\": 0}}, got {}",
          type_name(t));
    }
    if (!t.empty()) {
      auto type_it = t.find("type");
      auto index_it = t.find("index");
      if (type_it == t.end() || !type_it->is_string()) {
        return errors::invalid_argument("TF_CONFIG \"task\" needs a string \"type\" (the job name)");
      }
      // TensorFlow takes int(task["index"]): a whole number, or a string of one.
      int index = -1;
      bool index_ok = false;
      if (index_it != t.end() && index_it->is_number_integer()) {
        const int64_t v = index_it->get<int64_t>();
        index_ok = v >= 0 && v <= std::numeric_limits<int>::max();
        if (index_ok) index = static_cast<int>(v);
      } else if (index_it != t.end() && index_it->is_string()) {
        index_ok = parse_digits(index_it->get_ref<const std::string&>(), &index);
      }
      if (!index_ok) {
        return errors::invalid_argument("TF_CONFIG \"task\" needs an \"index\" that is a whole number >= 0{}",
                                        index_it == t.end() ? "" : fmt::format(", got {}", index_it->dump()));
      }
      task = TaskSpec{type_it->get<std::string>(), index};
      auto job = jobs.value().find(task->job);
      if (job == jobs.value().end()) {
        return errors::invalid_argument("TF_CONFIG task type '{}' is not a job of its cluster; {}", task->job,
                                        list_jobs(jobs.value()));
      }
      if (!job->second.contains(index)) {
        return errors::invalid_argument("TF_CONFIG task index {} is not a task of job '{}'; {}", index,
                                        task->job, list_indices(job->second));
      }
    }
  }
  return ResolvedCluster{ClusterSpec(std::move(jobs).value()), std::move(task), "TF_CONFIG"};
}

// Note [Slurm task layout]
// As TensorFlow's SlurmClusterResolver: SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE say how
// many tasks run on each node; the i-th task on a node listens on port_base + i (8888 by default,
// TESSERA_SLURM_PORT_BASE to change it); the tasks, in order, are cut into jobs (TensorFlow's
// `jobs` dict; here TESSERA_SLURM_JOBS, else one job "worker" of all the step's tasks, a count that
// SLURM_STEP_NUM_TASKS, when set, must match); this process is the task whose position is
// SLURM_PROCID. Three deliberate differences: a range keeps its zero padding as Slurm writes host
// names (TensorFlow's expand_hostlist turns node[001-002] into node1, node2); tasks are ordered
// by the node list as Slurm gives it, not by sorted host name, because Slurm's default (block)
// distribution gives ranks to nodes in that order, so rank r really is the r-th address (sorting
// would put node10 before node9); and jobs are cut in the order TESSERA_SLURM_JOBS lists them, not
// sorted by name, so a "chief:1,worker:3" layout puts the chief on rank 0. The resolver sets no
// CUDA_VISIBLE_DEVICES (TensorFlow's does): device visibility is the launcher's business here.
StatusOr<std::vector<std::pair<std::string, int>>> parse_slurm_jobs(const std::string& text) {
  std::vector<std::pair<std::string, int>> jobs;
  auto fail = [&](std::string_view why) {
    return errors::invalid_argument(
        "TESSERA_SLURM_JOBS={}: {}; expected job:count pairs such as \"ps:1,worker:3\"", quote(text), why);
  };
  std::size_t start = 0;
  while (true) {
    std::size_t comma = text.find(',', start);
    std::string_view part =
        std::string_view(text).substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::size_t colon = part.find(':');
    if (colon == std::string_view::npos) return fail(fmt::format("'{}' has no ':count'", part));
    std::string name(part.substr(0, colon));
    int count = 0;
    if (!validate_job_name(name).ok()) {
      return fail(fmt::format("'{}' is not a job name ([a-z][a-z0-9_]*)", name));
    }
    if (!parse_digits(part.substr(colon + 1), &count) || count < 1) {
      return fail(fmt::format("the count of job '{}' is not a whole number >= 1", name));
    }
    for (const auto& j : jobs) {
      if (j.first == name) return fail(fmt::format("job '{}' is listed twice", name));
    }
    jobs.emplace_back(std::move(name), count);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return jobs;
}

StatusOr<ResolvedCluster> resolve_slurm(const std::string& procid_text) {
  auto need = [](const char* name) -> StatusOr<std::string> {
    if (auto v = env(name)) return *v;
    return errors::failed_precondition(
        "SLURM_PROCID is set but {} is not: start the tasks as a Slurm job step (srun), which sets "
        "SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE, or describe the cluster in TF_CONFIG",
        name);
  };
  auto nodelist = need("SLURM_STEP_NODELIST");
  if (!nodelist.ok()) return nodelist.status();
  auto per_node_text = need("SLURM_STEP_TASKS_PER_NODE");
  if (!per_node_text.ok()) return per_node_text.status();

  auto hosts = expand_hostlist(nodelist.value());
  if (!hosts.ok()) return hosts.status().with_prefix("SLURM_STEP_NODELIST: ");
  auto per_node = expand_tasks_per_node(per_node_text.value());
  if (!per_node.ok()) return per_node.status().with_prefix("SLURM_STEP_TASKS_PER_NODE: ");
  if (hosts.value().size() != per_node.value().size()) {
    return errors::invalid_argument(
        "SLURM_STEP_NODELIST={} names {} nodes but SLURM_STEP_TASKS_PER_NODE={} gives task counts for {}",
        quote(nodelist.value()), hosts.value().size(), quote(per_node_text.value()), per_node.value().size());
  }
  std::set<std::string_view> seen;
  for (const auto& h : hosts.value()) {
    if (!seen.insert(h).second) {
      return errors::invalid_argument("SLURM_STEP_NODELIST={} names node '{}' twice", quote(nodelist.value()),
                                      h);
    }
  }
  int64_t total = 0;
  int max_per_node = 0;
  for (int n : per_node.value()) {
    total += n;
    max_per_node = std::max(max_per_node, n);
  }
  if (total > internal::kMaxHosts) {
    return errors::invalid_argument("SLURM_STEP_TASKS_PER_NODE={} adds up to {} tasks, more than {}",
                                    quote(per_node_text.value()), total, internal::kMaxHosts);
  }
  if (auto num_tasks_text = env("SLURM_STEP_NUM_TASKS")) {
    int64_t n = -1;
    if (!parse_digits(*num_tasks_text, &n)) {
      return errors::invalid_argument("SLURM_STEP_NUM_TASKS={} is not a whole number",
                                      quote(*num_tasks_text));
    }
    if (n != total) {
      return errors::invalid_argument(
          "SLURM_STEP_NUM_TASKS={} but SLURM_STEP_TASKS_PER_NODE={} adds up to {} tasks", n,
          quote(per_node_text.value()), total);
    }
  }
  int64_t rank = -1;
  if (!parse_digits(procid_text, &rank) || rank >= total) {
    return errors::invalid_argument("SLURM_PROCID={} is not a task rank from 0 to {}", quote(procid_text),
                                    total - 1);
  }

  int port_base = kDefaultSlurmPortBase;
  if (auto base_text = env("TESSERA_SLURM_PORT_BASE")) {
    if (!parse_digits(*base_text, &port_base) || port_base < 1 || port_base > 65535) {
      return errors::invalid_argument("TESSERA_SLURM_PORT_BASE={} is not a port from 1 to 65535",
                                      quote(*base_text));
    }
  }
  if (port_base + max_per_node - 1 > 65535) {
    return errors::invalid_argument(
        "TESSERA_SLURM_PORT_BASE={}: with {} tasks on a node the ports would run past 65535", port_base,
        max_per_node);
  }

  std::vector<std::pair<std::string, int>> jobs{{"worker", static_cast<int>(total)}};
  if (auto jobs_text = env("TESSERA_SLURM_JOBS")) {
    auto parsed = parse_slurm_jobs(*jobs_text);
    if (!parsed.ok()) return parsed.status();
    jobs = std::move(parsed).value();
    int64_t sum = 0;
    for (const auto& j : jobs) sum += j.second;
    if (sum != total) {
      return errors::invalid_argument("TESSERA_SLURM_JOBS={} asks for {} tasks but the Slurm step has {}",
                                      quote(*jobs_text), sum, total);
    }
  }

  // Every task's address, in rank order (see the note).
  std::vector<std::string> addresses;
  addresses.reserve(static_cast<std::size_t>(total));
  for (std::size_t i = 0; i < hosts.value().size(); ++i) {
    for (int local = 0; local < per_node.value()[i]; ++local) {
      addresses.push_back(fmt::format("{}:{}", hosts.value()[i], port_base + local));
    }
  }
  ClusterSpec::SparseJobs spec;
  std::optional<TaskSpec> task;
  int64_t next = 0;
  for (const auto& [name, count] : jobs) {
    auto& tasks = spec[name];
    for (int i = 0; i < count; ++i, ++next) {
      tasks.emplace(i, addresses[static_cast<std::size_t>(next)]);
      if (next == rank) task = TaskSpec{name, i};
    }
  }
  Status s = validate_jobs(spec);
  if (!s.ok()) return s.with_prefix(fmt::format("SLURM_STEP_NODELIST={}: ", quote(nodelist.value())));
  return ResolvedCluster{ClusterSpec(std::move(spec)), std::move(task), "SLURM"};
}

}  // namespace

// ---- ClusterSpec ----

ClusterSpec::ClusterSpec(DenseJobs jobs) {
  for (auto& [name, addresses] : jobs) {
    Tasks& tasks = jobs_[name];
    for (std::size_t i = 0; i < addresses.size(); ++i)
      tasks.emplace(static_cast<int>(i), std::move(addresses[i]));
  }
  validate_jobs(jobs_).raise();
}

ClusterSpec::ClusterSpec(std::initializer_list<std::pair<const std::string, std::vector<std::string>>> jobs) {
  for (const auto& [name, addresses] : jobs) {
    auto [it, added] = jobs_.try_emplace(name);
    if (!added) throw InvalidArgumentError(fmt::format("job {} is given twice", quote(name)));
    for (std::size_t i = 0; i < addresses.size(); ++i) it->second.emplace(static_cast<int>(i), addresses[i]);
  }
  validate_jobs(jobs_).raise();
}

ClusterSpec::ClusterSpec(SparseTag, SparseJobs jobs) : jobs_(std::move(jobs)) {
  validate_jobs(jobs_).raise();
}

ClusterSpec ClusterSpec::from_json(std::string_view json) {
  auto parsed = parse_json(json, "cluster JSON");
  if (!parsed.ok()) parsed.status().raise();
  auto jobs = parse_cluster(parsed.value(), "cluster JSON");
  if (!jobs.ok()) jobs.status().raise();
  return ClusterSpec(SparseTag{}, std::move(jobs).value());
}

ClusterSpec ClusterSpec::from_file(const std::string& path) {
  auto text = internal::read_small_file(path, "cluster file", kMaxClusterJsonBytes);
  if (!text.ok()) {
    Status(text.status().code(), text.status().message() +
                                     " (a cluster file holds JSON such as {\"worker\": [\"host:2222\"]})")
        .raise();
  }
  auto parsed = parse_json(text.value(), fmt::format("cluster file {}", internal::quoted_prefix(path)));
  if (!parsed.ok()) parsed.status().raise();
  auto jobs = parse_cluster(parsed.value(), "cluster file");
  if (!jobs.ok()) jobs.status().raise();
  return ClusterSpec(SparseTag{}, std::move(jobs).value());
}

ClusterSpec ClusterSpec::from_env() {
  return resolve_cluster_from_env().cluster;
}

std::vector<std::string> ClusterSpec::jobs() const {
  std::vector<std::string> out;
  out.reserve(jobs_.size());
  for (const auto& kv : jobs_) out.push_back(kv.first);
  return out;
}

namespace {
const Tasks& find_job(const ClusterSpec::SparseJobs& jobs, std::string_view job) {
  auto it = jobs.find(std::string(job));
  if (it == jobs.end()) {
    throw InvalidArgumentError(fmt::format("no job {} in the cluster; {}", quote(job), list_jobs(jobs)));
  }
  return it->second;
}
}  // namespace

int ClusterSpec::num_tasks(std::string_view job) const {
  return static_cast<int>(find_job(jobs_, job).size());
}

std::vector<int> ClusterSpec::task_indices(std::string_view job) const {
  std::vector<int> out;
  for (const auto& kv : find_job(jobs_, job)) out.push_back(kv.first);
  return out;  // std::map keeps them sorted
}

std::string ClusterSpec::task_address(std::string_view job, int task) const {
  const Tasks& tasks = find_job(jobs_, job);
  auto it = tasks.find(task);
  if (it == tasks.end()) {
    throw InvalidArgumentError(
        fmt::format("no task {} in job {}; {}", task, quote(job), list_indices(tasks)));
  }
  return it->second;
}

std::vector<std::string> ClusterSpec::job_tasks(std::string_view job) const {
  const Tasks& tasks = find_job(jobs_, job);
  if (tasks.empty()) return {};
  std::vector<std::string> out(static_cast<std::size_t>(tasks.rbegin()->first) + 1);
  for (const auto& [i, addr] : tasks) out[static_cast<std::size_t>(i)] = addr;
  return out;
}

std::string ClusterSpec::to_json() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [name, tasks] : jobs_) {
    const bool dense = tasks.empty() || tasks.rbegin()->first + 1 == static_cast<int>(tasks.size());
    if (dense) {
      auto& list = out[name] = nlohmann::ordered_json::array();
      for (const auto& kv : tasks) list.push_back(kv.second);
    } else {
      auto& object = out[name] = nlohmann::ordered_json::object();
      for (const auto& [i, addr] : tasks) object[std::to_string(i)] = addr;  // numeric order
    }
  }
  return out.dump();
}

ResolvedCluster resolve_cluster_from_env() {
  StatusOr<ResolvedCluster> resolved = [&]() -> StatusOr<ResolvedCluster> {
    if (auto tf_config = env("TF_CONFIG")) return resolve_tf_config(*tf_config);
    if (auto procid = env("SLURM_PROCID")) return resolve_slurm(*procid);
    return errors::failed_precondition(
        "no cluster in the environment: set TF_CONFIG to TensorFlow's JSON, e.g. "
        "{{\"cluster\": {{\"worker\": [\"host0:2222\", \"host1:2222\"]}}, \"task\": {{\"type\": \"worker\", "
        "\"index\": 0}}}}, or start the tasks with Slurm's srun, which sets SLURM_PROCID, "
        "SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE and SLURM_STEP_NUM_TASKS");
  }();
  return std::move(resolved).value_or_raise();
}

}  // namespace tessera::train
