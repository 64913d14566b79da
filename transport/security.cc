// CURVE key files for clusters. See transport/security.h and Note [RPC security] in rpc_server.cc.
#include "transport/security.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zmq.h>

#include "core/file_util.h"

namespace tessera::internal {

namespace {

constexpr std::size_t kKeyFileMaxBytes = 64 * 1024;
constexpr std::size_t kClusterKeysMaxBytes = 16 * 1024 * 1024;


// Writes `content` to `path` with `mode` (an existing file is replaced only when `force`).
Status write_file(const std::string& path, std::string_view content, mode_t mode, bool force) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (force ? O_TRUNC : O_EXCL);
  const int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) return file_error(errno, "write", path);
  Status status;
  // An existing file keeps its mode through O_TRUNC: set it before writing a secret into it.
  if (force && ::fchmod(fd, mode) != 0) status = file_error(errno, "chmod", path);
  std::size_t done = 0;
  while (status.ok() && done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      status = file_error(errno, "write", path);
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0 && status.ok()) status = file_error(errno, "write", path);
  return status;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// At most `n` characters of `s`, for messages.
std::string clip(std::string_view s, std::size_t n = 48) {
  if (s.size() <= n) return std::string(s);
  return std::string(s.substr(0, n)) + "...";
}

std::vector<std::string_view> split_blanks(std::string_view line) {
  std::vector<std::string_view> tokens;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) tokens.push_back(line.substr(start, i - start));
  }
  return tokens;
}

// "host:port" with a non-empty host and a port in 1..65535.
bool is_task_address(std::string_view label) {
  const std::size_t colon = label.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == label.size()) return false;
  const std::string_view port = label.substr(colon + 1);
  if (port.size() > 5) return false;
  int value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  return value >= 1 && value <= 65535;
}

}  // namespace

bool is_z85_key(std::string_view key) {
  if (key.size() != 40) return false;
  const std::string text(key);
  uint8_t raw[32];
  return zmq_z85_decode(raw, text.c_str()) != nullptr;
}

StatusOr<CurveKeyPair> generate_curve_key_pair() {
  char public_key[41] = {};
  char secret_key[41] = {};
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    return errors::unimplemented("cannot make a CURVE key pair: {} (libzmq needs CURVE support: libsodium)",
                                 zmq_strerror(zmq_errno()));
  }
  return CurveKeyPair{public_key, secret_key};
}

Status write_key_pair_files(const std::string& prefix, const CurveKeyPair& keys, bool force) {
  if (prefix.empty()) return errors::invalid_argument("the key files need a path prefix (--out PREFIX)");
  struct stat st {};
  if (prefix.back() == '/' || (::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode))) {
    // "dir/" would write the hidden files dir/.key and dir/.pub.
    return errors::invalid_argument("{} is a directory: the prefix names the files (PREFIX.key and PREFIX.pub), "
                                    "as in --out {}/task0",
                                    quoted_prefix(prefix), prefix.back() == '/' ? prefix.substr(0, prefix.size() - 1) : prefix);
  }
  if (!is_z85_key(keys.public_key) || !is_z85_key(keys.secret_key)) {
    return errors::invalid_argument("not a CURVE key pair: the keys must be 40-character Z85 text");
  }
  const std::string key_path = prefix + ".key";
  const std::string pub_path = prefix + ".pub";
  if (!force) {
    for (const std::string& path : {key_path, pub_path}) {
      if (exists(path)) return errors::already_exists("'{}' exists: pass --force to replace it", path);
    }
  }
  nlohmann::json json = {{"public", keys.public_key}, {"secret", keys.secret_key}};
  TESSERA_RETURN_IF_ERROR(write_file(key_path, json.dump(2) + "\n", 0600, force));
  return write_file(pub_path, keys.public_key + "\n", 0644, force);
}

StatusOr<CurveKeyPair> load_key_pair(const std::string& path) {
  struct stat st;
  StatusOr<std::string> text = read_small_file(path, "key file", kKeyFileMaxBytes, &st);
  if (!text.ok()) {
    if (text.status().code() == ErrorCode::kNotFound) {
      return errors::not_found("{} (make one with `tessera keygen --out PREFIX`)", text.status().message());
    }
    return text.status();
  }
  if ((st.st_mode & 077) != 0) {
    return Status(ErrorCode::kPermissionDenied,
                  fmt::format("key file '{}' holds a secret key but group or others may access it (mode {:04o}): "
                              "chmod 600 '{}'",
                              path, st.st_mode & 07777, path));
  }
  StatusOr<nlohmann::json> parsed = parse_json_bounded(text.value(), "key file");
  const nlohmann::json json = parsed.ok() ? std::move(parsed).value() : nlohmann::json(nlohmann::json::value_t::discarded);
  if (json.is_discarded()) {
    return errors::invalid_argument("key file '{}' is not JSON (expected {{\"public\": \"<Z85>\", \"secret\": \"<Z85>\"}}, "
                                    "as `tessera keygen` writes)",
                                    path);
  }
  if (!json.is_object()) {
    return errors::invalid_argument("key file '{}' is not a JSON object with \"public\" and \"secret\"", path);
  }
  CurveKeyPair keys;
  for (const char* field : {"public", "secret"}) {
    auto it = json.find(field);
    if (it == json.end()) return errors::invalid_argument("key file '{}' has no \"{}\" key", path, field);
    if (!it->is_string() || !is_z85_key(it->get_ref<const std::string&>())) {
      return errors::invalid_argument("key file '{}': \"{}\" is not a 40-character Z85 key", path, field);
    }
    (std::string_view(field) == "public" ? keys.public_key : keys.secret_key) = it->get<std::string>();
  }
  char derived[41] = {};
  if (zmq_curve_public(derived, keys.secret_key.c_str()) != 0) {
    return errors::unimplemented("cannot check key file '{}': {} (libzmq needs CURVE support)", path,
                                 zmq_strerror(zmq_errno()));
  }
  if (keys.public_key != derived) {
    return errors::invalid_argument("key file '{}': its \"public\" key is not the public key of its \"secret\" key",
                                    path);
  }
  return keys;
}

const std::string* ClusterKeys::server_key(const std::string& address) const {
  auto it = server_keys.find(address);
  if (it != server_keys.end()) return &it->second;
  const std::size_t colon = address.rfind(':');
  if (colon == std::string::npos) return nullptr;
  const std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon);
  std::string alias;
  if (host == "localhost") alias = "127.0.0.1" + port;
  if (host == "127.0.0.1") alias = "localhost" + port;
  if (alias.empty()) return nullptr;
  it = server_keys.find(alias);
  return it != server_keys.end() ? &it->second : nullptr;
}

StatusOr<ClusterKeys> load_cluster_keys(const std::string& path) {
  struct stat st;
  StatusOr<std::string> text = read_small_file(path, "cluster keys file", kClusterKeysMaxBytes, &st);
  if (!text.ok()) return text.status();
  ClusterKeys keys;
  keys.file = path;
  std::map<std::string, int> address_line;
  std::string_view rest = text.value();
  int number = 0;
  while (!rest.empty()) {
    const std::size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::vector<std::string_view> tokens = split_blanks(line);
    if (tokens.empty()) continue;
    auto bad = [&](const std::string& what) {
      return errors::invalid_argument("cluster keys file '{}', line {}: {} (each line is '<Z85 public key> <label>', "
                                      "the label a task's host:port or a client's name; '#' starts a comment)",
                                      path, number, what);
    };
    // '#' is a Z85 character, but no key begins with it (five Z85 characters starting with '#'
    // exceed 32 bits): a line starting with '#' is a comment, a '#' inside a key is not one.
    if (!is_z85_key(tokens[0])) {
      if (tokens[0].front() == '#') continue;
      return bad(fmt::format("'{}' is not a 40-character Z85 public key", clip(tokens[0])));
    }
    if (tokens.size() < 2 || tokens[1].front() == '#') return bad("the key has no label");
    if (tokens.size() > 2 && tokens[2].front() != '#') {
      return bad(fmt::format("unexpected '{}' after the label", clip(tokens[2])));
    }
    const std::string key(tokens[0]);
    const std::string label(tokens[1]);
    if (label.find(':') != std::string::npos) {
      if (!is_task_address(label)) return bad(fmt::format("'{}' is not a task address host:port", clip(label)));
      auto [it, fresh] = keys.server_keys.emplace(label, key);
      if (!fresh && it->second != key) {
        return bad(fmt::format("{} already has another key (line {})", label, address_line[label]));
      }
      address_line.emplace(label, number);
    }
    keys.keys.insert(key);
  }
  if (keys.keys.empty()) {
    return errors::invalid_argument("cluster keys file '{}' lists no keys (each line is '<Z85 public key> <label>')",
                                    path);
  }
  return keys;
}

Status check_security_options(const train::SecurityOptions& options, std::string_view what) {
  if (!options.cluster_keys_file.empty() && options.key_file.empty()) {
    return errors::invalid_argument("{}.cluster_keys_file needs {}.key_file too (this process's key pair: "
                                    "`tessera keygen --out PREFIX`)",
                                    what, what);
  }
  if (!options.key_file.empty() && options.cluster_keys_file.empty()) {
    return errors::invalid_argument("{}.key_file needs {}.cluster_keys_file too (the cluster's public keys)", what,
                                    what);
  }
  if (!options.key_file.empty() && options.insecure) {
    return errors::invalid_argument("{}.insecure and {}.key_file exclude each other", what, what);
  }
  return Status();
}

StatusOr<std::shared_ptr<const Credentials>> load_credentials(const train::SecurityOptions& options,
                                                               std::string_view what) {
  TESSERA_RETURN_IF_ERROR(check_security_options(options, what));
  if (options.key_file.empty()) return std::shared_ptr<const Credentials>();
  StatusOr<CurveKeyPair> own = load_key_pair(options.key_file);
  if (!own.ok()) return own.status();
  StatusOr<ClusterKeys> cluster = load_cluster_keys(options.cluster_keys_file);
  if (!cluster.ok()) return cluster.status();
  return std::shared_ptr<const Credentials>(
      std::make_shared<Credentials>(Credentials{std::move(own).value(), std::move(cluster).value()}));
}

StatusOr<RpcChannelOptions::Curve> channel_curve(const Credentials& credentials, const std::string& address) {
  const std::string* server_key = credentials.cluster.server_key(address);
  if (server_key == nullptr) {
    return errors::failed_precondition(
        "cannot authenticate {}: the cluster keys file '{}' has no key for it (add the line '<its public key> {}', "
        "the key being its PREFIX.pub)",
        address, credentials.cluster.file, address);
  }
  return RpcChannelOptions::Curve{credentials.own.public_key, credentials.own.secret_key, *server_key};
}

RpcServerOptions::Curve server_curve(const Credentials& credentials) {
  RpcServerOptions::Curve curve{credentials.own.public_key, credentials.own.secret_key, credentials.cluster.keys};
  curve.allowed_clients.insert(credentials.own.public_key);
  return curve;
}

bool is_loopback_endpoint(std::string_view endpoint) {
  constexpr std::string_view kTcp = "tcp://";
  if (endpoint.substr(0, kTcp.size()) == kTcp) endpoint.remove_prefix(kTcp.size());
  const std::size_t colon = endpoint.rfind(':');
  const std::string host(endpoint.substr(0, colon));
  if (host == "localhost" || host == "[::1]") return true;
  in_addr ipv4{};
  if (::inet_pton(AF_INET, host.c_str(), &ipv4) != 1) return false;
  return (ntohl(ipv4.s_addr) >> 24) == 127;
}

}  // namespace tessera::internal
