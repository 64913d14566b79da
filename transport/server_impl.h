// The inside of train::Server (include/tessera/server.h): the task's RPC server and the services
// it answers. Internal: transport/ and tests only. See Note [Server] in transport/server.cc.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/status.h"
#include "tessera/cluster.h"
#include "tessera/server.h"
#include "transport/rpc.h"

namespace tessera::internal {

// The ZeroMQ endpoint a task with address `address` ("host:port", validated by ClusterSpec) binds:
// an IPv4 literal binds itself ("tcp://10.0.0.7:2222"), "localhost" binds 127.0.0.1, any other host
// name every interface ("tcp://*:2222"). Unimplemented for an IPv6 address ("[::1]:2222");
// InvalidArgument for a string that is not host:port.
StatusOr<std::string> server_bind_endpoint(std::string_view address);

class Master;
class Worker;
struct Credentials;

// What the request handlers need; shared with them (an RpcServer may leave a slow handler running
// after stop(), so handlers never point into ServerImpl). The fields are set once; the services
// are thread-safe.
struct ServiceState {
  std::string job;
  int task = 0;
  std::string task_name;  // "/job:worker/task:1", for messages
  uint64_t max_tensor_bytes = 0;  // the cap on a tensor a peer sends (ServerOptions::max_tensor_bytes)
  std::shared_ptr<Worker> worker;
  std::shared_ptr<Master> master;
};

// The services of task (`job`, `task`) of `cluster`: a fresh worker and master, whose calls to
// the other tasks use `credentials` (transport/security.h) when given.
std::shared_ptr<ServiceState> make_services(const train::ClusterSpec& cluster, const std::string& job, int task,
                                            const train::ServerOptions& options,
                                            std::shared_ptr<const Credentials> credentials = nullptr);

// Handles one request (frame 0 a wire RequestHeader): GetStatus, or Unimplemented naming the
// method; a header that does not parse gets InvalidArgument (in a ResponseHeader when its request
// id can be read, else as the call's error). Never throws; replies exactly once.
void serve_request(const ServiceState& state, RpcMessage request, const Responder& respond);

// A task's server: its address in the cluster, and the RpcServer bound there while it serves.
// Thread-safe: start(), stop(), join() and the accessors may be called from any thread (stop() not
// from a request handler).
class ServerImpl {
 public:
  // Validates the task and options (InvalidArgumentError) and registers the default devices; binds
  // nothing.
  ServerImpl(train::ClusterSpec cluster, std::string job, int task, train::ServerOptions options);
  ~ServerImpl();  // stop()
  ServerImpl(const ServerImpl&) = delete;
  ServerImpl& operator=(const ServerImpl&) = delete;

  // create_local_server(): binds 127.0.0.1:0 first, then names the cluster after the port it got.
  static std::unique_ptr<ServerImpl> start_local(train::ServerOptions options);

  void start();  // the errors of Server::start(), raised
  void stop();
  void join();

  // With this task's port 0 in the cluster: the port bound, once started.
  std::string target() const;
  const train::ClusterSpec& cluster() const { return cluster_; }
  const std::string& job_name() const { return job_; }
  int task_index() const { return task_; }

 private:
  const train::ClusterSpec cluster_;  // as given (this task's port may be 0)
  // This task's "host:port": the cluster's, where port 0 becomes the port the first start() bound
  // (a restart binds that one again, so target() stays valid). Written by start() only, under
  // lifecycle_mu_ and address_mu_.
  mutable std::mutex address_mu_;
  std::string address_;  // guarded by address_mu_
  const train::ServerOptions options_;
  const std::string job_;
  const int task_;
  // Handlers find the services here; a restarted server gets fresh ones.
  struct StateSlot {
    std::mutex mu;
    std::shared_ptr<ServiceState> state;  // guarded by mu; null while not serving
  };
  std::shared_ptr<StateSlot> slot_ = std::make_shared<StateSlot>();  // replaced only by start_local

  // Held for the whole of start() and stop(), so they never interleave and a second stop() returns
  // when the first has finished.
  std::mutex lifecycle_mu_;
  std::unique_ptr<RpcServer> rpc_;  // guarded by lifecycle_mu_; null when not serving

  std::mutex serving_mu_;
  std::condition_variable serving_cv_;  // notified by stop()
  bool serving_ = false;                // guarded by serving_mu_
  uint64_t stops_ = 0;                  // guarded by serving_mu_: stop()s that stopped a server
};

}  // namespace tessera::internal
