// The placement pass's cost model (declared in core/placement.h): what one run of an op costs
// on a device, from its inferred shapes, and what moving a tensor between devices costs. The
// devices' own figures (DeviceCostProfile) come from core/device.h. Note [Cost policy] in
// core/placement_schedule.cc says how placement uses them.
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/logging.h"
#include "core/placement.h"

namespace tessera::internal {

namespace {

// ---- The cost model: op classes ----

enum class OpKind {
  kNoData,          // no arithmetic and no data moved: Const, Placeholder, NoOp, VariableV2, queues
  kMove,            // copies its inputs: Identity, Cast, Assign, enqueue/dequeue
  kElementwise,     // one operation per output element
  kSqrt,            // four per output element
  kTranscendental,  // eight per output element
  kReduce,          // one per input element
  kRandom,          // ten per output element
  kMatMul,
  kOther,           // one per output element
};

OpKind op_kind(const std::string& type) {
  static const std::unordered_map<std::string_view, OpKind> kinds = {
      {"Const", OpKind::kNoData},          {"Placeholder", OpKind::kNoData},
      {"NoOp", OpKind::kNoData},           {"VariableV2", OpKind::kNoData},
      {"_ReadVariable", OpKind::kNoData},
      {"FIFOQueue", OpKind::kNoData},      {"QueueClose", OpKind::kNoData},
      {"QueueSize", OpKind::kNoData},      {"QueueIsClosed", OpKind::kNoData},
      {"Identity", OpKind::kMove},         {"Cast", OpKind::kMove},
      {"Assign", OpKind::kMove},           {"QueueEnqueue", OpKind::kMove},
      {"QueueEnqueueMany", OpKind::kMove}, {"QueueDequeue", OpKind::kMove},
      {"QueueDequeueMany", OpKind::kMove}, {"QueueDequeueUpTo", OpKind::kMove},
      {"Add", OpKind::kElementwise},       {"Sub", OpKind::kElementwise},
      {"Mul", OpKind::kElementwise},       {"Div", OpKind::kElementwise},
      {"Maximum", OpKind::kElementwise},   {"Minimum", OpKind::kElementwise},
      {"Neg", OpKind::kElementwise},       {"Relu", OpKind::kElementwise},
      {"Square", OpKind::kElementwise},    {"AssignAdd", OpKind::kElementwise},
      {"AssignSub", OpKind::kElementwise}, {"RandomShuffle", OpKind::kElementwise},
      {"Sqrt", OpKind::kSqrt},             {"Exp", OpKind::kTranscendental},
      {"Log", OpKind::kTranscendental},    {"Tanh", OpKind::kTranscendental},
      {"Sigmoid", OpKind::kTranscendental}, {"Pow", OpKind::kTranscendental},
      {"Sin", OpKind::kTranscendental},    {"Cos", OpKind::kTranscendental},
      {"Floor", OpKind::kElementwise},     {"Abs", OpKind::kElementwise},
      {"Sign", OpKind::kElementwise},      {"Relu6", OpKind::kElementwise},
      {"Reciprocal", OpKind::kElementwise}, {"Rsqrt", OpKind::kSqrt},
      {"Softplus", OpKind::kTranscendental}, {"Elu", OpKind::kTranscendental},
      {"Sum", OpKind::kReduce},          {"TopKV2", OpKind::kReduce},
      {"InTopK", OpKind::kReduce},
      {"Mean", OpKind::kReduce},           {"Max", OpKind::kReduce},
      {"RandomUniform", OpKind::kRandom},  {"RandomNormal", OpKind::kRandom},
      {"MatMul", OpKind::kMatMul},
  };
  auto it = kinds.find(type);
  return it == kinds.end() ? OpKind::kOther : it->second;
}

// Elements of a shape, unknown dimensions (and an unknown rank) counting as 1.
double known_elements(const Shape& s) {
  if (s.unknown_rank()) return 1;
  double n = 1;
  for (int i = 0; i < s.rank(); ++i) {
    if (s.dim(i) >= 0) n *= static_cast<double>(s.dim(i));
  }
  return n;
}

double dim_or_one(const Shape& s, int i) {
  if (s.unknown_rank() || i >= s.rank() || s.dim(i) < 0) return 1;
  return static_cast<double>(s.dim(i));
}

double output_elements(const Node& n) {
  double e = 0;
  for (const Shape& s : n.output_shapes) e += known_elements(s);
  return e;
}

}  // namespace

// ---- The cost model ----

double output_bytes(const Node& node, int index) {
  if (index < 0 || index >= static_cast<int>(node.output_shapes.size()) ||
      index >= static_cast<int>(node.output_dtypes.size())) {
    return 0;
  }
  return known_elements(node.output_shapes[index]) * static_cast<double>(dtype_size(node.output_dtypes[index]));
}

double op_flops(const Node& node) {
  switch (op_kind(node.type)) {
    case OpKind::kNoData:
    case OpKind::kMove:
      return 0;
    case OpKind::kElementwise:
    case OpKind::kOther:
      return output_elements(node);
    case OpKind::kSqrt:
      return 4 * output_elements(node);
    case OpKind::kTranscendental:
      return 8 * output_elements(node);
    case OpKind::kRandom:
      return 10 * output_elements(node);
    case OpKind::kReduce: {
      if (node.inputs.empty() || node.inputs[0].node == nullptr) return output_elements(node);
      const Endpoint& in = node.inputs[0];
      if (in.index >= static_cast<int>(in.node->output_shapes.size())) return 1;
      return known_elements(in.node->output_shapes[in.index]);
    }
    case OpKind::kMatMul: {
      if (node.output_shapes.empty()) return 0;
      const Shape& out = node.output_shapes[0];
      const double m = dim_or_one(out, 0);
      const double n = dim_or_one(out, 1);
      double k = 1;
      if (!node.inputs.empty() && node.inputs[0].node != nullptr) {
        const Endpoint& a = node.inputs[0];
        if (a.index < static_cast<int>(a.node->output_shapes.size())) {
          k = dim_or_one(a.node->output_shapes[a.index], node.attr_or<bool>("transpose_a", false) ? 0 : 1);
        }
      }
      return 2 * m * n * k;
    }
  }
  return 0;
}

double op_bytes(const Node& node) {
  if (op_kind(node.type) == OpKind::kNoData) return 0;
  double b = 0;
  for (const Endpoint& e : node.inputs) {
    if (e.node != nullptr) b += output_bytes(*e.node, e.index);
  }
  for (int i = 0; i < static_cast<int>(node.output_shapes.size()); ++i) b += output_bytes(node, i);
  return b;
}

double op_seconds(const Node& node, const PlacementDevice& device) {
  return device.cost.kernel_seconds(op_flops(node), op_bytes(node));
}

double transfer_seconds(const PlacementDevice& from, const PlacementDevice& to, double bytes,
                        const NetworkCostProfile& network) {
  if (&from == &to || from.name == to.name) return 0;
  const auto b = static_cast<std::size_t>(bytes);
  double t = 0;
  if (!from.is_host()) t += from.cost.transfer_seconds(b);
  if (!to.is_host()) t += to.cost.transfer_seconds(b);
  if (task_of(from.name) != task_of(to.name)) t += network.seconds(bytes);
  return t;
}

std::string_view task_of(std::string_view device_name) {
  const auto at = device_name.find("/device:");
  return device_name.substr(0, at == std::string_view::npos ? device_name.size() : at);
}

NetworkCostProfile default_network_cost() {
  static const NetworkCostProfile profile = [] {
    NetworkCostProfile p;
    auto read = [](const char* name, double& into) {
      const char* v = std::getenv(name);
      if (v == nullptr || *v == '\0') return;
      char* end = nullptr;
      const double x = std::strtod(v, &end);
      if (*end != '\0' || !std::isfinite(x) || x < 0) {
        TESSERA_LOG(kWarning, "ignoring {}='{}': expected a number >= 0", name, v);
        return;
      }
      into = x;
    };
    read("TESSERA_NETWORK_BANDWIDTH", p.bandwidth);
    read("TESSERA_NETWORK_LATENCY", p.latency_seconds);
    return p;
  }();
  return profile;
}

}  // namespace tessera::internal
