// Nodes and the graph that owns them (the internals behind tessera::Graph, Output, Operation).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"
#include "tessera/graph.h"
#include "tessera/tensor.h"

namespace tessera::internal {

struct OpDef;
struct CondBranch;
struct WhileFrame;

using AttrValue = std::variant<int64_t, double, bool, DType, Shape, std::string, Tensor,
                               std::vector<int64_t>, std::vector<DType>, std::vector<Shape>>;
using AttrMap = std::map<std::string, AttrValue>;

struct Endpoint {
  Node* node = nullptr;  // Not owned.
  int index = 0;
};

// One op of a graph. Immutable once added, except for control inputs (add_control_input, which
// bumps the graph's version). Where sessions placed it is theirs, not the node's (see
// GraphImpl::record_placement).
struct Node {
  GraphImpl* graph = nullptr;  // Not owned: the graph owns this node.
  int id = 0;                  // dense, in creation order
  std::string name;
  std::string type;
  const OpDef* def = nullptr;  // Not owned: registry entries live forever.
  std::vector<Endpoint> inputs;
  std::vector<Node*> control_inputs;
  std::vector<DType> output_dtypes;
  std::vector<Shape> output_shapes;
  AttrMap attrs;
  std::string requested_device;
  // The stateful node (variable, queue, ...) this op reads or updates: the op runs against that
  // node's resource and is placed with it. Not owned.
  Node* resource = nullptr;
  // Nodes this one must be placed with (colocate_with scopes). Not owned.
  std::vector<Node*> colocate_with;
  // For a partition's copy of a node (core/partition.h): the graph's node it copies. Not owned.
  const Node* origin = nullptr;
  // The branch of a cond the node was made in (null: none). Owned by the graph.
  const CondBranch* cond_branch = nullptr;
  // The body of the while loop the node was made in (null: none); and, for a While node, the
  // loop it runs. Owned by the graph.
  const WhileFrame* while_frame = nullptr;
  const WhileFrame* loop = nullptr;

  template <class T>
  const T& attr(const std::string& key) const {
    auto it = attrs.find(key);
    TESSERA_CHECK(it != attrs.end());
    return std::get<T>(it->second);
  }
  template <class T>
  T attr_or(const std::string& key, T fallback) const {
    auto it = attrs.find(key);
    if (it == attrs.end()) return fallback;
    return std::get<T>(it->second);
  }
  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
  std::string debug_name() const;  // "name (Type)"
};

// The key of output `index` of `n` in a step's maps (feeds, fetches, a plan's signature, fused
// chains): its node's id and the index (an op has far fewer than 65536 outputs).
inline uint64_t endpoint_key(const Node* n, int index) {
  return (static_cast<uint64_t>(n->id) << 16) | static_cast<uint64_t>(index);
}
inline uint64_t endpoint_key(const Endpoint& e) { return endpoint_key(e.node, e.index); }

// What an op constructor asks the graph to add.
struct NodeSpec {
  std::string type;
  std::string name;  // base name; "" = type. Made unique.
  std::vector<Output> inputs;
  AttrMap attrs;
  Node* resource = nullptr;
  std::vector<Operation> extra_control_inputs;
  const WhileFrame* loop = nullptr;  // a While node's loop (Node::loop)
};

// A branch of a cond while it is built (Note [Conditionals] in core/control_flow_ops.cc): a node
// made in it reads each tensor from outside the branch through a Switch on the cond's predicate
// (made once per tensor), and a node with no inputs waits on the branch's pivot, so that the
// whole branch is dead when the predicate picks the other one.
struct CondBranch {
  const CondBranch* outer = nullptr;  // the branch the cond is built in, or null
  Output pred;                        // the cond's predicate (its pred_id), made in `outer`
  int branch = 0;                     // 1: true, 0: false (the Switch output the branch reads)
  Node* pivot = nullptr;              // Identity of pred's own Switch output `branch`
  std::string name;                   // "cond/branch_true", for messages
  std::unordered_map<uint64_t, Output> switched;  // endpoint_key of an outside tensor -> its Switch output
  // Whether `b` is this branch or a branch inside it.
  bool contains(const CondBranch* b) const {
    for (; b != nullptr; b = b->outer) {
      if (b == this) return true;
    }
    return false;
  }
};

// The body of a while loop (Note [While loops] in core/while_ops.cc): the loop's cond and body
// are nodes of the graph like any other, made while the frame is the graph's current one, which
// the While node runs as steps of their own, an iteration at a time. A node made in the frame
// reads each tensor from outside it through a capture (a _LoopArg made once per tensor, fed with
// the tensor the While reads as an input); a control input from outside becomes the While's.
struct WhileFrame {
  const WhileFrame* outer = nullptr;  // the frame the loop is built in, or null
  std::string name;                   // the loop's scope ("while", "outer/while_1"), for messages
  std::vector<Node*> args;            // the loop variables inside the loop (_LoopArg)
  std::vector<Node*> capture_args;    // per captured tensor, its _LoopArg
  std::vector<Output> captures;       // the captured tensors (made outside), parallel to capture_args
  std::unordered_map<uint64_t, int> captured;  // endpoint_key of a captured tensor -> its index
  std::vector<Node*> outer_controls;  // control inputs from outside: the While waits on them
  std::vector<Node*> nodes;           // every node made in the frame, in creation order
  Output cond;                        // the cond function's result: a bool scalar
  std::vector<Output> body;           // the body function's results, one per loop variable
  // Set by the While's gradient: the While keeps each iteration's loop variables (its history
  // outputs), which the gradient loop reads back.
  mutable std::atomic<bool> keep_history{false};
  // Whether `f` is this frame or a frame inside it.
  bool contains(const WhileFrame* f) const {
    for (; f != nullptr; f = f->outer) {
      if (f == this) return true;
    }
    return false;
  }
};

// Owns the nodes of a Graph; nodes never move. Thread safety: adding nodes and reading them take
// mu_; sessions snapshot what they need under a shared lock.
class GraphImpl {
 public:
  GraphImpl();

  // Validates inputs (same graph, non-null), runs the op's shape function and adds the node with
  // the current scopes applied. Errors are InvalidArgumentError naming the op.
  // Adds a node; InvalidArgument (naming the op) for an unknown type, a bad input or a shape
  // function's complaint. add_node() is the same for the public API, raising the error.
  StatusOr<Node*> try_add_node(NodeSpec spec);
  Node* add_node(NodeSpec spec);

  Node* find(const std::string& name) const;
  std::vector<Node*> nodes() const;
  int num_nodes() const;
  Node* node(int id) const;
  // The same, for a caller that holds mutex().
  int num_nodes_locked() const { return static_cast<int>(nodes_.size()); }
  Node* node_locked(int id) const { return nodes_.at(static_cast<std::size_t>(id)).get(); }
  // find() for a caller that holds mutex(): a shape function (add_node holds it) that checks the
  // nodes an op names in its attrs (the optimizer ops' slot variables, core/training_ops.cc).
  Node* find_locked(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }
  // Bumped by every change that can invalidate a cached execution plan: new control inputs on an
  // existing node (adding nodes cannot change what an existing plan runs).
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  void add_control_input(Node* node, Node* dep);
  std::shared_mutex& mutex() const { return mu_; }

  // The latest placement any session made of `node` (a full device name), which
  // Operation::assigned_device() reports. Each session keeps its own placement and never reads
  // this: two sessions with different policies do not disturb each other. Thread-safe.
  void record_placement(const Node* node, const std::string& device);
  std::string placement_of(const Node* node) const;  // "" before any session placed it

  // Scopes (used by the thread building the graph).
  // device_scope_: the string scopes opened since the innermost device function (all of them
  // without one); device_functions_: the Graph::device(DeviceFunction) scopes, outermost first,
  // each with the device_scope_ around it. Note [Device scopes] in graph.cc. Code that sets
  // the scopes aside clears both.
  struct DeviceFunctionScope {
    DeviceFunction fn;
    std::string outer;
  };
  std::string device_scope_;
  std::vector<DeviceFunctionScope> device_functions_;
  std::vector<Node*> colocation_scope_;
  std::vector<Node*> control_scope_;
  std::string name_scope_;
  // The branch of a cond being built (null: none); the graph owns every branch it ever had.
  CondBranch* cond_branch_ = nullptr;
  std::vector<std::unique_ptr<CondBranch>> cond_branches_;
  // Whether the graph has a Switch (a cond): its plans then track dead tensors (Note [Dead
  // tensors] in core/executor.cc).
  bool has_control_flow() const { return has_control_flow_.load(std::memory_order_acquire); }
  // The body of a while loop being built (null: none); the graph owns every frame it ever had.
  WhileFrame* while_frame_ = nullptr;
  std::vector<std::unique_ptr<WhileFrame>> while_frames_;
  // The tensor that stands for `outside` (made outside the current frame) inside it: its capture,
  // made on first use. Without the lock. InvalidArgumentError naming `what` for a tensor of a loop
  // inside this one.
  StatusOr<Output> capture_into_frame(const Output& outside, const std::string& what);

  // Collections: variables and queue runners registered by the public classes. Type-erased so
  // core does not depend on the public wrapper types.
  std::mutex collections_mu_;
  std::map<std::string, std::vector<std::shared_ptr<void>>> collections_;

  Graph* owner = nullptr;  // The public Graph (updated on move). Not owned.

 private:
  std::string unique_name_locked(const std::string& base);
  // Sets node.requested_device from `functions` (Note [Device scopes] in graph.cc); called without
  // the lock.
  static Status apply_device_functions(Node& node, const std::vector<DeviceFunctionScope>& functions);

  mutable std::shared_mutex mu_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::unordered_map<std::string, Node*> by_name_;
  std::unordered_map<std::string, int> name_counts_;
  std::atomic<uint64_t> version_{0};
  std::atomic<bool> has_control_flow_{false};
  // A node made in branch cond_branch_ (spec.inputs and its control inputs): reads from outside
  // the branch through Switches; no inputs at all, waits on the pivot. Called without the lock.
  Status enter_cond_branch(NodeSpec& spec, const std::string& base);
  // A node made in frame while_frame_: reads from outside through captures; control inputs from
  // outside go to the frame's While. Called without the lock.
  Status enter_while_frame(NodeSpec& spec, const std::string& base);
  // Why input i of op `base` cannot read `src`: a tensor of another loop's body than `frame`.
  static Status loop_input_error(const std::string& type, const std::string& base, std::size_t i, const Node& src,
                                 const WhileFrame* frame);
  mutable std::mutex placements_mu_;
  std::unordered_map<int, std::string> placements_;  // guarded by placements_mu_: node id -> device
};

// The node behind a handle, or InvalidArgumentError for a null handle.
Node* checked_node(const Output& o, const char* what);
// The last component of a node name ("q" of "input/q"): resource handles name their ops after it.
inline std::string last_name_component(const std::string& name) {
  const auto slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}
// How the builders of tessera::ops make a node: `spec` over `inputs`, added to the graph of the
// first input (checked_node(inputs[0], what)). add_op returns the node's first output.
Node* add_op_node(const char* what, NodeSpec spec, std::vector<Output> inputs);
Output add_op(const char* what, NodeSpec spec, std::vector<Output> inputs);
// A read of the variable `var` (a VariableV2 node) when the read runs: op "_ReadVariable" named
// "<var>/read" (made unique), under the graph's current scopes, colocated with the variable
// (Variable::read_value; core/variable_ops.cc).
Output read_variable(Node* var);
// While the scope lives, nodes added to `g` take no control inputs from the control_dependencies
// scopes around it (TF's init_scope): a variable, and the initial values and state an op makes
// for itself, must not wait for the ops a caller's scope names.
// Likewise outside any cond being built: what it makes runs whichever branch is taken.
GraphScope without_control_dependencies(GraphImpl& g);
// The attr-less op `type` over (a, b): the elementwise binary builders.
inline Output add_binary_op(const char* what, const char* type, Output a, Output b, std::string name) {
  return add_op(what, NodeSpec{type, std::move(name)}, {a, b});
}

// What the public handle of a resource (a queue, an accumulator) keeps of the resource's node, and
// how it adds the ops that act on it: named `name`, or by default after the node ("q" ->
// "q_enqueue" with suffix "_enqueue"), each input checked (checked_node, naming `type`).
struct ResourceNode {
  explicit ResourceNode(Node* n) : node(n), base_name(last_name_component(n->name)) {}
  Node* add_op(const char* type, const char* suffix, std::string name, std::vector<Output> inputs = {},
               AttrMap attrs = {}) const;

  Node* node;             // the resource's node. Not owned.
  std::string base_name;  // the node name's last component
};

}  // namespace tessera::internal

// The builders of tessera::ops (core/*_ops.cc) call these by their short names.
namespace tessera::ops {
using internal::add_binary_op;
using internal::add_op;
using internal::NodeSpec;
}  // namespace tessera::ops
