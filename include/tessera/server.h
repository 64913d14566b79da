// A task of a cluster: the process that serves one (job, task index) of a ClusterSpec (tessera::train).
//
//   // On each machine (or `tessera server --cluster FILE --job worker --task 1`):
//   train::ClusterSpec cluster({{"ps", {"ps0:2222"}}, {"worker", {"w0:2222", "w1:2222"}}});
//   train::Server server(cluster, "worker", 1);   // binds w1's port, serves until stopped
//   server.target();                              // "tessera://w1:2222"
//   server.join();                                // until another thread (or a signal) calls stop()
//
//   // In tests and single-process programs: one task on a free loopback port.
//   auto local = train::Server::create_local_server();
//   local.target();                               // "tessera://127.0.0.1:40123"
//
// A server answers its peers' calls over ZeroMQ (transport/rpc.h) in tessera's wire format
// (distributed/wire.proto). It is both
//   * a master: Session(graph, server.target()) creates a session there; the master places the
//     graph's ops over the devices of every task the graph names (ops with no job in their device
//     request run on the master's own task), splits each step by task, and runs the pieces on the
//     tasks' workers (Note [Master] in distributed/master_session.cc);
//   * a worker: it runs the pieces masters register with it and exchanges the tensors that cross
//     tasks directly with the other tasks' workers (Note [Worker] in distributed/worker.cc).
// Variables and queues live on the task their ops are placed on, in one set per task shared by
// every session and client (between-graph replication), and outlive the sessions. A task that is
// down, dies or hangs makes the runs that need it fail with UnavailableError naming it (as soon
// as its connection drops, or after rpc_timeout when it cannot be reached at all); runs that do
// not need it are unaffected. After a task restarts, open a new session to use it. A master that
// dies, hangs or is cut off takes the steps it started on other tasks with it (a dequeue blocked on
// a worker's queue ends there: at once for a killed process, within the 3 s heartbeat timeout
// otherwise), so they take nothing meant for live clients.
// Threads and what stop() guarantees: Note [Server]; keys and signals: Note [Server security
// and signals] (both in transport/server.cc).
//
// A Server is move-only (a moved-from Server is inert: stop() and join() do nothing, the other
// calls raise FailedPreconditionError). start(), stop(), join() and the accessors may be called from
// any thread concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/cluster.h"
#include "tessera/security.h"

namespace tessera::internal {
class ServerImpl;
}  // namespace tessera::internal

namespace tessera::train {

struct ServerOptions {
  // Deadline of each call this server makes to another task (the master and worker services use
  // it): a task that does not answer within it is reported Unavailable. Must be > 0.
  std::chrono::milliseconds rpc_timeout{10000};
  // Threads running request handlers. 0 runs them on the server's I/O thread (only for handlers
  // that never block). Must be >= 0.
  int handler_threads = 4;
  // Largest request accepted, in bytes (one frame and all frames together): a larger frame drops
  // the sender's connection before anything is allocated, a larger request is refused with
  // ResourceExhausted. -1: no limit; otherwise must be > 0.
  int64_t max_message_bytes = 1LL << 32;
  // Largest tensor accepted from another task or a client (a feed, a tensor pulled from a peer, a
  // fetch returned by a worker), in bytes: larger ones are refused with ResourceExhaustedError
  // naming the size, checked against the metadata before anything is allocated. Must be > 0.
  int64_t max_tensor_bytes = 1LL << 32;
  // Most frames one request may have (a RunStep carries one per tensor): the rest of a larger
  // request is dropped as it arrives and the call refused with ResourceExhaustedError, so a request
  // of millions of empty frames costs no more memory than this many. Must be > 0.
  int64_t max_frames_per_request = 65536;
  // Most nodes a session's graph (master) or a registered partition (worker) may have: a larger
  // CreateSession, ExtendSession or RegisterGraph is refused with ResourceExhaustedError naming the
  // limit, before its nodes are built. Must be > 0.
  int64_t max_graph_nodes = 1'000'000;
  // How long a session on this master may go without a RunStep or ExtendSession before it is
  // closed as CloseSession would close it (its partitions dropped on every task): the sessions of a
  // client that vanished without closing them. A session with a call in flight (a run blocked on a
  // queue for hours) is never closed; its clock restarts when its last call ends. Later calls naming
  // a closed session fail with AbortedError saying so (CloseSession succeeds). 0: never. Must be
  // >= 0.
  std::chrono::milliseconds session_idle_timeout{3'600'000};
  // How long the other tasks keep the partitions this master registered with them once they stop
  // hearing from it: while a session is open the master renews their lease every
  // partition_lease / 4, so a master that died or is cut off between steps leaves nothing behind
  // on its workers past this. A master cut off for longer finds its partitions gone: its session's
  // next run fails with AbortedError (a MonitoredTrainingSession makes a new session). 0: kept
  // until the session closes. Must be 0 or >= 100 ms.
  std::chrono::milliseconds partition_lease{60'000};
  // Most sessions open on this master at once: CreateSession past it fails with
  // ResourceExhaustedError naming the limit, and closing (or the idle timeout's closing) a session
  // frees a slot. Must be > 0.
  int64_t max_sessions = 10'000;
  // How long a tensor pull from another task (RecvTensor) for a step that has not started on this
  // task waits for it to start before it fails with UnavailableError: a pull for a step that never
  // comes (bogus, or of a master that died) holds memory no longer than this. A real step's pulls
  // wait milliseconds (its master starts every task's part at once), and once the step has started
  // here they wait as long as its producers need. Must be > 0.
  std::chrono::milliseconds step_start_timeout{60'000};
  // Busy polling: after receiving requests, the server's I/O thread keeps looking for more this
  // long (yielding its core between looks) before it sleeps, so that a task sending many small
  // calls (gradients of small layers) does not pay a wake-up per call. The task's own channels to
  // the other tasks do the same for replies: after completing calls while others still wait, their
  // I/O thread looks this long before it sleeps, and a thread waiting for its reply looks this long
  // before it sleeps. Costs up to this much CPU after each burst; beside more busy processes than
  // cores it slows them. 0 (default): off. Must be in [0, 10 ms].
  std::chrono::microseconds busy_poll{0};
  // CURVE keys (include/tessera/security.h): with security.key_file the server encrypts its
  // traffic and admits only the keys of security.cluster_keys_file. Without it, start() refuses an
  // address other hosts can reach (FailedPreconditionError) unless security.insecure is set.
  SecurityOptions security;
};

class Server {
 public:
  // The server of task `task_index` of job `job_name` in `cluster`, bound to that task's address
  // (see start()) unless `start` is false. InvalidArgumentError naming the job or task when the
  // cluster has no such task, or for invalid options; what start() raises when started here.
  // Registers this process's default devices first (an InvalidArgumentError when the environment
  // asks for a malformed set, as `tessera devices` reports).
  Server(ClusterSpec cluster, std::string job_name, int task_index, ServerOptions options = {},
         bool start = true);
  // A started server for the one-task cluster {"localhost": ["127.0.0.1:PORT"]}, PORT chosen by the
  // operating system. UnavailableError when no port can be bound.
  static Server create_local_server(ServerOptions options = {});

  ~Server();  // stop()
  Server(Server&&) noexcept;
  Server& operator=(Server&&) noexcept;  // stops the server assigned over
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds this task's address and starts serving; nothing if already serving. The host of the
  // address decides the interface: an IPv4 literal binds that address, "localhost" 127.0.0.1, and a
  // host name every interface ("*"), since a name may resolve to an address other interfaces
  // carry. Port 0 binds a free port, which target() then reports and a restart binds again; this
  // server's master reaches its own task there (other tasks cannot: they know only port 0). UnavailableError naming the address when it cannot be bound (port in use, or not an
  // address of this machine); UnimplementedError for IPv6 addresses. Security: the key files are
  // read here (NotFoundError, InvalidArgumentError naming the file and what is wrong,
  // PermissionDeniedError for a key file others can read); FailedPreconditionError for an address
  // other than loopback without keys and without security.insecure. A stopped server may be
  // started again (and reads the key files again).
  void start();
  // Stops serving: sessions on this master are closed (their runs in flight fail with
  // CancelledError), runs of this worker are cancelled, then the port is closed (it can be bound
  // again when this returns) and no new request is handled. Returns promptly (about a second at
  // most); idempotent; also done by the destructor. Not from inside a request handler. Variables
  // of this task are lost: a restarted server starts empty.
  void stop();
  // Blocks until the server is not serving: returns at once when it was never started or is
  // stopped, else when stop() is called from another thread.
  void join();

  // "tessera://HOST:PORT" with this task's address as the cluster gives it; with port 0 there,
  // the port bound once started ("tessera://localhost:0" before).
  std::string target() const;
  const ClusterSpec& cluster() const;  // as given (a port 0 stays 0 here)
  const std::string& job_name() const;
  int task_index() const;

 private:
  explicit Server(std::unique_ptr<tessera::internal::ServerImpl> impl);
  tessera::internal::ServerImpl& impl() const;  // FailedPreconditionError when moved from

  std::unique_ptr<tessera::internal::ServerImpl> impl_;
};

// Call first in main() of a program whose job is serving a task (one that starts a Server and
// joins it; `tessera server` does), before it starts threads. On glibc it re-executes the program
// (same pid and arguments) with glibc's per-thread cache of freed blocks turned off
// (GLIBC_TUNABLES=glibc.malloc.tcache_count=0 added to the environment), so that what a burst of
// requests took, such as the sessions and runs of clients that vanished, goes back to the system
// once freed (the server's resident memory after such a burst: +1-3% of idle with it, +11-16%
// without). It returns, doing nothing, only where it does not apply, saying why: not glibc, a
// sanitizer build, TESSERA_MALLOC_TUNING=0, malloc settings of the user's own (MALLOC_ARENA_MAX,
// a glibc.malloc tunable of the same), already in effect ("in effect"), or the exec failed (the
// reason then starts "exec ": /proc not mounted, say).
std::string apply_server_malloc_settings(char** argv);

}  // namespace tessera::train
