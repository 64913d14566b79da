// One harness for every math kernel on every device type that has it (CPU, SIM, and GPU in a
// CUDA build with a GPU): the op is built in a
// Graph (so its dtypes and shapes come from graph construction), its kernel is made by the
// registered factory and run through an OpKernelContext as the executor runs it (no Session), and
// the output is compared against a float64 reference computed here, independently of the kernels:
// dtype and shape exactly, integers exactly, floating point by normalised squared error.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/device.h"
#include "core/device_factory.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "device/sim_device.h"
#include "host/child_process.h"
#include "kernels/blas.h"
#include "tessera/tessera.h"
#include "tests/testing/kernel_runner.h"
#include "tests/testing/kernel_cases.h"
#include "tests/testing/tensor_expect.h"
#include "tests/testing/tensor_values.h"
#include "tests/testing/test_util.h"

namespace tessera::internal {
namespace {

using ::testing::HasSubstr;
using tessera::testing::copy_to_device_now;
using tessera::testing::copy_to_host_now;
using tessera::testing::describe;
using tessera::testing::expect_values;
using tessera::testing::feed;
using tessera::testing::for_each_cast_case;
using tessera::testing::for_each_matmul_case;
using tessera::testing::for_each_reduction_case;
using tessera::testing::for_each_unary_case;
using tessera::testing::for_late_reduction_axis;
using tessera::testing::kAllDTypes;
using tessera::testing::KernelRun;
using tessera::testing::kNumericDTypes;
using tessera::testing::MatMulSize;
using tessera::testing::RandomInputs;
using tessera::testing::Range;
using tessera::testing::reduce_max_nan_input;
using tessera::testing::run_kernel_once;
using tessera::testing::tensor_of;
using tessera::testing::values_of;

// ---- Running kernels ----

// The devices the harness runs every op on: the CPU, a simulated accelerator of this test's own
// (its kernels are the CPU kernels run on its stream, with inputs and outputs in its memory), and
// every GPU a CUDA build registered.
struct Target {
  std::string type;
  Device* device = nullptr;  // nullptr = the host CPU
};

Device& test_sim_device() {
  static SimDevice* sim = new SimDevice(7);  // leaked: its stream threads outlive static exit
  return *sim;
}

std::mutex kernel_devices_mu;
std::map<const OpKernel*, Device*> kernel_devices;  // guarded: which device each test kernel runs on

// Runs `kernel` once on `inputs` the way the executor does, with a private resource manager and
// cancellation manager and a runner that runs closures inline; on a device, the inputs are copied
// into its memory first and the outputs back to host memory after.
KernelRun run_kernel(OpKernel& kernel, const std::vector<Tensor>& host_inputs) {
  Device* device = nullptr;
  {
    std::lock_guard<std::mutex> l(kernel_devices_mu);
    auto it = kernel_devices.find(&kernel);
    if (it != kernel_devices.end()) device = it->second;
  }
  std::vector<Tensor> inputs;
  for (const Tensor& t : host_inputs) {
    if (device == nullptr) {
      inputs.push_back(t);
      continue;
    }
    auto on_device = copy_to_device_now(*device, t);
    if (!on_device.ok()) return {on_device.status(), {}};
    inputs.push_back(std::move(on_device).value());
  }
  KernelRun r = run_kernel_once(kernel, inputs, device);
  if (device == nullptr) {
    EXPECT_TRUE(r.finished_inline) << "CPU math kernels finish before compute returns";
  }
  if (device == nullptr || !r.status.ok()) return r;
  for (std::size_t i = 0; i < r.outputs.size(); ++i) {
    Tensor& out = r.outputs[i];
    if (out.is_null()) continue;
    EXPECT_EQ(out.device(), device->name()) << "output " << i << " is not in the device's memory";
    auto on_host = copy_to_host_now(*device, out);
    if (!on_host.ok()) return {on_host.status(), {}};
    out = std::move(on_host).value();
  }
  return r;
}

// Every device type that has a kernel for the op of `y`.
std::vector<std::pair<std::string, Target>> factories_for(const Output& y) {
  const auto& registry = OpRegistry::global();
  const std::string type = y.op().type();
  std::vector<Target> targets{{"CPU", nullptr}, {"SIM", &test_sim_device()}};
  static const StatusOr<std::vector<Device*>> devices = local_devices();  // the GPUs of a CUDA build
  EXPECT_TRUE(devices.ok()) << devices.status().to_string();
  for (Device* d : devices.ok() ? devices.value() : std::vector<Device*>{}) {
    if (d->type() == "GPU") targets.push_back({"GPU", d});
  }
  std::vector<std::pair<std::string, Target>> out;
  for (const Target& t : targets) {
    if (registry.has_kernel(type, t.type)) {
      out.emplace_back(t.device == nullptr ? t.type : t.device->name(), t);
    }
  }
  EXPECT_FALSE(out.empty()) << "no kernel registered for " << type;
  EXPECT_TRUE(registry.has_kernel(type, "SIM")) << type << " has no SIM kernel";
  return out;
}

std::unique_ptr<OpKernel> make_kernel(const Output& y, const Target& target) {
  auto kernel = OpRegistry::global().create_kernel(*y.node(), target.type);
  EXPECT_TRUE(kernel.ok()) << kernel.status().to_string();
  if (!kernel.ok()) return nullptr;
  std::lock_guard<std::mutex> l(kernel_devices_mu);
  kernel_devices[kernel.value().get()] = target.device;
  return std::move(kernel).value();
}

std::unique_ptr<OpKernel> make_kernel(const Output& y, const KernelFactory& factory) {
  return factory(*y.node());
}

// The one output of a run of `kernel` on `inputs`; nullopt, and a test failure, where the run
// fails or gives another number of outputs.
std::optional<Tensor> one_output(OpKernel& kernel, const std::vector<Tensor>& inputs) {
  KernelRun r = run_kernel(kernel, inputs);
  EXPECT_TRUE(r.status.ok()) << r.status.to_string();
  if (!r.status.ok()) return std::nullopt;
  EXPECT_EQ(r.outputs.size(), 1u);
  if (r.outputs.size() != 1) return std::nullopt;
  return std::move(r.outputs[0]);
}

// The harness: runs the op of `y` on `inputs` with the kernel of every registered device type and
// checks its one output against `want`, and that the kernel left its inputs as they were.
void check_op(const Output& y, const std::vector<Tensor>& inputs, const Shape& want_shape,
              const std::vector<double>& want) {
  std::vector<Tensor> before;
  for (const Tensor& t : inputs) before.push_back(t.deep_copy());
  for (const auto& [device, factory] : factories_for(y)) {
    SCOPED_TRACE(device);
    auto kernel = make_kernel(y, factory);
    const std::optional<Tensor> out = one_output(*kernel, inputs);
    if (!out) return;
    expect_values(*out, y.dtype(), want_shape, want);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      EXPECT_TRUE(inputs[i].equals(before[i])) << "the kernel changed input " << i;
    }
  }
}

// check_op of the op of `y`, fed `x` alone, against `ref` of each element of `x`.
void check_elementwise(const Output& y, const Tensor& x, const std::function<double(double)>& ref) {
  std::vector<double> want = values_of(x);
  for (double& v : want) v = ref(v);
  check_op(y, {x}, x.shape(), want);
}

// Runs the op of `y` on every registered device type and checks it fails with InvalidArgument,
// naming the op, with `substring` in the message.
void check_op_fails(const Output& y, const std::vector<Tensor>& inputs,
                    const std::string& substring) {
  for (const auto& [device, factory] : factories_for(y)) {
    SCOPED_TRACE(device);
    auto kernel = make_kernel(y, factory);
    KernelRun r = run_kernel(*kernel, inputs);
    EXPECT_EQ(r.status.code(), ErrorCode::kInvalidArgument) << r.status.to_string();
    EXPECT_THAT(r.status.message(), HasSubstr(y.op().name() + " (" + y.op().type() + "): "));
    EXPECT_THAT(r.status.message(), HasSubstr(substring));
  }
}

// Checks the output of the op of `y` on `inputs` element by element as T: for values that a double
// cannot hold exactly (int64 near its limits).
template <class T>
void expect_exact(const Output& y, const std::vector<Tensor>& inputs, const std::vector<T>& want) {
  for (const auto& [device, factory] : factories_for(y)) {
    SCOPED_TRACE(device);
    auto kernel = make_kernel(y, factory);
    const std::optional<Tensor> out = one_output(*kernel, inputs);
    if (!out) return;
    ASSERT_EQ(out->dtype(), dtype_of<T>);
    EXPECT_EQ(out->to_vector<T>(), want);
  }
}

// The values of the op of `kernel` from one run on `inputs`.
std::vector<double> run_values(OpKernel& kernel, const std::vector<Tensor>& inputs = {}) {
  KernelRun r = run_kernel(kernel, inputs);
  EXPECT_TRUE(r.status.ok()) << r.status.to_string();
  if (!r.status.ok() || r.outputs.size() != 1) return {};
  return values_of(r.outputs[0]);
}

TEST(KernelsTest, EveryMathOpHasACpuKernel) {
  for (const char* type :
       {"Add",    "Sub", "Mul",  "Div",           "Maximum",      "Minimum",      "Neg",    "Relu",
        "Square", "Exp", "Log",  "Sqrt",          "Tanh",         "Sigmoid",      "MatMul", "Sum",
        "Mean",   "Max", "Cast", "RandomUniform", "RandomNormal", "RandomShuffle", "Pow", "Floor", "Sin", "Cos",
        "Abs",    "Sign", "Relu6", "Rsqrt", "Reciprocal", "Softplus", "Elu"}) {
    auto devices = OpRegistry::global().kernel_device_types(type);
    EXPECT_NE(std::find(devices.begin(), devices.end(), "CPU"), devices.end()) << type;
  }
}

// ---- Binary elementwise ops ----

struct BinaryOpCase {
  const char* type;
  Output (*build)(Output, Output, std::string);
  double (*ref)(double a, double b, bool integral);
  bool nonzero_b;
};
const BinaryOpCase kBinaryOps[] = {
    {"Add", ops::add, [](double a, double b, bool) { return a + b; }, false},
    {"Sub", ops::sub, [](double a, double b, bool) { return a - b; }, false},
    {"Mul", ops::mul, [](double a, double b, bool) { return a * b; }, false},
    {"Div", ops::div,
     [](double a, double b, bool integral) { return integral ? std::floor(a / b) : a / b; }, true},
    {"Maximum", ops::maximum, [](double a, double b, bool) { return std::max(a, b); }, false},
    {"Minimum", ops::minimum, [](double a, double b, bool) { return std::min(a, b); }, false},
};

// out[i] = f(a[ia], b[ib]) where ia and ib follow NumPy's rule, recomputed for every element
// from its index: dims align from the right and a dim of 1 always reads index 0.
template <class F>
std::vector<double> broadcast_reference(const Shape& a_shape, const std::vector<double>& a,
                                        const Shape& b_shape, const std::vector<double>& b,
                                        const Shape& out_shape, F f) {
  std::vector<double> out(static_cast<std::size_t>(out_shape.num_elements()));
  const int rank = out_shape.rank();
  for (int64_t i = 0; i < out_shape.num_elements(); ++i) {
    int64_t rest = i;
    int64_t ia = 0, ib = 0, sa = 1, sb = 1;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t index = rest % out_shape.dim(d);
      rest /= out_shape.dim(d);
      const int da = d - (rank - a_shape.rank());
      if (da >= 0) {
        ia += (a_shape.dim(da) == 1 ? 0 : index) * sa;
        sa *= a_shape.dim(da);
      }
      const int db = d - (rank - b_shape.rank());
      if (db >= 0) {
        ib += (b_shape.dim(db) == 1 ? 0 : index) * sb;
        sb *= b_shape.dim(db);
      }
    }
    out[i] = f(a[ia], b[ib]);
  }
  return out;
}

TEST(KernelsTest, BinaryOps) {
  struct Case {
    Shape a, b, out;
  };
  const std::vector<Case> cases = {
      {Shape{}, Shape{}, Shape{}},
      // One element each: the kernel's path without a loop.
      {Shape{1}, Shape{1}, Shape{1}},
      {Shape{}, Shape{1}, Shape{1}},
      {Shape{1, 1}, Shape{}, Shape{1, 1}},
      {Shape{5}, Shape{5}, Shape{5}},
      {Shape{1000}, Shape{1000}, Shape{1000}},
      {Shape{2, 3}, Shape{}, Shape{2, 3}},
      {Shape{}, Shape{2, 3}, Shape{2, 3}},
      {Shape{1, 1, 7}, Shape{7}, Shape{1, 1, 7}},
      {Shape{1}, Shape{6, 1}, Shape{6, 1}},
      {Shape{3, 1}, Shape{1, 4}, Shape{3, 4}},
      {Shape{4, 1, 3}, Shape{5, 1}, Shape{4, 5, 3}},
      {Shape{2, 3, 4, 5}, Shape{3, 1, 5}, Shape{2, 3, 4, 5}},
      {Shape{2, 1, 3, 1}, Shape{1, 4, 1, 5}, Shape{2, 4, 3, 5}},
      {Shape{129, 33}, Shape{33}, Shape{129, 33}},
      {Shape{33, 1}, Shape{33, 17}, Shape{33, 17}},
      {Shape{0, 3}, Shape{3}, Shape{0, 3}},
      {Shape{2, 0}, Shape{1}, Shape{2, 0}},
  };
  RandomInputs rng;
  for (const auto& op : kBinaryOps) {
    for (DType dtype : kNumericDTypes) {
      const bool integral = !dtype_is_floating(dtype);
      const Range range = integral ? Range{-50, 50} : Range{-2, 2};
      for (const auto& c : cases) {
        SCOPED_TRACE(std::string(op.type) + " " + describe(dtype, {c.a, c.b}));
        Tensor a = rng.tensor(dtype, c.a, range);
        Tensor b = rng.tensor(dtype, c.b, {range.lo, range.hi, op.nonzero_b});
        Graph g;
        Output y = op.build(feed(g, a), feed(g, b), "");
        auto want = broadcast_reference(c.a, values_of(a), c.b, values_of(b), c.out,
                                        [&](double x, double z) { return op.ref(x, z, integral); });
        check_op(y, {a, b}, c.out, want);
      }
    }
  }
}

TEST(KernelsTest, BinaryOpsCheckShapesLeftUnknownAtRunTime) {
  for (const auto& op : kBinaryOps) {
    Graph g;
    Output y = op.build(ops::placeholder(g, DType::Float32),
                        ops::placeholder(g, DType::Float32, Shape{-1}), "late");
    Tensor a = Tensor::zeros(DType::Float32, Shape{2, 3});
    Tensor b = Tensor::zeros(DType::Float32, Shape{4});
    check_op_fails(y, {a, b}, "incompatible shapes [2,3] and [4]");
  }
}

template <class T>
void check_integer_division() {
  constexpr T kMin = std::numeric_limits<T>::min();
  Graph g;
  Tensor a = Tensor::vector<T>({-7, 7, -7, 7, kMin, 0, -6, 6, kMin, 1});
  Tensor b = Tensor::vector<T>({2, -2, -2, 3, -1, -5, 3, -3, 2, -3});
  Output y = ops::div(feed(g, a), feed(g, b));
  // Rounded down, as TF1's tf.div (Python 2's `/`): -7 / 2 = -4 where C++ truncates to -3; exact
  // quotients as they are; MIN / -1 wraps to MIN instead of trapping.
  expect_exact<T>(y, {a, b}, {-4, -4, 3, 2, kMin, 0, -2, -2, kMin / 2, -1});
  check_op_fails(y, {a, Tensor::vector<T>({1, 1, 0, 1, 1, 1, 1, 1, 1, 1})}, "division by zero");
  Output by_scalar = ops::div(feed(g, a), ops::placeholder(g, dtype_of<T>, Shape{}));
  check_op_fails(by_scalar, {a, Tensor::scalar<T>(0)}, "division by zero");
  Output scalars = ops::div(ops::placeholder(g, dtype_of<T>, Shape{}), ops::placeholder(g, dtype_of<T>, Shape{}));
  expect_exact<T>(scalars, {Tensor::scalar<T>(kMin), Tensor::scalar<T>(-1)}, {kMin});
  check_op_fails(scalars, {Tensor::scalar<T>(7), Tensor::scalar<T>(0)}, "division by zero");
}

TEST(KernelsTest, IntegerDivisionRoundsDownAndRejectsZero) {
  check_integer_division<int32_t>();
  check_integer_division<int64_t>();
}

template <class T>
void check_integer_wraparound() {
  constexpr T kMin = std::numeric_limits<T>::min();
  constexpr T kMax = std::numeric_limits<T>::max();
  constexpr T kHalf = T{1} << (sizeof(T) * 4);  // kHalf * kHalf overflows to 0
  Graph g;
  Tensor a = Tensor::vector<T>({kMax, kMin, kHalf});
  Tensor b = Tensor::vector<T>({1, 1, kHalf});
  expect_exact<T>(ops::add(feed(g, a), feed(g, b)), {a, b}, {kMin, kMin + 1, 2 * kHalf});
  expect_exact<T>(ops::sub(feed(g, a), feed(g, b)), {a, b}, {kMax - 1, kMax, 0});
  expect_exact<T>(ops::mul(feed(g, a), feed(g, b)), {a, b}, {kMax, kMin, 0});
  expect_exact<T>(ops::neg(feed(g, a)), {a}, {kMin + 1, kMin, -kHalf});
  expect_exact<T>(ops::square(feed(g, a)), {a}, {1, 0, 0});
}

TEST(KernelsTest, IntegerArithmeticWrapsAround) {
  check_integer_wraparound<int32_t>();
  check_integer_wraparound<int64_t>();
}

TEST(KernelsTest, MaximumAndMinimumPropagateNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Graph g;
    Tensor a = tensor_of(dtype, Shape{3}, {nan, 1, 2});
    Tensor b = tensor_of(dtype, Shape{3}, {1, nan, 3});
    check_op(ops::maximum(feed(g, a), feed(g, b)), {a, b}, Shape{3}, {nan, nan, 3});
    check_op(ops::minimum(feed(g, a), feed(g, b)), {a, b}, Shape{3}, {nan, nan, 2});
  }
}

// TensorFlow's Pow: floats as std::pow (fractional exponents of positive bases, 0^0 = 1, a
// negative base to a fractional power NaN), with broadcasting; integers by repeated
// multiplication, wrapping around, and a negative exponent fails the op.
TEST(KernelsTest, PowOfFloatsAndIntegers) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Graph g;
    Tensor x = tensor_of(dtype, Shape{2, 3}, {2, 9, 0, -2, 0.5, 4});
    Tensor y = tensor_of(dtype, Shape{3}, {3, 0.5, 0});
    const bool f32 = dtype == DType::Float32;
    auto in_dtype = [&](double v) { return f32 ? static_cast<double>(static_cast<float>(v)) : v; };
    check_op(ops::pow(feed(g, x), feed(g, y)), {x, y}, Shape{2, 3},
             {8, 3, 1, -8, in_dtype(std::pow(0.5, 0.5)), 1});
    Tensor negative = tensor_of(dtype, Shape{2}, {-8, 4});
    Tensor half = tensor_of(dtype, Shape{}, {0.5});
    check_op(ops::pow(feed(g, negative), feed(g, half)), {negative, half}, Shape{2}, {nan, 2});
  }
  for (DType dtype : {DType::Int32, DType::Int64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Graph g;
    Tensor x = tensor_of(dtype, Shape{6}, {2, -3, 0, 0, 7, -1});
    Tensor y = tensor_of(dtype, Shape{6}, {10, 3, 0, 5, 1, 7});
    Output p = ops::pow(feed(g, x), feed(g, y));
    check_op(p, {x, y}, Shape{6}, {1024, -27, 1, 0, 7, -1});
    check_op_fails(p, {x, tensor_of(dtype, Shape{6}, {1, 1, 1, -1, 1, 1})}, "negative integer powers");
    Output by_scalar = ops::pow(feed(g, x), ops::placeholder(g, dtype, Shape{}));
    check_op_fails(by_scalar, {x, tensor_of(dtype, Shape{}, {-2})}, "negative integer powers");
  }
  Graph g;
  Tensor big = Tensor::vector<int32_t>({3, 2});
  Tensor exponent = Tensor::vector<int32_t>({21, 31});
  // 3^21 = 10460353203 and 2^31 wrap around in int32, as TensorFlow's integer Pow does.
  expect_exact<int32_t>(ops::pow(feed(g, big), feed(g, exponent)), {big, exponent},
                        {static_cast<int32_t>(static_cast<uint32_t>(10460353203ULL)), std::numeric_limits<int32_t>::min()});
}

// ---- Unary elementwise ops ----

struct UnaryOpCase {
  const char* type;
  Output (*build)(Output, std::string);
  double (*ref)(double);
  bool floating_only;
  Range float_range;
};
const UnaryOpCase kUnaryOps[] = {
    {"Neg", ops::neg, [](double x) { return -x; }, false, {-2, 2}},
    {"Relu", ops::relu, [](double x) { return std::max(x, 0.0); }, false, {-2, 2}},
    {"Square", ops::square, [](double x) { return x * x; }, false, {-2, 2}},
    {"Exp", ops::exp, [](double x) { return std::exp(x); }, true, {-3, 3}},
    {"Log", ops::log, [](double x) { return std::log(x); }, true, {0.01, 4}},
    {"Sqrt", ops::sqrt, [](double x) { return std::sqrt(x); }, true, {0, 4}},
    {"Tanh", ops::tanh, [](double x) { return std::tanh(x); }, true, {-4, 4}},
    {"Sigmoid", ops::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, true, {-8, 8}},
    {"Floor", ops::floor, [](double x) { return std::floor(x); }, true, {-4, 4}},
    {"Sin", ops::sin, [](double x) { return std::sin(x); }, true, {-4, 4}},
    {"Cos", ops::cos, [](double x) { return std::cos(x); }, true, {-4, 4}},
    {"Abs", ops::abs, [](double x) { return std::fabs(x); }, false, {-4, 4}},
    {"Sign", ops::sign, [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }, false, {-4, 4}},
    {"Relu6", ops::relu6, [](double x) { return std::min(std::max(x, 0.0), 6.0); }, false, {-3, 9}},
    {"Rsqrt", ops::rsqrt, [](double x) { return 1 / std::sqrt(x); }, true, {0.05, 4}},
    {"Reciprocal", ops::reciprocal, [](double x) { return 1 / x; }, true, {0.1, 4}},
    {"Softplus", ops::softplus, [](double x) { return std::log1p(std::exp(x)); }, true, {-8, 20}},  // no float16 subnormals
    {"Elu", ops::elu, [](double x) { return x < 0 ? std::expm1(x) : x; }, true, {-4, 4}},
};

TEST(KernelsTest, UnaryOps) {
  const std::vector<Shape> shapes = {Shape{}, Shape{0}, Shape{7}, Shape{3, 5}, Shape{1031}};
  for_each_unary_case(kUnaryOps, shapes, [](const UnaryOpCase& op, const Tensor& x) {
    Graph g;
    check_elementwise(op.build(feed(g, x), ""), x, op.ref);
  });
}

TEST(KernelsTest, UnaryOpsAtTheEdgesOfTheirDomain) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Graph g;
    Tensor x = tensor_of(dtype, Shape{4}, {-1000, 0, -1, nan});
    check_op(ops::sigmoid(feed(g, x)), {x}, Shape{4}, {0, 0.5, 1 / (1 + std::exp(1.0)), nan});
    check_op(ops::log(feed(g, x)), {x}, Shape{4}, {nan, -inf, nan, nan});
    check_op(ops::sqrt(feed(g, x)), {x}, Shape{4}, {nan, 0, nan, nan});
    check_op(ops::relu(feed(g, x)), {x}, Shape{4}, {0, 0, 0, nan});
    check_op(ops::exp(feed(g, x)), {x}, Shape{4}, {0, 1, std::exp(-1.0), nan});
  }
}

// Float32 tanh and sigmoid are computed in vectorized code of their own (Note [Vectorized exp, tanh
// and sigmoid] in kernels/cwise_ops.cc): within 4 ulp of the exact values over 200,001 points of
// [-20, 20] and the edges (around 0.5, where tanh changes formulas; tiny values; past exp's range),
// -0 kept, inf and NaN as the library's.
TEST(KernelsTest, Float32TanhAndSigmoidAreWithinFourUlp) {
  std::vector<float> xs;
  for (int i = -100000; i <= 100000; ++i) xs.push_back(static_cast<float>(i) * 2e-4f);
  for (float e : {0.5f, -0.5f, 1e-30f, -1e-30f, 1e-6f, 87.0f, -87.0f, 88.8f, -88.8f, 100.0f, -100.0f, 1e4f, -1e4f}) {
    xs.push_back(e);
    xs.push_back(std::nextafter(e, 0.0f));
  }
  const auto n = static_cast<int64_t>(xs.size());
  Graph g;
  Output x = ops::constant(g, Tensor::from_vector<float>(xs, Shape{n}));
  Session s(g);
  std::vector<Tensor> got = s.run({ops::tanh(x), ops::sigmoid(x)});
  const std::vector<float> t = got[0].to_vector<float>(), sg = got[1].to_vector<float>();
  auto ulps = [](float have, double want) {
    const auto w = static_cast<float>(want);
    if (w == have) return 0.0;
    const double ulp = std::nextafter(std::abs(w), std::numeric_limits<float>::infinity()) - std::abs(w);
    return std::abs(static_cast<double>(have) - want) / ulp;
  };
  double worst_tanh = 0, worst_sigmoid = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    worst_tanh = std::max(worst_tanh, ulps(t[i], std::tanh(v)));
    const double sig = 1 / (1 + std::exp(-v));
    if (sig > 1.2e-38) worst_sigmoid = std::max(worst_sigmoid, ulps(sg[i], sig));  // (denormals flush to 0)
  }
  EXPECT_LE(worst_tanh, 4.0);
  EXPECT_LE(worst_sigmoid, 4.0);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Output edges = ops::constant(g, Tensor::vector<float>({-0.0f, inf, -inf, nan}));
  got = s.run({ops::tanh(edges), ops::sigmoid(edges)});
  const std::vector<float> te = got[0].to_vector<float>(), se = got[1].to_vector<float>();
  EXPECT_TRUE(te[0] == 0.0f && std::signbit(te[0]));  // tanh(-0) = -0
  EXPECT_EQ(te[1], 1.0f);
  EXPECT_EQ(te[2], -1.0f);
  EXPECT_TRUE(std::isnan(te[3]));
  EXPECT_EQ(se[0], 0.5f);
  EXPECT_EQ(se[1], 1.0f);
  EXPECT_EQ(se[2], 0.0f);
  EXPECT_TRUE(std::isnan(se[3]));
}

// TensorFlow's values at the edges (printed by TF 2.21's compat.v1 ops): sign(NaN) is NaN and
// sign(-0) 0; abs of the smallest integer is itself; relu6 keeps NaN; softplus is x or exp(x)
// past its thresholds (no overflow at 100 or 1000, no log(1) = 0 at -20); elu(-inf) = -1.
TEST(KernelsTest, NewUnaryOpsAtTheEdgesOfTheirDomain) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Graph g;
    Tensor x = tensor_of(dtype, Shape{5}, {nan, -0.0, 2, -3, -inf});
    check_op(ops::sign(feed(g, x)), {x}, Shape{5}, {nan, 0, 1, -1, -1});
    check_op(ops::abs(feed(g, x)), {x}, Shape{5}, {nan, 0, 2, 3, inf});
    check_op(ops::relu6(feed(g, x)), {x}, Shape{5}, {nan, 0, 2, 0, 0});
    check_op(ops::elu(feed(g, x)), {x}, Shape{5}, {nan, 0, 2, std::expm1(-3.0), -1});
    Tensor big = tensor_of(dtype, Shape{5}, {-20, 0, 20, 100, 1000});
    const bool f32 = dtype == DType::Float32;
    // float32 crosses its upper threshold (log(2^-23) + 2 = -13.9) before 20: softplus(20) = 20.
    check_op(ops::softplus(feed(g, big)), {big}, Shape{5},
             {std::exp(-20.0), std::log(2.0), f32 ? 20.0 : 20 + std::log1p(std::exp(-20.0)), 100, 1000});
    Tensor zero = tensor_of(dtype, Shape{2}, {0, -0.0});
    check_op(ops::reciprocal(feed(g, zero)), {zero}, Shape{2}, {inf, -inf});
    check_op(ops::rsqrt(feed(g, zero)), {zero}, Shape{2}, {inf, -inf});
  }
  Graph g;
  Tensor ints = Tensor::vector<int32_t>({std::numeric_limits<int32_t>::min(), -5, 7, 0});
  expect_exact<int32_t>(ops::abs(feed(g, ints)), {ints}, {std::numeric_limits<int32_t>::min(), 5, 7, 0});
  expect_exact<int32_t>(ops::sign(feed(g, ints)), {ints}, {-1, -1, 1, 0});
  Tensor longs = Tensor::vector<int64_t>({-9, 3, 6, 11});
  expect_exact<int64_t>(ops::relu6(feed(g, longs)), {longs}, {0, 3, 6, 6});
}

TEST(KernelsTest, FloatingOnlyUnaryOpsRejectIntegers) {
  Graph g;
  Output i = ops::placeholder(g, DType::Int32, Shape{2});
  for (auto op : {&ops::rsqrt, &ops::reciprocal, &ops::softplus, &ops::elu}) {
    EXPECT_THROW(op(i, ""), InvalidArgumentError);
  }
}

// ---- MatMul ----

TEST(KernelsTest, MatMul) {
  const std::vector<MatMulSize> sizes = {{1, 1, 1},     {3, 4, 5}, {17, 33, 9}, {64, 65, 63},
                                         {5, 300, 600}, {0, 3, 4}, {3, 0, 4},   {4, 3, 0}};
  for_each_matmul_case(sizes, [](const Tensor& a, const Tensor& b, bool ta, bool tb, MatMulSize size) {
    const auto [m, k, n] = size;
    const auto av = values_of(a);
    const auto bv = values_of(b);
    std::vector<double> want(static_cast<std::size_t>(m * n));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          sum += (ta ? av[p * m + i] : av[i * k + p]) * (tb ? bv[j * k + p] : bv[p * n + j]);
        }
        want[i * n + j] = sum;
      }
    }
    Graph g;
    check_op(ops::matmul(feed(g, a), feed(g, b), ta, tb), {a, b}, Shape{m, n}, want);
  });
}

TEST(KernelsTest, MatMulChecksShapesLeftUnknownAtRunTime) {
  Graph g;
  Output y = ops::matmul(ops::placeholder(g, DType::Float32),
                         ops::placeholder(g, DType::Float32, Shape{-1, -1}), false, false, "late");
  Tensor m23 = Tensor::zeros(DType::Float32, Shape{2, 3});
  check_op_fails(y, {m23, Tensor::zeros(DType::Float32, Shape{4, 5})}, "[2,3] and [4,5]");
  check_op_fails(y, {Tensor::zeros(DType::Float32, Shape{2, 3, 1}), m23}, "[2,3,1]");
}

TEST(KernelsTest, MatMulIsExpensiveByItsMultiplyAdds) {
  Graph g;
  auto x = [&](Shape s) { return ops::placeholder(g, DType::Float32, s); };
  const auto& factory = *OpRegistry::global().find_kernel("MatMul", "CPU");
  // A 16x16 output is small, but 16x16x4096 multiply-adds are not.
  EXPECT_TRUE(
      make_kernel(ops::matmul(x(Shape{16, 4096}), x(Shape{4096, 16})), factory)->is_expensive());
  EXPECT_FALSE(make_kernel(ops::matmul(x(Shape{4, 4}), x(Shape{4, 4})), factory)->is_expensive());
  EXPECT_TRUE(make_kernel(ops::matmul(x(Shape{4, -1}), x(Shape{-1, 4})), factory)->is_expensive());
}

// ---- Reductions ----

using tessera::testing::kReductions;

// Folds every input element into the output element its kept indices name.
std::vector<double> reduction_reference(const std::string& type, bool integral, const Shape& in,
                                        const std::vector<double>& x, const std::vector<int>& axes,
                                        int64_t out_elements) {
  std::vector<bool> reduced(in.rank(), axes.empty());
  for (int axis : axes) reduced[axis < 0 ? axis + in.rank() : axis] = true;
  std::vector<double> acc(static_cast<std::size_t>(out_elements),
                          type == "Max" ? -std::numeric_limits<double>::infinity() : 0.0);
  std::vector<int64_t> count(acc.size(), 0);
  for (int64_t i = 0; i < in.num_elements(); ++i) {
    int64_t rest = i, o = 0, stride = 1;
    for (int d = in.rank() - 1; d >= 0; --d) {
      const int64_t index = rest % in.dim(d);
      rest /= in.dim(d);
      if (!reduced[d]) {
        o += index * stride;
        stride *= in.dim(d);
      }
    }
    acc[o] = type == "Max" ? std::max(acc[o], x[i]) : acc[o] + x[i];
    ++count[o];
  }
  if (type == "Mean") {
    for (std::size_t o = 0; o < acc.size(); ++o) {
      acc[o] = integral ? std::trunc(acc[o] / count[o]) : acc[o] / count[o];
    }
  }
  return acc;
}

TEST(KernelsTest, Reductions) {
  struct Case {
    Shape in;
    std::vector<int> axes;
  };
  const std::vector<Case> cases = {
      {Shape{}, {}},
      {Shape{5}, {}},
      {Shape{5}, {0}},
      {Shape{1000}, {0}},
      {Shape{3, 4}, {}},
      {Shape{3, 4}, {0}},
      {Shape{3, 4}, {1}},
      {Shape{3, 4}, {-1}},
      {Shape{3, 4}, {0, 1}},
      {Shape{37, 70}, {1}},
      {Shape{70, 37}, {0}},
      {Shape{2, 3, 4}, {1}},
      {Shape{2, 3, 4}, {0, 2}},
      {Shape{2, 3, 4}, {-3}},
      {Shape{2, 1, 4}, {0}},
      {Shape{2, 1, 4}, {1}},
      {Shape{2, 3, 4, 5}, {1, 3}},
      {Shape{2, 3, 4, 5}, {0, 2, 3}},
      {Shape{4, 0, 3}, {2}},
  };
  // Floating sums and means over one-signed inputs: over mixed signs they cancel, and the float32
  // rounding of any summation order but the reference's (a GPU's tree, say) is then far beyond the
  // tolerance relative to the small result, without a kernel fault.
  const auto range = [](const auto& op, DType dtype) {
    const bool sums = op.type != std::string("Max");
    return !dtype_is_floating(dtype) ? Range{-50, 50} : sums ? Range{0.25, 2} : Range{-2, 2};
  };
  const auto check = [](const auto& op, const Tensor& x, const Case& c, bool keep_dims) {
    Graph g;
    Output y = op.build(feed(g, x), c.axes, keep_dims, "");
    const Shape out = y.shape();  // from shape inference, whose rules shape_inference_test checks
    ASSERT_TRUE(out.fully_defined());
    const bool integral = !dtype_is_floating(x.dtype());
    check_op(y, {x}, out, reduction_reference(op.type, integral, c.in, values_of(x), c.axes, out.num_elements()));
  };
  for_each_reduction_case(kReductions, cases, range, check);
}

TEST(KernelsTest, ReductionsOverEmptySets) {
  for (DType dtype : kNumericDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Graph g;
    Tensor x = Tensor::zeros(dtype, Shape{4, 0, 3});
    const std::vector<double> zeros(12, 0.0);
    check_op(ops::reduce_sum(feed(g, x), {1}), {x}, Shape{4, 3}, zeros);
    check_op_fails(ops::reduce_max(feed(g, x), {1}), {x}, "empty");
    if (dtype_is_floating(dtype)) {
      check_op(ops::reduce_mean(feed(g, x), {1}), {x}, Shape{4, 3},
               std::vector<double>(12, std::numeric_limits<double>::quiet_NaN()));
    } else {
      check_op_fails(ops::reduce_mean(feed(g, x), {1}), {x}, "empty");
    }
    // Nothing to compute for an empty output, even when the set is empty.
    check_op(ops::reduce_max(feed(g, x), {0}), {x}, Shape{0, 3}, {});
  }
}

TEST(KernelsTest, ReductionsCheckAxesLeftUnknownAtRunTime) { for_late_reduction_axis(check_op_fails); }

TEST(KernelsTest, ReduceMaxPropagatesNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Graph g;
  const Tensor x = reduce_max_nan_input(DType::Float32);
  check_op(ops::reduce_max(feed(g, x), {1}), {x}, Shape{2}, {nan, 1});
  check_op(ops::reduce_max(feed(g, x), {0}), {x}, Shape{40}, [&] {
    std::vector<double> want(40, 1.0);
    want[3] = nan;
    return want;
  }());
}

TEST(KernelsTest, ReductionsAreExpensiveByTheirInput) {
  Graph g;
  const auto& factory = *OpRegistry::global().find_kernel("Sum", "CPU");
  // A scalar output, but a million inputs to read.
  EXPECT_TRUE(
      make_kernel(ops::reduce_sum(ops::placeholder(g, DType::Float32, Shape{1000, 1000})), factory)
          ->is_expensive());
  EXPECT_FALSE(
      make_kernel(ops::reduce_sum(ops::placeholder(g, DType::Float32, Shape{10, 10})), factory)
          ->is_expensive());
}

// ---- Cast ----

double cast_reference(double v, DType to) {
  switch (to) {
    case DType::Bool:
      return v != 0 ? 1 : 0;
    case DType::Int32:
    case DType::Int64:
      return std::trunc(v);
    case DType::Float32:
      return static_cast<float>(v);
    case DType::Float64:
    case DType::Float16:   // rounding to 16 bits: within the dtype's tolerance
    case DType::BFloat16:
      return v;
    case DType::String:  // no numeric cast to or from strings: not among the cast test's dtypes
      break;
  }
  ADD_FAILURE() << "cast_reference: no numeric reference for " << dtype_name(to);
  return v;
}

TEST(KernelsTest, CastBetweenAllDTypes) {
  const std::vector<Shape> shapes = {Shape{}, Shape{0}, Shape{9}, Shape{3, 40}};
  for_each_cast_case(shapes, [](const Tensor& x, DType to) {
    Graph g;
    check_elementwise(ops::cast(feed(g, x), to), x, [&](double v) { return cast_reference(v, to); });
  });
}

TEST(KernelsTest, CastFromFloatingPointSaturates) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (DType from : {DType::Float32, DType::Float64}) {
    Graph g;
    Tensor x = tensor_of(from, Shape{6}, {1e10, -1e10, nan, -3.9, inf, -1e30});
    expect_exact<int32_t>(ops::cast(feed(g, x), DType::Int32), {x},
                          {INT32_MAX, INT32_MIN, 0, -3, INT32_MAX, INT32_MIN});
    expect_exact<int64_t>(ops::cast(feed(g, x), DType::Int64), {x},
                          {10000000000, -10000000000, 0, -3, INT64_MAX, INT64_MIN});
    check_op(ops::cast(feed(g, x), DType::Bool), {x}, Shape{6}, {1, 1, 1, 1, 1, 1});
  }
}

TEST(KernelsTest, CastToTheSameDTypeSharesTheBuffer) {
  Graph g;
  Tensor x = Tensor::vector<float>({1, 2, 3});
  Output y = ops::cast(feed(g, x), DType::Float32);
  for (const auto& [device, factory] : factories_for(y)) {
    if (factory.device != nullptr) continue;  // on a device the input is a copy to begin with
    auto kernel = make_kernel(y, factory);
    EXPECT_FALSE(kernel->is_expensive());
    KernelRun r = run_kernel(*kernel, {x});
    ASSERT_TRUE(r.status.ok());
    EXPECT_EQ(r.outputs[0].raw_data(), x.raw_data());
  }
}

// ---- Random ops ----

double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}
double stddev_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / v.size());
}

// Philox4x32-10 as specified by Random123 (Salmon et al., SC 2011), written out again here so
// that the kernels' stream can be checked bit for bit.
std::array<uint32_t, 4> philox_reference(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  auto mulhilo = [](uint32_t a, uint32_t b, uint32_t& hi) {
    const uint64_t product = static_cast<uint64_t>(a) * b;
    hi = static_cast<uint32_t>(product >> 32);
    return static_cast<uint32_t>(product);
  };
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = mulhilo(0xD2511F53u, ctr[0], hi0);
    const uint32_t lo1 = mulhilo(0xCD9E8D57u, ctr[2], hi1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
    key[0] += 0x9E3779B9u;
    key[1] += 0xBB67AE85u;
  }
  return ctr;
}

TEST(KernelsTest, PhiloxReferenceMatchesRandom123KnownAnswers) {
  // Random123's tests/kat_vectors, the three "philox4x32 10" lines.
  using Words = std::array<uint32_t, 4>;
  EXPECT_EQ(philox_reference({0, 0, 0, 0}, {0, 0}),
            (Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox_reference({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      philox_reference({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
      (Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(KernelsTest, RandomUniformIsPhiloxOfTheSeedAndBlockIndex) {
  // Note [Random streams] in kernels/random_ops.cc: key = seed, block i = Philox of counter (i, 0),
  // each run taking the blocks after the previous run's. A float takes the top 24 bits of a word,
  // a double the top 53 bits of two.
  const uint64_t seed = 0x0123456789abcdefull;
  const std::array<uint32_t, 2> key = {static_cast<uint32_t>(seed),
                                       static_cast<uint32_t>(seed >> 32)};
  auto block = [&](uint32_t i) { return philox_reference({i, 0, 0, 0}, key); };
  Graph g;
  Output f32 = ops::random_uniform(g, Shape{6}, DType::Float32, seed);
  Output f64 = ops::random_uniform(g, Shape{3}, DType::Float64, seed);
  for (const auto& [device, factory] : factories_for(f32)) {
    SCOPED_TRACE(device);
    auto kernel = make_kernel(f32, factory);
    for (uint32_t run = 0; run < 2; ++run) {  // 6 floats use 2 blocks per run
      std::vector<double> want;
      for (uint32_t b = 2 * run; b < 2 * run + 2; ++b) {
        for (uint32_t word : block(b)) want.push_back(static_cast<double>(word >> 8) * 0x1p-24);
      }
      want.resize(6);
      EXPECT_EQ(run_values(*kernel), want) << "run " << run;
    }
  }
  for (const auto& [device, factory] : factories_for(f64)) {
    SCOPED_TRACE(device);
    auto kernel = make_kernel(f64, factory);
    std::vector<double> want;
    for (uint32_t b = 0; b < 2; ++b) {
      const auto w = block(b);
      for (int j = 0; j < 4; j += 2) {
        want.push_back(static_cast<double>(((static_cast<uint64_t>(w[j]) << 32) | w[j + 1]) >> 11) *
                       0x1p-53);
      }
    }
    want.resize(3);
    EXPECT_EQ(run_values(*kernel), want);
  }
}

TEST(KernelsTest, RandomUniformIsUniformInZeroOne) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Graph g;
    Output y = ops::random_uniform(g, Shape{200, 500}, dtype, 11);
    for (const auto& [device, factory] : factories_for(y)) {
      SCOPED_TRACE(describe(dtype, {}) + " " + device);
      auto kernel = make_kernel(y, factory);
      KernelRun r = run_kernel(*kernel, {});
      ASSERT_TRUE(r.status.ok()) << r.status.to_string();
      ASSERT_EQ(r.outputs[0].dtype(), dtype);
      ASSERT_EQ(r.outputs[0].shape(), (Shape{200, 500}));
      const std::vector<double> v = values_of(r.outputs[0]);
      EXPECT_GE(*std::min_element(v.begin(), v.end()), 0.0);
      EXPECT_LT(*std::max_element(v.begin(), v.end()), 1.0);
      EXPECT_NEAR(mean_of(v), 0.5, 0.01);
      EXPECT_NEAR(stddev_of(v), std::sqrt(1.0 / 12), 0.01);
      std::vector<int> bins(10, 0);
      for (double x : v) ++bins[static_cast<int>(x * 10)];
      for (int b : bins) EXPECT_NEAR(b, 10000, 600);  // ~6 standard deviations
    }
  }
}

TEST(KernelsTest, RandomNormalHasItsMeanAndStddev) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Graph g;
    Output y = ops::random_normal(g, Shape{100001}, dtype, 5, 3.0f, 2.0f);
    for (const auto& [device, factory] : factories_for(y)) {
      SCOPED_TRACE(describe(dtype, {}) + " " + device);
      auto kernel = make_kernel(y, factory);
      const std::vector<double> v = run_values(*kernel);
      ASSERT_EQ(v.size(), 100001u);
      EXPECT_NEAR(mean_of(v), 3.0, 0.05);
      EXPECT_NEAR(stddev_of(v), 2.0, 0.05);
      const auto within_one_sigma =
          std::count_if(v.begin(), v.end(), [](double x) { return std::abs(x - 3) < 2; });
      EXPECT_NEAR(static_cast<double>(within_one_sigma) / v.size(), 0.6827, 0.01);
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); }));
    }
  }
}

// Checks the random op that `build` makes, run on `inputs`: each run draws new values, a fixed
// seed repeats its sequence of runs in a fresh kernel, and seed 0 differs between kernels.
void check_random_streams(const std::function<Output(Graph&, uint64_t seed)>& build,
                          const std::vector<Tensor>& inputs = {}) {
  Graph g;
  Output seeded = build(g, 42);
  Output unseeded = build(g, 0);
  for (const auto& [device, factory] : factories_for(seeded)) {
    SCOPED_TRACE(device);
    auto first = make_kernel(seeded, factory);
    auto second = make_kernel(seeded, factory);
    const auto run1 = run_values(*first, inputs);
    const auto run2 = run_values(*first, inputs);
    ASSERT_FALSE(run1.empty());
    EXPECT_NE(run1, run2) << "each run draws new values";
    EXPECT_EQ(run_values(*second, inputs), run1) << "a fixed seed repeats in a fresh kernel";
    EXPECT_EQ(run_values(*second, inputs), run2);
    auto random_a = make_kernel(unseeded, factory);
    auto random_b = make_kernel(unseeded, factory);
    EXPECT_NE(run_values(*random_a, inputs), run_values(*random_b, inputs))
        << "seed 0 seeds each kernel afresh";
  }
}

TEST(KernelsTest, RandomOpsAreReproducibleWithASeedAndNewOnEveryRun) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (int64_t n : {1, 7, 64}) {
      SCOPED_TRACE(describe(dtype, {Shape{n}}));
      check_random_streams(
          [&](Graph& g, uint64_t seed) { return ops::random_uniform(g, Shape{n}, dtype, seed); });
      check_random_streams(
          [&](Graph& g, uint64_t seed) { return ops::random_normal(g, Shape{n}, dtype, seed); });
    }
  }
  const Tensor rows = Tensor::vector<int32_t>([] {
    std::vector<int32_t> v(64);
    std::iota(v.begin(), v.end(), 0);
    return v;
  }());
  check_random_streams(
      [&](Graph& g, uint64_t seed) { return ops::random_shuffle(feed(g, rows), seed); }, {rows});
}

TEST(KernelsTest, ConcurrentRandomRunsDrawDisjointValues) {
  // Each run reserves its values with one atomic step, so concurrent runs of one kernel see the
  // same values as as many runs in a row, in some order, and no value twice (float64 values
  // carry 53 random bits: a repeat by chance is out of the question).
  constexpr int kRuns = 8;
  Graph g;
  Output y = ops::random_uniform(g, Shape{1001}, DType::Float64, 99);
  for (const auto& [device, factory] : factories_for(y)) {
    SCOPED_TRACE(device);
    auto shared = make_kernel(y, factory);
    std::vector<std::vector<double>> concurrent(kRuns);
    tessera::testing::run_threads(kRuns, [&](int i) { concurrent[i] = run_values(*shared); });
    auto sequential_kernel = make_kernel(y, factory);
    std::vector<std::vector<double>> sequential(kRuns);
    for (auto& values : sequential) values = run_values(*sequential_kernel);
    std::sort(concurrent.begin(), concurrent.end());
    std::sort(sequential.begin(), sequential.end());
    EXPECT_EQ(concurrent, sequential);
    std::vector<double> all;
    for (const auto& values : concurrent) all.insert(all.end(), values.begin(), values.end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a value was drawn twice";
  }
}

TEST(KernelsTest, RandomShufflePermutesRows) {
  RandomInputs rng;
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    // Distinct rows (except for bool, whose rows repeat): row r starts with r.
    Tensor x = rng.tensor(dtype, Shape{40, 3}, Range{-1000, 1000});
    if (dtype != DType::Bool) {
      std::vector<double> v = values_of(x);
      for (int r = 0; r < 40; ++r) v[r * 3] = r;
      x = tensor_of(dtype, x.shape(), v);
    }
    auto rows_of = [](const std::vector<double>& v) {
      std::vector<std::vector<double>> rows;
      for (std::size_t r = 0; r < v.size(); r += 3)
        rows.emplace_back(v.begin() + r, v.begin() + r + 3);
      return rows;
    };
    Graph g;
    Output y = ops::random_shuffle(feed(g, x), 3);
    for (const auto& [device, factory] : factories_for(y)) {
      auto kernel = make_kernel(y, factory);
      KernelRun r = run_kernel(*kernel, {x});
      ASSERT_TRUE(r.status.ok()) << r.status.to_string();
      ASSERT_EQ(r.outputs[0].dtype(), dtype);
      ASSERT_EQ(r.outputs[0].shape(), (Shape{40, 3}));
      auto got = rows_of(values_of(r.outputs[0]));
      auto want = rows_of(values_of(x));
      if (dtype != DType::Bool) {
        EXPECT_NE(got, want) << "40 rows left in place";
      }
      std::sort(got.begin(), got.end());
      std::sort(want.begin(), want.end());
      EXPECT_EQ(got, want) << "not a permutation of the rows";
    }
  }
}

TEST(KernelsTest, RandomShufflePicksEveryPermutationEquallyOften) {
  constexpr int kRuns = 6000;
  Graph g;
  Tensor x = Tensor::vector<int64_t>({0, 1, 2});
  Output y = ops::random_shuffle(feed(g, x), 17);
  for (const auto& [device, factory] : factories_for(y)) {
    auto kernel = make_kernel(y, factory);
    std::map<std::vector<double>, int> counts;
    for (int i = 0; i < kRuns; ++i) ++counts[run_values(*kernel, {x})];
    ASSERT_EQ(counts.size(), 6u);
    for (const auto& [perm, count] : counts) {
      EXPECT_NEAR(count, kRuns / 6, 150)
          << ::testing::PrintToString(perm);  // ~5 standard deviations
    }
  }
}

TEST(KernelsTest, RandomShuffleOfFewRows) {
  Graph g;
  for (const Tensor& x :
       {Tensor::scalar<float>(2.5f), Tensor::matrix<int32_t>({1, 2, 3}, 1, 3),
        Tensor::zeros(DType::Float64, Shape{0, 2}), Tensor::zeros(DType::Int32, Shape{5, 0})}) {
    SCOPED_TRACE(x.shape().to_string());
    check_op(ops::random_shuffle(feed(g, x)), {x}, x.shape(), values_of(x));
  }
}

// ---- OpenBLAS's threads (kernels/blas.cc) ----

// The probe of the next test, run only as its child process: how many threads the process has
// before it makes any (its main thread alone: OpenBLAS's were stopped as tessera loaded), then
// the largest error of a MatMul through a session (OpenBLAS's sgemm, sharded over tessera's pool)
// against a plain loop.
// The largest error of a 96x80x72 MatMul through a session against a plain loop (integer-valued
// operands: 0 when right).
double max_matmul_error() {
  constexpr int64_t m = 96, k = 80, n = 72;
  std::vector<float> a(m * k), b(k * n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 7) % 13) - 6.0f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 5) % 11) - 5.0f;
  Graph g;
  Output product = ops::matmul(ops::constant(g, Tensor::from_vector(a, Shape{m, k})),
                               ops::constant(g, Tensor::from_vector(b, Shape{k, n})));
  Session session(g);
  const Tensor c = session.run(product);
  double max_error = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t p = 0; p < k; ++p) want += static_cast<double>(a[i * k + p]) * b[p * n + j];
      max_error = std::max(max_error, std::abs(want - c.data<float>()[i * n + j]));
    }
  }
  return max_error;
}

TEST(BlasThreadsTest, DISABLED_Probe) {
  const int threads = tessera::testing::threads_of(::getpid());
  std::printf("probe: threads %d, max error %g\n", threads, max_matmul_error());
  std::fflush(stdout);
}

// The "probe: ..." line of `test` (a DISABLED_ probe), run as a child process of this binary; what
// went wrong instead, when it printed none.
std::string probe_of(const std::string& test) {
  ChildProcess probe({"/proc/self/exe", "--gtest_also_run_disabled_tests", "--gtest_filter=" + test});
  if (!probe.error().empty()) return "no probe: " + probe.error();
  const std::optional<std::string> line = tessera::testing::probe_line(probe);
  if (!probe.wait_exit(std::chrono::seconds(30)).has_value()) return "the probe did not exit";
  return line.value_or("no probe line: " + probe.stderr_text());
}

// tessera runs OpenBLAS on one thread and shards products itself, so OpenBLAS's own threads
// (started by its constructor, spinning for 0.1-0.2 s before they sleep) are stopped as tessera
// loads: a process starts with its main thread alone, and products still come out right.
// (ThreadSanitizer's runtime adds a background thread of its own to every process.)
TEST(BlasThreadsTest, AProcessStartsWithItsMainThreadAloneAndProductsAreRight) {
#if defined(TESSERA_TSAN)
  constexpr const char* kAlone = "probe: threads 2, max error 0";
#else
  constexpr const char* kAlone = "probe: threads 1, max error 0";
#endif
  EXPECT_EQ(probe_of("BlasThreadsTest.DISABLED_Probe"), kAlone);
}

// ---- OpenBLAS's kernels (Note [OpenBLAS on CPUs it does not know] in kernels/blas.cc) ----

TEST(BlasCoreTest, TheBestCoreIsTheWidestExtensionTheCpuHas) {
  EXPECT_STREQ(blas_core_for({.avx = true, .avx2 = true, .fma = true, .avx512 = true}), "SkylakeX");
  EXPECT_STREQ(blas_core_for({.avx = true, .avx2 = true, .fma = true, .avx512 = false}), "Haswell");
  EXPECT_STREQ(blas_core_for({.avx = true, .avx2 = true, .fma = false, .avx512 = false}), "Sandybridge");
  EXPECT_STREQ(blas_core_for({.avx = true}), "Sandybridge");
  EXPECT_STREQ(blas_core_for({}), "");
}

TEST(BlasCoreTest, OnlyACoreWithoutAvxKernelsIsReplaced) {
  const CpuVectorFeatures avx512{.avx = true, .avx2 = true, .fma = true, .avx512 = true};
  const CpuVectorFeatures avx2{.avx = true, .avx2 = true, .fma = true, .avx512 = false};
  // OpenBLAS 0.3.21's fallback on an Emerald Rapids Xeon, and other cores with no AVX kernels.
  EXPECT_STREQ(blas_core_override("Prescott", avx512), "SkylakeX");
  EXPECT_STREQ(blas_core_override("prescott", avx2), "Haswell");
  EXPECT_STREQ(blas_core_override("Nehalem", avx2), "Haswell");
  EXPECT_STREQ(blas_core_override("Barcelona", avx2), "Haswell");
  // A core OpenBLAS knew is its own choice, even a narrower one than the CPU's best.
  EXPECT_EQ(blas_core_override("Haswell", avx512), nullptr);
  EXPECT_EQ(blas_core_override("SkylakeX", avx512), nullptr);
  EXPECT_EQ(blas_core_override("Zen", avx2), nullptr);
  EXPECT_EQ(blas_core_override("Sandybridge", avx2), nullptr);
  // A CPU without AVX keeps OpenBLAS's choice; so does a name that is not there.
  EXPECT_EQ(blas_core_override("Prescott", {}), nullptr);
  EXPECT_EQ(blas_core_override(nullptr, avx512), nullptr);
}

// The probe of the next tests, run only as their child process: the core OpenBLAS picked as it
// loaded, the one in use, whether tessera changed it, and the MatMul's error.
TEST(BlasCoreTest, DISABLED_Probe) {
  const BlasCore& core = blas_core();
  std::printf("probe: detected %s, in use %s, overridden %d, max error %g\n", core.detected, core.in_use,
              core.overridden ? 1 : 0, max_matmul_error());
  std::fflush(stdout);
}

std::string blas_core_probe() { return probe_of("BlasCoreTest.DISABLED_Probe"); }

// Whatever OpenBLAS picked, a process ends up with a core that has kernels for this CPU's vector
// extensions, or with OpenBLAS's own choice when that was one it knew; products stay right. (On
// the Emerald Rapids VM this test was written on, OpenBLAS 0.3.21 picks "Prescott" and the probe
// must say "overridden 1, in use SkylakeX".)
TEST(BlasCoreTest, AProcessUsesKernelsForItsCpu) {
  tessera::testing::ScopedEnv unset("OPENBLAS_CORETYPE", std::nullopt);
  const std::string line = blas_core_probe();
  SCOPED_TRACE(line);
  char detected[64] = {}, in_use[64] = {};
  int overridden = -1;
  double error = -1;
  ASSERT_EQ(std::sscanf(line.c_str(), "probe: detected %63[^,], in use %63[^,], overridden %d, max error %lf",
                        detected, in_use, &overridden, &error),
            4);
  EXPECT_EQ(error, 0);
  const CpuVectorFeatures cpu = cpu_vector_features();
  const char* want = blas_core_override(detected, cpu);
  if (want != nullptr) {
    EXPECT_EQ(overridden, 1);
    EXPECT_STREQ(in_use, want);
  } else {
    EXPECT_EQ(overridden, 0);
    EXPECT_STREQ(in_use, detected);
  }
  // Either way, what runs is not a core without AVX kernels on a CPU with AVX.
  EXPECT_EQ(blas_core_override(in_use, cpu), nullptr);
}

// A user's OPENBLAS_CORETYPE is OpenBLAS's to follow: tessera leaves it alone.
TEST(BlasCoreTest, AUsersOpenblasCoretypeIsLeftAlone) {
  tessera::testing::ScopedEnv prescott("OPENBLAS_CORETYPE", "Prescott");
  EXPECT_EQ(blas_core_probe(), "probe: detected Prescott, in use Prescott, overridden 0, max error 0");
}

}  // namespace
}  // namespace tessera::internal
