// Note [Partitions]
// A step whose needed ops all run on the host is one plan over the graph's own nodes: nothing is
// copied and nothing crosses a device, which keeps the one-device fast path exactly as it was.
// Otherwise every needed node is copied into its device's partition (the copy keeps its name and
// attributes and points at the original through `origin`, whose kernel it shares), and every
// edge between partitions becomes a _Send in the producer's partition and a _Recv in the
// consumer's: one transfer per tensor per destination device, however many consumers it has
// there. Control edges cross the same way with a token tensor. Feeds and fetches live on the
// host: a feed is a _Feed node of the host partition (sent on to devices that consume it) and a
// fetch produced on a device is received into the host partition.
//
// A _Recv waits on the step's Rendezvous holding no thread (it is an async kernel), then moves
// the tensor into its partition's memory on the copy streams: host to device on the destination's
// host_to_device stream, device to host on the source's device_to_host stream, device to device
// through host memory. Both streams are separate from the compute streams, so copies overlap
// compute. Constants hoisted into a device partition are copied into device memory once, when the
// plan is built, instead of once per step.
#include "core/partition.h"

#include <future>
#include <map>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "core/rendezvous.h"
#include "core/tensor_buffer.h"

namespace tessera::internal {
namespace {

// Hands its input (a token for a control transfer) to the step's rendezvous.
class SendOp final : public OpKernel {
 public:
  SendOp(const Node& node, int key, bool control) : OpKernel(node), key_(key), control_(control) {}
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override {
    Tensor value = control_ ? Tensor::scalar<bool>(true) : ctx.input(0);
    Status s = ctx.rendezvous()->send(key_, std::move(value));
    if (!s.ok()) ctx.fail(s);
  }

 private:
  const int key_;
  const bool control_;
};

// Waits for the matching _Send, then brings the tensor into this partition's memory.
class RecvOp final : public OpKernel {
 public:
  // `src` and `dst`: the sending and receiving devices, nullptr = host.
  RecvOp(const Node& node, int key, bool control, Device* src, Device* dst)
      : OpKernel(node), key_(key), control_(control), src_(src), dst_(dst) {}
  bool is_async() const override { return true; }
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override {
    ctx.fail(errors::internal("_Recv runs asynchronously only"));
  }
  void compute_async(OpKernelContext& ctx, std::function<void()> done) override {
    ctx.rendezvous()->recv_async(key_, [this, &ctx, done = std::move(done)](const Status& s, Tensor t) mutable {
      if (!s.ok()) {
        ctx.fail(s);
        done();
        return;
      }
      deliver(ctx, std::move(t), std::move(done));
    });
  }

 private:
  using Done = std::function<void()>;

  void deliver(OpKernelContext& ctx, Tensor t, Done done) const {
    const std::string where = t.device();
    const bool on_host = where == kHostDeviceName;
    if (control_ || (dst_ == nullptr && on_host) || (dst_ != nullptr && where == dst_->name())) {
      ctx.set_output(0, std::move(t));
      done();
      return;
    }
    if (dst_ == nullptr) {  // device -> host
      to_host(ctx, std::move(t), std::move(done), nullptr);
    } else if (on_host) {  // host -> device
      to_device(ctx, std::move(t), std::move(done));
    } else {  // device -> device, through host memory
      to_host(ctx, std::move(t), std::move(done), dst_);
    }
  }

  // Copies `t` from src_ into host memory; then on to `then_to` when set.
  void to_host(OpKernelContext& ctx, Tensor t, Done done, Device* then_to) const {
    if (src_ == nullptr || t.device() != src_->name()) {
      ctx.fail(errors::internal("{}: received a tensor in {}, expected {}", node().debug_name(), t.device(),
                                src_ == nullptr ? std::string(kHostDeviceName) : src_->name()));
      done();
      return;
    }
    Stream& stream = src_->device_to_host_stream();
    const int64_t start = ctx.trace() != nullptr ? now_micros() : 0;
    src_->copy_to_host(t, stream, [this, &ctx, &stream, start, done = std::move(done), then_to](StatusOr<Tensor> r) mutable {
      ctx.trace_on_stream(*src_, stream, start, "copy");
      if (!r.ok()) {
        ctx.fail(r.status());
        done();
      } else if (then_to != nullptr) {
        to_device(ctx, std::move(r).value(), std::move(done));
      } else {
        ctx.set_output(0, std::move(r).value());
        done();
      }
    });
  }

  void to_device(OpKernelContext& ctx, Tensor t, Done done) const {
    Stream& stream = dst_->host_to_device_stream();
    const int64_t start = ctx.trace() != nullptr ? now_micros() : 0;
    dst_->copy_to_device(t, stream, [this, &ctx, &stream, start, done = std::move(done)](StatusOr<Tensor> r) {
      ctx.trace_on_stream(*dst_, stream, start, "copy");
      if (!r.ok()) {
        ctx.fail(r.status());
      } else {
        ctx.set_output(0, std::move(r).value());
      }
      done();
    });
  }

  const int key_;
  const bool control_;
  Device* const src_;
  Device* const dst_;
};

StatusOr<Tensor> copy_to_device_now(Device& device, const Tensor& t) {
  std::promise<StatusOr<Tensor>> result;
  auto ready = result.get_future();
  device.copy_to_device(t, device.host_to_device_stream(),
                        [&result](StatusOr<Tensor> r) { result.set_value(std::move(r)); });
  return ready.get();
}

std::string short_device_name(const Device* d) {
  return d == nullptr ? std::string("CPU:0") : fmt::format("{}:{}", d->type(), d->id());
}

}  // namespace

StatusOr<std::shared_ptr<const StepPlan>> build_step_plan(const GraphImpl& graph, const std::vector<Endpoint>& feeds,
                                                          const std::vector<Endpoint>& fetches,
                                                          const std::vector<const Node*>& targets,
                                                          const DeviceOf& device_of, const KernelFor& kernel_for) {
  auto step = std::make_shared<StepPlan>();
  const std::vector<const Node*> needed = prune_nodes(feeds, fetches, targets);

  // Partition 0 is the host; devices follow in order of first use.
  std::vector<Device*> part_device{nullptr};
  std::unordered_map<const Node*, int> part_of;
  for (const Node* n : needed) {
    Device* d = device_of(*n);
    int p = 0;
    while (p < static_cast<int>(part_device.size()) && part_device[p] != d) ++p;
    if (p == static_cast<int>(part_device.size())) part_device.push_back(d);
    part_of[n] = p;
  }
  if (part_device.size() == 1) {
    auto plan = build_plan(graph, feeds, fetches, targets, [&](const Node& n) { return kernel_for(n, nullptr); });
    if (!plan.ok()) return plan.status();
    step->host = std::move(plan).value();
    return std::shared_ptr<const StepPlan>(std::move(step));
  }

  const int num_parts = static_cast<int>(part_device.size());
  std::vector<std::vector<const Node*>> part_targets(num_parts);
  std::unordered_map<const Node*, OpKernel*> own_kernel;  // _Send/_Recv -> kernel
  int next_id = graph.num_nodes_locked();  // the session holds the graph's lock
  auto new_node = [&](std::string name, std::string type) {
    auto n = std::make_unique<Node>();
    n->graph = const_cast<GraphImpl*>(&graph);
    n->id = next_id++;
    n->name = std::move(name);
    n->type = std::move(type);
    Node* raw = n.get();
    step->nodes.push_back(std::move(n));
    return raw;
  };

  std::unordered_map<const Node*, Node*> copy_of;
  for (const Node* n : needed) {
    auto c = std::make_unique<Node>(*n);
    c->origin = n;
    c->inputs.clear();
    c->control_inputs.clear();
    copy_of[n] = c.get();
    step->nodes.push_back(std::move(c));
  }
  // Feeds become _Feed nodes of the host partition.
  auto fed_key = [](const Node* n, int index) { return (static_cast<uint64_t>(n->id) << 16) | index; };
  std::unordered_map<uint64_t, int> fed;
  std::vector<Endpoint> feed_eps;
  for (std::size_t i = 0; i < feeds.size(); ++i) {
    Node* f = new_node(fmt::format("_feed/{}", feeds[i].node->name), "_Feed");
    f->output_dtypes = {feeds[i].node->output_dtypes[feeds[i].index]};
    f->output_shapes = {feeds[i].node->output_shapes[feeds[i].index]};
    feed_eps.push_back({f, 0});
    fed[fed_key(feeds[i].node, feeds[i].index)] = static_cast<int>(i);
  }

  // One transfer per (source, destination partition).
  std::map<std::tuple<uint64_t, int, bool>, Endpoint> transfers;
  auto transfer = [&](uint64_t source_key, Endpoint local, int from, int to, const std::string& tensor,
                      bool control) -> Endpoint {
    const auto memo = std::make_tuple(source_key, to, control);
    auto it = transfers.find(memo);
    if (it != transfers.end()) return it->second;
    const int key = step->num_keys++;
    if (!control) step->num_transfers++;
    Node* send = new_node(fmt::format("_send/{}/to/{}", tensor, short_device_name(part_device[to])), "_Send");
    if (control) {
      send->control_inputs.push_back(local.node);
    } else {
      send->inputs.push_back(local);
    }
    Node* recv = new_node(fmt::format("_recv/{}/from/{}", tensor, short_device_name(part_device[from])), "_Recv");
    if (control) {
      recv->output_dtypes = {DType::Bool};
      recv->output_shapes = {Shape{}};
    } else {
      recv->output_dtypes = {local.node->output_dtypes[local.index]};
      recv->output_shapes = {local.node->output_shapes[local.index]};
    }
    step->kernels.push_back(std::make_unique<SendOp>(*send, key, control));
    own_kernel[send] = step->kernels.back().get();
    step->kernels.push_back(std::make_unique<RecvOp>(*recv, key, control, part_device[from], part_device[to]));
    own_kernel[recv] = step->kernels.back().get();
    part_of[send] = from;
    part_of[recv] = to;
    part_targets[from].push_back(send);
    Endpoint out{recv, 0};
    transfers.emplace(memo, out);
    return out;
  };
  // The endpoint that carries `e` (a graph endpoint) into partition `to`.
  auto endpoint_in = [&](const Endpoint& e, int to) -> Endpoint {
    auto f = fed.find(fed_key(e.node, e.index));
    const std::string tensor = fmt::format("{}:{}", e.node->name, e.index);
    if (f != fed.end()) {
      const Endpoint local = feed_eps[f->second];
      return to == 0 ? local : transfer(fed_key(local.node, 0), local, 0, to, tensor, false);
    }
    const int from = part_of.at(e.node);
    const Endpoint local{copy_of.at(e.node), e.index};
    return from == to ? local : transfer(fed_key(local.node, e.index), local, from, to, tensor, false);
  };

  for (const Node* n : needed) {
    Node* c = copy_of[n];
    const int to = part_of[n];
    for (const auto& in : n->inputs) c->inputs.push_back(endpoint_in(in, to));
    for (const Node* dep : n->control_inputs) {
      const int from = part_of.at(dep);
      Node* local = copy_of.at(dep);
      c->control_inputs.push_back(
          from == to ? local : transfer(fed_key(local, 0), {local, 0}, from, to, dep->name, true).node);
    }
  }
  std::vector<Endpoint> host_fetches;
  for (const auto& f : fetches) host_fetches.push_back(endpoint_in(f, 0));
  for (const Node* t : targets) part_targets[part_of.at(t)].push_back(copy_of.at(t));

  // Constants hoisted into a device partition live in device memory.
  for (const Node* n : needed) {
    Device* d = part_device[part_of[n]];
    if (d == nullptr || n->type != "Const") continue;
    auto on_device = copy_to_device_now(*d, n->attr<Tensor>("value"));
    if (!on_device.ok()) return on_device.status().with_prefix(n->debug_name() + ": ");
    copy_of[n]->attrs["value"] = std::move(on_device).value();
  }

  for (int p = 0; p < num_parts; ++p) {
    auto make_kernel = [&, p](const Node& n) -> StatusOr<OpKernel*> {
      auto own = own_kernel.find(&n);
      if (own != own_kernel.end()) return own->second;
      return kernel_for(n.origin != nullptr ? *n.origin : n, part_device[p]);
    };
    auto plan = p == 0 ? build_plan(graph, feed_eps, host_fetches, part_targets[0], make_kernel)
                       : build_plan(graph, {}, {}, part_targets[p], make_kernel);
    if (!plan.ok()) return plan.status();
    if (p == 0) {
      step->host = std::move(plan).value();
    } else {
      step->devices.push_back({part_device[p], std::move(plan).value()});
    }
  }
  return std::shared_ptr<const StepPlan>(std::move(step));
}

}  // namespace tessera::internal
