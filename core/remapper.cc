// Note [Op fusion]
// ~~~~~~~~~~~~~~~~
// A convolution layer is three passes over its output when written as TF1 code writes it
// (relu(bias_add(conv2d(x, f), b))), and its gradient two more over the same tensor
// (MaxPoolGrad, then ReluGrad); each pass reads and writes the whole activation from the cache it
// has fallen out of since the forward pass. TensorFlow's Grappler remapper rewrites such chains
// into one kernel; so does remap_ops here, for the host CPU, when a step's plan is built:
//   Conv2D -> BiasAdd [-> Relu]     _FusedConv2D (input, filter, bias; activation "Relu" or "")
//   MaxPoolGrad -> ReluGrad         _FusedMaxPoolGradReluGrad (MaxPoolGrad's inputs), where the
//                                   ReluGrad's features are the MaxPoolGrad's orig_input
//   [MaxPoolGrad -> ReluGrad ->] Conv2DBackpropFilter + BiasAddGrad of one out_backprop
//                                   _FusedConv2DBackpropFilterWithBias (input, filter, then
//                                   out_backprop or the pool gradient's inputs; two outputs), as
//                                   TF's oneDNN rewrite fuses the filter and bias gradients: a
//                                   first layer's gradient, read by those two alone, is made an
//                                   image at a time and summed into both while it is in cache
// The fused kernels (kernels/conv_ops.cc, pool_ops.cc) do the same arithmetic in the same order,
// so a fused step's values are the unfused step's, bit for bit (tests/remapper_test.cc checks
// whole training steps). A chain is fused only where nothing else can see inside it: each inner
// value has one reader (the next op of the chain; for the filter and bias gradients' out_backprop,
// those two), is neither fed nor fetched, and no op of the chain is a target or has a control edge
// in or out. The fused node is not added to the graph (the user's graph is never rewritten): the
// plan reads the chain's outputs from it through a Remap, and the chain's other ops fall out of
// the pruned step. It is named after the ops it stands for ("Conv2D_1+BiasAdd_1+Relu_1"), which a
// trace and an error show.
// Only host-only steps are fused (a step split over devices keeps its ops): the fused ops have CPU
// kernels only. SessionOptions::remapping turns it off, as TF's RewriterConfig.remapping does.
#include "core/remapper.h"

#include <unordered_set>

namespace tessera::internal {
namespace {

// Fused nodes' ids: past any graph's, so that they never meet a graph node's in a key.
constexpr int kFirstFusedId = 1 << 30;

bool one_floating_output(const Node* n) {
  return n->output_dtypes.size() == 1 &&
         (n->output_dtypes[0] == DType::Float32 || n->output_dtypes[0] == DType::Float64);
}

}  // namespace

Node* FusedNodes::get_or_make(const std::string& type, const std::vector<const Node*>& parts,
                              const std::function<void(Node&)>& make) {
  std::vector<int> ids;
  std::string name;
  for (const Node* p : parts) {
    ids.push_back(p->id);
    name += (name.empty() ? "" : "+") + p->name;
  }
  std::lock_guard<std::mutex> l(mu_);
  auto& slot = nodes_[{type, ids}];
  if (!slot) {
    slot = std::make_unique<Node>();
    slot->graph = parts.back()->graph;
    slot->id = kFirstFusedId + next_id_++;
    slot->name = std::move(name);
    slot->type = type;
    make(*slot);
  }
  return slot.get();
}

Remap remap_ops(const std::vector<const Node*>& needed, const std::vector<Endpoint>& feeds,
                const std::vector<Endpoint>& fetches, const std::vector<const Node*>& targets, FusedNodes& fused) {
  Remap remap;
  // Who reads each value in this step (inputs and fetches), and the ops that must stay themselves.
  std::unordered_map<uint64_t, int> reads;
  std::unordered_map<uint64_t, std::vector<std::pair<const Node*, int>>> readers;  // (node, input)
  std::unordered_set<uint64_t> fed;
  std::unordered_set<const Node*> pinned(targets.begin(), targets.end());
  for (const Endpoint& f : feeds) fed.insert(endpoint_key(f));
  for (const Node* n : needed) {
    for (int i = 0; i < static_cast<int>(n->inputs.size()); ++i) {
      const uint64_t key = endpoint_key(n->inputs[i]);
      ++reads[key];
      readers[key].emplace_back(n, i);
    }
    if (!n->control_inputs.empty()) pinned.insert(n);
    pinned.insert(n->control_inputs.begin(), n->control_inputs.end());
  }
  for (const Endpoint& f : fetches) ++reads[endpoint_key(f)];
  // Output 0 of `producer`, read by `consumer` alone: a value inside a chain.
  auto inner = [&](const Node* producer, const Node* consumer) {
    const Endpoint e{const_cast<Node*>(producer), 0};
    auto r = reads.find(endpoint_key(e));
    auto who = readers.find(endpoint_key(e));
    return producer->output_dtypes.size() == 1 && r != reads.end() && r->second == 1 && who != readers.end() &&
           who->second.back().first == consumer && !fed.count(endpoint_key(e)) && !pinned.count(producer);
  };

  // MaxPoolGrad -> ReluGrad, ReluGrad's features being the values the pool's gradient was taken
  // over: the ReluGrad, or null.
  auto pool_relu_grad = [&](const Node* n) -> const Node* {
    if (n->type != "ReluGrad" || pinned.count(n) || !one_floating_output(n)) return nullptr;
    const Node* pool = n->inputs[0].node;
    if (pool->type != "MaxPoolGrad" || n->inputs[0].index != 0 || !inner(pool, n)) return nullptr;
    const Endpoint& features = n->inputs[1];
    const Endpoint& pooled = pool->inputs[0];
    return features.node == pooled.node && features.index == pooled.index ? pool : nullptr;
  };

  // Conv2DBackpropFilter and BiasAddGrad of one out_backprop, read by nothing else (the two
  // readers of a convolution layer's gradient), with the pool's gradient that makes it if any.
  std::unordered_set<const Node*> taken;
  for (const Node* n : needed) {
    if (n->type != "BiasAddGrad" || pinned.count(n) || !one_floating_output(n)) continue;
    const Endpoint& dy = n->inputs[0];
    const uint64_t key = endpoint_key(dy);
    const auto& who = readers.at(key);  // n among them
    if (reads.at(key) != 2 || who.size() != 2 || fed.count(key) || dy.node->output_dtypes.size() != 1) continue;
    const std::pair<const Node*, int>& other = who[0].first == n ? who[1] : who[0];
    const Node* conv = other.first;
    if (conv->type != "Conv2DBackpropFilter" || other.second != 2 || pinned.count(conv) || !one_floating_output(conv)) {
      continue;
    }
    const Node* pool = pool_relu_grad(dy.node);
    std::vector<const Node*> parts{conv, n};
    if (pool != nullptr) parts = {pool, dy.node, conv, n};
    Node* f = fused.get_or_make("_FusedConv2DBackpropFilterWithBias", parts, [&](Node& node) {
      node.inputs = {conv->inputs[0], conv->inputs[1]};
      node.attrs = conv->attrs;
      if (pool != nullptr) {
        node.inputs.insert(node.inputs.end(), pool->inputs.begin(), pool->inputs.end());
        node.attrs["pool_grad"] = true;
        node.attrs["pool_ksize"] = pool->attrs.at("ksize");
        node.attrs["pool_strides"] = pool->attrs.at("strides");
        node.attrs["pool_padding"] = pool->attrs.at("padding");
      } else {
        node.inputs.push_back(dy);
      }
      node.output_dtypes = {conv->output_dtypes[0], n->output_dtypes[0]};
      node.output_shapes = {conv->output_shapes[0], n->output_shapes[0]};
    });
    remap.add({const_cast<Node*>(conv), 0}, {f, 0});
    remap.add({const_cast<Node*>(n), 0}, {f, 1});
    taken.insert(parts.begin(), parts.end());
  }

  for (const Node* n : needed) {
    if (pinned.count(n) || !one_floating_output(n) || taken.count(n)) continue;
    if (n->type == "BiasAdd") {
      const Node* conv = n->inputs[0].node;
      if (conv->type != "Conv2D" || n->inputs[0].index != 0 || !inner(conv, n)) continue;
      // The Relu that is the bias's only reader, if any.
      const Endpoint biased{const_cast<Node*>(n), 0};
      auto r = readers.find(endpoint_key(biased));
      const Node* next = r != readers.end() ? r->second.back().first : nullptr;
      const Node* relu = next != nullptr && next->type == "Relu" && !pinned.count(next) && inner(n, next) ? next : nullptr;
      std::vector<const Node*> parts{conv, n};
      if (relu != nullptr) parts.push_back(relu);
      Node* f = fused.get_or_make("_FusedConv2D", parts, [&](Node& node) {
        node.inputs = {conv->inputs[0], conv->inputs[1], n->inputs[1]};
        node.attrs = conv->attrs;
        node.attrs["activation"] = std::string(relu != nullptr ? "Relu" : "");
        node.output_dtypes = parts.back()->output_dtypes;
        node.output_shapes = parts.back()->output_shapes;
      });
      remap.add({const_cast<Node*>(parts.back()), 0}, {f, 0});
    } else if (const Node* pool = pool_relu_grad(n); pool != nullptr) {
      Node* f = fused.get_or_make("_FusedMaxPoolGradReluGrad", {pool, n}, [&](Node& node) {
        node.inputs = pool->inputs;
        node.attrs = pool->attrs;
        node.output_dtypes = n->output_dtypes;
        node.output_shapes = n->output_shapes;
      });
      remap.add({const_cast<Node*>(n), 0}, {f, 0});
    }
  }
  return remap;
}

}  // namespace tessera::internal
