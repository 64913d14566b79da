// Graphs of ops, built once and run many times by sessions.
//
//   tessera::Graph g;
//   auto a = tessera::ops::constant(g, 1.0f, "a");
//   auto x = tessera::ops::placeholder(g, tessera::DType::Float32, {-1, 3}, "x");
//   auto y = tessera::ops::add(x, a);             // shapes and dtypes inferred now: [?,3] float32
//   {
//     auto scope = g.device("/cpu:0");            // ops created here request that device
//     auto z = tessera::ops::square(y);
//   }
//   {
//     // A device per op, chosen when it is created (train::replica_device_setter is one).
//     auto scope = g.device([](const tessera::Operation& op) {
//       return op.type() == "VariableV2" ? "/job:ps/task:0" : "/job:worker";
//     });
//   }
//
// Output and Operation are cheap handles to a node of a Graph (null when default-constructed;
// using a null handle raises InvalidArgumentError). A Graph may be extended at any time, including
// while sessions run it; it is safe to run from many threads. Scopes (device, colocation, control
// dependencies, name) are per Graph and meant to be used by the thread that builds the graph.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera {

namespace internal {
struct Node;
class GraphImpl;
}  // namespace internal

class Graph;
class Operation;
class Output;

// Chooses a new op's device spec (a Graph::device scope). Called once per op created in the scope,
// with the op already made (type, name, inputs, attrs, output dtypes and shapes; device() is what
// the device scopes opened inside this one requested, "" if none). Its answer replaces that
// request; the string scopes around the function's scope are then merged under it.
using DeviceFunction = std::function<std::string(const Operation&)>;

class Operation {
 public:
  Operation() = default;
  explicit Operation(internal::Node* node) : node_(node) {}

  std::string name() const;
  std::string type() const;
  std::string device() const;           // requested device spec ("" if none)
  std::string assigned_device() const;  // after a session placed it ("" before)
  int num_inputs() const;
  int num_outputs() const;
  Output input(int i) const;
  Output output(int i) const;
  std::vector<Operation> control_inputs() const;
  // Adds a control edge: this op runs only after `op`. May create a cycle, which sessions reject.
  void add_control_input(Operation op);
  Graph& graph() const;

  bool is_null() const { return node_ == nullptr; }
  internal::Node* node() const;  // checked: throws InvalidArgumentError when null
  bool operator==(const Operation& o) const { return node_ == o.node_; }
  bool operator!=(const Operation& o) const { return node_ != o.node_; }
  bool operator<(const Operation& o) const { return node_ < o.node_; }

 private:
  internal::Node* node_ = nullptr;  // Not owned: the Graph owns its nodes.
};

class Output {
 public:
  Output() = default;
  Output(internal::Node* node, int index) : node_(node), index_(index) {}

  Operation op() const { return Operation(node()); }
  int index() const { return index_; }
  std::string name() const;  // "op:0"
  DType dtype() const;
  Shape shape() const;

  bool is_null() const { return node_ == nullptr; }
  internal::Node* node() const;  // checked
  bool operator==(const Output& o) const { return node_ == o.node_ && index_ == o.index_; }
  bool operator!=(const Output& o) const { return !(*this == o); }
  bool operator<(const Output& o) const {
    return node_ != o.node_ ? node_ < o.node_ : index_ < o.index_;
  }

 private:
  internal::Node* node_ = nullptr;  // Not owned.
  int index_ = 0;
};

// RAII scope returned by Graph's scope methods; restores the previous state when destroyed.
class [[nodiscard]] GraphScope {
 public:
  GraphScope() = default;
  explicit GraphScope(std::function<void()> restore) : restore_(std::move(restore)) {}
  GraphScope(GraphScope&& o) noexcept : restore_(std::move(o.restore_)) { o.restore_ = nullptr; }
  GraphScope& operator=(GraphScope&&) = delete;
  GraphScope(const GraphScope&) = delete;
  ~GraphScope() {
    if (restore_) restore_();
  }

 private:
  std::function<void()> restore_;
};

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Ops created while the scope lives request `device_spec` (partial specs merge with outer
  // scopes; "" clears, device functions included). A malformed spec raises InvalidArgumentError.
  GraphScope device(const std::string& device_spec);
  GraphScope device(const char* device_spec) {  // nullptr clears, as "" (TensorFlow's None)
    return device(device_spec == nullptr ? std::string() : std::string(device_spec));
  }
  // Ops created while the scope lives request what `fn` returns for them, as TensorFlow's device
  // functions: the innermost scope decides first, each outer string scope fills in the fields the
  // answer leaves unset (Note [Device scopes] in core/graph.cc). A null function or an answer that
  // is not a device spec raises InvalidArgumentError (the latter when the op is created).
  GraphScope device(DeviceFunction fn);
  // Ops created while the scope lives are placed with `op`. As TensorFlow's, the scope sets aside
  // the device scopes around it (colocation is the stronger constraint): an op made inside
  // requests only what device scopes opened inside it say, and follows `op` otherwise.
  GraphScope colocate_with(Operation op);
  GraphScope colocate_with(const Output& output) { return colocate_with(output.op()); }
  // Ops created while the scope lives run after every op of `deps`.
  GraphScope control_dependencies(const std::vector<Operation>& deps);
  // Ops created while the scope lives get names prefixed with "scope/".
  GraphScope name_scope(const std::string& scope);

  // Looks up an op by name: NotFoundError when absent.
  Operation operation(const std::string& name) const;
  // Looks up "op:0": NotFoundError when absent.
  Output output(const std::string& name) const;
  std::vector<Operation> operations() const;
  int num_operations() const;

  internal::GraphImpl& impl() const { return *impl_; }

 private:
  std::unique_ptr<internal::GraphImpl> impl_;
};

}  // namespace tessera
