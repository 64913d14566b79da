// CPU kernel of DecodeCSV (core/parsing_ops.cc): TensorFlow's decode_csv_op.cc, field for field
// (its splitting rules, its messages), with the record's text added to the messages.
#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/op_kernel.h"
#include "core/op_registry.h"

namespace tessera::internal {
namespace {

// A record in messages: quoted, and cut short when long.
std::string shown(std::string_view record) {
  constexpr std::size_t kMax = 64;
  if (record.size() <= kMax) return fmt::format("'{}'", record);
  return fmt::format("'{}...'", record.substr(0, kMax));
}

// Splits `in` into fields as TensorFlow's ExtractFields: a field in double quotes (with
// `quotes`) may hold the delimiter and "" stands for a quote; a line break outside quotes is
// skipped; a record ending in the delimiter has an empty last field. Empty input: no fields.
Status split_fields(std::string_view in, char delim, bool quotes, std::vector<std::string>* out) {
  out->clear();
  std::size_t i = 0;
  if (in.empty()) return Status();
  while (i < in.size()) {
    if (in[i] == '\n' || in[i] == '\r') {
      ++i;
      continue;
    }
    std::string field;
    if (quotes && in[i] == '"') {
      ++i;
      // Up to a quote followed by the delimiter (or the end); "" inside is one quote.
      while (i + 1 < in.size() && (in[i] != '"' || in[i + 1] != delim)) {
        if (in[i] != '"') {
          field += in[i++];
        } else if (in[i + 1] == '"') {
          field += '"';
          i += 2;
        } else {
          return errors::invalid_argument("Quote inside a string has to be escaped by another quote");
        }
      }
      if (i >= in.size() || in[i] != '"' || (i + 1 != in.size() && in[i + 1] != delim)) {
        return errors::invalid_argument("Quoted field has to end with quote followed by delim or end");
      }
      i += 2;
    } else {
      while (i < in.size() && in[i] != delim) {
        if ((quotes && in[i] == '"') || in[i] == '\n' || in[i] == '\r') {
          return errors::invalid_argument("Unquoted fields cannot have quotes/CRLFs inside");
        }
        field += in[i++];
      }
      ++i;  // past the delimiter, or the end
    }
    out->push_back(std::move(field));
  }
  if (in.back() == delim) out->emplace_back();  // "a," has an empty last field
  return Status();
}

// Parses all of `s` (surrounding spaces allowed, as TensorFlow's safe_strto*) into `*value`.
template <class T>
bool parse_number(std::string_view s, T* value) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  if (s.size() > 1 && s.front() == '+' && s[1] != '-') s.remove_prefix(1);
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *value);
  return ec == std::errc() && end == s.data() + s.size();
}

// Thread-safe: compute() keeps no state between runs.
class DecodeCSVOp : public OpKernel {
 public:
  explicit DecodeCSVOp(const Node& n)
      : OpKernel(n), delim_(n.attr<std::string>("field_delim")), quotes_(n.attr<bool>("use_quote_delim")) {}

  void compute(OpKernelContext& ctx) override {
    const Tensor& records = ctx.input(0);
    const int columns = ctx.num_inputs() - 1;
    for (int f = 0; f < columns; ++f) {
      const Tensor& d = ctx.input(f + 1);
      if (d.num_elements() > 1 || d.shape().rank() > 1) {
        return ctx.fail(ErrorCode::kInvalidArgument,
                        "record default {} must be a scalar or have at most one element, got shape {}", f,
                        d.shape().to_string());
      }
    }
    for (int f = 0; f < columns; ++f) ctx.allocate_output(f, records.shape());
    std::vector<Tensor*> out;
    for (int f = 0; f < columns; ++f) out.push_back(&ctx.output(f));
    const std::string* recs = records.data<std::string>();
    std::vector<std::string> fields;
    for (int64_t i = 0; i < records.num_elements(); ++i) {
      const std::string& record = recs[i];
      Status split = split_fields(record, delim_[0], quotes_, &fields);
      if (!split.ok()) {
        return ctx.fail(ErrorCode::kInvalidArgument, "{} in record {} ({})", split.message(), i, shown(record));
      }
      if (static_cast<int>(fields.size()) != columns) {
        return ctx.fail(ErrorCode::kInvalidArgument, "Expect {} fields but have {} in record {} ({})", columns,
                        fields.size(), i, shown(record));
      }
      for (int f = 0; f < columns; ++f) {
        Status s = put(ctx.input(f + 1), fields[static_cast<std::size_t>(f)], *out[static_cast<std::size_t>(f)], i, f);
        if (!s.ok()) return ctx.fail(ErrorCode::kInvalidArgument, "{} ({})", s.message(), shown(record));
      }
    }
  }

 private:
  // Writes field f of record i (or the column's default, when the field is empty) as element i
  // of `out`. Messages as TensorFlow's.
  static Status put(const Tensor& def, const std::string& field, Tensor& out, int64_t i, int f) {
    if (field.empty()) {
      if (def.num_elements() != 1) return errors::invalid_argument("Field {} is required but missing in record {}!", f, i);
      copy_default(def, out, i);
      return Status();
    }
    bool ok = true;
    switch (out.dtype()) {
      case DType::Float32: ok = parse_number(field, &out.mutable_data<float>()[i]); break;
      case DType::Float64: ok = parse_number(field, &out.mutable_data<double>()[i]); break;
      case DType::Int32: ok = parse_number(field, &out.mutable_data<int32_t>()[i]); break;
      case DType::Int64: ok = parse_number(field, &out.mutable_data<int64_t>()[i]); break;
      case DType::String: out.mutable_data<std::string>()[i] = field; break;
      default: return errors::internal("Field {} has dtype {}", f, dtype_name(out.dtype()));  // refused at build time
    }
    if (!ok) return errors::invalid_argument("Field {} in record {} is not a valid {}: {}", f, i, dtype_name(out.dtype()), field);
    return Status();
  }

  static void copy_default(const Tensor& def, Tensor& out, int64_t i) {
    switch (out.dtype()) {
      case DType::Float32: out.mutable_data<float>()[i] = def.data<float>()[0]; break;
      case DType::Float64: out.mutable_data<double>()[i] = def.data<double>()[0]; break;
      case DType::Int32: out.mutable_data<int32_t>()[i] = def.data<int32_t>()[0]; break;
      case DType::Int64: out.mutable_data<int64_t>()[i] = def.data<int64_t>()[0]; break;
      case DType::String: out.mutable_data<std::string>()[i] = def.data<std::string>()[0]; break;
      default: break;  // refused by the shape function
    }
  }

  const std::string delim_;
  const bool quotes_;
};

TESSERA_REGISTER_KERNEL("DecodeCSV", "CPU", DecodeCSVOp);

}  // namespace
}  // namespace tessera::internal
