// Op fusion for a step's plan, as TensorFlow's Grappler remapper does it (Note [Op fusion] in
// core/remapper.cc): chains of ops that are each a pass over the same large tensor become one
// kernel, where nothing else reads the values in between.
//
//   FusedNodes fused;                                  // the session's, for its life
//   Remap remap = remap_ops(needed, feeds, fetches, targets, fused);
//   build_plan(graph, feeds, fetches, targets, make_kernel, remap);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/node.h"

namespace tessera::internal {

// The fused nodes a session has made. They are not in the graph: a step's plan reads them through
// a Remap. Each is made once per distinct chain and lives as long as this object, so the
// session's kernel cache (keyed by node) never sees a node's address reused. Thread-safe.
class FusedNodes {
 public:
  // The node of type `type` standing for the chain `parts` (graph nodes, in dataflow order);
  // `make` fills in a new one's inputs, attrs and outputs (its id, name, type and graph are set
  // here; the name joins the parts' names with '+').
  Node* get_or_make(const std::string& type, const std::vector<const Node*>& parts,
                    const std::function<void(Node&)>& make);

 private:
  std::mutex mu_;
  std::map<std::pair<std::string, std::vector<int>>, std::unique_ptr<Node>> nodes_;
  int next_id_ = 0;
};

// Where a step reads endpoints of fused chains from: (node, output) -> the fused node's output.
class Remap {
 public:
  // The empty one: every endpoint is itself.
  static const Remap& none() {
    static const Remap empty;
    return empty;
  }
  Endpoint resolve(const Endpoint& e) const {
    if (map_.empty()) return e;
    auto it = map_.find(endpoint_key(e));
    return it == map_.end() ? e : it->second;
  }
  void add(const Endpoint& from, const Endpoint& to) { map_[endpoint_key(from)] = to; }
  bool empty() const { return map_.empty(); }
  int size() const { return static_cast<int>(map_.size()); }

 private:
  std::unordered_map<uint64_t, Endpoint> map_;
};

// The fusions among `needed` (prune_nodes' result for the signature), every node of which runs on
// the host CPU. A chain is fused only where nothing but the chain reads its inner values: no other
// consumer, fetch, feed, target or control edge.
Remap remap_ops(const std::vector<const Node*>& needed, const std::vector<Endpoint>& feeds,
                const std::vector<Endpoint>& fetches, const std::vector<const Node*>& targets, FusedNodes& fused);

}  // namespace tessera::internal
