// "DecodeCSV": its definition and shape function, and the public train::decode_csv. The record
// defaults are the op's inputs 1..n (Const nodes), as in TensorFlow, so that their dtypes and
// shapes are checked here and their values read by the kernel (kernels/parsing_ops.cc).
#include <fmt/format.h>

#include "core/gradients.h"
#include "core/node.h"
#include "core/op_registry.h"
#include "tessera/input.h"
#include "tessera/ops.h"

namespace tessera {
namespace internal {
namespace {

bool csv_dtype(DType d) {
  return d == DType::Float32 || d == DType::Float64 || d == DType::Int32 || d == DType::Int64 || d == DType::String;
}

Status decode_csv_shape(ShapeContext& c) {
  if (c.num_inputs() < 2) return c.invalid("needs records and at least one record default, got {} inputs", c.num_inputs());
  if (c.input_dtype(0) != DType::String) return c.invalid("records must be string, got {}", dtype_name(c.input_dtype(0)));
  const std::string& delim = c.attr<std::string>("field_delim");
  if (delim.size() != 1) return c.invalid("field_delim must be one character, got '{}'", delim);
  if (c.attr<bool>("use_quote_delim") && delim == "\"") return c.invalid("field_delim cannot be '\"' with quoted fields");
  for (int i = 1; i < c.num_inputs(); ++i) {
    const DType d = c.input_dtype(i);
    if (!csv_dtype(d)) {
      return c.invalid("record default {} has dtype {}; a column is float32, float64, int32, int64 or string", i - 1,
                       dtype_name(d));
    }
    const Shape& s = c.input_shape(i);
    // A scalar, a vector of one (a default) or of none (a required column).
    if (!s.unknown_rank() && (s.rank() > 1 || (s.rank() == 1 && s.dim(0) > 1))) {
      return c.invalid("record default {} must be a scalar or have at most one element, got shape {}", i - 1,
                       s.to_string());
    }
    c.add_output(d, c.input_shape(0));
  }
  return Status();
}

TESSERA_REGISTER_OP(OpDef{"DecodeCSV", decode_csv_shape});
TESSERA_NOT_DIFFERENTIABLE("DecodeCSV");

}  // namespace
}  // namespace internal

namespace train {

std::vector<Output> decode_csv(Output records, std::vector<Tensor> record_defaults, std::string field_delim,
                               std::string name, bool use_quote_delim) {
  internal::Node* r = internal::checked_node(records, "decode_csv");
  if (record_defaults.empty()) throw InvalidArgumentError("decode_csv: needs at least one record default");
  Graph& g = *r->graph->owner;
  std::vector<Output> inputs{records};
  {
    GraphScope scope = g.name_scope(name.empty() ? std::string("DecodeCSV") : name);
    for (std::size_t i = 0; i < record_defaults.size(); ++i) {
      if (record_defaults[i].is_null()) {
        throw InvalidArgumentError(fmt::format("decode_csv: record default {} is a null tensor", i));
      }
      inputs.push_back(ops::constant(g, std::move(record_defaults[i]), fmt::format("record_default_{}", i)));
    }
  }
  internal::NodeSpec spec{"DecodeCSV", std::move(name)};
  spec.attrs["field_delim"] = std::move(field_delim);
  spec.attrs["use_quote_delim"] = use_quote_delim;
  internal::Node* n = internal::add_op_node("decode_csv", std::move(spec), std::move(inputs));
  std::vector<Output> out;
  for (std::size_t i = 0; i < n->output_dtypes.size(); ++i) out.emplace_back(n, static_cast<int>(i));
  return out;
}

}  // namespace train
}  // namespace tessera
