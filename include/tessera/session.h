// Sessions run a graph: feeds in, fetches out, targets run for their effects.
//
//   tessera::Session s(g);
//   auto out = s.run({y, loss}, {{x, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2)}});
//   float l = out[1].scalar<float>();
//
// Multiple threads can call run concurrently on one Session. A run that fails (any typed Error)
// leaves the session usable. close() cancels the runs in flight (CancelledError) and makes later
// runs raise CancelledError. Session is move-only.
#pragma once

#include <chrono>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/graph.h"
#include "tessera/security.h"
#include "tessera/tensor.h"

namespace tessera {

using FeedMap = std::map<Output, Tensor>;

struct RunOptions {
  std::chrono::milliseconds timeout{0};  // 0 = no deadline; else DeadlineExceededError past it
  bool trace = false;                    // fill RunMetadata::trace_json
};

struct RunMetadata {
  std::string trace_json;  // Chrome trace-event JSON of the step when RunOptions::trace is set
};

// How the placement pass chooses a device for the ops no request or colocation pins:
//   cost       a cost model (FLOPs and bytes per op, per-device throughput, transfer cost per
//              edge) and list scheduling by earliest finish time; tiny ops stay on the host;
//   gpu_first  TensorFlow's rule: an accelerator whenever it has a kernel for the op (with
//              several GPUs, the one that finishes it first, so independent branches spread);
//   cpu_only   the host CPU (requests for accelerators are soft-placed there).
enum class PlacementPolicy { cost, gpu_first, cpu_only };

struct SessionOptions {
  bool log_device_placement = false;  // print the op -> device table (with cost estimates)
  bool allow_soft_placement = true;
  int inter_op_threads = 0;  // 0 = the process-wide pool, one thread per hardware thread
  PlacementPolicy placement_policy = PlacementPolicy::cost;
  // Lets float32 MatMuls on a GPU use TF32 tensor cores (10-bit mantissa products, float32
  // accumulation): several times faster, less exact. TensorFlow 1's default: off, full float32.
  // Nothing changes on the CPU.
  bool allow_tf32 = false;
  // Replays a step's device partition from a capture of its stream work where that is safe: a
  // CUDA graph on a GPU (one launch per step instead of one per op), one stream work item on the
  // simulated accelerator. Safe means: static shapes, no stateful op (variables, random ops,
  // queues) and no op that runs on the host or checks its result there (integer division) in the
  // partition. The first untraced step is captured, later steps replay; results are those of
  // eager execution. The capture keeps the memory of the partition's tensors for the session.
  bool cuda_graphs = true;
  // Fuses chains of ops that each pass over one large tensor into one kernel where nothing else
  // reads the values between them, as TF's Grappler remapper (RewriterConfig.remapping) does:
  // Conv2D + BiasAdd (+ Relu), MaxPoolGrad + ReluGrad, on the host CPU. Results are the same
  // bits; a trace shows the fused op under its parts' names joined by '+'.
  bool remapping = true;
  // Sessions on a cluster target: the deadline of each call to the master that should be quick
  // (creating, extending, closing the session). A run itself may take as long as it needs (bound
  // it with RunOptions::timeout); it fails with UnavailableError as soon as the connection to the
  // master is lost, or when no connection can be made within this time.
  std::chrono::milliseconds rpc_timeout{10000};
  // Sessions on a cluster target: busy polling on the client's channel to the master, as
  // train::ServerOptions::busy_poll does for a task's channels (a thread waiting for a step's reply
  // looks this long before it sleeps). 0 (default): off. Must be in [0, 10 ms]. Sessions on one
  // master share a channel only when their busy_poll is the same.
  std::chrono::microseconds busy_poll{0};
  // Sessions on a cluster target whose tasks use CURVE keys (include/tessera/security.h): this
  // client's key pair (key_file) and the cluster's keys, where the target's host:port names the
  // master's server key. `insecure` means nothing here.
  train::SecurityOptions security;
};

namespace internal {
class SessionBackend;
class CallableBackend;
}  // namespace internal

// A handle that runs one signature (fetches, feeds, targets) of a session, as TF's
// Session.make_callable: the feeds, fetches and targets are checked and the step's plan found
// when it is made, so a call only checks the values fed (their number, dtypes and shapes) and runs
// the step. Copyable (copies share the signature); safe from any number of threads; valid while
// its session lives and is open (a call on a closed session raises CancelledError). Ops added to
// the graph later are picked up as run() would.
class Callable {
 public:
  Callable() = default;
  explicit Callable(std::shared_ptr<internal::CallableBackend> impl) : impl_(std::move(impl)) {}
  // `feed_values[i]` feeds the i-th feed of the signature; returns the fetches' values.
  std::vector<Tensor> operator()(const std::vector<Tensor>& feed_values = {}) const;

 private:
  std::shared_ptr<internal::CallableBackend> impl_;
};

class Session {
 public:
  explicit Session(Graph& g, SessionOptions options = {});
  // `target` "" or "local": in this process, as above. "tessera://host:port" (a cluster task's
  // Server::target(); "grpc://host:port" is accepted too): a session on that task's master, whose
  // ops may be placed on every task of the cluster (see include/tessera/server.h).
  Session(Graph& g, const std::string& target, SessionOptions options = {});
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds = {},
                          const std::vector<Operation>& targets = {}, const RunOptions& options = {});
  std::vector<Tensor> run(std::initializer_list<Output> fetches, const FeedMap& feeds = {},
                          const std::vector<Operation>& targets = {}, const RunOptions& options = {});
  Tensor run(Output fetch, const FeedMap& feeds = {});
  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds,
                          const std::vector<Operation>& targets, const RunOptions& options,
                          RunMetadata* metadata);
  void run(Operation target, const FeedMap& feeds = {});

  // TF's make_callable: see Callable. The feeds must be distinct; errors as run() would raise.
  Callable make_callable(const std::vector<Output>& fetches, const std::vector<Output>& feeds = {},
                         const std::vector<Operation>& targets = {});

  void close();
  Graph& graph() const;

 private:
  // The session its target's factory made (core/session_factory.h): in-process or on a cluster.
  std::unique_ptr<internal::SessionBackend> impl_;
};

}  // namespace tessera
