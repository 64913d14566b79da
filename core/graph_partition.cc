// Note [Graph partition]
// ~~~~~~~~~~~~~~~~~~~~~~
// Every needed node is copied into the partition of its device (the copy keeps its name, attrs and
// device request, points at the original through `origin`, and has its edges rewired), and every
// edge between partitions becomes a _Send in the producer's partition and a _Recv in the
// consumer's: one transfer per tensor per destination partition, however many consumers it has
// there. A control edge crosses the same way with a bool token. Each pair has a dense slot (what an
// in-process step's LocalRendezvous is indexed by) and a name, "send_device;recv_device;tensor"
// (what a cluster step's rendezvous keys the exchange between tasks by; see RendezvousKey).
//
// Feeds and fetches. In process, the client is the host partition: each feed is a Placeholder
// there, sent on to the partitions that consume it, and every fetch is received into it. A master
// has no partition of its own: it feeds each task the fed tensors that task consumes (a
// Placeholder per feed per task) and collects each fetch from the task that produces it.
//
// The same code partitions twice in a cluster: the master by task (a partition is a task, whose
// transfers are named by its CPU), then each task's worker its share by device. A _Send or _Recv
// of the first kind is an ordinary graph node to the second, placed on the task's CPU (the ops are
// host-only), so a tensor bound for another task leaves a GPU through the task's own _Send/_Recv.
#include "core/graph_partition.h"

#include <map>
#include <tuple>
#include <unordered_set>

#include <fmt/format.h>

#include "core/device_name.h"

namespace tessera::internal {
namespace {

// A name part without ':' (node names cannot hold one): "ps_0" for "/job:ps/replica:0/task:0",
// "localhost_0_SIM_1" for a device in full.
std::string partition_tag(const std::string& partition) {
  auto spec = DeviceSpec::parse(partition);
  if (!spec.ok()) return partition;
  std::string tag;
  auto add = [&tag](const std::string& part) { tag += (tag.empty() ? "" : "_") + part; };
  if (spec.value().job) add(*spec.value().job);
  if (spec.value().task) add(std::to_string(*spec.value().task));
  if (spec.value().type) add(*spec.value().type);
  if (spec.value().id) add(std::to_string(*spec.value().id));
  return tag.empty() ? std::string("partition") : tag;
}

}  // namespace

std::unordered_map<const Node*, const Node*> append_loop_nodes(std::vector<const Node*>* nodes) {
  std::unordered_map<const Node*, const Node*> loop_of;  // an appended node -> the While running it
  bool any = false;
  for (const Node* n : *nodes) any = any || n->loop != nullptr;
  if (!any) return loop_of;
  std::unordered_set<const Node*> in_step(nodes->begin(), nodes->end());
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    const Node* w = (*nodes)[i];
    if (w->loop == nullptr) continue;
    auto outer = loop_of.find(w);
    const Node* owner = outer != loop_of.end() ? outer->second : w;
    for (const Node* f : w->loop->nodes) {
      if (in_step.insert(f).second) {
        loop_of.emplace(f, owner);
        nodes->push_back(f);
      }
    }
  }
  return loop_of;
}

StatusOr<PartitionedStep> partition_step(const GraphImpl& graph, const std::vector<const Node*>& step_nodes,
                                         const std::vector<Endpoint>& feeds, const std::vector<Endpoint>& fetches,
                                         const std::vector<const Node*>& targets, const PartitionOptions& options) {
  // A While's loop comes along into its partition (Note [While loops] in core/while_ops.cc): a
  // task's worker runs the loop's nodes as steps of their own, so they must be in its graph. They
  // are in no plan of this step (nothing outside the loop reads them).
  std::vector<const Node*> needed = step_nodes;
  const std::unordered_map<const Node*, const Node*> loop_of = append_loop_nodes(&needed);
  PartitionedStep step;
  auto transfer_device = [&](int p) {
    const std::string& name = step.partitions[static_cast<std::size_t>(p)].name;
    return options.transfer_device ? options.transfer_device(name) : name;
  };
  std::unordered_map<std::string, int> index_of_partition;
  auto partition_index = [&](const std::string& name) {
    auto [it, fresh] = index_of_partition.emplace(name, static_cast<int>(step.partitions.size()));
    if (fresh) step.partitions.push_back(GraphPartition{name, {}, {}, {}, {}, {}});
    return it->second;
  };
  const bool has_client = !options.client_partition.empty();
  const int client = has_client ? partition_index(options.client_partition) : -1;

  std::unordered_map<const Node*, int> part_of;
  std::unordered_map<const Node*, Node*> copy_of;
  for (const Node* n : needed) {
    auto owner = loop_of.find(n);
    part_of[n] = owner != loop_of.end() ? part_of.at(owner->second)
                                        : partition_index(options.partition_of(options.device_of(*n)));
    auto c = std::make_unique<Node>(*n);
    c->origin = n;
    c->inputs.clear();
    c->control_inputs.clear();
    copy_of[n] = c.get();
    step.partitions[static_cast<std::size_t>(part_of[n])].nodes.push_back(c.get());
    step.nodes.push_back(std::move(c));
  }
  // A copy's resource and colocation refer to copies in its partition (what encoding one needs).
  for (const Node* n : needed) {
    Node* c = copy_of[n];
    auto r = c->resource != nullptr ? copy_of.find(c->resource) : copy_of.end();
    if (r != copy_of.end() && part_of[r->first] == part_of[n]) c->resource = r->second;
    std::vector<Node*> colocated;
    for (Node* w : c->colocate_with) {
      auto it = copy_of.find(w);
      if (it != copy_of.end() && part_of[w] == part_of[n]) colocated.push_back(it->second);
    }
    c->colocate_with = std::move(colocated);
  }

  int next_id = graph.num_nodes_locked();
  auto new_node = [&](int p, std::string name, std::string type) {
    auto n = std::make_unique<Node>();
    n->graph = const_cast<GraphImpl*>(&graph);
    n->id = next_id++;
    n->name = std::move(name);
    n->type = std::move(type);
    n->requested_device = transfer_device(p);
    Node* raw = n.get();
    step.partitions[static_cast<std::size_t>(p)].nodes.push_back(raw);
    step.nodes.push_back(std::move(n));
    return raw;
  };

  // Feeds: a Placeholder per (feed, partition that takes it), made when first needed.
  std::unordered_map<uint64_t, int> fed;
  for (std::size_t i = 0; i < feeds.size(); ++i) fed[endpoint_key(feeds[i])] = static_cast<int>(i);
  std::map<std::pair<int, int>, Endpoint> feed_nodes;
  auto feed_in = [&](int i, int p) -> Endpoint {
    auto it = feed_nodes.find({i, p});
    if (it != feed_nodes.end()) return it->second;
    const Endpoint& f = feeds[static_cast<std::size_t>(i)];
    Node* ph = new_node(p, fmt::format("_feed/{}_{}", f.node->name, f.index), "Placeholder");
    ph->output_dtypes = {f.node->output_dtypes[f.index]};
    ph->output_shapes = {f.node->output_shapes[f.index]};
    ph->attrs["dtype"] = ph->output_dtypes[0];
    ph->attrs["shape"] = ph->output_shapes[0];
    GraphPartition& part = step.partitions[static_cast<std::size_t>(p)];
    part.feeds.push_back({ph, 0});
    part.feed_index.push_back(i);
    return feed_nodes.emplace(std::make_pair(i, p), Endpoint{ph, 0}).first->second;
  };
  if (has_client) {
    for (int i = 0; i < static_cast<int>(feeds.size()); ++i) feed_in(i, client);  // in step order
  }

  // One transfer per (source, destination partition, data or control).
  std::map<std::tuple<const Node*, int, int, bool>, Endpoint> transfers;
  auto transfer = [&](Endpoint local, int from, int to, const std::string& tensor, bool control) -> Endpoint {
    const auto memo = std::make_tuple(local.node, local.index, to, control);
    auto it = transfers.find(memo);
    if (it != transfers.end()) return it->second;
    const int slot = step.num_slots++;
    if (!control) step.num_transfers++;
    const std::string tag = control ? local.node->name : fmt::format("{}_{}", local.node->name, local.index);
    const std::string send_device = transfer_device(from), recv_device = transfer_device(to);
    Node* send = new_node(from, fmt::format("{}/{}/to/{}", control ? "_csend" : "_send", tag,
                                            partition_tag(step.partitions[static_cast<std::size_t>(to)].name)),
                          kSendOp);
    Node* recv = new_node(to, fmt::format("{}/{}/from/{}", control ? "_crecv" : "_recv", tag,
                                          partition_tag(step.partitions[static_cast<std::size_t>(from)].name)),
                          kRecvOp);
    for (Node* n : {send, recv}) {
      n->attrs["tensor_name"] = tensor;
      n->attrs["send_device"] = send_device;
      n->attrs["recv_device"] = recv_device;
      step.slot_of[n] = slot;
    }
    if (control) {
      send->control_inputs.push_back(local.node);
      recv->output_dtypes = {DType::Bool};
      recv->output_shapes = {Shape{}};
    } else {
      send->inputs.push_back(local);
      recv->output_dtypes = {local.node->output_dtypes[local.index]};
      recv->output_shapes = {local.node->output_shapes[local.index]};
    }
    recv->attrs["dtype"] = recv->output_dtypes[0];
    recv->attrs["shape"] = recv->output_shapes[0];
    // What a graph with a cond sends may be dead (Note [Dead tensors] in executor.cc): a task that
    // receives the partition learns it from this attr, its graph having no Switch of its own.
    if (graph.has_control_flow()) recv->attrs["may_be_dead"] = true;
    step.partitions[static_cast<std::size_t>(from)].targets.push_back(send);
    return transfers.emplace(memo, Endpoint{recv, 0}).first->second;
  };
  // The endpoint that carries `e` (a graph endpoint) into partition `to`.
  auto endpoint_in = [&](const Endpoint& e, int to) -> StatusOr<Endpoint> {
    const std::string tensor = fmt::format("{}:{}", e.node->name, e.index);
    auto f = fed.find(endpoint_key(e));
    if (f != fed.end()) {
      if (!has_client) return feed_in(f->second, to);
      const Endpoint local = feed_in(f->second, client);
      return to == client ? local : transfer(local, client, to, tensor, false);
    }
    auto from = part_of.find(e.node);
    if (from == part_of.end()) {
      return errors::internal("partition: '{}' is consumed but not among the step's nodes", tensor);
    }
    const Endpoint local{copy_of.at(e.node), e.index};
    return from->second == to ? local : transfer(local, from->second, to, tensor, false);
  };

  for (const Node* n : needed) {
    Node* c = copy_of[n];
    const int to = part_of[n];
    for (const Endpoint& in : n->inputs) {
      auto ep = endpoint_in(in, to);
      if (!ep.ok()) return ep.status().with_prefix(n->debug_name() + ": ");
      c->inputs.push_back(ep.value());
    }
    for (const Node* dep : n->control_inputs) {
      auto from = part_of.find(dep);
      if (from == part_of.end()) {
        return errors::internal("partition: {}: control input '{}' is not among the step's nodes", n->debug_name(),
                                dep->name);
      }
      Node* local = copy_of.at(dep);
      c->control_inputs.push_back(from->second == to ? local
                                                      : transfer({local, 0}, from->second, to, "^" + dep->name, true).node);
    }
  }
  for (const Endpoint& f : fetches) {
    if (has_client) {
      auto ep = endpoint_in(f, client);
      if (!ep.ok()) return ep.status();
      GraphPartition& c = step.partitions[static_cast<std::size_t>(client)];
      step.fetch_from.emplace_back(client, static_cast<int>(c.fetches.size()));
      c.fetches.push_back(ep.value());
      continue;
    }
    auto fi = fed.find(endpoint_key(f));
    if (fi != fed.end()) {
      step.fetch_from.emplace_back(-1, fi->second);
      continue;
    }
    auto p = part_of.find(f.node);
    if (p == part_of.end()) return errors::internal("partition: fetch '{}:{}' is not among the step's nodes", f.node->name, f.index);
    GraphPartition& part = step.partitions[static_cast<std::size_t>(p->second)];
    const Endpoint local{copy_of.at(f.node), f.index};
    int pos = 0;
    while (pos < static_cast<int>(part.fetches.size()) &&
           (part.fetches[pos].node != local.node || part.fetches[pos].index != local.index)) {
      ++pos;
    }
    if (pos == static_cast<int>(part.fetches.size())) part.fetches.push_back(local);
    step.fetch_from.emplace_back(p->second, pos);
  }
  for (const Node* t : targets) {
    auto p = part_of.find(t);
    if (p == part_of.end()) return errors::internal("partition: target '{}' is not among the step's nodes", t->name);
    step.partitions[static_cast<std::size_t>(p->second)].targets.push_back(copy_of.at(t));
  }
  return step;
}

}  // namespace tessera::internal
