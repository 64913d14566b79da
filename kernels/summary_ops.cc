// CPU kernels of the summary ops (core/summary_ops.cc): each writes one serialized
// tessera.tensorboard.Summary (core/summary.proto, TensorFlow's summary.proto by field number) into
// a String scalar. The tag is the node's name (TF1's tf.summary.* name their op after the tag).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/summary.pb.h"
#include "kernels/dtype_visit.h"

namespace tessera::internal {
namespace {

namespace tb = tessera::tensorboard;

// Calls fn(const T* data) for a numeric tensor (the shape functions refused the others).
template <class Fn>
void with_numbers(const Tensor& t, Fn&& fn) {
  visit_number(t.dtype(), [&](auto zero) { fn(t.data<decltype(zero)>()); });
}

void set_serialized(OpKernelContext& ctx, const tb::Summary& s) {
  Tensor& out = ctx.allocate_output(0, Shape{});
  if (!s.SerializeToString(&out.mutable_data<std::string>()[0])) {
    ctx.fail(ErrorCode::kInternal, "could not serialize the Summary");
  }
}

class ScalarSummaryOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Tensor& v = ctx.input(0);
    if (v.num_elements() != 1 || v.shape().rank() != 0) {
      return ctx.fail(ErrorCode::kInvalidArgument, "a scalar summary takes a scalar, got shape {}",
                      v.shape().to_string());
    }
    double value = 0;
    with_numbers(v, [&](const auto* p) { value = static_cast<double>(p[0]); });
    tb::Summary s;
    tb::Summary::Value* sv = s.add_value();
    sv->set_tag(name());
    sv->set_simple_value(static_cast<float>(value));  // TF's simple_value is a float
    set_serialized(ctx, s);
  }
};

TESSERA_REGISTER_KERNEL("ScalarSummary", "CPU", ScalarSummaryOp);

// TensorFlow's default histogram buckets (its histogram.cc): limits 1e-12 * 1.1^k below 1e20 and
// DBL_MAX, their negatives, and 0, in increasing order. A value v falls in the first bucket whose
// limit exceeds it.
const std::vector<double>& default_bucket_limits() {
  static const std::vector<double> limits = [] {
    std::vector<double> pos;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) pos.push_back(v);
    pos.push_back(DBL_MAX);
    std::vector<double> all;
    all.reserve(2 * pos.size() + 1);
    for (auto it = pos.rbegin(); it != pos.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), pos.begin(), pos.end());
    return all;
  }();
  return limits;
}

class HistogramSummaryOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Tensor& t = ctx.input(0);
    const std::vector<double>& limits = default_bucket_limits();
    std::vector<double> counts(limits.size(), 0.0);
    double lo = DBL_MAX, hi = -DBL_MAX, sum = 0, sum_squares = 0;
    bool finite = true;
    with_numbers(t, [&](const auto* p) {
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        const double v = static_cast<double>(p[i]);
        if (!std::isfinite(v)) {
          finite = false;
          return;
        }
        const auto b = std::upper_bound(limits.begin(), limits.end(), v) - limits.begin();
        counts[static_cast<std::size_t>(std::min<std::ptrdiff_t>(b, static_cast<std::ptrdiff_t>(limits.size()) - 1))] += 1;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        sum += v;
        sum_squares += v * v;
      }
    });
    if (!finite) return ctx.fail(ErrorCode::kInvalidArgument, "Nan in summary histogram for: {}", name());
    tb::Summary s;
    tb::Summary::Value* sv = s.add_value();
    sv->set_tag(name());
    tb::HistogramProto* h = sv->mutable_histo();
    h->set_min(lo);
    h->set_max(hi);
    h->set_num(static_cast<double>(t.num_elements()));
    h->set_sum(sum);
    h->set_sum_squares(sum_squares);
    // As TF's Histogram::EncodeToProto without preserve_zero_buckets: a run of empty buckets is
    // one bucket, ending at the run's last limit.
    for (std::size_t i = 0; i < counts.size();) {
      double end = limits[i];
      double count = counts[i];
      ++i;
      if (count <= 0.0) {
        while (i < counts.size() && counts[i] <= 0.0) {
          end = limits[i];
          count = counts[i];
          ++i;
        }
      }
      h->add_bucket_limit(end);
      h->add_bucket(count);
    }
    set_serialized(ctx, s);
  }
};

TESSERA_REGISTER_KERNEL("HistogramSummary", "CPU", HistogramSummaryOp);

class MergeSummaryOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    tb::Summary merged;
    std::set<std::string> tags;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& in = ctx.input(i);
      const std::string* elems = in.data<std::string>();
      for (int64_t e = 0; e < in.num_elements(); ++e) {
        tb::Summary part;
        if (!part.ParseFromString(elems[e])) {
          return ctx.fail(ErrorCode::kInvalidArgument, "Could not parse one of the summary inputs (input {}, element {})",
                          i, e);
        }
        for (tb::Summary::Value& v : *part.mutable_value()) {
          if (!tags.insert(v.tag()).second) {
            return ctx.fail(ErrorCode::kInvalidArgument, "Duplicate tag {} found in summary inputs", v.tag());
          }
          *merged.add_value() = std::move(v);
        }
      }
    }
    set_serialized(ctx, merged);
  }
};

TESSERA_REGISTER_KERNEL("MergeSummary", "CPU", MergeSummaryOp);

}  // namespace
}  // namespace tessera::internal
