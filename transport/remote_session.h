// The client side of Session(graph, "tessera://host:port"): the graph goes to the master of that
// task (CreateSession, then ExtendSession for nodes added later), and each run is one RunStep call
// carrying the feeds and bringing back the fetches. See Note [Master] in distributed/master_session.cc.
//
// Thread-safe: run() from any number of threads; close() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/session_factory.h"
#include "tessera/session.h"
#include "transport/rpc.h"

namespace tessera::internal {

// The session of targets "tessera://host:port" (and TensorFlow's "grpc://host:port", accepted as
// an alias), registered with SessionFactory for those prefixes.
class RemoteSession final : public SessionBackend {
 public:
  // Connects to the master at `target` and creates the session there. InvalidArgumentError for a
  // malformed target; UnavailableError when the master does not answer within options.rpc_timeout.
  RemoteSession(Graph& graph, const std::string& target, const SessionOptions& options);
  ~RemoteSession() override;  // close()

  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds,
                          const std::vector<Operation>& targets, const RunOptions& options,
                          RunMetadata* metadata) override;
  void close() override;
  Graph& graph() const override { return graph_; }

 private:
  // Sends the nodes added to the graph since the last call (under mu_).
  void extend_locked();

  Graph& graph_;  // Not owned.
  const std::string target_;
  const std::chrono::milliseconds rpc_timeout_;
  std::shared_ptr<RpcChannel> channel_;  // shared by the process's sessions on this master
  std::string handle_;

  std::mutex mu_;
  int sent_nodes_ = 0;          // guarded by mu_: nodes [0, sent_nodes_) are on the master
  uint64_t sent_version_ = 0;   // guarded by mu_: the graph's version() then
  std::vector<std::size_t> sent_controls_;  // guarded by mu_: per node sent, its control inputs then
  int64_t graph_version_ = 0;   // guarded by mu_: the master's
  std::atomic<bool> closed_{false};
};

}  // namespace tessera::internal
