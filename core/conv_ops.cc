// Op definitions and constructors for Conv2D, MaxPool and AvgPool and their gradient ops
// (Conv2DBackpropInput, Conv2DBackpropFilter, MaxPoolGrad, AvgPoolGrad). Shapes and dtypes are
// inferred here, when the graph is built, with the window arithmetic of core/conv_ops.h that the
// kernels repeat on concrete shapes. Each op keeps strides, padding (and ksize) as attrs, as
// TensorFlow's gradient functions read them.
#include "core/conv_ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/gradients.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/shape_util.h"
#include "tessera/ops.h"

namespace tessera {
namespace internal {

namespace {

enum class Padding { kValid, kSame };

StatusOr<Padding> parse_padding(const std::string& padding) {
  if (padding == "VALID") return Padding::kValid;
  if (padding == "SAME") return Padding::kSame;
  return errors::invalid_argument("padding must be \"SAME\" or \"VALID\", got \"{}\"", padding);
}

// strides or ksize: [1, h, w, 1] with h, w >= 1 (TF has no batch or depth windows here).
Status check_window_attr(const std::vector<int64_t>& v, const char* what) {
  if (v.size() != 4) {
    return errors::invalid_argument("{} must have 4 elements [1, height, width, 1], got {}", what, dims_list(v));
  }
  if (v[0] != 1 || v[3] != 1) {
    return errors::invalid_argument("{} in the batch and depth dimensions must be 1, got {}", what, dims_list(v));
  }
  if (v[1] < 1 || v[2] < 1) return errors::invalid_argument("{} must be positive, got {}", what, dims_list(v));
  return Status();
}

// The output size and the padding before, along one dim ("height" or "width") of `in` elements
// (-1: unknown, giving -1 for both).
Status window_dim(int64_t in, int64_t k, int64_t stride, Padding padding, const char* dim, int64_t* out,
                  int64_t* pad_before) {
  *out = -1;
  *pad_before = -1;
  if (in < 0) return Status();
  if (padding == Padding::kValid) {
    if (k < 0) return Status();
    if (k > in) {
      return errors::invalid_argument("the window's {} {} is larger than the input's {} (VALID padding)", dim, k, in);
    }
    *out = (in - k) / stride + 1;
    *pad_before = 0;
    return Status();
  }
  *out = (in + stride - 1) / stride;  // SAME's output does not depend on the window
  if (k < 0) return Status();
  const int64_t pad_total = std::max<int64_t>((*out - 1) * stride + k - in, 0);
  *pad_before = pad_total / 2;
  return Status();
}

// `s` as four dims (-1 where unknown); `what` names it in the error for another rank.
StatusOr<std::vector<int64_t>> dims4(const Shape& s, const char* what) {
  if (s.unknown_rank()) return std::vector<int64_t>(4, -1);
  if (s.rank() != 4) return errors::invalid_argument("{} must be 4-D, got shape {}", what, s.to_string());
  return s.dims();
}

// Fills the output dims and paddings of `w`, whose input and window dims are set.
Status place_window(Window2D& w, const std::vector<int64_t>& strides, const std::string& padding_name) {
  TESSERA_RETURN_IF_ERROR(check_window_attr(strides, "strides"));
  auto padding = parse_padding(padding_name);
  if (!padding.ok()) return padding.status();
  w.stride_h = strides[1];
  w.stride_w = strides[2];
  TESSERA_RETURN_IF_ERROR(window_dim(w.in_h, w.k_h, w.stride_h, padding.value(), "height", &w.out_h, &w.pad_top));
  return window_dim(w.in_w, w.k_w, w.stride_w, padding.value(), "width", &w.out_w, &w.pad_left);
}

}  // namespace

WindowAttrs WindowAttrs::of(const AttrMap& attrs) {
  WindowAttrs a;
  if (auto it = attrs.find("ksize"); it != attrs.end()) a.ksize = std::get<std::vector<int64_t>>(it->second);
  a.strides = std::get<std::vector<int64_t>>(attrs.at("strides"));
  a.padding = std::get<std::string>(attrs.at("padding"));
  return a;
}

StatusOr<Window2D> WindowAttrs::conv2d(const Shape& input, const Shape& filter) const {
  auto in = dims4(input, "the input (NHWC)");
  if (!in.ok()) return in.status();
  auto f = dims4(filter, "the filter (height, width, in channels, out channels)");
  if (!f.ok()) return f.status();
  const auto& i = in.value();
  const auto& k = f.value();
  if (k[0] == 0 || k[1] == 0) {
    return errors::invalid_argument("the filter's height and width must be positive, got shape {}", filter.to_string());
  }
  if (i[3] >= 0 && k[2] >= 0 && i[3] != k[2]) {
    return errors::invalid_argument("the filter's in channels ({}) must equal the input's ({}): filter shape {}, "
                                    "input shape {}",
                                    k[2], i[3], filter.to_string(), input.to_string());
  }
  Window2D w{{.batch = i[0],
              .in_h = i[1],
              .in_w = i[2],
              .in_c = i[3] >= 0 ? i[3] : k[2],
              .k_h = k[0],
              .k_w = k[1],
              .out_c = k[3]}};
  TESSERA_RETURN_IF_ERROR(place_window(w, strides, padding));
  return w;
}

StatusOr<Window2D> WindowAttrs::pool(const Shape& input) const {
  TESSERA_RETURN_IF_ERROR(check_window_attr(ksize, "ksize"));
  auto in = dims4(input, "the input (NHWC)");
  if (!in.ok()) return in.status();
  const auto& i = in.value();
  Window2D w{
      {.batch = i[0], .in_h = i[1], .in_w = i[2], .in_c = i[3], .k_h = ksize[1], .k_w = ksize[2], .out_c = i[3]}};
  TESSERA_RETURN_IF_ERROR(place_window(w, strides, padding));
  return w;
}

int64_t Window2D::chunk_rows(int64_t max_bytes, int64_t elem_bytes) const {
  const int64_t row_bytes = std::max<int64_t>(patch_size() * elem_bytes, 1);
  return std::clamp<int64_t>(max_bytes / row_bytes, 1, std::max<int64_t>(std::min<int64_t>(out_pixels(), INT_MAX), 1));
}

Status Window2D::check_gemm_dims() const {
  for (int64_t d : {patch_size(), out_c}) {
    if (d > INT_MAX) return errors::invalid_argument("dimension {} is too large for BLAS", d);
  }
  return Status();
}

Status expect_shape(const Shape& got, const Shape& want, const char* what) {
  bool same = got.unknown_rank() || want.unknown_rank() || got.rank() == want.rank();
  for (int d = 0; same && !got.unknown_rank() && !want.unknown_rank() && d < got.rank(); ++d) {
    same = got.dim(d) < 0 || want.dim(d) < 0 || got.dim(d) == want.dim(d);
  }
  if (same) return Status();
  return errors::invalid_argument("{} has shape {}, expected {}", what, got.to_string(), want.to_string());
}

namespace {

// The dtypes the CPU kernels take (TensorFlow's): the floating point ones (float16 and bfloat16
// computed in float32), and for MaxPool the integers too. The GPU kernels take fewer and say so
// when registered (KernelDTypes in core/op_registry.h).
bool window_dtype(DType dtype, bool integers) {
  return dtype_is_floating(dtype) || (integers && (dtype == DType::Int32 || dtype == DType::Int64));
}

Status expect_window_dtype(DType dtype, bool integers) {
  if (window_dtype(dtype, integers)) return Status();
  return errors::invalid_argument("unsupported dtype {}", dtype_name(dtype));
}

}  // namespace

StatusOr<WindowPlan> plan_conv(ConvKind kind, const WindowAttrs& attrs, const OpKernelContext& ctx) {
  const Shape& x = ctx.input(0).shape();
  const Shape& f = ctx.input(1).shape();
  auto w = attrs.conv2d(x, f);
  if (!w.ok()) return w.status();
  if (kind != ConvKind::kForward) {
    TESSERA_RETURN_IF_ERROR(expect_shape(ctx.input(2).shape(), w.value().out_shape(), "out_backprop"));
  }
  TESSERA_RETURN_IF_ERROR(w.value().check_gemm_dims());
  TESSERA_RETURN_IF_ERROR(expect_window_dtype(ctx.input(0).dtype(), /*integers=*/false));
  const Shape out = kind == ConvKind::kForward ? w.value().out_shape() : kind == ConvKind::kBackpropInput ? x : f;
  return WindowPlan{w.value(), out};
}

StatusOr<WindowPlan> plan_pool(PoolKind kind, const WindowAttrs& attrs, const OpKernelContext& ctx) {
  const Shape& x = ctx.input(0).shape();
  auto w = attrs.pool(x);
  if (!w.ok()) return w.status();
  const Shape out = w.value().out_shape();
  if (kind == PoolKind::kMaxGrad) {
    TESSERA_RETURN_IF_ERROR(expect_shape(ctx.input(1).shape(), out, "orig_output"));
    TESSERA_RETURN_IF_ERROR(expect_shape(ctx.input(2).shape(), out, "grad"));
  } else if (kind == PoolKind::kAvgGrad) {
    TESSERA_RETURN_IF_ERROR(expect_shape(ctx.input(1).shape(), out, "grad"));
  }
  TESSERA_RETURN_IF_ERROR(expect_window_dtype(ctx.input(0).dtype(), /*integers=*/kind == PoolKind::kMax));
  const bool grad = kind == PoolKind::kMaxGrad || kind == PoolKind::kAvgGrad;
  return WindowPlan{w.value(), grad ? x : out};
}

namespace {

// `n` inputs of one dtype that the kernels take (window_dtype; the integers for MaxPool only).
Status expect_window_inputs(const ShapeContext& c, int n, bool integers = false) {
  TESSERA_RETURN_IF_ERROR(expect_inputs(c, n));
  for (int i = 0; i < c.num_inputs(); ++i) {
    const DType d = c.input_dtype(i);
    if (!window_dtype(d, integers)) {
      return c.invalid("input {} must be float16, bfloat16, float32{}, got {}", i,
                       integers ? ", float64, int32 or int64" : " or float64", dtype_name(d));
    }
    if (d != c.input_dtype(0)) {
      return c.invalid("inputs must have one dtype: input 0 is {}, input {} is {}", dtype_name(c.input_dtype(0)), i,
                       dtype_name(d));
    }
  }
  return Status();
}

// The window of the node being built: a convolution's of inputs 0 and 1, a pool's of input 0.
StatusOr<Window2D> window_of(const ShapeContext& c, bool conv) {
  const WindowAttrs a = WindowAttrs::of(c.spec().attrs);
  auto w = conv ? a.conv2d(c.input_shape(0), c.input_shape(1)) : a.pool(c.input_shape(0));
  if (!w.ok()) return c.invalid("{}", w.status().message());
  return w;
}

// Conv2D, MaxPool, AvgPool: the window's output.
template <bool kConv>
Status forward_fn(ShapeContext& c) {
  TESSERA_RETURN_IF_ERROR(expect_window_inputs(c, kConv ? 2 : 1, /*integers=*/c.op_type() == "MaxPool"));
  auto w = window_of(c, kConv);
  if (!w.ok()) return w.status();
  c.add_output(c.input_dtype(0), w.value().out_shape());
  return Status();
}

// A gradient op of `num_inputs` inputs: those of `of_output` (index, name) have the forward op's
// output shape, and the result has the shape of input `result` (the forward op's input or filter).
Status gradient_shape(ShapeContext& c, bool conv, int num_inputs, int result,
                      std::initializer_list<std::pair<int, const char*>> of_output) {
  TESSERA_RETURN_IF_ERROR(expect_window_inputs(c, num_inputs));
  auto w = window_of(c, conv);
  if (!w.ok()) return w.status();
  for (const auto& [i, name] : of_output) {
    if (Status s = expect_shape(c.input_shape(i), w.value().out_shape(), name); !s.ok()) {
      return c.invalid("{}", s.message());
    }
  }
  c.add_output(c.input_dtype(result), c.input_shape(result));
  return Status();
}

TESSERA_REGISTER_OP(OpDef{"Conv2D", forward_fn<true>});
TESSERA_REGISTER_OPS(forward_fn<false>, "MaxPool", "AvgPool");
TESSERA_REGISTER_OP(OpDef{"Conv2DBackpropInput", [](ShapeContext& c) {
                            return gradient_shape(c, true, 3, 0, {{2, "out_backprop"}});
                          }});
TESSERA_REGISTER_OP(OpDef{"Conv2DBackpropFilter", [](ShapeContext& c) {
                            return gradient_shape(c, true, 3, 1, {{2, "out_backprop"}});
                          }});
TESSERA_REGISTER_OP(OpDef{"MaxPoolGrad", [](ShapeContext& c) {
                            return gradient_shape(c, false, 3, 0, {{1, "orig_output"}, {2, "grad"}});
                          }});
TESSERA_REGISTER_OP(OpDef{"AvgPoolGrad", [](ShapeContext& c) {
                            return gradient_shape(c, false, 2, 0, {{1, "grad"}});
                          }});

NodeSpec conv_spec(const char* type, std::string name, std::vector<int64_t> strides, std::string padding) {
  NodeSpec spec{type, std::move(name)};
  spec.attrs["strides"] = std::move(strides);
  spec.attrs["padding"] = std::move(padding);
  return spec;
}

NodeSpec pool_spec(const char* type, std::string name, std::vector<int64_t> ksize, std::vector<int64_t> strides,
                   std::string padding) {
  NodeSpec spec = conv_spec(type, std::move(name), std::move(strides), std::move(padding));
  spec.attrs["ksize"] = std::move(ksize);
  return spec;
}

std::vector<int64_t> wide(const std::vector<int>& v) { return std::vector<int64_t>(v.begin(), v.end()); }

}  // namespace

Output conv2d_backprop_input(Output input, Output filter, Output out_backprop, std::vector<int64_t> strides,
                             std::string padding, std::string name) {
  return add_op("conv2d_backprop_input",
                conv_spec("Conv2DBackpropInput", std::move(name), std::move(strides), std::move(padding)),
                {input, filter, out_backprop});
}

Output conv2d_backprop_filter(Output input, Output filter, Output out_backprop, std::vector<int64_t> strides,
                              std::string padding, std::string name) {
  return add_op("conv2d_backprop_filter",
                conv_spec("Conv2DBackpropFilter", std::move(name), std::move(strides), std::move(padding)),
                {input, filter, out_backprop});
}

Output max_pool_grad(Output orig_input, Output orig_output, Output grad, std::vector<int64_t> ksize,
                     std::vector<int64_t> strides, std::string padding, std::string name) {
  return add_op("max_pool_grad",
                pool_spec("MaxPoolGrad", std::move(name), std::move(ksize), std::move(strides), std::move(padding)),
                {orig_input, orig_output, grad});
}

Output avg_pool_grad(Output orig_input, Output grad, std::vector<int64_t> ksize, std::vector<int64_t> strides,
                     std::string padding, std::string name) {
  return add_op("avg_pool_grad",
                pool_spec("AvgPoolGrad", std::move(name), std::move(ksize), std::move(strides), std::move(padding)),
                {orig_input, grad});
}

namespace {

// ---- Gradients (TensorFlow's nn_grad.py) ----
// Each gradient op reads strides, padding and ksize from the forward node; the forward op's input
// or filter goes in as the tensor whose shape the result takes (core/conv_ops.h).

using Grads = std::vector<Output>;

const std::vector<int64_t>& attr_list(const GradContext& c, const char* name) {
  return c.node().attr<std::vector<int64_t>>(name);
}
const std::string& padding_of(const GradContext& c) { return c.node().attr<std::string>("padding"); }
// A list attr as the public builders take it (its values came from ints).
std::vector<int> ints(const std::vector<int64_t>& v) { return std::vector<int>(v.begin(), v.end()); }

TESSERA_REGISTER_GRADIENT("Conv2D", [](const GradContext& c) -> Grads {
  const auto& strides = attr_list(c, "strides");
  return {conv2d_backprop_input(c.input(0), c.input(1), c.grad(0), strides, padding_of(c)),
          conv2d_backprop_filter(c.input(0), c.input(1), c.grad(0), strides, padding_of(c))};
});

TESSERA_REGISTER_GRADIENT("MaxPool", [](const GradContext& c) -> Grads {
  return {
      max_pool_grad(c.input(0), c.output(0), c.grad(0), attr_list(c, "ksize"), attr_list(c, "strides"), padding_of(c))};
});

TESSERA_REGISTER_GRADIENT("AvgPool", [](const GradContext& c) -> Grads {
  return {avg_pool_grad(c.input(0), c.grad(0), attr_list(c, "ksize"), attr_list(c, "strides"), padding_of(c))};
});

// The gradient ops are linear in their gradient input, so the second derivatives are the other
// products of the same convolution (the input or filter read for its shape gets none).
// MaxPoolGrad has none (TF's MaxPoolGradGrad is not here): tessera::gradients names it.
TESSERA_REGISTER_GRADIENT("Conv2DBackpropInput", [](const GradContext& c) -> Grads {
  // dx = conv_input_backprop(f, dy): d/df as a filter gradient with dx's gradient as the input,
  // d/d dy the forward convolution of that gradient.
  const auto& strides = attr_list(c, "strides");
  return {Output(), conv2d_backprop_filter(c.grad(0), c.input(1), c.input(2), strides, padding_of(c)),
          ops::conv2d(c.grad(0), c.input(1), ints(strides), padding_of(c))};
});

TESSERA_REGISTER_GRADIENT("Conv2DBackpropFilter", [](const GradContext& c) -> Grads {
  // df = conv_filter_backprop(x, dy): d/dx as an input gradient with df's gradient as the filter,
  // d/d dy the forward convolution of x with it.
  const auto& strides = attr_list(c, "strides");
  return {conv2d_backprop_input(c.input(0), c.grad(0), c.input(2), strides, padding_of(c)), Output(),
          ops::conv2d(c.input(0), c.grad(0), ints(strides), padding_of(c))};
});

TESSERA_REGISTER_GRADIENT("AvgPoolGrad", [](const GradContext& c) -> Grads {
  return {Output(),
          ops::avg_pool(c.grad(0), ints(attr_list(c, "ksize")), ints(attr_list(c, "strides")), padding_of(c))};
});

}  // namespace
}  // namespace internal

namespace ops {

Output conv2d(Output input, Output filter, std::vector<int> strides, std::string padding, std::string name) {
  return internal::add_op("conv2d",
                          internal::conv_spec("Conv2D", std::move(name), internal::wide(strides), std::move(padding)),
                          {input, filter});
}

Output max_pool(Output x, std::vector<int> ksize, std::vector<int> strides, std::string padding, std::string name) {
  return internal::add_op("max_pool",
                          internal::pool_spec("MaxPool", std::move(name), internal::wide(ksize),
                                              internal::wide(strides), std::move(padding)),
                          {x});
}

Output avg_pool(Output x, std::vector<int> ksize, std::vector<int> strides, std::string padding, std::string name) {
  return internal::add_op("avg_pool",
                          internal::pool_spec("AvgPool", std::move(name), internal::wide(ksize),
                                              internal::wide(strides), std::move(padding)),
                          {x});
}

}  // namespace ops
}  // namespace tessera
