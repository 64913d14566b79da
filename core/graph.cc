#include <algorithm>

#include <fmt/format.h>

#include "core/device_name.h"
#include "core/node.h"
#include "core/op_registry.h"
#include "tessera/graph.h"

namespace tessera {
namespace internal {

std::string Node::debug_name() const { return fmt::format("{} ({})", name, type); }

Node* checked_node(const Output& o, const char* what) {
  if (o.is_null()) throw InvalidArgumentError(fmt::format("{}: null Output", what));
  return o.node();
}

Node* add_op_node(const char* what, NodeSpec spec, std::vector<Output> inputs) {
  Node* first = checked_node(inputs.front(), what);
  spec.inputs = std::move(inputs);
  return first->graph->add_node(std::move(spec));
}

Output add_op(const char* what, NodeSpec spec, std::vector<Output> inputs) {
  return Output(add_op_node(what, std::move(spec), std::move(inputs)), 0);
}

Node* ResourceNode::add_op(const char* type, const char* suffix, std::string name, std::vector<Output> inputs,
                           AttrMap attrs) const {
  for (const Output& in : inputs) checked_node(in, type);
  NodeSpec spec{type, name.empty() ? base_name + suffix : std::move(name)};
  spec.inputs = std::move(inputs);
  spec.attrs = std::move(attrs);
  spec.resource = node;
  return node->graph->add_node(std::move(spec));
}

GraphImpl::GraphImpl() = default;

// Note [Device scopes]
// ~~~~~~~~~~~~~~~~~~~~
// An op's requested device comes from the Graph::device scopes open when it is created, as
// TensorFlow's _apply_device_functions does it: innermost scope first. A string scope merges
// under what the scopes inside it chose (their fields win); a device function (replica_device_
// setter) sees the op with that choice as its device() and its answer replaces it. String scopes
// are merged eagerly into device_scope_, so only the functions are a stack: each remembers the
// string scopes around it (`outer`), merged under its answer. device("") sets every outer scope
// aside, functions too (TensorFlow's device(None)), and so does colocate_with: as TensorFlow's,
// colocation is the stronger constraint, so an optimizer's slot variables (made colocated with
// their variable) are not sent to another ps task by the device function, and an update made
// under colocate_with(var) asks for nothing but its variable's device (the resource rule in
// try_add_node). Ops that use a variable without such a scope (the Apply* ops) keep what the
// scopes say; placement then lets the variable's request win (Note [Placement], placement.cc).
// The functions run without the graph's lock (they are user code that may read the graph), on
// the op before it is added: its id is -1 and its name is reserved meanwhile.
Status GraphImpl::apply_device_functions(Node& node, const std::vector<DeviceFunctionScope>& functions) {
  std::string current = node.requested_device;
  for (auto it = functions.rbegin(); it != functions.rend(); ++it) {
    node.requested_device = current;
    std::string answer;
    try {  // a device function is user code: whatever it throws becomes this op's error
      answer = it->fn(Operation(&node));
    } catch (...) {
      return status_from_current_exception().with_prefix(
          fmt::format("{} '{}': device function: ", node.type, node.name));
    }
    auto inner = DeviceSpec::parse(answer);
    if (!inner.ok()) {
      return errors::invalid_argument("{} '{}': the device function answered '{}': {}", node.type, node.name, answer,
                                      inner.status().message());
    }
    auto outer = DeviceSpec::parse(it->outer);
    if (!outer.ok()) return outer.status();
    current = outer.value().merged_with(inner.value()).to_string();
  }
  node.requested_device = std::move(current);
  return Status();
}

std::string GraphImpl::unique_name_locked(const std::string& base) {
  if (!by_name_.count(base)) {
    name_counts_.emplace(base, 0);
    return base;
  }
  int& n = name_counts_[base];
  std::string candidate;
  do {
    candidate = fmt::format("{}_{}", base, ++n);
  } while (by_name_.count(candidate));
  return candidate;
}

StatusOr<Node*> GraphImpl::try_add_node(NodeSpec spec) {
  const OpDef* def = OpRegistry::global().find_op(spec.type);
  if (def == nullptr) return errors::invalid_argument("unknown op type '{}'", spec.type);
  std::string base = spec.name.empty() ? spec.type : spec.name;
  if (!name_scope_.empty()) base = name_scope_ + "/" + base;
  if (base.find(':') != std::string::npos) {
    return errors::invalid_argument("op name '{}' must not contain ':'", base);
  }
  // Captures first: a branch of a cond inside a loop's body then reads a captured tensor, made in
  // the frame outside any branch, through its Switch.
  WhileFrame* const frame = while_frame_;
  if (frame != nullptr) TESSERA_RETURN_IF_ERROR(enter_while_frame(spec, base));
  const CondBranch* branch = cond_branch_;
  if (branch != nullptr) TESSERA_RETURN_IF_ERROR(enter_cond_branch(spec, base));

  std::vector<DType> in_dtypes;
  std::vector<Shape> in_shapes;
  std::vector<Endpoint> inputs;
  for (std::size_t i = 0; i < spec.inputs.size(); ++i) {
    const Output& in = spec.inputs[i];
    if (in.is_null()) {
      return errors::invalid_argument("{} '{}': input {} is a null Output", spec.type, base, i);
    }
    Node* src = in.node();
    if (src->graph != this) {
      return errors::invalid_argument("{} '{}': input {} ('{}') belongs to another graph", spec.type, base, i,
                                      src->name);
    }
    if (in.index() < 0 || in.index() >= static_cast<int>(src->output_dtypes.size())) {
      return errors::invalid_argument("{} '{}': input {} refers to output {} of '{}', which has {}", spec.type, base,
                                      i, in.index(), src->name, src->output_dtypes.size());
    }
    if (src->while_frame != frame) return loop_input_error(spec.type, base, i, *src, frame);
    in_dtypes.push_back(src->output_dtypes[in.index()]);
    in_shapes.push_back(src->output_shapes[in.index()]);
    inputs.push_back({src, in.index()});
  }
  for (const auto& dep : spec.extra_control_inputs) {
    if (dep.is_null() || dep.node()->graph != this) {
      return errors::invalid_argument("{} '{}': control input is null or from another graph", spec.type, base);
    }
  }
  // A DType attr must name a dtype (DType(77) has no size, name or kernel).
  for (const auto& [attr, value] : spec.attrs) {
    std::vector<DType> dtypes;
    if (const auto* d = std::get_if<DType>(&value)) dtypes.push_back(*d);
    if (const auto* ds = std::get_if<std::vector<DType>>(&value)) dtypes = *ds;
    for (DType d : dtypes) {
      if (!dtype_is_valid(d)) {
        return errors::invalid_argument("{} '{}': attr {} is not a dtype ({})", spec.type, base, attr,
                                        static_cast<int>(d));
      }
    }
  }

  std::unique_lock<std::shared_mutex> lock(mu_);
  auto node = std::make_unique<Node>();
  node->name = unique_name_locked(base);
  {
    // Shape inference sees the final name so its errors name the op.
    ShapeContext ctx(spec, node->name, std::move(in_dtypes), std::move(in_shapes));
    if (def->shape_fn) {
      Status shaped;
      try {  // a shape function is plug-in code: whatever it throws becomes this op's error
        shaped = def->shape_fn(ctx);
      } catch (...) {
        shaped = status_from_current_exception().with_prefix(fmt::format("{} '{}': ", spec.type, node->name));
      }
      if (!shaped.ok()) return shaped;
    }
    node->output_dtypes = std::move(ctx.out_dtypes_);
    node->output_shapes = std::move(ctx.out_shapes_);
  }
  node->graph = this;
  node->id = static_cast<int>(nodes_.size());
  node->type = spec.type;
  node->def = def;
  node->inputs = std::move(inputs);
  node->attrs = std::move(spec.attrs);
  node->resource = spec.resource;
  node->requested_device = device_scope_;
  node->colocate_with = colocation_scope_;
  node->control_inputs = control_scope_;
  for (const auto& dep : spec.extra_control_inputs) node->control_inputs.push_back(dep.node());
  node->cond_branch = branch;
  node->loop = spec.loop;
  if (frame != nullptr) {
    // Control inputs from outside the loop: the While waits on them (it starts the body's steps).
    auto& controls = node->control_inputs;
    for (std::size_t k = 0; k < controls.size();) {
      Node* dep = controls[k];
      if (dep->while_frame == frame) {
        ++k;
        continue;
      }
      if (!dep->while_frame || dep->while_frame->contains(frame)) {
        auto& outer = frame->outer_controls;
        if (std::find(outer.begin(), outer.end(), dep) == outer.end()) outer.push_back(dep);
        controls.erase(controls.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      return errors::invalid_argument(
          "{} '{}': control input '{}' was made in the body of while loop '{}', a loop inside this op's ('{}')",
          spec.type, base, dep->name, dep->while_frame->name, frame->name);
    }
  } else {
    for (Node* dep : node->control_inputs) {
      if (dep->while_frame != nullptr) {
        return errors::invalid_argument(
            "{} '{}': control input '{}' was made in the body of while loop '{}': outside the loop, wait on "
            "the loop's results",
            spec.type, base, dep->name, dep->while_frame->name);
      }
    }
  }
  // A Switch makes dead tensors; a _Recv of a partition of a graph with a cond may receive them.
  if (node->type == "Switch" || node->attr_or<bool>("may_be_dead", false)) {
    has_control_flow_.store(true, std::memory_order_release);
  }
  if (!device_functions_.empty()) {
    // The functions are user code that may read the graph: they run without the lock, the name
    // reserved meanwhile (find() answers "no such op" until the node is added). Note [Device scopes].
    const std::vector<DeviceFunctionScope> functions = device_functions_;
    by_name_.emplace(node->name, nullptr);
    node->id = -1;
    lock.unlock();
    Status chosen = apply_device_functions(*node, functions);
    lock.lock();
    if (!chosen.ok()) {
      by_name_.erase(node->name);
      return chosen;
    }
    node->id = static_cast<int>(nodes_.size());
  }
  // A request for an accelerator means that task's CPU for an op that runs on a host
  // (OpDef::host_of_request), and for every op of a loop's body (Note [While loops] in
  // core/while_ops.cc: a loop runs on one host).
  if ((def->host_of_request || frame != nullptr) && !node->requested_device.empty()) {
    auto spec = DeviceSpec::parse(node->requested_device);
    if (spec.ok() && spec.value().type && *spec.value().type != "CPU") {
      spec.value().type = "CPU";
      spec.value().id = 0;
      node->requested_device = spec.value().to_string();
    }
  }
  if (frame != nullptr) {
    // All of a loop's nodes are placed with its first variable.
    node->while_frame = frame;
    if (!frame->args.empty()) node->colocate_with.push_back(frame->args.front());
  }
  // A resource op is placed with its resource and inherits its device request.
  if (node->resource != nullptr && node->requested_device.empty()) {
    node->requested_device = node->resource->requested_device;
  }
  Node* raw = node.get();
  by_name_[raw->name] = raw;
  nodes_.push_back(std::move(node));
  if (frame != nullptr) frame->nodes.push_back(raw);
  return raw;
}

Status GraphImpl::loop_input_error(const std::string& type, const std::string& base, std::size_t i, const Node& src,
                                   const WhileFrame* frame) {
  if (src.while_frame == nullptr || frame == nullptr || !frame->contains(src.while_frame)) {
    // A tensor of a loop's body read outside it (what enter_while_frame captures never gets here).
    return errors::invalid_argument(
        "{} '{}': input {} ('{}') was made in the body of while loop '{}'{}: outside the loop, read the loop's "
        "results",
        type, base, i, src.name, src.while_frame ? src.while_frame->name : std::string("?"),
        frame ? fmt::format(", not in this op's loop '{}'", frame->name) : std::string());
  }
  return errors::invalid_argument(
      "{} '{}': input {} ('{}') was made in the body of while loop '{}', a loop inside this op's ('{}'): read "
      "that loop's results",
      type, base, i, src.name, src.while_frame->name, frame->name);
}

Status GraphImpl::enter_while_frame(NodeSpec& spec, const std::string& base) {
  for (std::size_t i = 0; i < spec.inputs.size(); ++i) {
    Output& in = spec.inputs[i];
    if (in.is_null() || in.node()->graph != this) continue;  // try_add_node's checks say why
    const WhileFrame* from = in.node()->while_frame;
    if (from == while_frame_ || (from != nullptr && !from->contains(while_frame_))) continue;  // try_add_node
    auto captured = capture_into_frame(in, fmt::format("{} '{}'", spec.type, base));
    if (!captured.ok()) return captured.status();
    in = captured.value();
  }
  return Status();
}

StatusOr<Output> GraphImpl::capture_into_frame(const Output& outside, const std::string& what) {
  WhileFrame* frame = while_frame_;
  TESSERA_CHECK(frame != nullptr);
  const uint64_t key = endpoint_key(outside.node(), outside.index());
  auto it = frame->captured.find(key);
  if (it != frame->captured.end()) return Output(frame->capture_args[static_cast<std::size_t>(it->second)], 0);
  // Made as the loop's own ops are: in the frame, outside any branch of a cond, without the
  // control inputs, colocation or name scope of the op being made.
  auto restore_controls = std::move(control_scope_);
  auto restore_colocation = std::move(colocation_scope_);
  const std::string saved_scope = std::move(name_scope_);
  CondBranch* saved_branch = cond_branch_;
  control_scope_.clear();
  colocation_scope_.clear();
  cond_branch_ = nullptr;
  name_scope_ = frame->name;
  NodeSpec arg{"_LoopArg", "capture"};
  arg.attrs["dtype"] = outside.dtype();
  arg.attrs["shape"] = outside.shape();
  StatusOr<Node*> made = try_add_node(std::move(arg));
  name_scope_ = saved_scope;
  cond_branch_ = saved_branch;
  control_scope_ = std::move(restore_controls);
  colocation_scope_ = std::move(restore_colocation);
  if (!made.ok()) return made.status().with_prefix(what + ": ");
  frame->captured.emplace(key, static_cast<int>(frame->captures.size()));
  frame->captures.push_back(outside);
  frame->capture_args.push_back(made.value());
  return Output(made.value(), 0);
}

Status GraphImpl::enter_cond_branch(NodeSpec& spec, const std::string& base) {
  CondBranch* branch = cond_branch_;
  for (std::size_t i = 0; i < spec.inputs.size(); ++i) {
    Output& in = spec.inputs[i];
    if (in.is_null() || in.node()->graph != this) continue;  // try_add_node's checks say why
    const CondBranch* from = in.node()->cond_branch;
    if (branch->contains(from)) continue;  // made in this branch (or one inside it)
    if (from != nullptr && !from->contains(branch)) {
      return errors::invalid_argument(
          "{} '{}': input {} ('{}') was made in {}, another branch of a cond than this op's ({}): a "
          "branch reads only its own tensors and those from outside the cond",
          spec.type, base, i, in.name(), from->name, branch->name);
    }
    // From outside: through a Switch made where the cond is built, once per tensor and branch.
    const uint64_t key = endpoint_key(in.node(), in.index());
    auto it = branch->switched.find(key);
    if (it == branch->switched.end()) {
      // Made as the cond's own ops are: no control inputs or colocation of the op being made
      // (an update's colocation with its variable would drag the Switch along).
      cond_branch_ = const_cast<CondBranch*>(branch->outer);
      auto restore_controls = std::move(control_scope_);
      auto restore_colocation = std::move(colocation_scope_);
      control_scope_.clear();
      colocation_scope_.clear();
      NodeSpec sw{"Switch", branch->pivot->name.substr(0, branch->pivot->name.rfind('/') + 1) + "Switch"};
      const std::string saved_scope = std::move(name_scope_);
      name_scope_.clear();
      sw.inputs = {in, branch->pred};
      StatusOr<Node*> made = try_add_node(std::move(sw));
      name_scope_ = saved_scope;
      control_scope_ = std::move(restore_controls);
      colocation_scope_ = std::move(restore_colocation);
      cond_branch_ = branch;
      if (!made.ok()) return made.status().with_prefix(fmt::format("{} '{}': ", spec.type, base));
      it = branch->switched.emplace(key, Output(made.value(), branch->branch)).first;
    }
    in = it->second;
  }
  // A node without inputs would run whichever branch is taken: it waits on the pivot.
  if (spec.inputs.empty()) spec.extra_control_inputs.push_back(Operation(branch->pivot));
  return Status();
}

Node* GraphImpl::add_node(NodeSpec spec) { return try_add_node(std::move(spec)).value_or_raise(); }

Node* GraphImpl::find(const std::string& name) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<Node*> GraphImpl::nodes() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n.get());
  return out;
}

int GraphImpl::num_nodes() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return static_cast<int>(nodes_.size());
}

Node* GraphImpl::node(int id) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return nodes_.at(id).get();
}

void GraphImpl::record_placement(const Node* node, const std::string& device) {
  std::lock_guard<std::mutex> l(placements_mu_);
  placements_[node->id] = device;
}

std::string GraphImpl::placement_of(const Node* node) const {
  std::lock_guard<std::mutex> l(placements_mu_);
  auto it = placements_.find(node->id);
  return it == placements_.end() ? std::string() : it->second;
}

void GraphImpl::add_control_input(Node* node, Node* dep) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (std::find(node->control_inputs.begin(), node->control_inputs.end(), dep) ==
      node->control_inputs.end()) {
    node->control_inputs.push_back(dep);
  }
  version_.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace internal

using internal::Node;

// ---- Operation ----

Node* Operation::node() const {
  if (node_ == nullptr) throw InvalidArgumentError("use of a null Operation");
  return node_;
}
std::string Operation::name() const { return node()->name; }
std::string Operation::type() const { return node()->type; }
std::string Operation::device() const { return node()->requested_device; }
std::string Operation::assigned_device() const { return node()->graph->placement_of(node_); }
int Operation::num_inputs() const { return static_cast<int>(node()->inputs.size()); }
int Operation::num_outputs() const { return static_cast<int>(node()->output_dtypes.size()); }
Output Operation::input(int i) const {
  Node* n = node();
  if (i < 0 || i >= static_cast<int>(n->inputs.size())) {
    throw InvalidArgumentError(fmt::format("{}: no input {}", n->debug_name(), i));
  }
  return Output(n->inputs[i].node, n->inputs[i].index);
}
Output Operation::output(int i) const {
  Node* n = node();
  if (i < 0 || i >= static_cast<int>(n->output_dtypes.size())) {
    throw InvalidArgumentError(fmt::format("{}: no output {}", n->debug_name(), i));
  }
  return Output(n, i);
}
std::vector<Operation> Operation::control_inputs() const {
  std::shared_lock<std::shared_mutex> lock(node()->graph->mutex());
  std::vector<Operation> out;
  for (Node* n : node_->control_inputs) out.emplace_back(n);
  return out;
}
void Operation::add_control_input(Operation op) {
  Node* n = node();
  Node* dep = op.node();
  if (dep->graph != n->graph) {
    throw InvalidArgumentError(fmt::format("{}: control input '{}' belongs to another graph",
                                           n->debug_name(), dep->name));
  }
  if (dep->while_frame != n->while_frame) {
    // A loop's nodes run in its own steps (Note [While loops] in core/while_ops.cc): an edge into
    // or out of a loop's body made after the fact would wait across steps that never meet.
    throw InvalidArgumentError(fmt::format(
        "{}: control input '{}' is in {} and this op in {}: an edge added later may not cross a while loop's body",
        n->debug_name(), dep->name, dep->while_frame ? "the body of loop '" + dep->while_frame->name + "'" : "no loop",
        n->while_frame ? "the body of loop '" + n->while_frame->name + "'" : "no loop"));
  }
  n->graph->add_control_input(n, dep);
}
Graph& Operation::graph() const { return *node()->graph->owner; }

// ---- Output ----

Node* Output::node() const {
  if (node_ == nullptr) throw InvalidArgumentError("use of a null Output");
  return node_;
}
std::string Output::name() const { return fmt::format("{}:{}", node()->name, index_); }
DType Output::dtype() const { return node()->output_dtypes.at(index_); }
Shape Output::shape() const { return node()->output_shapes.at(index_); }

// ---- Graph ----

Graph::Graph() : impl_(std::make_unique<internal::GraphImpl>()) { impl_->owner = this; }
Graph::~Graph() = default;
Graph::Graph(Graph&& o) noexcept : impl_(std::move(o.impl_)) {
  if (impl_) impl_->owner = this;
}
Graph& Graph::operator=(Graph&& o) noexcept {
  impl_ = std::move(o.impl_);
  if (impl_) impl_->owner = this;
  return *this;
}

namespace {

// Restores the device scopes (string and functions) when the GraphScope ends.
GraphScope restoring_device_scopes(internal::GraphImpl& impl) {
  return GraphScope([&impl, previous = impl.device_scope_, functions = impl.device_functions_] {
    impl.device_scope_ = previous;
    impl.device_functions_ = functions;
  });
}

}  // namespace

GraphScope Graph::device(const std::string& device_spec) {
  auto& impl = *impl_;
  GraphScope restore = restoring_device_scopes(impl);
  if (device_spec.empty()) {
    impl.device_scope_.clear();
    impl.device_functions_.clear();
  } else {
    auto outer = internal::DeviceSpec::parse(impl.device_scope_).value_or_raise();
    auto inner = internal::DeviceSpec::parse(device_spec).value_or_raise();
    impl.device_scope_ = outer.merged_with(inner).to_string();
  }
  return restore;
}

GraphScope Graph::device(DeviceFunction fn) {
  if (!fn) throw InvalidArgumentError("Graph::device: null device function");
  auto& impl = *impl_;
  GraphScope restore = restoring_device_scopes(impl);
  impl.device_functions_.push_back({std::move(fn), impl.device_scope_});
  impl.device_scope_.clear();
  return restore;
}

GraphScope Graph::colocate_with(Operation op) {
  Node* n = op.node();
  if (n->graph != impl_.get()) throw InvalidArgumentError("colocate_with: op from another graph");
  auto& impl = *impl_;
  // The device scopes around it are set aside (Note [Device scopes]).
  GraphScope restore([&impl, colocation = impl.colocation_scope_, previous = impl.device_scope_,
                      functions = impl.device_functions_] {
    impl.colocation_scope_ = colocation;
    impl.device_scope_ = previous;
    impl.device_functions_ = functions;
  });
  impl.colocation_scope_.push_back(n->resource != nullptr ? n->resource : n);
  impl.device_scope_.clear();
  impl.device_functions_.clear();
  return restore;
}

GraphScope internal::without_control_dependencies(GraphImpl& g) {
  GraphScope restore(
      [&g, previous = std::move(g.control_scope_), branch = g.cond_branch_, frame = g.while_frame_]() mutable {
        g.control_scope_ = std::move(previous);
        g.cond_branch_ = branch;
        g.while_frame_ = frame;
      });
  g.control_scope_.clear();
  g.cond_branch_ = nullptr;
  g.while_frame_ = nullptr;
  return restore;
}

GraphScope Graph::control_dependencies(const std::vector<Operation>& deps) {
  auto& impl = *impl_;
  auto previous = impl.control_scope_;
  for (const auto& d : deps) {
    Node* n = d.node();
    if (n->graph != impl_.get()) throw InvalidArgumentError("control_dependencies: op from another graph");
    impl.control_scope_.push_back(n);
  }
  return GraphScope([&impl, previous] { impl.control_scope_ = previous; });
}

GraphScope Graph::name_scope(const std::string& scope) {
  auto& impl = *impl_;
  std::string previous = impl.name_scope_;
  if (scope.find(':') != std::string::npos) {
    throw InvalidArgumentError(fmt::format("name scope '{}' must not contain ':'", scope));
  }
  impl.name_scope_ = previous.empty() ? scope : previous + "/" + scope;
  return GraphScope([&impl, previous] { impl.name_scope_ = previous; });
}

Operation Graph::operation(const std::string& name) const {
  Node* n = impl_->find(name);
  if (n == nullptr) throw NotFoundError(fmt::format("no op named '{}' in the graph", name));
  return Operation(n);
}

Output Graph::output(const std::string& name) const {
  auto colon = name.rfind(':');
  std::string op = colon == std::string::npos ? name : name.substr(0, colon);
  int index = 0;
  if (colon != std::string::npos) {
    try {
      index = std::stoi(name.substr(colon + 1));
    } catch (const std::exception&) {
      throw InvalidArgumentError(fmt::format("malformed tensor name '{}'", name));
    }
  }
  Operation o = operation(op);
  return o.output(index);
}

std::vector<Operation> Graph::operations() const {
  std::vector<Operation> out;
  for (Node* n : impl_->nodes()) out.emplace_back(n);
  return out;
}

int Graph::num_operations() const { return impl_->num_nodes(); }

}  // namespace tessera
