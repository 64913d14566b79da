// TensorArray (tessera/tensor_array.h) and the higher-order functions built on it (map_fn, scan,
// foldl, foldr in tessera/control_flow.h). Cases ported from TensorFlow's
// tensor_array_ops_test.py (testTensorArrayWriteRead, testTensorArrayWritePack,
// testTensorArrayUnpackRead, testTensorArrayScatterRead, testTensorArrayWriteGatherAndGradients,
// testTensorArrayWriteWrongIndexOrDataTypeFails, testTensorArrayReadWrongIndexOrDataTypeFails,
// testTensorArrayGradientWriteRead, testTensorArrayGradientWritePackConcatAndRead (without
// concat), testTensorArrayGradientUnpackRead, testTensorArrayGradientDynamicUnpackRead,
// testSumOfTwoReadVariablesWithoutRepeatGrad, testWhileLoopWritePackGradients,
// testTensorArrayGradientScatterRead, testTensorArraySizeDynamic (testPackWithZeroSize), and
// functional_ops_test.py (testMap_Simple, testMap_MultiOutput, testMapSparseAndGrad's gradient,
// testScan_Simple, testScan_Reverse, testScan_NoInitializer, testScanGradient, testFoldl_Simple,
// testFoldr_Simple, testFoldl_Gradient), plus what they take for granted: arrays inside loops
// that keep no history, reused buffers, errors and a loop on a cluster's worker.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "tessera/tessera.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::error_of;

Output f32(Graph& g, float v) { return ops::constant(g, v); }
Output i32(Graph& g, int32_t v) { return ops::constant(g, v); }
Output vec(Graph& g, std::vector<float> v) { return ops::constant(g, Tensor::vector<float>(std::move(v))); }
Output mat(Graph& g, std::vector<float> v, int64_t rows, int64_t cols) {
  return ops::constant(g, Tensor::matrix<float>(std::move(v), rows, cols));
}
using Vars = std::vector<Output>;

// testTensorArrayWriteRead: three writes of differing values, read back in another order.
TEST(TensorArrayTest, WriteRead) {
  Graph g;
  TensorArray ta(g, DType::Float32, 3);
  TensorArray w = ta.write(0, mat(g, {4, 5}, 1, 2)).write(1, mat(g, {1, 2}, 1, 2)).write(2, mat(g, {-1, -2}, 1, 2));
  Session s(g);
  std::vector<Tensor> r = s.run({w.read(0), w.read(2), w.read(1), w.size()});
  EXPECT_EQ(r[0].to_vector<float>(), (std::vector<float>{4, 5}));
  EXPECT_EQ(r[1].to_vector<float>(), (std::vector<float>{-1, -2}));
  EXPECT_EQ(r[2].to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(r[0].shape(), (Shape{1, 2}));
  EXPECT_EQ(r[3].scalar<int32_t>(), 3);
  // A write returns a new array: the one written to is unchanged (values, as TF2's lists).
  EXPECT_EQ(s.run(ta.size()).scalar<int32_t>(), 3);
  EXPECT_EQ(w.read(0).shape(), (Shape{1, 2}));  // the element shape learned from the writes
  EXPECT_EQ(ta.element_shape(), (Shape{1, 2}));  // shared by the arrays made from one another
}

// testTensorArrayWritePack and testTensorArrayUnpackRead.
TEST(TensorArrayTest, StackAndUnstack) {
  Graph g;
  TensorArray ta(g, DType::Float32, 3);
  Output stacked = ta.write(0, vec(g, {4, 5})).write(1, vec(g, {1, 2})).write(2, vec(g, {-1, -2})).stack();
  TensorArray u = TensorArray(g, DType::Float32, 3).unstack(mat(g, {1, 2, 3, 4, 5, 6}, 3, 2));
  Session s(g);
  Tensor t = s.run(stacked);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{4, 5, 1, 2, -1, -2}));
  EXPECT_EQ(stacked.shape(), (Shape{3, 2}));  // a constant size and the writes' shape
  EXPECT_EQ(s.run(u.read(1)).to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(s.run(u.size()).scalar<int32_t>(), 3);
  EXPECT_EQ(s.run(u.stack()).to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

// testTensorArrayScatterRead and gather.
TEST(TensorArrayTest, ScatterAndGather) {
  Graph g;
  TensorArray ta(g, DType::Float32, 4, {.element_shape = Shape{2}});
  TensorArray w = ta.scatter(ops::constant(g, Tensor::vector<int32_t>({1, 3})), mat(g, {1, 2, 3, 4}, 2, 2));
  Session s(g);
  // Elements not written read as zeros (an element shape is known).
  EXPECT_EQ(s.run(w.stack()).to_vector<float>(), (std::vector<float>{0, 0, 1, 2, 0, 0, 3, 4}));
  EXPECT_EQ(s.run(w.gather(ops::constant(g, Tensor::vector<int64_t>({3, 1, 3})))).to_vector<float>(),
            (std::vector<float>{3, 4, 1, 2, 3, 4}));
  EXPECT_EQ(s.run(ta.stack()).shape(), (Shape{4, 2}));
}

// testTensorArrayWriteWrongIndexOrDataTypeFails, testTensorArrayReadWrongIndexOrDataTypeFails.
TEST(TensorArrayTest, BadIndicesAndDtypes) {
  Graph g;
  TensorArray ta(g, DType::Float32, 3);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ta.write(0, i32(g, 1)); }), HasSubstr("holds float32"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ta.write(f32(g, 0), f32(g, 1)); }), HasSubstr("not int32 or int64"));
  TensorArray w = ta.write(0, vec(g, {1, 2}));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { w.write(1, vec(g, {1, 2, 3})); }),
              HasSubstr("a value of shape [3], but its elements have shape [2]"));
  Session s(g);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(ta.write(-1, vec(g, {1, 2})).flow()); }),
              HasSubstr("index -1 is out of range for a TensorArray of size 3"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(ta.write(3, vec(g, {1, 2})).flow()); }),
              HasSubstr("index 3 is out of range"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(w.read(5)); }), HasSubstr("index 5 is out of range"));
  // Never written, element shape unknown: nothing to read (TF: "has not yet been written").
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(ta.read(1)); }), HasSubstr("none of whose elements"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(TensorArray(g, DType::Float32, 2).stack()); }),
              HasSubstr("none of whose elements"));
  // Messages name the op.
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(w.read(5, "my_read")); }), HasSubstr("my_read"));
  // A value whose shape is known only when run.
  Output p = ops::placeholder(g, DType::Float32, Shape::unknown(), "p");
  EXPECT_THAT(
      error_of<InvalidArgumentError>([&] { s.run(w.write(1, p).flow(), {{p, Tensor::vector<float>({1, 2, 3})}}); }),
      HasSubstr("cannot write a value of shape [3] to a TensorArray whose elements have shape [2]"));
  // Unstack of another size, a scatter naming an index twice, a negative size.
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(ta.unstack(mat(g, {1, 2, 3, 4}, 2, 2)).flow()); }),
              HasSubstr("has 2 rows, the TensorArray 3 elements"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] {
                s.run(ta.scatter(ops::constant(g, Tensor::vector<int32_t>({1, 1})), mat(g, {1, 2, 3, 4}, 2, 2)).flow());
              }),
              HasSubstr("names index 1 twice"));
  Output n = ops::placeholder(g, DType::Int32, Shape{}, "n");
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(TensorArray(g, DType::Float32, n).flow(), {{n, Tensor::scalar(-2)}}); }),
              HasSubstr("size must not be negative, got -2"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ta.unstack(f32(g, 1)); }), HasSubstr("unstack of a scalar"));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { TensorArray(g, DType::Float32, int64_t{-1}); }),
              HasSubstr("size -1 is not in [0, 2^31)"));
}

// testTensorArrayWriteConcat (elements of one shape): the elements joined along their first dim.
TEST(TensorArrayTest, Concat) {
  Graph g;
  TensorArray ta(g, DType::Float32, 2);
  Output c = ta.write(0, mat(g, {1, 2, 3, 4}, 2, 2)).write(1, mat(g, {5, 6, 7, 8}, 2, 2)).concat();
  Session s(g);
  Tensor t = s.run(c);
  EXPECT_EQ(t.shape(), (Shape{4, 2}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { TensorArray(g, DType::Float32, 2).concat(); }),
              HasSubstr("concat needs elements of rank 1 or more"));
}

// Writing an index twice keeps the last value (TF2's lists; TF1 raises).
TEST(TensorArrayTest, OverwriteKeepsTheLastValue) {
  Graph g;
  TensorArray ta(g, DType::Int32, 2);
  Output r = ta.write(1, i32(g, 7)).write(1, i32(g, 9)).stack();
  Session s(g);
  EXPECT_EQ(s.run(r).to_vector<int32_t>(), (std::vector<int32_t>{0, 9}));
}

// testTensorArraySizeDynamic: writes past the end grow a dynamic_size array; testPackWithZeroSize.
TEST(TensorArrayTest, DynamicSizeGrowsAndEmptyArraysStack) {
  Graph g;
  TensorArray ta(g, DType::Float32, 0, {.dynamic_size = true});
  TensorArray w = ta.write(0, f32(g, 1)).write(3, f32(g, 4)).write(1, f32(g, 2));
  Session s(g);
  EXPECT_EQ(s.run(w.size()).scalar<int32_t>(), 4);
  EXPECT_EQ(s.run(w.stack()).to_vector<float>(), (std::vector<float>{1, 2, 0, 4}));
  TensorArray empty(g, DType::Float32, 0, {.element_shape = Shape{3}});
  EXPECT_EQ(s.run(empty.stack()).shape(), (Shape{0, 3}));
  TensorArray fixed(g, DType::Float32, 2);
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { s.run(fixed.write(2, f32(g, 1)).flow()); }),
              HasSubstr("index 2 is out of range for a TensorArray of size 2"));
}

TEST(TensorArrayTest, StringElements) {
  Graph g;
  TensorArray ta(g, DType::String, 3);
  Output r = ta.write(2, ops::constant(g, "c")).write(0, ops::constant(g, "a")).stack();
  Session s(g);
  EXPECT_EQ(s.run(r).to_vector<std::string>(), (std::vector<std::string>{"a", "", "c"}));
}

// testTensorArrayGradientWriteRead and testSumOfTwoReadVariablesWithoutRepeatGrad: the gradient
// of reads with respect to the values written, and of an element read twice (summed).
TEST(TensorArrayGradTest, WriteRead) {
  Graph g;
  Output a = ops::placeholder(g, DType::Float32, Shape{2}, "a");
  Output b = ops::placeholder(g, DType::Float32, Shape{2}, "b");
  TensorArray w = TensorArray(g, DType::Float32, 3).write(0, a).write(1, b);
  Output r0 = w.read(0), r1 = w.read(1);
  Output loss = ops::add(ops::reduce_sum(ops::mul(r0, vec(g, {2, 3}))),
                         ops::add(ops::reduce_sum(r1), ops::reduce_sum(ops::mul(w.read(1), vec(g, {5, 7})))));
  std::vector<Output> d = gradients({loss}, {a, b});
  Session s(g);
  std::vector<Tensor> r = s.run(d, {{a, Tensor::vector<float>({1, 1})}, {b, Tensor::vector<float>({1, 1})}});
  EXPECT_EQ(r[0].to_vector<float>(), (std::vector<float>{2, 3}));
  EXPECT_EQ(r[1].to_vector<float>(), (std::vector<float>{6, 8}));
}

// testTensorArrayGradientUnpackRead, testTensorArrayGradientDynamicUnpackRead,
// testTensorArrayWriteGatherAndGradients, testTensorArrayGradientScatterRead: gradients through
// unstack, gather, scatter and stack.
TEST(TensorArrayGradTest, UnstackGatherScatterStack) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{3, 2}, "x");
  for (bool dynamic : {false, true}) {
    TensorArray u = TensorArray(g, DType::Float32, 3, {.dynamic_size = dynamic}).unstack(x);
    Output got = u.gather(ops::constant(g, Tensor::vector<int32_t>({2, 0, 2})));
    Output loss = ops::reduce_sum(ops::mul(got, mat(g, {1, 2, 3, 4, 5, 6}, 3, 2)));
    Session s(g);
    Tensor dx = s.run(gradients({loss}, {x})[0], {{x, Tensor::matrix<float>({0, 0, 0, 0, 0, 0}, 3, 2)}});
    // Row 2 gathered twice: (1, 2) + (5, 6).
    EXPECT_EQ(dx.to_vector<float>(), (std::vector<float>{3, 4, 0, 0, 6, 8})) << "dynamic_size " << dynamic;
  }
  Output v = ops::placeholder(g, DType::Float32, Shape{2, 2}, "v");
  Output base = ops::placeholder(g, DType::Float32, Shape{3, 2}, "base");
  TensorArray arr = TensorArray(g, DType::Float32, 3).unstack(base);
  Output st = arr.scatter(ops::constant(g, Tensor::vector<int32_t>({2, 0})), v).stack();
  Output loss = ops::reduce_sum(ops::mul(st, mat(g, {1, 2, 3, 4, 5, 6}, 3, 2)));
  std::vector<Output> d = gradients({loss}, {v, base});
  Session s(g);
  std::vector<Tensor> r =
      s.run(d, {{v, Tensor::matrix<float>({0, 0, 0, 0}, 2, 2)}, {base, Tensor::matrix<float>({0, 0, 0, 0, 0, 0}, 3, 2)}});
  EXPECT_EQ(r[0].to_vector<float>(), (std::vector<float>{5, 6, 1, 2}));  // rows 2 and 0 of the weights
  EXPECT_EQ(r[1].to_vector<float>(), (std::vector<float>{0, 0, 3, 4, 0, 0}));  // only the row not overwritten
}

// testWhileLoopWritePackGradients: a loop writes x_i * w for each i; the stacked results'
// gradient reaches x and w.
TEST(TensorArrayGradTest, WhileLoopWritePack) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{4}, "x");
  Output w = ops::placeholder(g, DType::Float32, Shape{}, "w");
  TensorArray in = TensorArray(g, DType::Float32, 4).unstack(x);
  TensorArray out(g, DType::Float32, 4);
  Vars r = ops::while_loop([&](const Vars& v) { return ops::less(v[0], i32(g, 4)); },
                           [&](const Vars& v) {
                             Output y = ops::mul(ops::square(in.read(v[0])), w);
                             return Vars{ops::add(v[0], i32(g, 1)), out.with_flow(v[1]).write(v[0], y).flow()};
                           },
                           {i32(g, 0), out.flow()});
  Output stacked = out.with_flow(r[1]).stack();
  EXPECT_EQ(stacked.shape(), (Shape{4}));
  Output loss = ops::reduce_sum(ops::mul(stacked, vec(g, {1, 10, 100, 1000})));
  std::vector<Output> d = gradients({loss}, {x, w});
  Session s(g);
  const FeedMap feeds = {{x, Tensor::vector<float>({1, 2, 3, 4})}, {w, Tensor::scalar(2.0f)}};
  EXPECT_EQ(s.run(stacked, feeds).to_vector<float>(), (std::vector<float>{2, 8, 18, 32}));
  std::vector<Tensor> got = s.run(d, feeds);
  // d/dx_i = 2 x_i w c_i; d/dw = sum x_i^2 c_i.
  EXPECT_EQ(got[0].to_vector<float>(), (std::vector<float>{4, 80, 1200, 16000}));
  EXPECT_EQ(got[1].scalar<float>(), 1 + 40 + 900 + 16000);
}

// Note [Tensor arrays]: a loop variable the body only writes keeps no history under a gradient
// (the While's history output for it is empty), while the counter keeps one per iteration.
TEST(TensorArrayGradTest, AnArrayTheBodyOnlyWritesKeepsNoHistory) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{}, "x");
  TensorArray out(g, DType::Float32, 50, {.element_shape = Shape{8}});
  Vars r = ops::while_loop([&](const Vars& v) { return ops::less(v[0], i32(g, 50)); },
                           [&](const Vars& v) {
                             Output e = ops::fill(g, Shape{8}, Tensor::scalar(1.0f));
                             Output y = ops::mul(ops::mul(e, v[1]), ops::cast(v[0], DType::Float32));
                             return Vars{ops::add(v[0], i32(g, 1)), ops::mul(v[1], f32(g, 1.0f)),
                                         out.with_flow(v[2]).write(v[0], y).flow()};
                           },
                           {i32(g, 0), x, out.flow()});
  Output loss = ops::reduce_sum(out.with_flow(r[2]).stack());
  Output dx = gradients({loss}, {x})[0];
  // The While's outputs: three finals, the iteration count, then a history per loop variable.
  Operation w = r[0].op();
  ASSERT_EQ(w.type(), "While");
  Session s(g);
  std::vector<Tensor> got = s.run({dx, w.output(3), w.output(4), w.output(5), w.output(6)}, {{x, Tensor::scalar(1.0f)}});
  EXPECT_EQ(got[0].scalar<float>(), 8.0f * (49 * 50 / 2));
  EXPECT_EQ(got[1].scalar<int32_t>(), 50);
  EXPECT_EQ(got[2].shape(), (Shape{50}));        // the counter's history
  EXPECT_EQ(got[3].shape(), (Shape{50}));        // x's
  EXPECT_EQ(got[4].shape().dim(0), 0);           // the array's: none
}

// A loop that reads its own array (the previous element) keeps the array's history, and its
// gradient is right: a_i = 2 a_{i-1} + x_i, so d sum(a) / d x_0 = 1 + 2 + 4 = 7 (four elements).
TEST(TensorArrayGradTest, BodyThatReadsItsOwnArray) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{4}, "x");
  TensorArray in = TensorArray(g, DType::Float32, 4).unstack(x);
  TensorArray acc = TensorArray(g, DType::Float32, 4).write(0, in.read(0));
  Vars r = ops::while_loop([&](const Vars& v) { return ops::less(v[0], i32(g, 4)); },
                           [&](const Vars& v) {
                             TensorArray a = acc.with_flow(v[1]);
                             Output prev = a.read(ops::sub(v[0], i32(g, 1)));
                             return Vars{ops::add(v[0], i32(g, 1)),
                                         a.write(v[0], ops::add(ops::mul(prev, f32(g, 2)), in.read(v[0]))).flow()};
                           },
                           {i32(g, 1), acc.flow()});
  Output stacked = acc.with_flow(r[1]).stack();
  Output dx = gradients({ops::reduce_sum(stacked)}, {x})[0];
  Session s(g);
  const FeedMap feeds = {{x, Tensor::vector<float>({1, 1, 1, 1})}};
  EXPECT_EQ(s.run(stacked, feeds).to_vector<float>(), (std::vector<float>{1, 3, 7, 15}));
  EXPECT_EQ(s.run(dx, feeds).to_vector<float>(), (std::vector<float>{15, 7, 3, 1}));
}

// testMap_Simple, testMap_MultiOutput, and map_fn's gradient (testMapSparseAndGrad's dense part).
TEST(FunctionalOpsTest, MapFn) {
  Graph g;
  Output elems = vec(g, {1, 2, 3, 4, 5, 6});
  Output r = ops::map_fn([&](Output x) { return ops::square(ops::add(x, f32(g, 3))); }, elems);
  Session s(g);
  EXPECT_EQ(s.run(r).to_vector<float>(), (std::vector<float>{16, 25, 36, 49, 64, 81}));
  EXPECT_EQ(r.shape(), (Shape{6}));
  // Several results of several dtypes; the rows of a matrix.
  std::vector<Output> m = ops::map_fn(
      [&](const Vars& x) { return Vars{ops::reduce_sum(x[0]), ops::cast(ops::reduce_max(x[0]), DType::Int32)}; },
      {mat(g, {1, 2, 3, 4, 5, 6}, 2, 3)}, {DType::Float32, DType::Int32});
  std::vector<Tensor> got = s.run(m);
  EXPECT_EQ(got[0].to_vector<float>(), (std::vector<float>{6, 15}));
  EXPECT_EQ(got[1].to_vector<int32_t>(), (std::vector<int32_t>{3, 6}));
  // The gradient: d sum((x_i w)^2) / dw = sum 2 x_i^2 w, d / dx_i = 2 x_i w^2.
  Output x = ops::placeholder(g, DType::Float64, Shape{-1}, "x");
  Output w = ops::placeholder(g, DType::Float64, Shape{}, "w");
  Output y = ops::map_fn([&](Output e) { return ops::square(ops::mul(e, w)); }, x);
  std::vector<Output> d = gradients({ops::reduce_sum(y)}, {x, w});
  got = s.run(d, {{x, Tensor::vector<double>({1, 2, 3})}, {w, Tensor::scalar(0.5)}});
  EXPECT_EQ(got[0].to_vector<double>(), (std::vector<double>{0.5, 1, 1.5}));
  EXPECT_EQ(got[1].scalar<double>(), 2 * 14 * 0.5);
  // No elements (fed): an empty result of fn's element shape.
  Output many = ops::placeholder(g, DType::Float32, Shape{-1, 2}, "many");
  Output sums = ops::map_fn([&](Output e) { return ops::mul(e, f32(g, 2)); }, many);
  EXPECT_EQ(s.run(sums, {{many, Tensor(DType::Float32, Shape{0, 2})}}).shape(), (Shape{0, 2}));
  EXPECT_EQ(s.run(sums, {{many, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2)}}).to_vector<float>(),
            (std::vector<float>{2, 4, 6, 8}));
}

// testScan_Simple, testScan_Reverse, testScan_NoInitializer, testScanGradient.
TEST(FunctionalOpsTest, Scan) {
  Graph g;
  Output elems = vec(g, {1, 2, 3, 4, 5, 6});
  auto mul = [](Output a, Output x) { return ops::mul(a, x); };
  Output v = f32(g, 2);
  Session s(g);
  EXPECT_EQ(s.run(ops::scan(mul, elems, v)).to_vector<float>(), (std::vector<float>{2, 4, 12, 48, 240, 1440}));
  EXPECT_EQ(s.run(ops::scan(mul, elems, v, /*reverse=*/true)).to_vector<float>(),
            (std::vector<float>{1440, 1440, 720, 240, 60, 12}));
  auto plus = [](Output a, Output x) { return ops::add(a, x); };
  EXPECT_EQ(s.run(ops::scan(plus, elems)).to_vector<float>(), (std::vector<float>{1, 3, 6, 10, 15, 21}));
  EXPECT_EQ(s.run(ops::scan(plus, elems, {}, true)).to_vector<float>(), (std::vector<float>{21, 20, 18, 15, 11, 6}));
  // testScanGradient: r = scan(a * x, elems, v); d r[-1] / dv = prod(elems) = 720.
  Output pv = ops::placeholder(g, DType::Float32, Shape{}, "v");
  Output r = ops::scan(mul, elems, pv);
  Output last = ops::gather(r, i32(g, 5));
  EXPECT_EQ(s.run(gradients({last}, {pv})[0], {{pv, Tensor::scalar(2.0f)}}).scalar<float>(), 720.0f);
  // And with respect to the elements: d (2 * prod x) / dx_0 = 2 * 720 / 1 = 1440.
  Output px = ops::placeholder(g, DType::Float32, Shape{6}, "x");
  Output last2 = ops::gather(ops::scan(mul, px, pv), i32(g, 5));
  Tensor dx = s.run(gradients({last2}, {px})[0],
                    {{pv, Tensor::scalar(2.0f)}, {px, Tensor::vector<float>({1, 2, 3, 4, 5, 6})}});
  EXPECT_THAT(dx.to_vector<float>(), ElementsAre(1440, 720, 480, 360, 288, 240));
}

// testFoldl_Simple, testFoldr_Simple, testFoldl_Gradient (a fold's accumulator of another shape
// than the elements: a running vector).
TEST(FunctionalOpsTest, Folds) {
  Graph g;
  Output elems = vec(g, {1, 2, 3, 4, 5, 6});
  Session s(g);
  auto f = [](Output a, Output x) { return ops::mul(ops::add(a, x), ops::constant(x.op().graph(), 2.0f)); };
  EXPECT_EQ(s.run(ops::foldl(f, elems)).scalar<float>(), 208);
  EXPECT_EQ(s.run(ops::foldl(f, elems, f32(g, 10))).scalar<float>(), 880);
  EXPECT_EQ(s.run(ops::foldr(f, elems)).scalar<float>(), 450);
  EXPECT_EQ(s.run(ops::foldr(f, elems, f32(g, 10))).scalar<float>(), 1282);
  Output x = ops::placeholder(g, DType::Float32, Shape{3}, "x");
  Output acc = ops::foldl([](Output a, Output e) { return ops::add(ops::mul(a, e), e); }, x, vec(g, {1, 1}));
  EXPECT_EQ(acc.shape(), (Shape{2}));
  // a = ((1 * x0 + x0) * x1 + x1) * x2 + x2 per component: d/dx0 = 2 x1 x2 = 24 at (1, 3, 4), twice.
  Tensor d = s.run(gradients({ops::reduce_sum(acc)}, {x})[0], {{x, Tensor::vector<float>({1, 3, 4})}});
  EXPECT_EQ(d.to_vector<float>(), (std::vector<float>{48, 2 * (2 * 4 + 4), 2 * (2 * 3 + 3 + 1)}));
}

TEST(FunctionalOpsTest, Errors) {
  Graph g;
  EXPECT_THAT(error_of<InvalidArgumentError>([&] { ops::map_fn([](Output x) { return x; }, f32(g, 1)); }),
              HasSubstr("is a scalar"));
  EXPECT_THAT(error_of<InvalidArgumentError>(
                  [&] { ops::map_fn([&](Output x) { return ops::cast(x, DType::Int32); }, vec(g, {1, 2})); }),
              HasSubstr("fn's result 0 is int32, the dtype given is float32"));
  EXPECT_THAT(error_of<InvalidArgumentError>(
                  [&] { ops::scan([&](Output, Output x) { return ops::cast(x, DType::Int32); }, vec(g, {1, 2})); }),
              HasSubstr("fn returned int32 for an accumulator of float32"));
}

// Threads running one map_fn with their own feeds: each sees its own elements.
TEST(FunctionalOpsTest, ConcurrentRuns) {
  Graph g;
  Output x = ops::placeholder(g, DType::Int32, Shape{-1}, "x");
  Output y = ops::map_fn([&](Output e) { return ops::mul(e, e); }, x);
  Session s(g);
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 25; ++k) {
        std::vector<int32_t> in(static_cast<std::size_t>(k % 7 + 1), t + k);
        std::vector<int32_t> got = s.run(y, {{x, Tensor::vector<int32_t>(in)}}).to_vector<int32_t>();
        if (got != std::vector<int32_t>(in.size(), (t + k) * (t + k))) ++bad[static_cast<std::size_t>(t)];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_THAT(bad, ElementsAre(0, 0, 0, 0));
}

// On a cluster: map_fn on the worker, over a ps variable's rows, training it (the arrays' ops
// cross the wire with the loop).
TEST(TensorArrayClusterTest, MapFnOnAWorkerTrainsAPsVariable) {
  train::ClusterSpec cluster({{"ps", {train::free_loopback_address()}}, {"worker", {train::free_loopback_address()}}});
  train::Server ps(cluster, "ps", 0);
  train::Server worker(cluster, "worker", 0);
  Graph g;
  Variable w;
  {
    auto on_ps = g.device("/job:ps/task:0");
    w = Variable(g, Tensor::matrix<double>({1, 2, 3, 4}, 2, 2), "w");
  }
  Output loss;
  Operation train;
  {
    auto on_worker = g.device("/job:worker/task:0");
    // loss = sum over rows r of (sum(r) - 1)^2: each row's sum goes to 1.
    Output sums = ops::map_fn([&](Output row) { return ops::reduce_sum(row); }, w.value());
    loss = ops::reduce_sum(ops::square(ops::sub(sums, ops::constant(g, 1.0))));
    train = train::GradientDescentOptimizer(0.1f).minimize(loss);
  }
  Session s(g, worker.target());
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(loss).scalar<double>(), 4 + 36);
  for (int k = 0; k < 100; ++k) s.run(train);
  EXPECT_NEAR(s.run(loss).scalar<double>(), 0.0, 1e-9);
  std::vector<double> got = s.run(w.value()).to_vector<double>();
  EXPECT_NEAR(got[0] + got[1], 1.0, 1e-6);
  EXPECT_NEAR(got[0] - got[1], -1.0, 1e-6);  // each step moves both entries of a row alike
}

}  // namespace
}  // namespace tessera
