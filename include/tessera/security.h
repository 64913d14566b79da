// Authenticated, encrypted clusters: ZeroMQ CURVE keys for train::Server (ServerOptions::security)
// and for the client side of a cluster Session (SessionOptions::security).
//
//   $ tessera keygen --out w0        # w0.key (this task's key pair, mode 0600) and w0.pub
//   $ cat cluster.keys               # every task's public key, labelled with its address
//   *C>zvf$X?4VbvY5J]MAnwV]j1i(.!Lx!=CTGH=[! w0:2222
//   c8t4)+}hR[5tqGMYBiW-&>s]R5:d!n(&Xg-jsqTI w1:2222
//   &XleMy9O0[h[R.bepGu]//v12qdU:FN<lqZ=sY%p alice          # a client (any label without ':')
//
//   train::ServerOptions o;
//   o.security.key_file = "w0.key";
//   o.security.cluster_keys_file = "cluster.keys";
//   train::Server server(cluster, "worker", 0, o);
//
// With a key file a server encrypts all its traffic and admits only the keys of the cluster keys
// file (the tasks' and the clients'); refused connections are logged on its stderr. Its calls to
// the other tasks use its key pair and check each task's server key against the line labelled
// with that task's address. Without one, a server serves only loopback addresses (127.0.0.0/8,
// localhost) unless `insecure` is set, and then says so on stderr.
#pragma once

#include <string>

namespace tessera::train {

struct SecurityOptions {
  // This process's key pair: the JSON file `tessera keygen --out PREFIX` writes as PREFIX.key
  // ({"public": Z85, "secret": Z85}). It must not be accessible by group or others (mode 0600).
  // Empty: no CURVE (plain TCP).
  std::string key_file;
  // The cluster's public keys, one `<Z85 public key> <label>` a line ('#' comments, blank lines):
  // a label "host:port" is the key the task at that address presents (clients check it, like
  // ssh's known_hosts); any other label names an allowed client (like authorized_keys). Every key
  // listed may connect. Needed with key_file, and only with it.
  std::string cluster_keys_file;
  // Servers only: serve an address other hosts can reach without keys (plain, unauthenticated
  // TCP), with a warning on stderr. Without keys and without this, such a server refuses to start.
  // Not with key_file.
  bool insecure = false;
};

// A CURVE key pair, both keys in Z85 (40 characters): what `tessera keygen` makes.
struct KeyPair {
  std::string public_key;
  std::string secret_key;
};

// A new key pair from the system's randomness. InternalError when libzmq has no CURVE support.
KeyPair generate_key_pair();

// Writes PREFIX.key ({"public": Z85, "secret": Z85}, mode 0600: what SecurityOptions::key_file
// reads) and PREFIX.pub (the public key and a newline). AlreadyExistsError naming the file when
// either exists and !overwrite (nothing is written then); NotFoundError, PermissionDeniedError or
// InternalError naming the file when it cannot be written.
void write_key_pair(const std::string& prefix, const KeyPair& keys, bool overwrite = false);

}  // namespace tessera::train
