// Graph-build-time dtype and shape inference of the math ops, and the errors it raises.
#include <functional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/op_registry.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using BinaryFn = Output (*)(Output, Output, std::string);
using UnaryFn = Output (*)(Output, std::string);

struct NamedBinary {
  const char* type;
  BinaryFn build;
};
const NamedBinary kBinaryOps[] = {
    {"Add", ops::add}, {"Sub", ops::sub},         {"Mul", ops::mul},
    {"Div", ops::div}, {"Maximum", ops::maximum}, {"Minimum", ops::minimum},
    {"Pow", ops::pow},
};

struct NamedUnary {
  const char* type;
  UnaryFn build;
  bool floating_only;
};
const NamedUnary kUnaryOps[] = {
    {"Neg", ops::neg, false},  {"Relu", ops::relu, false},      {"Square", ops::square, false},
    {"Exp", ops::exp, true},   {"Log", ops::log, true},         {"Sqrt", ops::sqrt, true},
    {"Tanh", ops::tanh, true}, {"Sigmoid", ops::sigmoid, true}, {"Floor", ops::floor, true},
    {"Sin", ops::sin, true},   {"Cos", ops::cos, true},         {"Abs", ops::abs, false},
    {"Sign", ops::sign, false}, {"Relu6", ops::relu6, false},   {"Rsqrt", ops::rsqrt, true},
    {"Reciprocal", ops::reciprocal, true}, {"Softplus", ops::softplus, true}, {"Elu", ops::elu, true},
};

// The message of the InvalidArgumentError `build` raises ("" and a test failure when none).
std::string build_error(const std::function<void()>& build) {
  return tessera::testing::error_of<InvalidArgumentError>(build);
}

Output input(Graph& g, DType dtype, Shape shape) { return ops::placeholder(g, dtype, shape); }

TEST(ShapeInferenceTest, BinaryOpsBroadcast) {
  struct Case {
    Shape a, b, out;
  };
  const std::vector<Case> cases = {
      {Shape{2, 3}, Shape{2, 3}, Shape{2, 3}},
      {Shape{}, Shape{2, 3}, Shape{2, 3}},
      {Shape{2, 3}, Shape{}, Shape{2, 3}},
      {Shape{4, 1, 3}, Shape{5, 1}, Shape{4, 5, 3}},
      {Shape{3, 1}, Shape{1, 4}, Shape{3, 4}},
      {Shape{0, 3}, Shape{1}, Shape{0, 3}},
      {Shape{0}, Shape{0}, Shape{0}},
      // Unknown dims are accepted; the known side wins unless it is 1.
      {Shape{-1, 3}, Shape{3}, Shape{-1, 3}},
      {Shape{-1}, Shape{4}, Shape{4}},
      {Shape{-1}, Shape{1}, Shape{-1}},
      {Shape{-1}, Shape{-1}, Shape{-1}},
      {Shape{2, -1}, Shape{-1, 1, 5}, Shape{-1, 2, 5}},
      {Shape::unknown(), Shape{2}, Shape::unknown()},
      {Shape{2}, Shape::unknown(), Shape::unknown()},
  };
  for (const auto& op : kBinaryOps) {
    for (DType dtype : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
      for (const auto& c : cases) {
        SCOPED_TRACE(::testing::Message() << op.type << " " << dtype << " " << c.a << " " << c.b);
        Graph g;
        Output y = op.build(input(g, dtype, c.a), input(g, dtype, c.b), "");
        EXPECT_EQ(y.op().type(), op.type);
        EXPECT_EQ(y.dtype(), dtype);
        EXPECT_EQ(y.shape(), c.out);
      }
    }
  }
}

TEST(ShapeInferenceTest, BinaryOpsRejectIncompatibleShapes) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {Shape{2, 3}, Shape{4}}, {Shape{2, 3}, Shape{3, 2}},        {Shape{-1, 3}, Shape{4}},
      {Shape{0}, Shape{2}},    {Shape{5, 2, -1}, Shape{3, 1, 1}},
  };
  for (const auto& op : kBinaryOps) {
    for (const auto& [a, b] : cases) {
      Graph g;
      Output x = input(g, DType::Float32, a);
      Output y = input(g, DType::Float32, b);
      ops::placeholder(g, DType::Float32, Shape{}, "first");  // so the failing op becomes first_1
      std::string message = build_error([&] { op.build(x, y, "first"); });
      EXPECT_THAT(message, HasSubstr(fmt::format("first_1 ({}): incompatible shapes {} and {}",
                                                 op.type, a.to_string(), b.to_string())))
          << op.type;
    }
  }
}

TEST(ShapeInferenceTest, BinaryOpsRejectMixedDtypesAndBool) {
  for (const auto& op : kBinaryOps) {
    Graph g;
    std::string mixed = build_error([&] {
      op.build(input(g, DType::Float32, Shape{2}), input(g, DType::Int32, Shape{2}), "mixed");
    });
    EXPECT_THAT(mixed, AllOf(HasSubstr(fmt::format("mixed ({})", op.type)), HasSubstr("float32"),
                             HasSubstr("int32")));
    std::string boolean = build_error(
        [&] { op.build(input(g, DType::Bool, Shape{2}), input(g, DType::Bool, Shape{2}), "flags"); });
    EXPECT_THAT(boolean, AllOf(HasSubstr(fmt::format("flags ({})", op.type)), HasSubstr("bool")));
  }
}

TEST(ShapeInferenceTest, UnaryOps) {
  for (const auto& op : kUnaryOps) {
    SCOPED_TRACE(op.type);
    for (DType dtype : {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::Bool}) {
      Graph g;
      const bool accepted = dtype != DType::Bool && (dtype_is_floating(dtype) || !op.floating_only);
      Output x = input(g, dtype, Shape{-1, 3});
      if (accepted) {
        Output y = op.build(x, "");
        EXPECT_EQ(y.op().type(), op.type);
        EXPECT_EQ(y.dtype(), dtype);
        EXPECT_EQ(y.shape(), (Shape{-1, 3}));
        EXPECT_EQ(op.build(input(g, dtype, Shape::unknown()), "").shape(), Shape::unknown());
      } else {
        std::string message = build_error([&] { op.build(x, "u"); });
        EXPECT_THAT(message, AllOf(HasSubstr(fmt::format("u ({})", op.type)),
                                   HasSubstr(std::string(dtype_name(dtype)))));
      }
    }
  }
}

TEST(ShapeInferenceTest, MatMul) {
  struct Case {
    Shape a, b;
    bool ta, tb;
    Shape out;
  };
  const std::vector<Case> cases = {
      {Shape{2, 3}, Shape{3, 4}, false, false, Shape{2, 4}},
      {Shape{3, 2}, Shape{3, 4}, true, false, Shape{2, 4}},
      {Shape{2, 3}, Shape{4, 3}, false, true, Shape{2, 4}},
      {Shape{3, 2}, Shape{4, 3}, true, true, Shape{2, 4}},
      {Shape{0, 3}, Shape{3, 0}, false, false, Shape{0, 0}},
      {Shape{-1, 3}, Shape{3, -1}, false, false, Shape{-1, -1}},
      {Shape{2, -1}, Shape{5, 4}, false, false, Shape{2, 4}},
      {Shape::unknown(), Shape{3, 4}, false, false, Shape{-1, 4}},
      {Shape::unknown(), Shape::unknown(), false, false, Shape{-1, -1}},
  };
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
    for (const auto& c : cases) {
      SCOPED_TRACE(::testing::Message()
                   << dtype << " " << c.a << " " << c.b << " " << c.ta << c.tb);
      Graph g;
      Output y = ops::matmul(input(g, dtype, c.a), input(g, dtype, c.b), c.ta, c.tb);
      EXPECT_EQ(y.op().type(), "MatMul");
      EXPECT_EQ(y.dtype(), dtype);
      EXPECT_EQ(y.shape(), c.out);
    }
  }
}

TEST(ShapeInferenceTest, MatMulErrors) {
  Graph g;
  auto f32 = [&](Shape s) { return input(g, DType::Float32, s); };
  EXPECT_THAT(build_error([&] {
                ops::matmul(f32(Shape{2, 3}), f32(Shape{4, 5}), false, false, "mm");
              }),
              AllOf(HasSubstr("mm (MatMul)"), HasSubstr("[2,3]"), HasSubstr("[4,5]")));
  // The transposes decide which dims meet: [2,3]^T is [3,2], which cannot meet [3,4].
  EXPECT_THAT(build_error([&] {
                ops::matmul(f32(Shape{2, 3}), f32(Shape{3, 4}), true, false, "mt");
              }),
              AllOf(HasSubstr("mt (MatMul)"), HasSubstr("[2,3]"), HasSubstr("[3,4]")));
  EXPECT_THAT(build_error([&] {
                ops::matmul(f32(Shape{3}), f32(Shape{3, 4}), false, false, "v");
              }),
              AllOf(HasSubstr("v (MatMul)"), HasSubstr("[3]")));
  EXPECT_THAT(build_error([&] {
                ops::matmul(f32(Shape{2, 3}), f32(Shape{2, 3, 4}), false, false, "r3");
              }),
              AllOf(HasSubstr("r3 (MatMul)"), HasSubstr("[2,3,4]")));
  EXPECT_THAT(
      build_error([&] {
        ops::matmul(f32(Shape{2, 3}), input(g, DType::Float64, Shape{3, 4}), false, false, "md");
      }),
      AllOf(HasSubstr("md (MatMul)"), HasSubstr("float32"), HasSubstr("float64")));
  EXPECT_THAT(build_error([&] {
                ops::matmul(input(g, DType::Bool, Shape{2, 2}), input(g, DType::Bool, Shape{2, 2}),
                            false, false, "mb");
              }),
              AllOf(HasSubstr("mb (MatMul)"), HasSubstr("bool")));
}

using tessera::testing::kReductions;

TEST(ShapeInferenceTest, Reductions) {
  struct Case {
    Shape in;
    std::vector<int> axes;
    bool keep_dims;
    Shape out;
  };
  const std::vector<Case> cases = {
      {Shape{2, 3, 4}, {}, false, Shape{}},
      {Shape{2, 3, 4}, {}, true, Shape{1, 1, 1}},
      {Shape{2, 3, 4}, {1}, false, Shape{2, 4}},
      {Shape{2, 3, 4}, {-1}, true, Shape{2, 3, 1}},
      {Shape{2, 3, 4}, {0, 2}, false, Shape{3}},
      {Shape{2, 3, 4}, {2, -3}, true, Shape{1, 3, 1}},
      {Shape{}, {}, false, Shape{}},
      {Shape{-1, 3}, {1}, false, Shape{-1}},
      {Shape{-1, 3}, {0}, true, Shape{1, 3}},
      {Shape::unknown(), {}, false, Shape{}},
      {Shape::unknown(), {}, true, Shape::unknown()},
      {Shape::unknown(), {0}, false, Shape::unknown()},
  };
  for (const auto& op : kReductions) {
    for (DType dtype : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
      for (const auto& c : cases) {
        SCOPED_TRACE(::testing::Message() << op.type << " " << dtype << " " << c.in << " "
                                          << ::testing::PrintToString(c.axes) << c.keep_dims);
        Graph g;
        Output y = op.build(input(g, dtype, c.in), c.axes, c.keep_dims, "");
        EXPECT_EQ(y.op().type(), op.type);
        EXPECT_EQ(y.dtype(), dtype);
        EXPECT_EQ(y.shape(), c.out);
      }
    }
  }
}

TEST(ShapeInferenceTest, ReductionErrors) {
  for (const auto& op : kReductions) {
    Graph g;
    Output x = input(g, DType::Float32, Shape{2, 3});
    EXPECT_THAT(build_error([&] { op.build(x, {2}, false, "r"); }),
                AllOf(HasSubstr(fmt::format("r ({})", op.type)),
                      HasSubstr("axis 2 is out of range"), HasSubstr("[2,3]")));
    EXPECT_THAT(build_error([&] { op.build(x, {-3}, false, "r"); }),
                HasSubstr("axis -3 is out of range"));
    EXPECT_THAT(build_error([&] { op.build(x, {1, -1}, false, "r"); }), HasSubstr("listed twice"));
    EXPECT_THAT(build_error([&] { op.build(input(g, DType::Bool, Shape{2}), {}, false, "rb"); }),
                AllOf(HasSubstr(fmt::format("rb ({})", op.type)), HasSubstr("bool")));
  }
}

TEST(ShapeInferenceTest, Cast) {
  const DType all[] = {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::Bool};
  for (DType from : all) {
    for (DType to : all) {
      Graph g;
      Output y = ops::cast(input(g, from, Shape{-1, 2}), to);
      EXPECT_EQ(y.op().type(), "Cast");
      EXPECT_EQ(y.dtype(), to);
      EXPECT_EQ(y.shape(), (Shape{-1, 2}));
    }
  }
}

TEST(ShapeInferenceTest, RandomOps) {
  Graph g;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Output u = ops::random_uniform(g, Shape{3, 4}, dtype, 7);
    EXPECT_EQ(u.op().type(), "RandomUniform");
    EXPECT_EQ(u.dtype(), dtype);
    EXPECT_EQ(u.shape(), (Shape{3, 4}));
    Output n = ops::random_normal(g, Shape{5}, dtype, 0, 1.0f, 2.0f);
    EXPECT_EQ(n.op().type(), "RandomNormal");
    EXPECT_EQ(n.dtype(), dtype);
    EXPECT_EQ(n.shape(), (Shape{5}));
  }
  EXPECT_EQ(ops::random_uniform(g, Shape{}).shape(), Shape{});
  EXPECT_EQ(ops::random_uniform(g, Shape{}).dtype(), DType::Float32);
  for (DType dtype : {DType::Float32, DType::Int64, DType::Bool}) {
    Output s = ops::random_shuffle(input(g, dtype, Shape{-1, 3}), 5);
    EXPECT_EQ(s.op().type(), "RandomShuffle");
    EXPECT_EQ(s.dtype(), dtype);
    EXPECT_EQ(s.shape(), (Shape{-1, 3}));
  }
  EXPECT_THAT(build_error([&] {
                ops::random_uniform(g, Shape{-1, 3}, DType::Float32, 0, "ru");
              }),
              AllOf(HasSubstr("ru (RandomUniform)"), HasSubstr("[?,3]")));
  EXPECT_THAT(
      build_error([&] { ops::random_normal(g, Shape::unknown(), DType::Float32, 0, 0, 1, "rn"); }),
      HasSubstr("rn (RandomNormal)"));
  EXPECT_THAT(build_error([&] { ops::random_uniform(g, Shape{2}, DType::Int32, 0, "ri"); }),
              AllOf(HasSubstr("ri (RandomUniform)"), HasSubstr("int32")));
  EXPECT_THAT(build_error([&] { ops::random_normal(g, Shape{2}, DType::Bool, 0, 0, 1, "rb"); }),
              AllOf(HasSubstr("rb (RandomNormal)"), HasSubstr("bool")));
}

TEST(ShapeInferenceTest, OnlyRandomOpsAreStateful) {
  const auto& registry = internal::OpRegistry::global();
  for (const char* type : {"RandomUniform", "RandomNormal", "RandomShuffle"}) {
    ASSERT_NE(registry.find_op(type), nullptr) << type;
    EXPECT_TRUE(registry.find_op(type)->stateful) << type;
  }
  for (const char* type :
       {"Add", "Sub", "Mul", "Div", "Maximum", "Minimum", "Neg", "Relu", "Square", "Exp", "Log",
        "Sqrt", "Tanh", "Sigmoid", "MatMul", "Sum", "Mean", "Max", "Cast", "Pow", "Floor", "Sin", "Cos",
        "Abs", "Sign", "Relu6", "Rsqrt", "Reciprocal", "Softplus", "Elu"}) {
    ASSERT_NE(registry.find_op(type), nullptr) << type;
    EXPECT_FALSE(registry.find_op(type)->stateful) << type;
  }
}

TEST(ShapeInferenceTest, NullAndForeignInputs) {
  Graph g;
  Graph other;
  Output x = input(g, DType::Float32, Shape{2});
  EXPECT_THROW_MSG(ops::add(Output(), x), InvalidArgumentError, "add");
  EXPECT_THROW_MSG(ops::add(x, Output()), InvalidArgumentError, "null");
  EXPECT_THROW_MSG(ops::exp(Output()), InvalidArgumentError, "exp");
  EXPECT_THROW_MSG(ops::reduce_sum(Output()), InvalidArgumentError, "reduce_sum");
  EXPECT_THROW_MSG(ops::mul(x, input(other, DType::Float32, Shape{2})), InvalidArgumentError,
                   "another graph");
}

TEST(ShapeInferenceTest, OpsComposeAsInTheHeaderExample) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{-1, 4}, "x");
  auto w = ops::random_normal(g, Shape{4, 2}, DType::Float32, 7);
  auto y = ops::relu(ops::add(ops::matmul(x, w), ops::constant(g, 0.5f)));
  auto loss = ops::reduce_mean(ops::square(y));
  EXPECT_EQ(y.shape(), (Shape{-1, 2}));
  EXPECT_EQ(loss.shape(), Shape{});
  EXPECT_EQ(loss.dtype(), DType::Float32);
}

}  // namespace
}  // namespace tessera
