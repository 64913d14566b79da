// Forwarded inputs (Note [Forwarded inputs] in core/executor.cc): a kernel may write its output over
// an input nobody reads again. Checked here: what the kernel context forwards and what it refuses,
// which inputs the executor lets a kernel take (a value's last use, and nothing a fetch, a feed, a
// variable or a constant still holds), and that every in-place loop of the elementwise kernels
// computes what the out-of-place one does.
#include <atomic>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/node.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/tensor_buffer.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using internal::OpKernelContext;

// An op whose kernel returns x + 1, over x when the context lets it, and counts which it did. It
// also records its output's data pointer, so that a test can see whether the op after it wrote
// over that buffer.
std::atomic<int> probe_forwarded{0};
std::atomic<int> probe_allocated{0};
std::atomic<const void*> probe_output{nullptr};

Status probe_shape(internal::ShapeContext& c) {
  c.add_output(DType::Float32, c.input_shape(0));
  return Status();
}
class ForwardProbe final : public internal::OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const float* px = x.data<float>();
    Tensor& out = ctx.forward_input_or_allocate_output({0}, 0, x.shape());
    float* po = out.mutable_data<float>();
    (po == px ? probe_forwarded : probe_allocated).fetch_add(1);
    for (int64_t i = 0; i < out.num_elements(); ++i) po[i] = px[i] + 1;
    probe_output = po;
  }
};
TESSERA_REGISTER_OP(internal::OpDef{"TestForwardProbe", probe_shape});
TESSERA_REGISTER_KERNEL("TestForwardProbe", "CPU", ForwardProbe);

Output probe(Output x, const std::string& name) {
  internal::NodeSpec spec;
  spec.type = "TestForwardProbe";
  spec.name = name;
  spec.inputs = {x};
  return Output(x.op().graph().impl().add_node(std::move(spec)), 0);
}

void reset_probe() {
  probe_forwarded = 0;
  probe_allocated = 0;
  probe_output = nullptr;
}

Tensor floats(std::vector<float> values) { return Tensor::vector<float>(std::move(values)); }

// ---- The kernel context ----

// A context as the executor makes one: `inputs`, one Float32 output, `forwardable` bits.
struct ContextRig {
  Graph g;
  Output node_output;
  std::vector<const Tensor*> inputs;
  DType dtype = DType::Float32;
  Tensor outputs[1];
  OpKernelContext::Params step;  // the context reads it where it is
  std::unique_ptr<OpKernelContext> ctx;

  ContextRig(std::vector<const Tensor*> ins, uint32_t forwardable, DType output_dtype = DType::Float32)
      : inputs(std::move(ins)), dtype(output_dtype) {
    node_output = probe(ops::constant(g, floats({0, 0, 0, 0})), "probe");
    ctx = std::make_unique<OpKernelContext>(step, node_output.node(), inputs.data(),
                                            static_cast<int>(inputs.size()), &dtype, outputs, 1, forwardable);
  }
};

TEST(ForwardedInputsTest, TheContextTakesOverASoleOwnedHostInputItMayForward) {
  Tensor x = floats({1, 2, 3, 4});
  const void* data = x.raw_data();
  ContextRig rig({&x}, 0b1);
  Tensor& out = rig.ctx->forward_input_or_allocate_output({0}, 0, Shape{4});
  EXPECT_EQ(out.raw_data(), data);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_TRUE(x.is_null());
  EXPECT_EQ(&out, &rig.outputs[0]);
}

TEST(ForwardedInputsTest, TheContextAllocatesWhereForwardingWouldBeUnsafe) {
  struct Case {
    const char* what;
    std::function<Tensor()> make;  // the input
    uint32_t forwardable;
    DType output_dtype;
    Shape shape;
  };
  Tensor kept;  // a second handle, for the shared case
  const std::vector<Case> cases = {
      {"the executor did not allow it", [] { return floats({1, 2, 3, 4}); }, 0, DType::Float32, Shape{4}},
      {"another handle shares the buffer", [&] { kept = floats({1, 2, 3, 4}); return kept; }, 1, DType::Float32,
       Shape{4}},
      {"another dtype of the same size", [] { return floats({1, 2, 3, 4}); }, 1, DType::Int32, Shape{4}},
      {"another shape of as many elements", [] { return floats({1, 2, 3, 4}); }, 1, DType::Float32, Shape{2, 2}},
      {"a view of another tensor's memory",
       [&] { kept = floats({1, 2, 3, 4}); return internal::unowned_view(kept); }, 1, DType::Float32, Shape{4}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Tensor x = c.make();
    const void* data = x.raw_data();
    ContextRig rig({&x}, c.forwardable, c.output_dtype);
    Tensor& out = rig.ctx->forward_input_or_allocate_output({0}, 0, c.shape);
    EXPECT_NE(out.raw_data(), data);
    EXPECT_EQ(out.dtype(), c.output_dtype);
    EXPECT_EQ(out.shape(), c.shape);
    ASSERT_FALSE(x.is_null());
    EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
    kept = Tensor();
  }
}

TEST(ForwardedInputsTest, TheContextTakesTheFirstCandidateThatMayBeForwarded) {
  Tensor shared = floats({1, 2});
  Tensor other_handle = shared;
  Tensor sole = floats({3, 4});
  const void* data = sole.raw_data();
  ContextRig rig({&shared, &sole}, 0b11);
  Tensor& out = rig.ctx->forward_input_or_allocate_output({0, 1}, 0, Shape{2});
  EXPECT_EQ(out.raw_data(), data);
  EXPECT_FALSE(shared.is_null());
  EXPECT_TRUE(sole.is_null());
}

// ---- The executor ----

TEST(ForwardedInputsTest, TheExecutorLetsAKernelTakeALastUseAndNothingElse) {
  Graph g;
  auto c = ops::constant(g, floats({1, 2, 3}), "c");
  auto p1 = probe(c, "p1");    // reads a constant: allocates
  auto p2 = probe(p1, "p2");   // p1's only use: forwards
  auto p3 = probe(p2, "p3");   // p2 is also fetched: allocates
  Session s(g);
  reset_probe();
  auto out = s.run({p2, p3});
  EXPECT_EQ(probe_forwarded.load(), 1);
  EXPECT_EQ(probe_allocated.load(), 2);
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{3, 4, 5}));  // not p3's values
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{4, 5, 6}));
  // Again, from the cached plan; the constant is as it was.
  reset_probe();
  out = s.run({p2, p3});
  EXPECT_EQ(probe_forwarded.load(), 1);
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{4, 5, 6}));
}

TEST(ForwardedInputsTest, FeedsAndVariablesAreNeverWrittenOver) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{3}, "x");
  auto from_feed = probe(x, "from_feed");
  Variable v(g, floats({10, 20, 30}), "v");
  auto from_variable = probe(v.value(), "from_variable");
  Session s(g);
  s.run(global_variables_initializer(g));
  Tensor fed = floats({1, 2, 3});
  const void* fed_data = fed.raw_data();
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run);
    reset_probe();
    auto out = s.run({from_feed, from_variable}, {{x, fed}});
    EXPECT_EQ(probe_forwarded.load(), 0);
    EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{2, 3, 4}));
    EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{11, 21, 31}));
    EXPECT_EQ(fed.raw_data(), fed_data);
    EXPECT_EQ(fed.to_vector<float>(), (std::vector<float>{1, 2, 3}));
    EXPECT_EQ(s.run(v.value()).to_vector<float>(), (std::vector<float>{10, 20, 30}));
  }
}

// Every in-place loop of the elementwise kernels against the reference: the op reads the probe's
// fresh output (its last use, so the kernel writes over it: checked by the fetched buffer) and a
// constant, for each binary op, both operand orders and both scalar forms, and the unary ops.
template <class T>
Tensor values_of(const std::vector<double>& v) {
  std::vector<T> t(v.begin(), v.end());
  return Tensor::vector<T>(std::move(t));
}

// Each elementwise kernel over an input of n elements that it may write over.
void check_elementwise_in_place(int n) {
  std::vector<double> base(n), other(n);
  for (int i = 0; i < n; ++i) {
    base[i] = (i % 7) - 3.5 + i * 0.25;   // x = base + 1 after the probe
    other[i] = (i % 5) + 1.5;             // never 0: a divisor
  }
  const double scalar = 2.5;
  struct Binary {
    const char* name;
    std::function<Output(Output, Output)> op;
    std::function<double(double, double)> ref;
  };
  const std::vector<Binary> binaries = {
      {"add", [](Output a, Output b) { return ops::add(a, b); }, [](double a, double b) { return a + b; }},
      {"sub", [](Output a, Output b) { return ops::sub(a, b); }, [](double a, double b) { return a - b; }},
      {"mul", [](Output a, Output b) { return ops::mul(a, b); }, [](double a, double b) { return a * b; }},
      {"div", [](Output a, Output b) { return ops::div(a, b); }, [](double a, double b) { return a / b; }},
      {"maximum", [](Output a, Output b) { return ops::maximum(a, b); }, [](double a, double b) { return a > b ? a : b; }},
      {"minimum", [](Output a, Output b) { return ops::minimum(a, b); }, [](double a, double b) { return a < b ? a : b; }},
  };
  // The probe's input: base (float32), so x = base + 1.
  auto check = [&](const char* what, const std::function<Output(Graph&, Output)>& build,
                   const std::function<double(double, int)>& ref) {
    SCOPED_TRACE(what);
    Graph g;
    auto x = probe(ops::constant(g, values_of<float>(base)), "x");
    auto y = build(g, x);
    Session s(g);
    reset_probe();
    Tensor out = s.run(y);
    EXPECT_EQ(probe_forwarded.load(), 0);  // the probe read a constant
    EXPECT_EQ(out.raw_data(), probe_output.load()) << "the op did not write over its input";
    ASSERT_EQ(out.num_elements(), n);
    const float* po = out.data<float>();
    for (int i = 0; i < n; ++i) {
      const double x_i = static_cast<float>(base[i]) + 1.0f;
      EXPECT_FLOAT_EQ(po[i], static_cast<float>(ref(x_i, i))) << "element " << i;
    }
  };
  for (const Binary& b : binaries) {
    SCOPED_TRACE(b.name);
    check("x op c", [&](Graph& g, Output x) { return b.op(x, ops::constant(g, values_of<float>(other))); },
          [&](double x, int i) { return b.ref(x, static_cast<float>(other[i])); });
    check("c op x", [&](Graph& g, Output x) { return b.op(ops::constant(g, values_of<float>(other)), x); },
          [&](double x, int i) { return b.ref(static_cast<float>(other[i]), x); });
    check("x op scalar", [&](Graph& g, Output x) { return b.op(x, ops::constant(g, static_cast<float>(scalar))); },
          [&](double x, int) { return b.ref(x, scalar); });
    check("scalar op x", [&](Graph& g, Output x) { return b.op(ops::constant(g, static_cast<float>(scalar)), x); },
          [&](double x, int) { return b.ref(scalar, x); });
  }
  check("neg", [](Graph&, Output x) { return ops::neg(x); }, [](double x, int) { return -x; });
  check("relu", [](Graph&, Output x) { return ops::relu(x); }, [](double x, int) { return x < 0 ? 0 : x; });
  check("square", [](Graph&, Output x) { return ops::square(x); }, [](double x, int) { return x * x; });
  check("tanh", [](Graph&, Output x) { return ops::tanh(x); },
        [](double x, int) { return std::tanh(static_cast<float>(x)); });
}

TEST(ForwardedInputsTest, ElementwiseKernelsComputeInPlaceAsTheyDoOutOfPlace) {
  check_elementwise_in_place(37);  // past a vector width, with a tail
}

// One element: the binary kernels' path without a loop reads both inputs before it writes.
TEST(ForwardedInputsTest, OneElementKernelsComputeInPlaceAsTheyDoOutOfPlace) { check_elementwise_in_place(1); }

// A chain whose every value is the last use of the one before: the result of the in-place
// arithmetic over 10,000 steps, as the executor benchmark runs it.
TEST(ForwardedInputsTest, ALongChainWritesOverOneBufferAndGetsTheRightSum) {
  Graph g;
  auto one = ops::constant(g, int32_t{1}, "one");
  Output x = ops::constant(g, int32_t{0}, "x0");
  for (int i = 0; i < 10000; ++i) x = ops::add(x, one);
  Session s(g);
  EXPECT_EQ(s.run(x).scalar<int32_t>(), 10000);
  EXPECT_EQ(s.run(x).scalar<int32_t>(), 10000);
}

}  // namespace
}  // namespace tessera
