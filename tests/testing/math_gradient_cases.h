// Numeric gradient checks of the math, shape and selection ops (math_grad_test.py and the
// array_grad tests of TensorFlow), and of the broadcast helpers the gradient functions build
// (SumToShapeOf, ReshapeToShapeOf), on the device of the instantiation. Included by
// tests/gradient_check_test.cc (CPU, SIM) and tests/gpu/cuda_gradient_check_test.cc (GPU).
#pragma once

#include <string>
#include <vector>

#include "core/gradients.h"
#include "tessera/control_flow.h"
#include "tessera/tensor_array.h"
#include "tests/testing/gradient_case_test.h"

namespace tessera::testing {

// The op types whose gradient functions these cases check.
inline const std::vector<std::string> kMathGradientOps = {
    "Add",     "Sub",        "Mul",          "Div",          "Maximum",      "Minimum",   "Neg",
    "Square",  "Exp",        "Log",          "Identity",     "Cast",         "AddN",      "MatMul",
    "Sum",     "Mean",       "Max",          "Min",          "SumToShapeOf", "ReshapeToShapeOf",
    "Reshape", "ExpandDims", "Squeeze",      "Transpose",    "ConcatV2",     "Split",     "Slice",
    "Pad",     "Tile",       "SelectV2",     "Prod",         "Cumsum",       "Cumprod",      "Pow",
    "Sin",     "Cos",        "Abs",          "Sign",         "Relu6",        "Rsqrt",     "Reciprocal",
    "Softplus", "Elu",       "TopKV2",       "Switch",       "Merge",
    "While",   "TensorArrayScatter", "TensorArrayRead", "TensorArrayStack", "TensorArrayUnstack",
    "TensorArrayZeroRows"};

class GradientCheckTest : public GradientCaseTest {
 protected:
  // The error of `build` at random values in [-1, 1] of `shapes`.
  double random_error(const std::vector<Shape>& shapes, const std::function<Output(const std::vector<Output>&)>& build) {
    std::vector<Tensor> values;
    for (std::size_t i = 0; i < shapes.size(); ++i) values.push_back(random_f64(shapes[i], 17 + i));
    return error(values, build);
  }
};

namespace math_gradient_cases {

// Central differences with delta 1e-3 err by about delta^2 |f'''| / 6 (2e-6 for log near 0.5); a
// wrong gradient errs by the size of the values.
constexpr double kTolerance = 1e-5;

}  // namespace math_gradient_cases

TEST_P(GradientCheckTest, BinaryOpsWithBroadcasting) {
  using math_gradient_cases::kTolerance;
  using Fn = Output (*)(Output, Output, std::string);
  for (Fn op : {Fn(&ops::add), Fn(&ops::sub), Fn(&ops::mul), Fn(&ops::maximum), Fn(&ops::minimum)}) {
    auto build = [&](auto x) { return op(x[0], x[1], ""); };
    EXPECT_LT(random_error({{2, 3}, {2, 3}}, build), kTolerance);
    EXPECT_LT(random_error({{2, 3}, {3}}, build), kTolerance);
    EXPECT_LT(random_error({{2, 1}, {1, 3}}, build), kTolerance);
    EXPECT_LT(random_error({{}, {2, 2}}, build), kTolerance);
  }
  // Division away from zero.
  EXPECT_LT(error({random_f64({2, 3}, 5), random_f64({3}, 6, 0.5, 2.0)}, [](auto x) { return ops::div(x[0], x[1]); }),
            kTolerance);
}

TEST_P(GradientCheckTest, UnaryOps) {
  using math_gradient_cases::kTolerance;
  using Fn = Output (*)(Output, std::string);
  for (Fn op : {Fn(&ops::neg), Fn(&ops::square), Fn(&ops::exp), Fn(&ops::identity)}) {
    EXPECT_LT(random_error({{2, 3}}, [&](auto x) { return op(x[0], ""); }), kTolerance);
  }
  EXPECT_LT(error({random_f64({2, 3}, 3, 0.5, 2.0)}, [](auto x) { return ops::log(x[0]); }), kTolerance);
  EXPECT_LT(random_error({{2, 3}}, [](auto x) { return ops::sin(x[0]); }), kTolerance);
  EXPECT_LT(random_error({{2, 3}}, [](auto x) { return ops::cos(x[0]); }), kTolerance);
  EXPECT_LT(random_error({{3}}, [](auto x) { return ops::cast(ops::cast(x[0], DType::Float32), DType::Float64); }), 1e-3)
      << "through float32";
  EXPECT_LT(random_error({{2}, {2}, {2}}, [](auto x) { return ops::add_n({x[0], ops::square(x[1]), x[2], x[0]}); }),
            kTolerance);
}

// The unary ops of TensorFlow's nn and math modules added with Abs, away from their kinks (the
// numeric derivative straddling one would not be the derivative).
TEST_P(GradientCheckTest, MoreUnaryOps) {
  using math_gradient_cases::kTolerance;
  const Tensor away_from_kinks = tensor_of(DType::Float64, Shape{2, 3}, {-1.5, -0.3, 0.4, 2.5, 5.2, 7.0});
  const Tensor positive = random_f64({2, 3}, 8, 0.5, 2.0);
  EXPECT_LT(error({away_from_kinks}, [](auto x) { return ops::abs(x[0]); }), kTolerance);
  EXPECT_LT(error({away_from_kinks}, [](auto x) { return ops::relu6(x[0]); }), kTolerance);
  EXPECT_LT(error({away_from_kinks}, [](auto x) { return ops::leaky_relu(x[0], 0.1f); }), kTolerance);
  EXPECT_LT(error({positive}, [](auto x) { return ops::rsqrt(x[0]); }), kTolerance);
  EXPECT_LT(error({positive}, [](auto x) { return ops::reciprocal(x[0]); }), kTolerance);
  EXPECT_LT(error({random_f64({2, 3}, 9, -5.0, 5.0)}, [](auto x) { return ops::softplus(x[0]); }), kTolerance);
  EXPECT_LT(error({random_f64({2, 3}, 10, -3.0, 3.0)}, [](auto x) { return ops::elu(x[0]); }), kTolerance);
  EXPECT_LT(random_error({{2, 3}, {3}}, [](auto x) { return ops::squared_difference(x[0], x[1]); }), kTolerance);
}

// What TensorFlow's gradients give at the kinks and where the derivative is zero: relu6 passes
// only inside (0, 6), leaky_relu gives alpha at 0, abs 0 at 0 (sign), sign nothing but zeros.
TEST_P(GradientCheckTest, UnaryOpsAtTheirKinks) {
  Graph g;
  Output x = ops::constant(g, Tensor::vector<double>({-1, 0, 3, 6, 7}));
  Session s(g);
  auto grad_of = [&](Output y) { return s.run(gradients({ops::reduce_sum(y)}, {x})[0]).template to_vector<double>(); };
  EXPECT_EQ(grad_of(ops::relu6(x)), (std::vector<double>{0, 0, 1, 0, 0}));
  EXPECT_EQ(grad_of(ops::leaky_relu(x, 0.25f)), (std::vector<double>{0.25, 0.25, 1, 1, 1}));
  EXPECT_EQ(grad_of(ops::abs(x)), (std::vector<double>{-1, 0, 1, 1, 1}));
  EXPECT_EQ(grad_of(ops::sign(x)), (std::vector<double>{0, 0, 0, 0, 0}));
  EXPECT_EQ(grad_of(ops::elu(x)), (std::vector<double>{std::exp(-1.0), 1, 1, 1, 1}));
}

// The functions built from other ops (core/composite_ops.cc): their gradients are their parts'.
TEST_P(GradientCheckTest, CompositeFunctions) {
  using math_gradient_cases::kTolerance;
  EXPECT_LT(error({random_f64({2, 3}, 11, 0.0, 1.0), random_f64({2, 3}, 12, -4.0, 4.0)},
                  [](auto x) { return ops::sigmoid_cross_entropy_with_logits(x[0], x[1]); }),
            kTolerance);
  EXPECT_LT(random_error({{2, 3}}, [](auto x) { return ops::moments(x[0], {0}).first; }), kTolerance);
  EXPECT_LT(random_error({{2, 3}}, [](auto x) { return ops::moments(x[0], {0, 1}, true).second; }), kTolerance);
  EXPECT_LT(random_error({{4, 3}}, [](auto x) { return ops::moments(x[0], {-1}).second; }), kTolerance);
  EXPECT_LT(error({random_f64({4, 3}, 13), random_f64({3}, 14), random_f64({3}, 15, 0.5, 2.0), random_f64({3}, 16),
                   random_f64({3}, 17)},
                  [](auto x) { return ops::batch_normalization(x[0], x[1], x[2], x[3], x[4], 0.001f); }),
            kTolerance);
  EXPECT_LT(random_error({{2, 3}}, [](auto x) { return ops::reduce_logsumexp(x[0], {1}); }), kTolerance);
  EXPECT_LT(random_error({{2, 3}}, [](auto x) { return ops::reduce_logsumexp(x[0], {}, true); }), kTolerance);
  EXPECT_LT(random_error({{2, 3}, {2, 3}}, [](auto x) { return ops::stack({x[0], ops::square(x[1])}, 1); }), kTolerance);
  EXPECT_LT(random_error({{2, 3}}, [](auto x) {
              std::vector<Output> rows = ops::unstack(x[0], 1);
              return ops::mul(rows[0], ops::add(rows[1], rows[2]));
            }),
            kTolerance);
}

// top_k's values: distinct inputs, so that a small step does not reorder them.
TEST_P(GradientCheckTest, TopK) {
  using math_gradient_cases::kTolerance;
  const Tensor distinct = tensor_of(DType::Float64, Shape{2, 4}, {0.3, -1.2, 2.5, 0.9, 1.7, -0.4, 0.1, 3.2});
  EXPECT_LT(error({distinct}, [](auto x) { return ops::top_k(x[0], 2).first; }), kTolerance);
  EXPECT_LT(error({distinct}, [](auto x) { return ops::top_k(x[0], 4).first; }), kTolerance);
}

// Pow's gradient for both inputs, broadcast (positive bases: d/dy is x^y log x), and TensorFlow's
// mask: at a base of 0 the exponent's gradient is 0, not NaN.
TEST_P(GradientCheckTest, Pow) {
  using math_gradient_cases::kTolerance;
  EXPECT_LT(error({random_f64({2, 3}, 5, 0.5, 2.0), random_f64({3}, 6, -2.0, 2.0)},
                  [](auto x) { return ops::pow(x[0], x[1]); }),
            kTolerance);
  EXPECT_LT(error({random_f64({4}, 7, -2.0, 2.0), tensor_of(DType::Float64, Shape{}, {3})},
                  [](auto x) { return ops::pow(x[0], x[1]); }),
            kTolerance)
      << "negative bases, integral exponent";
  Graph g;
  Output x = ops::constant(g, Tensor::vector<double>({0.0, 2.0}));
  Output y = ops::constant(g, Tensor::vector<double>({2.0, 3.0}));
  std::vector<Output> grads = gradients({ops::reduce_sum(ops::pow(x, y))}, {x, y});
  Session s(g);
  const std::vector<Tensor> got = s.run({grads[0], grads[1]});
  EXPECT_EQ(got[0].to_vector<double>(), (std::vector<double>{0.0, 12.0}));
  EXPECT_EQ(got[1].to_vector<double>()[0], 0.0) << "0^y: no log(0)";
  EXPECT_NEAR(got[1].to_vector<double>()[1], 8 * std::log(2.0), 1e-12);
}

// TensorFlow's Floor passes no gradient: an x reached only through it gets none.
TEST_P(GradientCheckTest, FloorPassesNoGradient) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float64, Shape{2});
  std::vector<Output> grads = gradients({ops::reduce_sum(ops::floor(x))}, {x});
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_TRUE(grads[0].is_null());
  std::vector<Output> mixed = gradients({ops::reduce_sum(ops::add(ops::floor(x), x))}, {x});
  Session s(g);
  EXPECT_EQ(s.run(mixed[0], {{x, Tensor::vector<double>({0.5, -1.5})}}).to_vector<double>(), (std::vector<double>{1, 1}));
}

TEST_P(GradientCheckTest, MatMulInEveryTransposition) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Shape a = ta ? Shape{3, 2} : Shape{2, 3};
      const Shape b = tb ? Shape{4, 3} : Shape{3, 4};
      EXPECT_LT(random_error({a, b}, [&](auto x) { return ops::matmul(x[0], x[1], ta, tb); }),
                math_gradient_cases::kTolerance)
          << "transpose_a=" << ta << " transpose_b=" << tb;
    }
  }
}

TEST_P(GradientCheckTest, Reductions) {
  using Fn = Output (*)(Output, std::vector<int>, bool, std::string);
  for (Fn op : {Fn(&ops::reduce_sum), Fn(&ops::reduce_mean), Fn(&ops::reduce_max), Fn(&ops::reduce_min)}) {
    for (const std::vector<int>& axes : {std::vector<int>{}, {0}, {1}, {-1}, {0, 2}}) {
      for (bool keep : {false, true}) {
        EXPECT_LT(random_error({{2, 3, 2}}, [&](auto x) { return op(x[0], axes, keep, ""); }),
                  math_gradient_cases::kTolerance)
            << "axes " << axes.size() << " keep_dims " << keep;
      }
    }
  }
}

// reduce_prod's gradient is built from exclusive cumulative products (TF's _ProdGrad): the scans
// and the product together, at random values (tests/scan_ops_test.cc checks zeros and errors).
TEST_P(GradientCheckTest, ScansAndProducts) {
  for (int axis : {0, 1, -1}) {
    for (bool exclusive : {false, true}) {
      for (bool reverse : {false, true}) {
        EXPECT_LT(random_error({{2, 3, 2}}, [&](auto x) { return ops::cumsum(x[0], axis, exclusive, reverse); }),
                  math_gradient_cases::kTolerance)
            << "cumsum axis " << axis << " exclusive " << exclusive << " reverse " << reverse;
        EXPECT_LT(random_error({{2, 3, 2}}, [&](auto x) { return ops::cumprod(x[0], axis, exclusive, reverse); }),
                  math_gradient_cases::kTolerance)
            << "cumprod axis " << axis << " exclusive " << exclusive << " reverse " << reverse;
      }
    }
  }
  for (const std::vector<int>& axes : {std::vector<int>{}, {0}, {1}, {-1}, {0, 2}}) {
    for (bool keep : {false, true}) {
      EXPECT_LT(random_error({{2, 3, 2}}, [&](auto x) { return ops::reduce_prod(x[0], axes, keep); }),
                math_gradient_cases::kTolerance)
          << "reduce_prod axes " << axes.size() << " keep_dims " << keep;
    }
  }
}

TEST_P(GradientCheckTest, MeanOverAnUnknownBatchDividesByTheRunTimeCount) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float64, Shape{-1, 2});
  Output y;
  {
    auto scope = on_device(g);
    y = ops::reduce_mean(x, {0});
  }
  EXPECT_LT(check(g, {{x, random_f64({3, 2}, 4)}}, y), math_gradient_cases::kTolerance);
}

TEST_P(GradientCheckTest, ShapeOps) {
  using math_gradient_cases::kTolerance;
  EXPECT_LT(random_error({{2, 3}}, [](auto x) { return ops::reshape(x[0], {3, 2}); }), kTolerance);
  EXPECT_LT(random_error({{2, 3}}, [](auto x) { return ops::expand_dims(x[0], 1); }), kTolerance);
  EXPECT_LT(random_error({{2, 1, 3}}, [](auto x) { return ops::squeeze(x[0]); }), kTolerance);
  EXPECT_LT(random_error({{2, 3, 4}}, [](auto x) { return ops::transpose(x[0], {1, 2, 0}); }), kTolerance);
  EXPECT_LT(random_error({{2, 3}}, [](auto x) { return ops::transpose(x[0]); }), kTolerance);
  EXPECT_LT(random_error({{2, 3}, {2, 1}}, [](auto x) { return ops::concat({x[0], x[1]}, -1); }), kTolerance);
  EXPECT_LT(random_error({{2, 4}},
                         [](auto x) {
                           auto halves = ops::split(x[0], 2, 1);
                           return ops::mul(halves[1], halves[0]);
                         }),
            kTolerance);
  EXPECT_LT(random_error({{3, 4}}, [](auto x) { return ops::slice(x[0], {1, 1}, {2, -1}); }), kTolerance);
  EXPECT_LT(random_error({{2, 2}}, [](auto x) { return ops::pad(x[0], {{1, 0}, {2, 1}}); }), kTolerance);
  EXPECT_LT(random_error({{2, 3}}, [](auto x) { return ops::tile(x[0], {2, 3}); }), kTolerance);
}

TEST_P(GradientCheckTest, WhereRoutesTheGradient) {
  EXPECT_LT(random_error({{2, 3}, {3}},
                         [](auto x) {
                           auto cond = ops::constant(x[0].op().graph(), Tensor::vector<bool>({true, false, true}));
                           return ops::where(cond, x[0], x[1]);
                         }),
            math_gradient_cases::kTolerance);
}

// A while loop's gradient (Note [While loops] in core/while_ops.cc): three iterations of an RNN
// step h = sin(h W + b), W and b read from outside the loop, h a loop variable; the
// counter an int32 loop variable without a gradient.
TEST_P(GradientCheckTest, WhileLoopRunsTheIterationsBackwards) {
  using math_gradient_cases::kTolerance;
  EXPECT_LT(random_error({{2, 3}, {3, 3}, {3}},
                         [](auto x) {
                           Graph& g = x[0].op().graph();
                           std::vector<Output> r = ops::while_loop(
                               [&](const std::vector<Output>& v) { return ops::less(v[0], ops::constant(g, 3)); },
                               [&](const std::vector<Output>& v) {
                                 Output h = ops::sin(ops::add(ops::matmul(v[1], x[1]), x[2]));
                                 return std::vector<Output>{ops::add(v[0], ops::constant(g, 1)), h};
                               },
                               {ops::constant(g, 0), x[0]});
                           return r[1];
                         }),
            kTolerance);
}

// TensorArray's ops (Note [Tensor arrays] in core/tensor_array_ops.cc): unstack, write over an
// element, scatter, read an element twice, gather, stack; and in a loop that writes an element
// per iteration (map_fn) and one that reads them back (scan). ZeroRows is the write's gradient,
// checked by the second-order term of a write's gradient.
TEST_P(GradientCheckTest, TensorArraysRouteTheGradient) {
  using math_gradient_cases::kTolerance;
  EXPECT_LT(random_error({{3, 2}, {2}, {2, 2}},
                         [](auto x) {
                           Graph& g = x[0].op().graph();
                           TensorArray a = TensorArray(g, DType::Float64, 3).unstack(x[0]).write(1, ops::sin(x[1]));
                           a = a.scatter(ops::constant(g, Tensor::vector<int32_t>({2, 0})), ops::square(x[2]));
                           Output twice = ops::mul(a.read(1), a.read(1));
                           Output some = a.gather(ops::constant(g, Tensor::vector<int32_t>({1, 2})));
                           return ops::add(ops::reduce_sum(ops::mul(a.stack(), a.stack())),
                                           ops::add(ops::reduce_sum(twice), ops::reduce_sum(ops::exp(some))));
                         }),
            kTolerance);
  EXPECT_LT(random_error({{4, 3}, {3, 3}},
                         [](auto x) {
                           Output y = ops::map_fn([&](Output row) { return ops::sin(ops::matmul(ops::expand_dims(row, 0), x[1])); }, x[0]);
                           return ops::scan([](Output acc, Output e) { return ops::add(ops::mul(acc, ops::cos(e)), e); }, y);
                         }),
            kTolerance);
  // The gradient of a gradient: through TensorArrayZeroRows.
  EXPECT_LT(random_error({{3}, {}},
                         [](auto x) {
                           Graph& g = x[0].op().graph();
                           TensorArray a = TensorArray(g, DType::Float64, 3).unstack(x[0]).write(0, ops::square(x[1]));
                           Output s = ops::reduce_sum(ops::mul(a.stack(), a.stack()));
                           return gradients({s}, {x[0]})[0];
                         }),
            kTolerance);
}

// A cond's gradient (Switch and Merge) is the taken branch's, whichever it is, nested too; the
// predicate may depend on the inputs (it is piecewise constant, and the values keep away from
// where it flips).
TEST_P(GradientCheckTest, CondRoutesTheGradient) {
  using math_gradient_cases::kTolerance;
  for (bool pick : {true, false}) {
    EXPECT_LT(random_error({{2, 3}, {3}},
                           [pick](auto x) {
                             return ops::cond(
                                 ops::constant(x[0].op().graph(), pick), [&] { return ops::mul(x[0], ops::sin(x[1])); },
                                 [&] { return ops::square(ops::add(x[0], x[1])); });
                           }),
              kTolerance)
        << "pred " << pick;
  }
  const Tensor positive = random_f64({3}, 4, 0.5, 2.0), negative = random_f64({3}, 5, -2.0, -0.5);
  for (const Tensor& v : {positive, negative}) {
    EXPECT_LT(error({v, random_f64({3}, 6)},
                    [](auto x) {
                      Graph& g = x[0].op().graph();
                      Output zero = ops::constant(g, 0.0);
                      return ops::cond(
                          ops::greater(ops::reduce_sum(x[0]), zero),
                          [&] {
                            return ops::cond(
                                ops::less(ops::reduce_sum(x[1]), ops::constant(g, 100.0)),
                                [&] { return ops::mul(ops::exp(x[0]), x[1]); }, [&] { return x[1]; });
                          },
                          [&] { return ops::mul(x[0], x[0]); });
                    }),
              kTolerance);
  }
}

// The ops the gradient functions build to undo broadcasting and reshaping have gradients of their
// own (second derivatives): SumToShapeOf's spreads the gradient back over the broadcast dims,
// ReshapeToShapeOf's reshapes it back. Their shape input gets none.
TEST_P(GradientCheckTest, BroadcastHelpers) {
  for (const Shape& to : {Shape{3}, Shape{2, 1}, Shape{}}) {
    EXPECT_LT(random_error({{2, 3}, to},
                           [](auto x) {
                             Output y = internal::reduce_to_shape_of(x[0], x[1]);
                             EXPECT_EQ(y.op().type(), "SumToShapeOf");
                             return y;
                           }),
              math_gradient_cases::kTolerance)
        << "summed to " << to.to_string();
  }
  // ReshapeToShapeOf reshapes to a shape known only when the op runs (a Reshape otherwise).
  Graph g;
  auto y = ops::placeholder(g, DType::Float64, Shape{6});
  auto like = ops::placeholder(g, DType::Float64, Shape::unknown());
  Output reshaped;
  {
    auto scope = on_device(g);
    reshaped = internal::reshape_to_shape_of(y, like);
  }
  EXPECT_EQ(reshaped.op().type(), "ReshapeToShapeOf");
  const Tensor like_value = random_f64({2, 3}, 2);
  EXPECT_LT(check(g, {{y, random_f64({6}, 1)}, {like, like_value}}, reshaped), math_gradient_cases::kTolerance);
}

TEST_P(GradientCheckTest, ARealisticChainOfOps) {
  // softmax-free logistic model: mean((xW + b)^2) with a batch of unknown size.
  Graph g;
  auto x = ops::placeholder(g, DType::Float64, Shape{-1, 3});
  auto w = ops::placeholder(g, DType::Float64, Shape{3, 2});
  auto b = ops::placeholder(g, DType::Float64, Shape{2});
  Output y;
  {
    auto scope = on_device(g);
    y = ops::reduce_mean(ops::square(ops::add(ops::matmul(x, w), b)));
  }
  EXPECT_LT(check(g, {{x, random_f64({4, 3}, 1)}, {w, random_f64({3, 2}, 2)}, {b, random_f64({2}, 3)}}, y),
            math_gradient_cases::kTolerance);
}

}  // namespace tessera::testing
