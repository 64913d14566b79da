// Authenticated, encrypted clusters (ZeroMQ CURVE): key pair files and cluster keys files, RPC with
// CURVE (admitted and refused clients, failing fast instead of at the deadline), cluster sessions
// across in-process Servers with keys, a `tessera server --keys` process, and servers that refuse
// to serve beyond loopback without keys. Loopback only, ports from the OS, every wait bounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "host/child_process.h"
#include "testing/test_util.h"
#include "tessera/server_process.h"
#include "tessera/tessera.h"
#include "transport/rpc.h"
#include "transport/security.h"

namespace tessera::internal {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
using train::ClusterSpec;
using train::SecurityOptions;
using train::Server;
using train::ServerOptions;

// ---- Helpers ----

// A fresh directory, removed with its files when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tessera-security-XXXXXX").string();
    const char* made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write_text(const std::string& path, const std::string& text, fs::perms perms = fs::perms::owner_read |
                                                                                    fs::perms::owner_write) {
  {
    std::ofstream out(path, std::ios::trunc);
    out << text;
  }
  fs::permissions(path, perms);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

CurveKeyPair fresh_keys() {
  auto keys = generate_curve_key_pair();
  EXPECT_TRUE(keys.ok()) << keys.status().to_string();
  return keys.value();
}

// Writes PREFIX.key / PREFIX.pub for a fresh key pair; returns the pair.
CurveKeyPair keygen(const std::string& prefix) {
  CurveKeyPair keys = fresh_keys();
  Status written = write_key_pair_files(prefix, keys, /*force=*/false);
  EXPECT_TRUE(written.ok()) << written.to_string();
  return keys;
}

std::string loopback() { return tessera::train::free_loopback_address(); }

RpcMessage message(std::initializer_list<std::string_view> frames) {
  RpcMessage m;
  for (auto f : frames) m.frames.push_back(string_frame(f));
  return m;
}

void echo(RpcMessage request, Responder respond) { respond(std::move(request)); }

RpcServerOptions curve_server(const CurveKeyPair& server, std::vector<std::string> allowed) {
  RpcServerOptions o;
  o.curve = RpcServerOptions::Curve{server.public_key, server.secret_key, {allowed.begin(), allowed.end()}};
  return o;
}

RpcChannelOptions curve_client(const CurveKeyPair& client, const std::string& server_key) {
  RpcChannelOptions o;
  o.curve = RpcChannelOptions::Curve{client.public_key, client.secret_key, server_key};
  return o;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Calls on `channel`, which must fail Unavailable for authentication well before the call's 10 s
// deadline; the call's status.
Status expect_fast_authentication_failure(RpcChannel& channel) {
  const auto t0 = Clock::now();
  auto reply = channel.call_sync(message({"hello"}), 10s);
  EXPECT_LT(Clock::now() - t0, 5s);  // well before the 10 s deadline
  EXPECT_EQ(reply.status().code(), ErrorCode::kUnavailable) << reply.status().to_string();
  EXPECT_TRUE(contains(reply.status().message(), "authentication")) << reply.status().message();
  return reply.status();
}

// ---- Key pair files ----

TEST(KeyFileTest, KeygenWritesAPrivateKeyFileAndAPublicOneThatLoadBack) {
  TempDir dir;
  const std::string prefix = dir.file("w0");
  CurveKeyPair keys = keygen(prefix);
  EXPECT_TRUE(is_z85_key(keys.public_key));
  EXPECT_TRUE(is_z85_key(keys.secret_key));
  EXPECT_NE(keys.public_key, keys.secret_key);

  struct stat st;
  ASSERT_EQ(::stat((prefix + ".key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(read_text(prefix + ".pub"), keys.public_key + "\n");
  auto loaded = load_key_pair(prefix + ".key");
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded.value().public_key, keys.public_key);
  EXPECT_EQ(loaded.value().secret_key, keys.secret_key);

  // No overwriting without force; nothing is written then.
  Status again = write_key_pair_files(prefix, fresh_keys(), false);
  EXPECT_EQ(again.code(), ErrorCode::kAlreadyExists) << again.to_string();
  EXPECT_TRUE(contains(again.message(), prefix + ".key")) << again.message();
  EXPECT_TRUE(contains(again.message(), "--force")) << again.message();
  EXPECT_EQ(load_key_pair(prefix + ".key").value().public_key, keys.public_key);

  // With force, even over a key file others could read: replaced, and private again.
  fs::permissions(prefix + ".key", fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_read);
  CurveKeyPair replaced = fresh_keys();
  Status forced = write_key_pair_files(prefix, replaced, true);
  ASSERT_TRUE(forced.ok()) << forced.to_string();
  ASSERT_EQ(::stat((prefix + ".key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(load_key_pair(prefix + ".key").value().public_key, replaced.public_key);
  EXPECT_EQ(read_text(prefix + ".pub"), replaced.public_key + "\n");

  // A directory that does not exist.
  EXPECT_EQ(write_key_pair_files(dir.file("no/such/dir/k"), keys, false).code(), ErrorCode::kNotFound);
  // A directory as the prefix ("out/" would write the hidden out/.key): refused, nothing written.
  const std::string as_dir = dir.file("keys_dir");
  fs::create_directories(as_dir);
  for (const std::string& prefix : {as_dir, as_dir + "/"}) {
    Status refused = write_key_pair_files(prefix, keys, false);
    EXPECT_EQ(refused.code(), ErrorCode::kInvalidArgument) << refused.to_string();
    EXPECT_TRUE(contains(refused.message(), "is a directory")) << refused.message();
  }
  EXPECT_FALSE(fs::exists(as_dir + "/.key"));
}

TEST(KeyFileTest, LoadingABadKeyFileSaysWhatIsWrong) {
  TempDir dir;
  const CurveKeyPair a = fresh_keys();
  const CurveKeyPair b = fresh_keys();
  auto expect_error = [](const std::string& path, ErrorCode code, const std::string& part) {
    auto r = load_key_pair(path);
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    EXPECT_TRUE(contains(r.status().message(), path)) << r.status().message();
    EXPECT_TRUE(contains(r.status().message(), part)) << r.status().message();
  };
  expect_error(dir.file("missing.key"), ErrorCode::kNotFound, "tessera keygen");

  const std::string good = "{\"public\": \"" + a.public_key + "\", \"secret\": \"" + a.secret_key + "\"}";
  write_text(dir.file("open.key"), good,
             fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  expect_error(dir.file("open.key"), ErrorCode::kPermissionDenied, "chmod 600");

  write_text(dir.file("text.key"), "not json at all");
  expect_error(dir.file("text.key"), ErrorCode::kInvalidArgument, "not JSON");
  write_text(dir.file("array.key"), "[1, 2]");
  expect_error(dir.file("array.key"), ErrorCode::kInvalidArgument, "JSON object");
  write_text(dir.file("nosecret.key"), "{\"public\": \"" + a.public_key + "\"}");
  expect_error(dir.file("nosecret.key"), ErrorCode::kInvalidArgument, "\"secret\"");
  write_text(dir.file("short.key"), "{\"public\": \"" + a.public_key + "\", \"secret\": \"abc\"}");
  expect_error(dir.file("short.key"), ErrorCode::kInvalidArgument, "Z85");
  write_text(dir.file("number.key"), "{\"public\": 7, \"secret\": \"" + a.secret_key + "\"}");
  expect_error(dir.file("number.key"), ErrorCode::kInvalidArgument, "\"public\"");
  write_text(dir.file("mixed.key"), "{\"public\": \"" + a.public_key + "\", \"secret\": \"" + b.secret_key + "\"}");
  expect_error(dir.file("mixed.key"), ErrorCode::kInvalidArgument, "not the public key");

  write_text(dir.file("good.key"), good);
  EXPECT_TRUE(load_key_pair(dir.file("good.key")).ok());
}

// ---- Cluster keys files ----

TEST(ClusterKeysTest, ParsesEntriesCommentsAndBlankLines) {
  TempDir dir;
  const CurveKeyPair w0 = fresh_keys(), w1 = fresh_keys(), alice = fresh_keys();
  // '#' is a Z85 character: inside a key it starts no comment. (No key begins with it: a group
  // of five Z85 characters starting with '#' would exceed 32 bits.)
  CurveKeyPair hashed = fresh_keys();
  for (int i = 0; i < 10000 && hashed.public_key.find('#') == std::string::npos; ++i) hashed = fresh_keys();
  ASSERT_NE(hashed.public_key.find('#'), std::string::npos);
  const std::string path = dir.file("cluster.keys");
  write_text(path, "# the cluster's keys\n"
                   "\n" +
                       w0.public_key + " 10.0.0.7:2222\n" +
                       "   " + w1.public_key + "\tlocalhost:2223   # task 1, with a comment\r\n" +
                       alice.public_key + " alice\n" +
                       hashed.public_key + " bob\n" +
                       "#" + w0.public_key + " 10.0.0.8:2222\n" +  // commented out: not a key
                       "  # indented comment\n" +
                       w0.public_key + " 10.0.0.7:2222\n");  // the same entry twice is fine
  auto keys = load_cluster_keys(path);
  ASSERT_TRUE(keys.ok()) << keys.status().to_string();
  EXPECT_EQ(keys.value().keys, (std::set<std::string>{w0.public_key, w1.public_key, alice.public_key,
                                                       hashed.public_key}));
  EXPECT_EQ(keys.value().server_keys.size(), 2u);
  ASSERT_NE(keys.value().server_key("10.0.0.7:2222"), nullptr);
  EXPECT_EQ(*keys.value().server_key("10.0.0.7:2222"), w0.public_key);
  // localhost and 127.0.0.1 are the same host.
  ASSERT_NE(keys.value().server_key("127.0.0.1:2223"), nullptr);
  EXPECT_EQ(*keys.value().server_key("127.0.0.1:2223"), w1.public_key);
  EXPECT_EQ(keys.value().server_key("10.0.0.8:2222"), nullptr);
  EXPECT_EQ(keys.value().server_key("alice"), nullptr);
}

TEST(ClusterKeysTest, EveryMalformedLineIsInvalidArgumentNamingFileAndLine) {
  TempDir dir;
  const std::string k = fresh_keys().public_key;
  const std::string k2 = fresh_keys().public_key;
  struct Case {
    std::string text;
    int line;
    std::string part;
  };
  const std::vector<Case> cases = {
      {"# ok\n" + k + " w0:1\nnot-a-key w1:2\n", 3, "not a 40-character Z85 public key"},
      {k + "\n", 1, "no label"},
      {k + "   # only a comment\n", 1, "no label"},
      {"\n\n" + k + " w0:1 extra\n", 3, "unexpected 'extra'"},
      {k + " w0:port\n", 1, "not a task address"},
      {k + " w0:99999\n", 1, "not a task address"},
      {k + " :2222\n", 1, "not a task address"},
      {k + " w0:1\n" + k2 + " w0:1\n", 2, "already has another key (line 1)"},
      {k.substr(0, 39) + " w0:1\n", 1, "Z85"},
      {k.substr(0, 39) + "\x01 w0:1\n", 1, "Z85"},
  };
  for (const Case& c : cases) {
    const std::string path = dir.file("bad.keys");
    write_text(path, c.text);
    auto keys = load_cluster_keys(path);
    ASSERT_FALSE(keys.ok()) << c.text;
    EXPECT_EQ(keys.status().code(), ErrorCode::kInvalidArgument) << keys.status().to_string();
    const std::string& m = keys.status().message();
    EXPECT_TRUE(contains(m, path)) << m;
    EXPECT_TRUE(contains(m, "line " + std::to_string(c.line) + ":")) << m;
    EXPECT_TRUE(contains(m, c.part)) << m;
  }
  write_text(dir.file("empty.keys"), "# nothing yet\n\n");
  auto empty = load_cluster_keys(dir.file("empty.keys"));
  EXPECT_EQ(empty.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(empty.status().message(), "lists no keys")) << empty.status().message();
  EXPECT_EQ(load_cluster_keys(dir.file("missing.keys")).status().code(), ErrorCode::kNotFound);
}

TEST(SecurityOptionsTest, KeyFilesGoTogetherAndNotWithInsecure) {
  SecurityOptions o;
  EXPECT_TRUE(check_security_options(o, "S").ok());
  o.insecure = true;
  EXPECT_TRUE(check_security_options(o, "S").ok());
  o = {};
  o.key_file = "k.key";
  EXPECT_TRUE(contains(check_security_options(o, "S").message(), "S.key_file needs S.cluster_keys_file"));
  o = {};
  o.cluster_keys_file = "c.keys";
  EXPECT_TRUE(contains(check_security_options(o, "S").message(), "S.cluster_keys_file needs S.key_file"));
  o.key_file = "k.key";
  o.insecure = true;
  EXPECT_EQ(check_security_options(o, "S").code(), ErrorCode::kInvalidArgument);
}

TEST(SecurityOptionsTest, LoopbackEndpoints) {
  EXPECT_TRUE(is_loopback_endpoint("tcp://127.0.0.1:2222"));
  EXPECT_TRUE(is_loopback_endpoint("tcp://127.1.2.3:0"));
  EXPECT_TRUE(is_loopback_endpoint("tcp://localhost:2222"));
  EXPECT_FALSE(is_loopback_endpoint("tcp://*:2222"));
  EXPECT_FALSE(is_loopback_endpoint("tcp://0.0.0.0:2222"));
  EXPECT_FALSE(is_loopback_endpoint("tcp://10.0.0.7:2222"));
  EXPECT_FALSE(is_loopback_endpoint("tcp://128.0.0.1:2222"));
}

// ---- RPC with CURVE ----

TEST(CurveRpcTest, AllowedClientIsServedIncludingALargeTensor) {
  const CurveKeyPair server_keys = fresh_keys(), client_keys = fresh_keys();
  auto server = RpcServer::start("tcp://127.0.0.1:0", echo, curve_server(server_keys, {client_keys.public_key}));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  RpcChannel channel(server.value()->endpoint(), curve_client(client_keys, server_keys.public_key));
  auto reply = channel.call_sync(message({"header", "payload"}), 5s);
  ASSERT_TRUE(reply.ok()) << reply.status().to_string();
  ASSERT_EQ(reply.value().frames.size(), 2u);
  EXPECT_EQ(reply.value().frames[1].to_string(), "payload");

  // 16 MiB of float32, encrypted both ways.
  const int64_t n = 4 * 1024 * 1024;
  std::vector<float> data(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) data[static_cast<std::size_t>(i)] = static_cast<float>(i % 65521);
  const Tensor t = Tensor::vector<float>(data);
  RpcMessage big;
  big.frames.push_back(string_frame("tensor"));
  big.frames.push_back(tensor_frame(t).value());
  auto big_reply = channel.call_sync(std::move(big), 20s);
  ASSERT_TRUE(big_reply.ok()) << big_reply.status().to_string();
  ASSERT_EQ(big_reply.value().frames.size(), 2u);
  auto back = frame_to_tensor(std::move(big_reply.value().frames[1]), DType::Float32, Shape{n});
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back.value().to_vector<float>(), data);
  EXPECT_EQ(server.value()->stats().refused, 0u);
  EXPECT_EQ(channel.stats().failed_handshakes, 0u);
}

TEST(CurveRpcTest, UnlistedClientFailsFastIsCountedAndLoggedAndOthersAreStillServed) {
  const CurveKeyPair server_keys = fresh_keys(), good_keys = fresh_keys(), bad_keys = fresh_keys();
  RpcServerOptions options = curve_server(server_keys, {good_keys.public_key});
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> refusals;
  options.on_refused = [&](const std::string& peer, const std::string& key) {
    std::lock_guard<std::mutex> l(mu);
    refusals.emplace_back(peer, key);
  };
  auto server = RpcServer::start("tcp://127.0.0.1:0", echo, options);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const std::string endpoint = server.value()->endpoint();

  ::testing::internal::CaptureStderr();
  std::optional<RpcChannel> bad;
  bad.emplace(endpoint, curve_client(bad_keys, server_keys.public_key));
  auto t0 = Clock::now();
  auto reply = bad->call_sync(message({"let me in"}), 10s);
  const auto took = Clock::now() - t0;
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), ErrorCode::kUnavailable) << reply.status().to_string();
  EXPECT_TRUE(contains(reply.status().message(), "authentication with " + endpoint + " failed")) << reply.status().message();
  EXPECT_TRUE(contains(reply.status().message(), "refused this client's key")) << reply.status().message();
  EXPECT_LT(took, 5s);  // not its 10 s deadline (a margin for loaded, sanitized runs)
  EXPECT_GE(bad->stats().failed_handshakes, 1u);

  // Later calls on that channel fail at once, the same way.
  t0 = Clock::now();
  auto again = bad->call_sync(message({"again"}), 10s);
  EXPECT_LT(Clock::now() - t0, 5s);  // not its deadline either
  EXPECT_EQ(again.status().code(), ErrorCode::kUnavailable);
  EXPECT_TRUE(contains(again.status().message(), "authentication")) << again.status().message();
  bad.reset();
  // Counted and logged (the log names the peer and the key).
  EXPECT_TRUE(tessera::testing::wait_until([&] { return server.value()->stats().refused >= 1; }, 5s));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(log, "tessera: refused a connection from 127.0.0.1: its key " + bad_keys.public_key +
                                " is not in the cluster's keys"))
      << log;
  {
    std::lock_guard<std::mutex> l(mu);
    ASSERT_FALSE(refusals.empty());
    EXPECT_EQ(refusals[0].first, "127.0.0.1");
    EXPECT_EQ(refusals[0].second, bad_keys.public_key);
  }

  // The allowed client is served all along.
  RpcChannel good(endpoint, curve_client(good_keys, server_keys.public_key));
  auto ok = good.call_sync(message({"hello"}), 5s);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok.value().frames[0].to_string(), "hello");
  EXPECT_EQ(server.value()->stats().requests, 1u);
}

TEST(CurveRpcTest, ClientWithoutKeysFailsAuthenticationFast) {
  const CurveKeyPair server_keys = fresh_keys();
  auto server = RpcServer::start("tcp://127.0.0.1:0", echo, curve_server(server_keys, {}));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  ::testing::internal::CaptureStderr();
  RpcChannel plain(server.value()->endpoint());
  const auto t0 = Clock::now();
  auto reply = plain.call_sync(message({"hello"}), 10s);
  EXPECT_LT(Clock::now() - t0, 5s);  // well before the 10 s deadline
  EXPECT_EQ(reply.status().code(), ErrorCode::kUnavailable) << reply.status().to_string();
  EXPECT_TRUE(contains(reply.status().message(), "authentication with " + server.value()->endpoint() + " failed"))
      << reply.status().message();
  EXPECT_TRUE(contains(reply.status().message(), "CURVE")) << reply.status().message();
  EXPECT_EQ(server.value()->stats().requests, 0u);
  // The server notices the mismatch only when it reads the client's greeting before the client
  // reads its own (and closes): when it does, it counts and logs it.
  server.value()->stop();
  const std::string log = ::testing::internal::GetCapturedStderr();
  if (server.value()->stats().refused > 0) {
    EXPECT_TRUE(contains(log, "does not use CURVE keys")) << log;
  }
}

TEST(CurveRpcTest, ClientWithTheWrongServerKeyOrAPlainServerFailsFast) {
  const CurveKeyPair server_keys = fresh_keys(), client_keys = fresh_keys(), impostor = fresh_keys();
  {
    auto server = RpcServer::start("tcp://127.0.0.1:0", echo, curve_server(server_keys, {client_keys.public_key}));
    ASSERT_TRUE(server.ok());
    ::testing::internal::CaptureStderr();
    RpcChannel channel(server.value()->endpoint(), curve_client(client_keys, impostor.public_key));
    const Status failed = expect_fast_authentication_failure(channel);
    EXPECT_TRUE(contains(failed.message(), "wrong key for the server")) << failed.message();
    server.value()->stop();
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(contains(log, "does not have this server's public key")) << log;
  }
  {
    auto plain = RpcServer::start("tcp://127.0.0.1:0", echo);
    ASSERT_TRUE(plain.ok());
    RpcChannel channel(plain.value()->endpoint(), curve_client(client_keys, server_keys.public_key));
    expect_fast_authentication_failure(channel).ignore();
    EXPECT_EQ(plain.value()->stats().requests, 0u);
  }
}

TEST(CurveRpcTest, RefusedChannelRecoversOnceTheServerAdmitsItsKey) {
  const CurveKeyPair server_keys = fresh_keys(), client_keys = fresh_keys();
  auto first = RpcServer::start("tcp://127.0.0.1:0", echo, curve_server(server_keys, {}));
  ASSERT_TRUE(first.ok());
  const std::string endpoint = first.value()->endpoint();
  ::testing::internal::CaptureStderr();
  RpcChannel channel(endpoint, curve_client(client_keys, server_keys.public_key));
  EXPECT_EQ(channel.call_sync(message({"hello"}), 5s).status().code(), ErrorCode::kUnavailable);
  first.value()->stop();
  (void)::testing::internal::GetCapturedStderr();
  // The same server key on the same port, now listing the client.
  std::unique_ptr<RpcServer> second;
  for (auto until = Clock::now() + 3s; !second && Clock::now() < until; std::this_thread::sleep_for(20ms)) {
    auto s = RpcServer::start(endpoint, echo, curve_server(server_keys, {client_keys.public_key}));
    if (s.ok()) second = std::move(s).value();
  }
  ASSERT_TRUE(second);
  // The channel connects again by itself (libzmq gives up after a refusal) and then serves.
  EXPECT_TRUE(tessera::testing::wait_until([&] { return channel.call_sync(message({"hi"}), 2s).ok(); }, 10s));
}

TEST(CurveRpcTest, MalformedKeysAreInvalidArgument) {
  const CurveKeyPair keys = fresh_keys();
  RpcServerOptions bad_server = curve_server(keys, {"not a key"});
  EXPECT_EQ(RpcServer::start("tcp://127.0.0.1:0", echo, bad_server).status().code(), ErrorCode::kInvalidArgument);
  bad_server = curve_server(CurveKeyPair{keys.public_key, "short"}, {});
  EXPECT_EQ(RpcServer::start("tcp://127.0.0.1:0", echo, bad_server).status().code(), ErrorCode::kInvalidArgument);
  // A CURVE server whose port is taken fails cleanly (its ZAP socket and monitor go with it).
  auto first = RpcServer::start("tcp://127.0.0.1:0", echo, curve_server(keys, {}));
  ASSERT_TRUE(first.ok());
  auto second = RpcServer::start(first.value()->endpoint(), echo, curve_server(keys, {}));
  EXPECT_EQ(second.status().code(), ErrorCode::kUnavailable) << second.status().to_string();
  RpcChannel channel("tcp://127.0.0.1:1", curve_client(keys, "nope"));
  auto reply = channel.call_sync(message({"x"}), 2s);
  EXPECT_EQ(reply.status().code(), ErrorCode::kInvalidArgument) << reply.status().to_string();
}

// ---- Clusters with keys ----

// Key files for the tasks at `addresses` and for clients `clients`, and a cluster keys file
// listing all of them (tasks by address, clients by name) except those in `unlisted`.
struct ClusterKeyFiles {
  TempDir dir;
  std::map<std::string, std::string> key_file;  // address or client name -> PREFIX.key
  std::map<std::string, CurveKeyPair> keys;
  std::string cluster_keys;

  ClusterKeyFiles(const std::vector<std::string>& addresses, const std::vector<std::string>& clients,
                  const std::vector<std::string>& unlisted = {}) {
    std::string text = "# test cluster\n";
    int n = 0;
    for (const auto& names : {addresses, clients}) {
      for (const std::string& name : names) {
        const std::string prefix = dir.file(std::string("k").append(std::to_string(n++)));
        keys[name] = keygen(prefix);
        key_file[name] = prefix + ".key";
        if (std::find(unlisted.begin(), unlisted.end(), name) == unlisted.end()) {
          text += keys[name].public_key + " " + name + "\n";
        }
      }
    }
    cluster_keys = dir.file("cluster.keys");
    write_text(cluster_keys, text);
  }
  SecurityOptions security(const std::string& who) const { return {key_file.at(who), cluster_keys, false}; }
};

ServerOptions secured(const ClusterKeyFiles& files, const std::string& address) {
  ServerOptions o;
  o.rpc_timeout = 3000ms;
  o.security = files.security(address);
  return o;
}

SessionOptions client(const ClusterKeyFiles& files, const std::string& name) {
  SessionOptions o;
  o.rpc_timeout = 5000ms;
  o.security = files.security(name);
  return o;
}

TEST(SecureClusterTest, SessionAcrossTwoTasksWithKeysAndARefusedClient) {
  const std::string a0 = loopback(), a1 = loopback();
  ClusterKeyFiles files({a0, a1}, {"alice", "mallory"}, /*unlisted=*/{"mallory"});
  ClusterSpec cluster({{"worker", {a0, a1}}});
  Server w0(cluster, "worker", 0, secured(files, a0));
  Server w1(cluster, "worker", 1, secured(files, a1));

  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{3}, "x");
  Output y;
  {
    auto scope = g.device("/job:worker/task:1");
    y = ops::mul(x, ops::constant(g, Tensor::scalar<float>(2)), "y");  // on task 1
  }
  auto z = ops::add(y, ops::constant(g, Tensor::scalar<float>(1)), "z");  // back on task 0
  {
    Session s(g, w0.target(), client(files, "alice"));
    EXPECT_EQ(s.run(z, {{x, Tensor::vector<float>({1, 2, 3})}}).to_vector<float>(), (std::vector<float>{3, 5, 7}));
  }

  // A client whose key is not listed: refused, fast, with the authentication message.
  ::testing::internal::CaptureStderr();
  const auto t0 = Clock::now();
  try {
    Session s(g, w0.target(), client(files, "mallory"));
    ADD_FAILURE() << "an unlisted client created a session";
  } catch (const UnavailableError& e) {
    EXPECT_TRUE(contains(e.what(), "authentication with tcp://" + a0 + " failed")) << e.what();
  }
  EXPECT_LT(Clock::now() - t0, 3500ms);  // before its 5 s rpc_timeout
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(log, "its key " + files.keys.at("mallory").public_key + " is not in the cluster's keys"))
      << log;

  // A client without keys at all.
  const auto t1 = Clock::now();
  SessionOptions plain;
  plain.rpc_timeout = 5000ms;
  EXPECT_THROW_MSG(Session(g, w0.target(), plain), UnavailableError, "authentication");
  EXPECT_LT(Clock::now() - t1, 3500ms);  // before its 5 s rpc_timeout

  // A client whose cluster keys do not list the target: a clear error before connecting.
  ClusterKeyFiles other({}, {"eve"});
  EXPECT_THROW_MSG(Session(g, w0.target(), client(other, "eve")), FailedPreconditionError, a0);
}

TEST(SecureClusterTest, TaskWithoutTheOtherTasksKeyFailsNamingItsAddress) {
  const std::string a0 = loopback(), a1 = loopback();
  ClusterKeyFiles files({a0, a1}, {"alice"});
  // Task 0's own cluster keys lack task 1.
  const std::string partial = files.dir.file("partial.keys");
  write_text(partial, files.keys.at(a0).public_key + " " + a0 + "\n" + files.keys.at("alice").public_key + " alice\n");
  ClusterSpec cluster({{"worker", {a0, a1}}});
  ServerOptions o0 = secured(files, a0);
  o0.security.cluster_keys_file = partial;
  Server w0(cluster, "worker", 0, o0);
  Server w1(cluster, "worker", 1, secured(files, a1));
  Graph g;
  Output remote;
  {
    auto scope = g.device("/job:worker/task:1");
    remote = ops::neg(ops::constant(g, Tensor::scalar<float>(3)), "remote");
  }
  auto local = ops::square(ops::constant(g, Tensor::scalar<float>(3)), "local");
  Session s(g, w0.target(), client(files, "alice"));
  EXPECT_EQ(s.run(local).scalar<float>(), 9.0f);
  EXPECT_THROW_MSG(s.run(remote), FailedPreconditionError, "has no key for it");
  try {
    s.run(remote);
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), a1)) << e.what();
  }
}

TEST(SecureClusterTest, TaskWhoseAddressIsListedWithAnotherKeyRefusesToStart) {
  const std::string a0 = loopback();
  ClusterKeyFiles files({a0, "impostor"}, {});
  ClusterSpec cluster({{"worker", {a0}}});
  ServerOptions o = secured(files, a0);
  o.security.key_file = files.key_file.at("impostor");
  EXPECT_THROW_MSG(Server(cluster, "worker", 0, o), InvalidArgumentError, "would refuse it");
}

TEST(SecureClusterTest, LocalServerWithKeys) {
  ClusterKeyFiles files({"server"}, {"alice"});
  ServerOptions o;
  o.security = files.security("server");
  Server server = Server::create_local_server(o);
  // The local server's address is not listed: the client lists it under the port it got.
  const std::string address = server.target().substr(std::string("tessera://").size());
  write_text(files.cluster_keys, read_text(files.cluster_keys) + files.keys.at("server").public_key + " " + address + "\n");
  Graph g;
  auto c = ops::add(ops::constant(g, Tensor::scalar<int32_t>(40)), ops::constant(g, Tensor::scalar<int32_t>(2)));
  Session s(g, server.target(), client(files, "alice"));
  EXPECT_EQ(s.run(c).scalar<int32_t>(), 42);
}

// ---- Secure by default ----

TEST(SecureByDefaultTest, NonLoopbackAddressNeedsKeysOrInsecure) {
  const std::string address = "0.0.0.0:" + std::to_string(tessera::train::free_loopback_port());
  ClusterSpec cluster({{"worker", {address}}});
  try {
    Server server(cluster, "worker", 0);
    ADD_FAILURE() << "served " << address << " without keys";
  } catch (const FailedPreconditionError& e) {
    EXPECT_TRUE(contains(e.what(), "/job:worker/task:0 will not serve " + address + " (tcp://0.0.0.0:")) << e.what();
    EXPECT_TRUE(contains(e.what(), "insecure")) << e.what();
    EXPECT_TRUE(contains(e.what(), "key_file")) << e.what();
  }
  // A host name binds every interface: the same.
  const std::string named = "tessera-test-host.invalid:" + std::to_string(tessera::train::free_loopback_port());
  EXPECT_THROW_MSG(Server(ClusterSpec({{"worker", {named}}}), "worker", 0), FailedPreconditionError,
                   "without authentication");

  ServerOptions insecure;
  insecure.security.insecure = true;
  std::optional<Server> server;
  ::testing::internal::CaptureStderr();
  for (int attempt = 0; attempt < 10 && !server; ++attempt) {
    try {
      server.emplace(ClusterSpec({{"worker", {"0.0.0.0:" + std::to_string(tessera::train::free_loopback_port())}}}), "worker", 0, insecure);
    } catch (const UnavailableError&) {  // the port was taken meanwhile
    }
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(server);
  EXPECT_TRUE(contains(log, "tessera: warning: /job:worker/task:0 serves 0.0.0.0:")) << log;
  EXPECT_TRUE(contains(log, "without authentication or encryption")) << log;
  server->stop();

  // Loopback needs neither, and says nothing.
  ::testing::internal::CaptureStderr();
  { Server local(ClusterSpec({{"worker", {loopback()}}}), "worker", 0); }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");

  // With keys a server serves every interface.
  const std::string wide = "0.0.0.0:" + std::to_string(tessera::train::free_loopback_port());
  ClusterKeyFiles files({wide}, {});
  EXPECT_NO_THROW(Server(ClusterSpec({{"worker", {wide}}}), "worker", 0, secured(files, wide)));
}

TEST(SecureByDefaultTest, BadSecurityOptionsAndKeyFilesAreTypedErrors) {
  ClusterSpec cluster({{"worker", {loopback()}}});
  ServerOptions o;
  o.security.key_file = "x.key";
  EXPECT_THROW_MSG(Server(cluster, "worker", 0, o, false), InvalidArgumentError, "cluster_keys_file");
  TempDir dir;
  o.security.key_file = dir.file("missing.key");
  o.security.cluster_keys_file = dir.file("missing.keys");
  EXPECT_THROW_MSG(Server(cluster, "worker", 0, o), NotFoundError, "missing.key");
  keygen(dir.file("open"));
  fs::permissions(dir.file("open.key"), fs::perms::group_read, fs::perm_options::add);
  o.security.key_file = dir.file("open.key");
  EXPECT_THROW_MSG(Server(cluster, "worker", 0, o), PermissionDeniedError, "chmod 600");
  SessionOptions s;
  s.security.cluster_keys_file = "c.keys";
  Graph g;
  EXPECT_THROW_MSG(Session(g, "tessera://127.0.0.1:1", s), InvalidArgumentError, "SessionOptions.security");
}

// ---- `tessera server --keys` ----

TEST(SecureServerProcessTest, ServesListedClientsAndLogsRefusals) {
  const std::string address = loopback();
  ClusterKeyFiles files({address}, {"alice", "mallory"}, {"mallory"});
  const std::string cluster_json = "{\"worker\": [\"" + address + "\"]}";
  std::unique_ptr<ChildProcess> child;
  for (int attempt = 0; attempt < 20 && !child; ++attempt) {
    child = std::make_unique<ChildProcess>(std::vector<std::string>{
        TESSERA_CLI_PATH, "server", "--cluster", cluster_json, "--job", "worker", "--task", "0", "--keys",
        files.key_file.at(address), "--cluster-keys", files.cluster_keys});
    auto line = child->read_line(60s);
    if (!line || !contains(*line, "listening on")) {
      child.reset();
      std::this_thread::sleep_for(100ms);
    }
  }
  ASSERT_TRUE(child) << "tessera server --keys did not start";
  Graph g;
  auto c = ops::mul(ops::constant(g, Tensor::scalar<int32_t>(6)), ops::constant(g, Tensor::scalar<int32_t>(7)));
  {
    Session s(g, "tessera://" + address, client(files, "alice"));
    EXPECT_EQ(s.run(c).scalar<int32_t>(), 42);
  }
  EXPECT_THROW_MSG(Session(g, "tessera://" + address, client(files, "mallory")), UnavailableError,
                   "authentication");
  child->signal(SIGTERM);
  EXPECT_EQ(child->wait_exit(10s), std::optional<int>(0));
  const std::string log = child->stderr_text();
  EXPECT_TRUE(contains(log, "tessera: refused a connection from 127.0.0.1: its key " +
                                files.keys.at("mallory").public_key + " is not in the cluster's keys"))
      << log;
}

}  // namespace
}  // namespace tessera::internal
