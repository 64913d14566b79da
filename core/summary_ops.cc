// The summary ops ("ScalarSummary", "HistogramSummary", "MergeSummary"): definitions, shape
// functions and the public builders of tessera::summary (include/tessera/summary.h). Their CPU
// kernels (kernels/summary_ops.cc) serialize TensorBoard's Summary message (core/summary.proto).
//
// As TF1's tf.summary.scalar, an op's name is its tag: summary::scalar("loss", x) inside the name
// scope "train" makes the op "train/loss" and the tag "train/loss" ("train/loss_1" for a second
// one), so the kernel reads the tag from its node's name and no attr repeats it.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/gradients.h"
#include "core/node.h"
#include "core/op_registry.h"
#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/summary.h"

namespace tessera {
namespace internal {
namespace {

// TF1's SUMMARIES collection: what merge_all merges, in creation order.
constexpr const char* kSummariesCollection = "summaries";

bool summarizable(DType d) { return d != DType::String && d != DType::Bool; }

Status scalar_summary_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  if (!summarizable(c.input_dtype(0))) {
    return c.invalid("a scalar summary takes a number, got {}", dtype_name(c.input_dtype(0)));
  }
  const Shape& s = c.input_shape(0);
  if (!s.unknown_rank() && s.rank() != 0) {
    return c.invalid("a scalar summary takes a scalar, got shape {}", s.to_string());
  }
  c.add_output(DType::String, Shape{});
  return Status();
}

Status histogram_summary_shape(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, 1));
  if (!summarizable(c.input_dtype(0))) {
    return c.invalid("a histogram summary takes numbers, got {}", dtype_name(c.input_dtype(0)));
  }
  c.add_output(DType::String, Shape{});
  return Status();
}

Status merge_summary_shape(ShapeContext& c) {
  if (c.num_inputs() == 0) return c.invalid("needs at least one summary");
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (c.input_dtype(i) != DType::String) {
      return c.invalid("input {} is {}, not a string (a serialized Summary)", i, dtype_name(c.input_dtype(i)));
    }
  }
  c.add_output(DType::String, Shape{});
  return Status();
}

TESSERA_REGISTER_OP(OpDef{"ScalarSummary", scalar_summary_shape});
TESSERA_REGISTER_OP(OpDef{"HistogramSummary", histogram_summary_shape});
TESSERA_REGISTER_OP(OpDef{"MergeSummary", merge_summary_shape});
TESSERA_NOT_DIFFERENTIABLE("ScalarSummary");
TESSERA_NOT_DIFFERENTIABLE("HistogramSummary");
TESSERA_NOT_DIFFERENTIABLE("MergeSummary");

// TensorBoard's tags: letters, digits and "_.-/" (TF cleans other characters away with a log line;
// tessera refuses them, so that the tag a user looks for is the name they wrote).
void check_summary_name(const char* what, const std::string& name) {
  if (name.empty()) throw InvalidArgumentError(fmt::format("summary::{}: empty name", what));
  for (char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                    ch == '.' || ch == '-' || ch == '/';
    if (!ok) {
      const std::string shown = name.size() > 64 ? name.substr(0, 64) + "..." : name;
      throw InvalidArgumentError(fmt::format(
          "summary::{}: name '{}' holds '{}' (byte 0x{:02x}); TensorBoard tags hold letters, digits and '_.-/' only",
          what, shown, ch >= 0x20 && ch < 0x7f ? std::string(1, ch) : std::string("?"),
          static_cast<unsigned>(static_cast<unsigned char>(ch))));
    }
  }
  if (name.front() == '/') {
    throw InvalidArgumentError(fmt::format("summary::{}: name '{}' starts with '/'", what, name));
  }
}

Output add_summary_op(const char* what, const char* type, std::string name, Output value) {
  check_summary_name(what, name);
  Node* n = add_op_node(what, NodeSpec{type, std::move(name)}, {value});
  auto& g = *n->graph;
  std::lock_guard<std::mutex> l(g.collections_mu_);
  g.collections_[kSummariesCollection].push_back(std::make_shared<Output>(n, 0));
  return Output(n, 0);
}

}  // namespace
}  // namespace internal

namespace summary {

Output scalar(std::string name, Output value) {
  return internal::add_summary_op("scalar", "ScalarSummary", std::move(name), value);
}

Output histogram(std::string name, Output values) {
  return internal::add_summary_op("histogram", "HistogramSummary", std::move(name), values);
}

Output merge(std::vector<Output> summaries, std::string name) {
  if (summaries.empty()) throw InvalidArgumentError("summary::merge: no summaries to merge");
  std::vector<Output> inputs = summaries;
  return internal::add_op("summary::merge", internal::NodeSpec{"MergeSummary", std::move(name)}, std::move(inputs));
}

Output merge_all(Graph& g) {
  std::vector<Output> all;
  {
    auto& impl = g.impl();
    std::lock_guard<std::mutex> l(impl.collections_mu_);
    auto it = impl.collections_.find(internal::kSummariesCollection);
    if (it != impl.collections_.end()) {
      for (const auto& p : it->second) all.push_back(*std::static_pointer_cast<const Output>(p));
    }
  }
  if (all.empty()) return Output();
  return merge(std::move(all));
}

}  // namespace summary
}  // namespace tessera
