// CURVE key files for clusters (include/tessera/security.h): key pairs (`tessera keygen`), the
// cluster keys file, and the RPC settings a server, a task's channels and a client derive from
// them. Internal: transport/, tools/ and tests.
//
//   auto keys = generate_curve_key_pair().value();
//   write_key_pair_files("w0", keys, /*force=*/false);       // w0.key (0600), w0.pub
//   auto mine = load_key_pair("w0.key").value();
//   auto cluster = load_cluster_keys("cluster.keys").value();
//   cluster.server_key("w1:2222");                            // the key task w1 presents, or null
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "core/status.h"
#include "tessera/security.h"
#include "transport/rpc.h"

namespace tessera::internal {

// A CURVE key pair, Z85 encoded (40 characters each).
struct CurveKeyPair {
  std::string public_key;
  std::string secret_key;
};

// True for the 40-character Z85 text of a 32-byte key.
bool is_z85_key(std::string_view key);

// A fresh key pair (zmq_curve_keypair). Unimplemented when libzmq was built without CURVE.
StatusOr<CurveKeyPair> generate_curve_key_pair();

// Writes PREFIX.key ({"public": Z85, "secret": Z85}, mode 0600) and PREFIX.pub (the public key and a
// newline). AlreadyExists naming the file when either exists and !force (nothing is written);
// NotFound / PermissionDenied / Internal naming the file when it cannot be written.
Status write_key_pair_files(const std::string& prefix, const CurveKeyPair& keys, bool force);

// Reads a key pair file. NotFound when it does not exist; PermissionDenied when it cannot be read
// or when group or others have any access to it (it holds a secret: chmod 600); InvalidArgument
// naming the file and what is wrong (not JSON, a key missing or not Z85, a public key that is not
// the secret key's).
StatusOr<CurveKeyPair> load_key_pair(const std::string& path);

// A cluster keys file: `<Z85 public key> <label>` a line, '#' comments (a whole line, or after the
// label), blank lines. A label with ':' is a task address "host:port" and names the key the server
// there presents; any other label names a client. Every key listed is allowed to connect.
struct ClusterKeys {
  std::string file;
  std::map<std::string, std::string> server_keys;  // "host:port" -> Z85 key
  std::set<std::string> keys;                      // every key listed (Z85)

  // The key of the server at `address` ("host:port"); "localhost" and "127.0.0.1" name the same
  // host. Null when the file lists none.
  const std::string* server_key(const std::string& address) const;
};

// NotFound when the file does not exist; InvalidArgument naming the file and the line for every
// malformed line (and for a file that lists no key, or an address listed with two keys).
StatusOr<ClusterKeys> load_cluster_keys(const std::string& path);

// The key pair and the cluster's keys a server, a task's channels or a client use.
struct Credentials {
  CurveKeyPair own;
  ClusterKeys cluster;
};

// Checks that `options` are consistent (key_file and cluster_keys_file together; not with
// insecure): InvalidArgument whose message starts with `what` ("ServerOptions.security").
Status check_security_options(const train::SecurityOptions& options, std::string_view what);
// Loads the files `options` name; null when they name none (no CURVE). The errors of
// check_security_options, load_key_pair and load_cluster_keys.
StatusOr<std::shared_ptr<const Credentials>> load_credentials(const train::SecurityOptions& options,
                                                               std::string_view what);

// The CURVE settings of a channel to the server at `address` ("host:port"). FailedPrecondition
// naming the address and the file when the cluster keys list no key for it.
StatusOr<RpcChannelOptions::Curve> channel_curve(const Credentials& credentials, const std::string& address);
// The CURVE settings of a server: its key pair; every key of the cluster (and its own) allowed.
RpcServerOptions::Curve server_curve(const Credentials& credentials);

// Whether a ZeroMQ bind endpoint ("tcp://127.0.0.1:2222", "tcp://*:2222") is reachable only from
// this machine: 127.0.0.0/8 (and "localhost"). "*" and every other address are not.
bool is_loopback_endpoint(std::string_view endpoint);

}  // namespace tessera::internal
