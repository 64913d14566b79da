// The shape ops through the public API (a Graph, a Session), on the CPU and on a simulated
// accelerator: values, shapes, negative axes, empty tensors, every dtype, and every error case,
// at graph-build time where the shape is known and at run time where it is not (always an
// InvalidArgumentError naming the op). Cases follow TensorFlow's reshape_op_test.py,
// transpose_op_test.py, concat_op_test.py, split_op_test.py, slice_op_test.py, pad_op_test.py,
// tile (array_ops_test.py) and shape_ops_test.py; the expected values of the all-dtype cases come
// from references computed here, index by index.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/node.h"
#include "tests/testing/op_suite.h"

namespace tessera {
namespace {

using namespace op_suite;
using testing::kAllDTypes;

// ---- References: row-major index arithmetic, independent of the kernels ----

Dims unflatten(int64_t i, const Dims& dims) {
  Dims idx(dims.size());
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    idx[d] = i % dims[d];
    i /= dims[d];
  }
  return idx;
}

int64_t flatten(const Dims& idx, const Dims& dims) {
  int64_t i = 0;
  for (std::size_t d = 0; d < dims.size(); ++d) i = i * dims[d] + idx[d];
  return i;
}

int64_t count(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// out[idx] = f(idx) over the elements of `out_dims`.
template <class F>
std::vector<double> build(const Dims& out_dims, F f) {
  std::vector<double> out(static_cast<std::size_t>(count(out_dims)));
  for (int64_t i = 0; i < count(out_dims); ++i) out[i] = f(unflatten(i, out_dims));
  return out;
}

// Values 1, 2, 3, ... of `dtype` (false/true alternating for bool; rounded in the 16-bit floats).
Tensor iota(DType dtype, const Dims& dims) {
  std::vector<double> v(static_cast<std::size_t>(count(dims)));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = dtype == DType::Bool ? static_cast<double>(i % 2) : static_cast<double>(i + 1);
  return tensor_of(dtype, Shape(dims), v);
}

// ---- Running on each device ----

// Runs each graph's shape ops on the device the test is instantiated for: "CPU", or "SIM" (the
// process's /device:SIM:0; placeholders stay on the host, so its inputs cross to it and its
// outputs back, as a GPU's would).
class ShapeOpsTest : public ::testing::TestWithParam<std::string> {
 protected:
  // Ops built while the scope lives run on the device under test.
  GraphScope on_device(Graph& g) { return g.device(GetParam() == "CPU" ? "/device:CPU:0" : "/device:SIM:0"); }

  // Fetches `ys` (twice: on SIM the second step replays the captured partition) and checks that
  // the op of each ran on the device under test.
  std::vector<Tensor> run(const std::vector<Output>& ys, const FeedMap& feeds = {}) {
    Session s(ys.front().op().graph());
    std::vector<Tensor> first = s.run(ys, feeds);
    std::vector<Tensor> second = s.run(ys, feeds);
    for (std::size_t i = 0; i < ys.size(); ++i) {
      EXPECT_THAT(ys[i].op().assigned_device(), HasSubstr("/device:" + GetParam() + ":0")) << ys[i].name();
      EXPECT_TRUE(first[i].equals(second[i])) << ys[i].name() << ": the second step differs";
    }
    return first;
  }
  Tensor run(Output y, const FeedMap& feeds = {}) { return run(std::vector<Output>{y}, feeds).front(); }

  // Runs `y` and expects InvalidArgumentError naming it and saying `detail`.
  void expect_run_fails(Output y, const FeedMap& feeds, const std::string& detail) {
    Session s(y.op().graph());
    const std::string message = error_of<InvalidArgumentError>([&] { s.run(y, feeds); });
    EXPECT_THAT(message, HasSubstr(y.op().name() + " (" + y.op().type() + "): "));
    EXPECT_THAT(message, HasSubstr(detail));
  }

  // `op` of `x`, built on the device under test.
  template <class F>
  Output on_device_of(const Output& x, F op) {
    auto scope = on_device(x.op().graph());
    return op(x);
  }

  // Feeds `t` through a placeholder of `shape` (default: t's own) and applies `op` on the device.
  template <class F>
  Tensor apply(const Tensor& t, F op, const Shape& shape) {
    Graph g;
    auto x = ops::placeholder(g, t.dtype(), shape, "x");
    return run(on_device_of(x, op), {{x, t}});
  }
  template <class F>
  Tensor apply(const Tensor& t, F op) {
    return apply(t, op, t.shape());
  }

  // For every dtype: `op` of iota(dtype, in_dims) has shape out_dims, and its element idx is the
  // input's element at source(idx), or 0 where that lies outside the input (padding). The check of
  // the ops that only move elements (slice, tile, pad).
  template <class F, class Source>
  void expect_moves_every_dtype(const Dims& in_dims, F op, const Dims& out_dims, Source source) {
    for (DType dtype : kAllDTypes) {
      SCOPED_TRACE(dtype_name(dtype));
      const Tensor x = iota(dtype, in_dims);
      const std::vector<double> v = values_of(x);
      const std::vector<double> want = build(out_dims, [&](const Dims& idx) {
        const Dims from = source(idx);
        for (std::size_t d = 0; d < from.size(); ++d) {
          if (from[d] < 0 || from[d] >= in_dims[d]) return 0.0;
        }
        return v[flatten(from, in_dims)];
      });
      expect_values(apply(x, op), dtype, Shape(out_dims), want);
    }
  }
};

// Expects building to throw InvalidArgumentError naming the op `name (Type)` and saying `detail`.
template <class F>
void expect_build_fails(F build, const std::string& op, const std::string& detail) {
  const std::string message = error_of<InvalidArgumentError>(build);
  EXPECT_THAT(message, HasSubstr(op));
  EXPECT_THAT(message, HasSubstr(detail));
}

std::vector<float> floats(const Tensor& t) { return t.to_vector<float>(); }

// ---- Reshape ----

TEST_P(ShapeOpsTest, ReshapeKeepsValuesInOrder) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{6});
  for (const Dims& shape : {Dims{2, 3}, Dims{3, 2}, Dims{-1, 2}, Dims{3, -1}, Dims{1, 6, 1}, Dims{-1}}) {
    SCOPED_TRACE(::testing::PrintToString(shape));
    Tensor y = apply(x, [&](Output in) { return ops::reshape(in, shape); });
    EXPECT_EQ(floats(y), floats(x));
    EXPECT_EQ(y.num_elements(), 6);
  }
  EXPECT_EQ(apply(x, [](Output in) { return ops::reshape(in, {-1, 3}); }).shape(), (Shape{2, 3}));
  EXPECT_EQ(apply(Tensor::scalar(7.0f), [](Output in) { return ops::reshape(in, {1, 1}); }).shape(), (Shape{1, 1}));
  Tensor scalar = apply(Tensor::from_vector<float>({7}, Shape{1, 1}), [](Output in) { return ops::reshape(in, {}); });
  EXPECT_EQ(scalar.shape(), Shape{});
  EXPECT_EQ(scalar.scalar<float>(), 7.0f);
}

TEST_P(ShapeOpsTest, ReshapeEveryDType) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = iota(dtype, {2, 3, 4});
    Tensor y = apply(x, [](Output in) { return ops::reshape(in, {4, -1}); });
    expect_values(y, dtype, Shape{4, 6}, values_of(x));
  }
}

TEST_P(ShapeOpsTest, ReshapeOfEmptyTensors) {
  const Tensor x(DType::Float32, Shape{0, 2});
  EXPECT_EQ(apply(x, [](Output in) { return ops::reshape(in, {2, 0, 5}); }).shape(), (Shape{2, 0, 5}));
  EXPECT_EQ(apply(x, [](Output in) { return ops::reshape(in, {0}); }).shape(), (Shape{0}));
}

// The -1 is inferred when the graph is built if the element count is known, else when it runs.
TEST_P(ShapeOpsTest, ReshapeInfersTheMinusOneWhenItRuns) {
  Graph g;
  auto x = ops::placeholder(g, DType::Int32, {-1, 6}, "x");
  Output y;
  {
    auto scope = on_device(g);
    y = ops::reshape(x, {3, -1});
  }
  EXPECT_EQ(y.shape(), (Shape{3, -1}));
  Tensor out = run(y, {{x, Tensor::from_vector<int32_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, Shape{2, 6})}});
  EXPECT_EQ(out.shape(), (Shape{3, 4}));
  EXPECT_EQ(out.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
}

TEST_P(ShapeOpsTest, ReshapeRejectsAnIncompatibleShapeWhenItRuns) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape::unknown(), "x");
  Output y, inferred;
  {
    auto scope = on_device(g);
    y = ops::reshape(x, {4}, "r");
    inferred = ops::reshape(x, {4, -1}, "inferred");
  }
  const Tensor six = Tensor::zeros(DType::Float32, Shape{2, 3});
  expect_run_fails(y, {{x, six}}, "cannot reshape a tensor of shape [2,3] (6 elements) to shape [4] (4 elements)");
  expect_run_fails(inferred, {{x, six}}, "6 is not a multiple of 4");
}

// CPU: the fetched tensor is the fed one, relabelled (no copy). SIM: the device holds one buffer,
// the received input, whatever the chain of relabellings after it.
TEST_P(ShapeOpsTest, ReshapeExpandDimsAndSqueezeShareTheInputBuffer) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {2, 3}, "x");
  Output y;
  {
    auto scope = on_device(g);
    y = ops::squeeze(ops::expand_dims(ops::reshape(x, {3, 2}), 1), {1});
  }
  const Tensor fed = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  SessionOptions eager;
  eager.cuda_graphs = false;
  Session s(g, eager);
  Tensor out = s.run(y, {{x, fed}});  // places the graph and makes the kernels
  EXPECT_EQ(out.shape(), (Shape{3, 2}));
  EXPECT_EQ(floats(out), floats(fed));
  if (GetParam() == "CPU") {
    EXPECT_EQ(out.raw_data(), fed.raw_data());
  } else {
    const int64_t before = testing::sim_device()->allocator().stats().num_allocs;
    out = s.run(y, {{x, fed}});
    EXPECT_EQ(testing::sim_device()->allocator().stats().num_allocs - before, 1) << "only the received input";
    EXPECT_EQ(floats(out), floats(fed));
  }
}

TEST(ShapeOpsBuildTest, ReshapeChecksItsShapeWhenTheGraphIsBuilt) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {2, 3}, "x");
  expect_build_fails([&] { ops::reshape(x, {4}, "r"); },
                     "r (Reshape): ", "cannot reshape a tensor of shape [2,3] (6 elements) to shape [4] (4 elements)");
  expect_build_fails(
      [&] {
        ops::reshape(x, {-1, -1}, "r");
      },
      "r (Reshape): ", "only one dimension of shape [-1,-1] may be -1");
  expect_build_fails([&] { ops::reshape(x, {4, -1}, "r"); }, "r (Reshape): ", "6 is not a multiple of 4");
  expect_build_fails([&] { ops::reshape(x, {-2, 3}, "r"); }, "r (Reshape): ", "negative dimension -2");
  expect_build_fails([&] { ops::reshape(x, {0, -1}, "r"); }, "r (Reshape): ", "the other dimensions multiply to 0");
  auto partial = ops::placeholder(g, DType::Float32, {-1, 4}, "partial");
  expect_build_fails([&] { ops::reshape(partial, {6}, "r"); }, "r (Reshape): ", "[?,4] to shape [6]");
  EXPECT_EQ(ops::reshape(partial, {8}).shape(), (Shape{8}));
  auto big = ops::placeholder(g, DType::Float32, Shape::unknown(), "big");
  expect_build_fails(
      [&] {
        ops::reshape(big, {int64_t{1} << 40, int64_t{1} << 40}, "r");
      },
      "r (Reshape): ", "more than 2^63 - 1 elements");
  expect_build_fails([&] { ops::reshape(big, Dims(9, 1), "r"); }, "r (Reshape): ", "rank 9");
  EXPECT_EQ(ops::reshape(big, {2, -1}).shape(), (Shape{2, -1}));
}

// ---- Transpose ----

std::vector<double> transpose_ref(const Tensor& x, const std::vector<int>& perm, Dims* out_dims) {
  const Dims in = x.shape().dims();
  out_dims->clear();
  for (int p : perm) out_dims->push_back(in[p]);
  const std::vector<double> v = values_of(x);
  return build(*out_dims, [&](const Dims& idx) {
    Dims src(in.size());
    for (std::size_t i = 0; i < perm.size(); ++i) src[perm[i]] = idx[i];
    return v[flatten(src, in)];
  });
}

TEST_P(ShapeOpsTest, TransposeMatrix) {
  Tensor y = apply(Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 2, 3), [](Output in) { return ops::transpose(in); });
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(floats(y), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  Tensor same = apply(Tensor::matrix<float>({1, 2, 3, 4}, 2, 2), [](Output in) { return ops::transpose(in, {0, 1}); });
  EXPECT_EQ(floats(same), (std::vector<float>{1, 2, 3, 4}));
}

TEST_P(ShapeOpsTest, TransposeEveryDTypeAndPermutation) {
  const std::vector<std::vector<int>> perms = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (DType dtype : kAllDTypes) {
    const Tensor x = iota(dtype, {2, 3, 4});
    for (const auto& perm : perms) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + ::testing::PrintToString(perm));
      Dims dims;
      const std::vector<double> want = transpose_ref(x, perm, &dims);
      expect_values(apply(x, [&](Output in) { return ops::transpose(in, perm); }), dtype, Shape(dims), want);
    }
  }
}

TEST_P(ShapeOpsTest, TransposeDefaultReversesAndHigherRanks) {
  const Tensor x = iota(DType::Float64, {2, 1, 3, 2, 2});
  Dims dims;
  std::vector<double> want = transpose_ref(x, {4, 3, 2, 1, 0}, &dims);
  expect_values(apply(x, [](Output in) { return ops::transpose(in); }), DType::Float64, Shape(dims), want);
  want = transpose_ref(x, {3, 0, 4, 2, 1}, &dims);
  expect_values(apply(x,
                      [](Output in) {
                        return ops::transpose(in, {3, 0, 4, 2, 1});
                      }),
                DType::Float64, Shape(dims), want);
  const Tensor big = iota(DType::Float32, {37, 65});
  want = transpose_ref(big, {1, 0}, &dims);
  expect_values(apply(big, [](Output in) { return ops::transpose(in); }), DType::Float32, Shape(dims), want);
  const Tensor rank8 = iota(DType::Int32, {2, 1, 2, 1, 2, 3, 1, 2});
  want = transpose_ref(rank8, {7, 5, 3, 1, 0, 2, 4, 6}, &dims);
  expect_values(apply(rank8,
                      [](Output in) {
                        return ops::transpose(in, {7, 5, 3, 1, 0, 2, 4, 6});
                      }),
                DType::Int32, Shape(dims), want);
}

TEST_P(ShapeOpsTest, TransposeOfScalarsVectorsAndEmptyTensors) {
  EXPECT_EQ(apply(Tensor::scalar(3), [](Output in) { return ops::transpose(in); }).scalar<int32_t>(), 3);
  EXPECT_EQ(
      apply(Tensor::vector<int64_t>({1, 2, 3}), [](Output in) { return ops::transpose(in); }).to_vector<int64_t>(),
      (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(apply(Tensor(DType::Float32, Shape{0, 3}), [](Output in) { return ops::transpose(in); }).shape(),
            (Shape{3, 0}));
  EXPECT_EQ(apply(Tensor(DType::Bool, Shape{2, 0, 4}),
                  [](Output in) {
                    return ops::transpose(in, {2, 0, 1});
                  })
                .shape(),
            (Shape{4, 2, 0}));
}

TEST_P(ShapeOpsTest, TransposeChecksItsPermutationWhenItRuns) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape::unknown(), "x");
  Output y = on_device_of(x, [](Output in) { return ops::transpose(in, {1, 0}, "t"); });
  EXPECT_EQ(y.shape(), (Shape{-1, -1}));
  expect_run_fails(y, {{x, Tensor::zeros(DType::Float32, Shape{2, 3, 4})}},
                   "perm [1,0] has 2 entries, the input has rank 3");
  Tensor ok = run(y, {{x, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2)}});
  EXPECT_EQ(floats(ok), (std::vector<float>{1, 3, 2, 4}));
}

TEST(ShapeOpsBuildTest, TransposeChecksItsPermutationWhenTheGraphIsBuilt) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {2, 3}, "x");
  expect_build_fails([&] { ops::transpose(x, {0, 0}, "t"); }, "t (Transpose): ", "0 appears twice");
  expect_build_fails([&] { ops::transpose(x, {0, 2}, "t"); }, "t (Transpose): ", "2 is out of range");
  expect_build_fails([&] { ops::transpose(x, {-1, 0}, "t"); }, "t (Transpose): ", "-1 is out of range");
  expect_build_fails(
      [&] {
        ops::transpose(x, {0, 1, 2}, "t");
      },
      "t (Transpose): ", "perm [0,1,2] has 3 entries, the input has rank 2");
  auto unknown = ops::placeholder(g, DType::Float32, Shape::unknown(), "u");
  expect_build_fails([&] { ops::transpose(unknown, {1, 1}, "t"); }, "t (Transpose): ", "1 appears twice");
  EXPECT_TRUE(ops::transpose(unknown).shape().unknown_rank());
  EXPECT_EQ(ops::transpose(ops::placeholder(g, DType::Float32, {-1, 5, 2}), {1, 2, 0}).shape(), (Shape{5, 2, -1}));
}

// ---- Concat ----

std::vector<double> concat_ref(const std::vector<Tensor>& xs, int axis, Dims* out_dims) {
  *out_dims = xs[0].shape().dims();
  (*out_dims)[axis] = 0;
  for (const Tensor& x : xs) (*out_dims)[axis] += x.shape().dim(axis);
  return build(*out_dims, [&](Dims idx) {
    for (const Tensor& x : xs) {
      const int64_t n = x.shape().dim(axis);
      if (idx[axis] < n) return values_of(x)[flatten(idx, x.shape().dims())];
      idx[axis] -= n;
    }
    return -1.0;
  });
}

TEST_P(ShapeOpsTest, ConcatAlongEachAxisEveryDType) {
  for (DType dtype : kAllDTypes) {
    for (int axis : {0, 1, 2, -1, -3}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " axis " + std::to_string(axis));
      const int a = axis < 0 ? axis + 3 : axis;
      Dims d1{2, 3, 4};
      Dims d2 = d1;
      d2[a] = 1;
      Dims d3 = d1;
      d3[a] = 5;
      const std::vector<Tensor> xs = {iota(dtype, d1), iota(dtype, d2), iota(dtype, d3)};
      Graph g;
      std::vector<Output> in;
      FeedMap feeds;
      for (const Tensor& x : xs) {
        in.push_back(ops::placeholder(g, dtype, x.shape()));
        feeds[in.back()] = x;
      }
      Output y;
      {
        auto scope = on_device(g);
        y = ops::concat(in, axis);
      }
      Dims dims;
      const std::vector<double> want = concat_ref(xs, a, &dims);
      EXPECT_EQ(y.shape(), Shape(dims));
      expect_values(run(y, feeds), dtype, Shape(dims), want);
    }
  }
}

TEST_P(ShapeOpsTest, ConcatOfOneInputAndOfEmptyInputs) {
  Graph g;
  auto a = ops::placeholder(g, DType::Float32, {2, 2}, "a");
  auto empty = ops::placeholder(g, DType::Float32, {2, 0}, "empty");
  auto none = ops::placeholder(g, DType::Float32, {0, 0}, "none");
  Output one, with_empty, all_empty;
  {
    auto scope = on_device(g);
    one = ops::concat({a}, 1);
    with_empty = ops::concat({empty, a, empty}, 1);
    all_empty = ops::concat({none, none}, 0);
  }
  const Tensor av = Tensor::matrix<float>({1, 2, 3, 4}, 2, 2);
  auto out = run({one, with_empty, all_empty},
                 {{a, av}, {empty, Tensor(DType::Float32, Shape{2, 0})}, {none, Tensor(DType::Float32, Shape{0, 0})}});
  EXPECT_EQ(floats(out[0]), floats(av));
  EXPECT_EQ(out[1].shape(), (Shape{2, 2}));
  EXPECT_EQ(floats(out[1]), floats(av));
  EXPECT_EQ(out[2].shape(), (Shape{0, 0}));
}

TEST_P(ShapeOpsTest, ConcatChecksShapesLeftUnknownWhenItRuns) {
  Graph g;
  auto a = ops::placeholder(g, DType::Int32, {-1, -1}, "a");
  auto b = ops::placeholder(g, DType::Int32, Shape::unknown(), "b");
  Output y;
  {
    auto scope = on_device(g);
    y = ops::concat({a, b}, 0, "c");
  }
  EXPECT_EQ(y.shape(), (Shape{-1, -1}));
  expect_run_fails(y, {{a, Tensor::zeros(DType::Int32, Shape{2, 3})}, {b, Tensor::zeros(DType::Int32, Shape{2, 4})}},
                   "input 0 has shape [2,3] and input 1 has shape [2,4]: dimension 1 differs");
  expect_run_fails(y, {{a, Tensor::zeros(DType::Int32, Shape{2, 3})}, {b, Tensor::zeros(DType::Int32, Shape{3})}},
                   "inputs must have one rank");
  Tensor ok = run(y, {{a, Tensor::matrix<int32_t>({1, 2}, 1, 2)}, {b, Tensor::matrix<int32_t>({3, 4}, 1, 2)}});
  EXPECT_EQ(ok.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4}));
}

TEST(ShapeOpsBuildTest, ConcatChecksItsInputsWhenTheGraphIsBuilt) {
  Graph g;
  auto a = ops::placeholder(g, DType::Float32, {2, 3}, "a");
  auto b = ops::placeholder(g, DType::Float32, {2, 4}, "b");
  auto i = ops::placeholder(g, DType::Int32, {2, 3}, "i");
  auto v = ops::placeholder(g, DType::Float32, {3}, "v");
  auto s = ops::placeholder(g, DType::Float32, Shape{}, "s");
  expect_build_fails(
      [&] {
        ops::concat({a, b}, 0, "c");
      },
      "c (ConcatV2): ", "dimension 1 differs (only the axis, 0, may)");
  EXPECT_EQ(ops::concat({a, b}, 1).shape(), (Shape{2, 7}));
  EXPECT_EQ(ops::concat({a, b}, -1).shape(), (Shape{2, 7}));
  expect_build_fails([&] { ops::concat({a, b}, 2, "c"); }, "c (ConcatV2): ", "axis 2 is out of range [-2, 2)");
  expect_build_fails([&] { ops::concat({a, b}, -3, "c"); }, "c (ConcatV2): ", "axis -3 is out of range [-2, 2)");
  expect_build_fails([&] { ops::concat({a, i}, 0, "c"); }, "c (ConcatV2): ", "input 0 is float32, input 1 is int32");
  expect_build_fails([&] { ops::concat({a, v}, 0, "c"); }, "c (ConcatV2): ", "inputs must have one rank");
  expect_build_fails([&] { ops::concat({s, s}, 0, "c"); }, "c (ConcatV2): ", "cannot concatenate scalars");
  expect_build_fails([&] { ops::concat({}, 0, "c"); }, "concat", "needs at least one input");
  Graph other;
  auto elsewhere = ops::placeholder(other, DType::Float32, {2, 3});
  expect_build_fails([&] { ops::concat({a, elsewhere}, 0, "c"); }, "ConcatV2", "belongs to another graph");
}

// ---- Split ----

TEST_P(ShapeOpsTest, SplitIntoEqualPiecesEveryDType) {
  for (DType dtype : kAllDTypes) {
    const Tensor x = iota(dtype, {4, 6});
    for (auto [num, axis] : std::vector<std::pair<int, int>>{{2, 0}, {4, 0}, {3, 1}, {2, -1}, {6, -1}, {1, 0}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::to_string(num) + " along " + std::to_string(axis));
      Graph g;
      auto in = ops::placeholder(g, dtype, x.shape());
      std::vector<Output> pieces;
      {
        auto scope = on_device(g);
        pieces = ops::split(in, num, axis);
      }
      ASSERT_EQ(pieces.size(), static_cast<std::size_t>(num));
      std::vector<Tensor> out = run(pieces, {{in, x}});
      const int a = axis < 0 ? axis + 2 : axis;
      Dims dims = x.shape().dims();
      dims[a] /= num;
      const std::vector<double> v = values_of(x);
      for (int k = 0; k < num; ++k) {
        const std::vector<double> want = build(dims, [&](Dims idx) {
          idx[a] += k * dims[a];
          return v[flatten(idx, x.shape().dims())];
        });
        expect_values(out[k], dtype, Shape(dims), want);
      }
    }
  }
}

TEST_P(ShapeOpsTest, SplitOfEmptyTensors) {
  Graph g;
  auto in = ops::placeholder(g, DType::Float32, {0, 4});
  std::vector<Output> rows, cols;
  {
    auto scope = on_device(g);
    rows = ops::split(in, 2, 0);
    cols = ops::split(in, 2, 1);
  }
  auto out = run({rows[0], rows[1], cols[0], cols[1]}, {{in, Tensor(DType::Float32, Shape{0, 4})}});
  EXPECT_EQ(out[0].shape(), (Shape{0, 4}));
  EXPECT_EQ(out[3].shape(), (Shape{0, 2}));
}

TEST_P(ShapeOpsTest, SplitChecksTheDivisionWhenItRuns) {
  Graph g;
  auto in = ops::placeholder(g, DType::Float32, {-1, 3}, "in");
  std::vector<Output> pieces;
  {
    auto scope = on_device(g);
    pieces = ops::split(in, 2, 0, "s");
  }
  EXPECT_EQ(pieces[0].shape(), (Shape{-1, 3}));
  expect_run_fails(pieces[0], {{in, Tensor::zeros(DType::Float32, Shape{3, 3})}},
                   "dimension 0 of shape [3,3] (size 3) does not split evenly into 2 pieces");
}

TEST(ShapeOpsBuildTest, SplitChecksItsArgumentsWhenTheGraphIsBuilt) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {2, 3}, "x");
  expect_build_fails([&] { ops::split(x, 2, 1, "s"); },
                     "s (Split): ", "dimension 1 of shape [2,3] (size 3) does not split evenly into 2 pieces");
  expect_build_fails([&] { ops::split(x, 2, 2, "s"); }, "s (Split): ", "axis 2 is out of range [-2, 2)");
  expect_build_fails([&] { ops::split(x, 0, 0, "s"); }, "s (Split): ", "num_split must be at least 1, got 0");
  expect_build_fails([&] { ops::split(ops::placeholder(g, DType::Float32, {0}), 1 << 20, 0, "s"); },
                     "s (Split): ", "num_split 1048576 is more than the 65536 outputs an op may have");
  expect_build_fails([&] { ops::split(ops::placeholder(g, DType::Float32, Shape{}), 1, 0, "s"); },
                     "s (Split): ", "axis 0 is out of range [0, 0)");
  auto pieces = ops::split(x, 3, -1);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2].shape(), (Shape{2, 1}));
  EXPECT_EQ(pieces[2].index(), 2);
}

// ---- Slice ----

TEST_P(ShapeOpsTest, SliceMatrix) {
  const Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, Shape{4, 4});
  Tensor y = apply(x, [](Output in) { return ops::slice(in, {1, 1}, {2, 2}); });
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(floats(y), (std::vector<float>{5, 6, 9, 10}));
  y = apply(x, [](Output in) { return ops::slice(in, {2, 1}, {-1, 2}); });
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(floats(y), (std::vector<float>{9, 10, 13, 14}));
  y = apply(x, [](Output in) { return ops::slice(in, {0, 0}, {-1, -1}); });
  EXPECT_EQ(floats(y), floats(x));
  y = apply(x, [](Output in) { return ops::slice(in, {3, 4}, {1, 0}); });
  EXPECT_EQ(y.shape(), (Shape{1, 0}));
  y = apply(x, [](Output in) { return ops::slice(in, {4, 0}, {-1, -1}); });
  EXPECT_EQ(y.shape(), (Shape{0, 4}));
}

TEST_P(ShapeOpsTest, SliceEveryDTypeInThreeDims) {
  const Dims begin{1, 0, 2};
  expect_moves_every_dtype(
      {3, 4, 5}, [&](Output in) { return ops::slice(in, begin, {-1, 4, 2}); }, {2, 4, 2},
      [&](Dims idx) {
        for (std::size_t d = 0; d < idx.size(); ++d) idx[d] += begin[d];
        return idx;
      });
}

TEST_P(ShapeOpsTest, SliceChecksBoundsWhenItRuns) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {-1, -1}, "x");
  Output y, ends;
  {
    auto scope = on_device(g);
    y = ops::slice(x, {1, 0}, {2, -1}, "s");
    ends = ops::slice(x, {1, 0}, {-1, 1}, "ends");
  }
  EXPECT_EQ(y.shape(), (Shape{2, -1}));
  EXPECT_EQ(ends.shape(), (Shape{-1, 1}));
  expect_run_fails(y, {{x, Tensor::zeros(DType::Float32, Shape{2, 3})}},
                   "size[0] = 2 is out of range [0, 1] for begin[0] = 1 and shape [2,3]");
  expect_run_fails(ends, {{x, Tensor::zeros(DType::Float32, Shape{0, 3})}}, "begin[0] = 1 is out of range [0, 0]");
  Tensor ok = run(ends, {{x, Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 3, 2)}});
  EXPECT_EQ(floats(ok), (std::vector<float>{3, 5}));
}

TEST(ShapeOpsBuildTest, SliceChecksBoundsWhenTheGraphIsBuilt) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {3, 4}, "x");
  expect_build_fails(
      [&] {
        ops::slice(x, {4, 0}, {-1, -1}, "s");
      },
      "s (Slice): ", "begin[0] = 4 is out of range [0, 3]");
  expect_build_fails([&] { ops::slice(x, {1, 1}, {1, 4}, "s"); }, "s (Slice): ", "size[1] = 4 is out of range [0, 3]");
  expect_build_fails([&] { ops::slice(x, {-1, 0}, {1, 1}, "s"); }, "s (Slice): ", "begin[0] = -1 must not be negative");
  expect_build_fails([&] { ops::slice(x, {0, 0}, {-2, 1}, "s"); }, "s (Slice): ", "size[0] = -2 must be -1");
  expect_build_fails([&] { ops::slice(x, {0}, {1}, "s"); }, "s (Slice): ", "one entry per dimension");
  expect_build_fails([&] { ops::slice(x, {0, 0}, {1}, "s"); }, "s (Slice): ", "one entry per dimension");
  EXPECT_EQ(ops::slice(ops::placeholder(g, DType::Float32, Shape::unknown()), {1, 2}, {3, -1}).shape(), (Shape{3, -1}));
}

// ---- ExpandDims and Squeeze ----

TEST_P(ShapeOpsTest, ExpandDimsAtEveryAxis) {
  const Tensor x = iota(DType::Int64, {2, 3});
  const std::vector<std::pair<int, Shape>> cases = {{0, Shape{1, 2, 3}},  {1, Shape{2, 1, 3}},  {2, Shape{2, 3, 1}},
                                                    {-1, Shape{2, 3, 1}}, {-2, Shape{2, 1, 3}}, {-3, Shape{1, 2, 3}}};
  for (const auto& [axis, want] : cases) {
    SCOPED_TRACE(axis);
    Tensor y = apply(x, [axis = axis](Output in) { return ops::expand_dims(in, axis); });
    EXPECT_EQ(y.shape(), want);
    EXPECT_EQ(y.to_vector<int64_t>(), x.to_vector<int64_t>());
  }
  EXPECT_EQ(apply(Tensor::scalar(true), [](Output in) { return ops::expand_dims(in, 0); }).shape(), (Shape{1}));
  EXPECT_EQ(apply(Tensor::scalar(true), [](Output in) { return ops::expand_dims(in, -1); }).shape(), (Shape{1}));
  EXPECT_EQ(apply(Tensor(DType::Float32, Shape{0}), [](Output in) { return ops::expand_dims(in, 1); }).shape(),
            (Shape{0, 1}));
}

TEST_P(ShapeOpsTest, SqueezeAllOrChosenDims) {
  const Tensor x = iota(DType::Float32, {1, 2, 1, 3, 1});
  EXPECT_EQ(apply(x, [](Output in) { return ops::squeeze(in); }).shape(), (Shape{2, 3}));
  EXPECT_EQ(apply(x, [](Output in) { return ops::squeeze(in, {2}); }).shape(), (Shape{1, 2, 3, 1}));
  EXPECT_EQ(apply(x, [](Output in) { return ops::squeeze(in, {0, -1}); }).shape(), (Shape{2, 1, 3}));
  Tensor y = apply(x, [](Output in) { return ops::squeeze(in, {-5, 2, 4}); });
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(floats(y), floats(x));
  EXPECT_EQ(apply(Tensor::from_vector<float>({5}, Shape{1, 1}), [](Output in) { return ops::squeeze(in); }).shape(),
            Shape{});
  EXPECT_EQ(apply(Tensor::scalar(2.0), [](Output in) { return ops::squeeze(in); }).scalar<double>(), 2.0);
  EXPECT_EQ(apply(Tensor(DType::Int32, Shape{0, 1}), [](Output in) { return ops::squeeze(in); }).shape(), (Shape{0}));
}

TEST_P(ShapeOpsTest, ExpandDimsAndSqueezeEveryDType) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = iota(dtype, {3, 1, 2});
    expect_values(apply(x, [](Output in) { return ops::expand_dims(in, -2); }), dtype, Shape{3, 1, 1, 2}, values_of(x));
    expect_values(apply(x, [](Output in) { return ops::squeeze(in); }), dtype, Shape{3, 2}, values_of(x));
  }
}

TEST_P(ShapeOpsTest, ExpandDimsAndSqueezeCheckAxesWhenTheyRun) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape::unknown(), "x");
  auto partial = ops::placeholder(g, DType::Float32, {-1, 3}, "partial");
  Output e, s, all;
  {
    auto scope = on_device(g);
    e = ops::expand_dims(x, 3, "e");
    s = ops::squeeze(partial, {0}, "s");
    all = ops::squeeze(partial, {}, "all");
  }
  EXPECT_TRUE(e.shape().unknown_rank());
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_TRUE(all.shape().unknown_rank());
  expect_run_fails(e, {{x, Tensor::zeros(DType::Float32, Shape{2})}}, "axis 3 is out of range [-2, 1]");
  expect_run_fails(s, {{partial, Tensor::zeros(DType::Float32, Shape{2, 3})}},
                   "cannot squeeze dimension 0 of shape [2,3]: its size is 2, not 1");
  EXPECT_EQ(run(all, {{partial, Tensor::zeros(DType::Float32, Shape{1, 3})}}).shape(), (Shape{3}));
}

TEST(ShapeOpsBuildTest, ExpandDimsAndSqueezeCheckAxesWhenTheGraphIsBuilt) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {2, 1}, "x");
  expect_build_fails([&] { ops::expand_dims(x, 3, "e"); }, "e (ExpandDims): ", "axis 3 is out of range [-3, 2]");
  expect_build_fails([&] { ops::expand_dims(x, -4, "e"); }, "e (ExpandDims): ", "axis -4 is out of range [-3, 2]");
  expect_build_fails([&] { ops::squeeze(x, {0}, "s"); },
                     "s (Squeeze): ", "cannot squeeze dimension 0 of shape [2,1]: its size is 2, not 1");
  expect_build_fails([&] { ops::squeeze(x, {2}, "s"); }, "s (Squeeze): ", "axis 2 is out of range [-2, 2)");
  expect_build_fails([&] { ops::expand_dims(ops::placeholder(g, DType::Float32, Shape(Dims(8, 1))), 0, "e"); },
                     "e (ExpandDims): ", "rank 9");
  EXPECT_EQ(ops::squeeze(x, {-1}).shape(), (Shape{2}));
}

// ---- Tile ----

TEST_P(ShapeOpsTest, TileMatrix) {
  const Tensor x = Tensor::matrix<int32_t>({1, 2, 3, 4, 5, 6}, 2, 3);
  Tensor y = apply(x, [](Output in) { return ops::tile(in, {2, 1}); });
  EXPECT_EQ(y.shape(), (Shape{4, 3}));
  EXPECT_EQ(y.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}));
  y = apply(x, [](Output in) { return ops::tile(in, {1, 2}); });
  EXPECT_EQ(y.shape(), (Shape{2, 6}));
  EXPECT_EQ(y.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}));
  EXPECT_EQ(apply(x, [](Output in) { return ops::tile(in, {1, 1}); }).to_vector<int32_t>(), x.to_vector<int32_t>());
  EXPECT_EQ(apply(x, [](Output in) { return ops::tile(in, {0, 3}); }).shape(), (Shape{0, 9}));
  EXPECT_EQ(apply(Tensor(DType::Int32, Shape{0, 2}),
                  [](Output in) {
                    return ops::tile(in, {3, 2});
                  })
                .shape(),
            (Shape{0, 4}));
  EXPECT_EQ(apply(Tensor::scalar(4), [](Output in) { return ops::tile(in, {}); }).scalar<int32_t>(), 4);
}

TEST_P(ShapeOpsTest, TileEveryDType) {
  expect_moves_every_dtype(
      {2, 1, 3}, [](Output in) { return ops::tile(in, {2, 3, 2}); }, {4, 3, 6},
      [](Dims idx) {
        idx[0] %= 2;
        idx[1] %= 1;
        idx[2] %= 3;
        return idx;
      });
}

TEST_P(ShapeOpsTest, TileChecksMultiplesWhenItRuns) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape::unknown(), "x");
  Output y = on_device_of(x, [](Output in) { return ops::tile(in, {2, 2}, "t"); });
  EXPECT_EQ(y.shape(), (Shape{-1, -1}));
  expect_run_fails(y, {{x, Tensor::zeros(DType::Float32, Shape{3})}},
                   "multiples [2,2] has 2 entries, the input (shape [3]) has rank 1");
}

TEST(ShapeOpsBuildTest, TileChecksMultiplesWhenTheGraphIsBuilt) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {2, 3}, "x");
  expect_build_fails([&] { ops::tile(x, {2}, "t"); },
                     "t (Tile): ", "multiples [2] has 1 entries, the input (shape [2,3]) has rank 2");
  expect_build_fails([&] { ops::tile(x, {1, -1}, "t"); }, "t (Tile): ", "multiples[1] = -1 must not be negative");
  auto big = ops::placeholder(g, DType::Float32, {int64_t{1} << 40}, "big");
  expect_build_fails([&] { ops::tile(big, {int64_t{1} << 30}, "t"); }, "t (Tile): ", "overflows int64");
  auto wide = ops::placeholder(g, DType::Float32, {int64_t{1} << 40, 1}, "wide");
  expect_build_fails([&] { ops::tile(wide, {1, int64_t{1} << 30}, "t"); }, "t (Tile): ", "more than 2^63 - 1 elements");
  EXPECT_EQ(ops::tile(ops::placeholder(g, DType::Float32, {-1, 3}), {2, 2}).shape(), (Shape{-1, 6}));
}

// ---- Pad ----

TEST_P(ShapeOpsTest, PadMatrix) {
  // pad_op_test.py's testSimple: [[1,2],[3,4]] padded [[1,2],[0,1]].
  const Tensor x = Tensor::matrix<float>({1, 2, 3, 4}, 2, 2);
  Tensor y = apply(x, [](Output in) { return ops::pad(in, {{1, 2}, {0, 1}}); });
  EXPECT_EQ(y.shape(), (Shape{5, 3}));
  EXPECT_EQ(floats(y), (std::vector<float>{0, 0, 0, 1, 2, 0, 3, 4, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(floats(apply(x, [](Output in) { return ops::pad(in, {{0, 0}, {0, 0}}); })), floats(x));
  y = apply(Tensor(DType::Float32, Shape{0, 2}), [](Output in) { return ops::pad(in, {{1, 1}, {0, 0}}); });
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(floats(y), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(apply(Tensor::scalar(5.0f), [](Output in) { return ops::pad(in, {}); }).scalar<float>(), 5.0f);
}

TEST_P(ShapeOpsTest, PadEveryDType) {
  const std::vector<std::pair<int64_t, int64_t>> paddings = {{0, 1}, {2, 0}, {1, 1}};
  expect_moves_every_dtype(
      {2, 3, 1}, [&](Output in) { return ops::pad(in, paddings); }, {3, 5, 3},
      [&](Dims idx) {
        for (std::size_t d = 0; d < idx.size(); ++d) idx[d] -= paddings[d].first;
        return idx;
      });
}

TEST_P(ShapeOpsTest, PadChecksPaddingsWhenItRuns) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape::unknown(), "x");
  Output y = on_device_of(x, [](Output in) { return ops::pad(in, {{1, 1}}, "p"); });
  EXPECT_EQ(y.shape(), (Shape{-1}));
  expect_run_fails(y, {{x, Tensor::zeros(DType::Float32, Shape{2, 2})}},
                   "paddings has 1 pairs, the input (shape [2,2]) has rank 2");
  EXPECT_EQ(floats(run(y, {{x, Tensor::vector<float>({7})}})), (std::vector<float>{0, 7, 0}));
}

TEST(ShapeOpsBuildTest, PadChecksPaddingsWhenTheGraphIsBuilt) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {2, 3}, "x");
  expect_build_fails(
      [&] {
        ops::pad(x, {{-1, 0}, {0, 0}}, "p");
      },
      "p (Pad): ", "paddings[0] = (-1, 0) must not be negative");
  expect_build_fails(
      [&] {
        ops::pad(x, {{0, 0}, {0, -2}}, "p");
      },
      "p (Pad): ", "paddings[1] = (0, -2) must not be negative");
  expect_build_fails(
      [&] {
        ops::pad(x, {{1, 1}}, "p");
      },
      "p (Pad): ", "paddings has 1 pairs, the input (shape [2,3]) has rank 2");
  expect_build_fails([&] { ops::pad(x, {{0, 0}, {INT64_MAX, 0}}, "p"); }, "p (Pad): ", "overflows int64");
  EXPECT_EQ(ops::pad(ops::placeholder(g, DType::Float32, {-1, 3}), {{1, 1}, {2, 3}}).shape(), (Shape{-1, 8}));
}

// ---- Fill, ZerosLike, OnesLike ----

TEST_P(ShapeOpsTest, FillEveryDType) {
  Graph g;
  Output f32, f64, i32, i64, b, empty, scalar;
  {
    auto scope = on_device(g);
    f32 = ops::fill(g, {2, 3}, Tensor::scalar(1.5f));
    f64 = ops::fill(g, {3}, Tensor::scalar(-2.25));
    i32 = ops::fill(g, {2, 2}, Tensor::scalar(int32_t{7}));
    i64 = ops::fill(g, {2}, Tensor::scalar(int64_t{1} << 40));
    b = ops::fill(g, {3}, Tensor::scalar(true));
    empty = ops::fill(g, {0, 3}, Tensor::scalar(9.0f));
    scalar = ops::fill(g, {}, Tensor::scalar(int32_t{-1}));
  }
  auto out = run({f32, f64, i32, i64, b, empty, scalar});
  EXPECT_EQ(out[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(floats(out[0]), std::vector<float>(6, 1.5f));
  EXPECT_EQ(out[1].to_vector<double>(), std::vector<double>(3, -2.25));
  EXPECT_EQ(out[2].to_vector<int32_t>(), std::vector<int32_t>(4, 7));
  EXPECT_EQ(out[3].to_vector<int64_t>(), std::vector<int64_t>(2, int64_t{1} << 40));
  EXPECT_EQ(out[4].to_vector<bool>(), std::vector<bool>(3, true));
  EXPECT_EQ(out[5].shape(), (Shape{0, 3}));
  EXPECT_EQ(out[6].scalar<int32_t>(), -1);
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Graph h;
    Output y;
    {
      auto scope = on_device(h);
      y = ops::fill(h, {2, 2}, tensor_of(dtype, Shape{}, {-3.5}));
    }
    expect_values(run(y), dtype, Shape{2, 2}, std::vector<double>(4, -3.5));
  }
}

TEST(ShapeOpsBuildTest, FillChecksItsArguments) {
  Graph g;
  expect_build_fails(
      [&] {
        ops::fill(g, {2}, Tensor::vector<float>({1, 2}), "f");
      },
      "f (Fill): ", "value must be a scalar, got shape [2]");
  expect_build_fails(
      [&] {
        ops::fill(g, {-1, 2}, Tensor::scalar(1.0f), "f");
      },
      "f (Fill): ", "shape [?,2] must be fully defined");
  expect_build_fails([&] { ops::fill(g, Shape::unknown(), Tensor::scalar(1.0f), "f"); },
                     "f (Fill): ", "must be fully defined");
  expect_build_fails([&] { ops::fill(g, {2}, Tensor(), "f"); }, "fill", "null tensor");
}

TEST_P(ShapeOpsTest, ZerosLikeAndOnesLikeEveryDType) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    for (const Dims& dims : {Dims{2, 3}, Dims{}, Dims{0, 4}}) {
      const Tensor x = iota(dtype, dims);
      const auto n = static_cast<std::size_t>(count(dims));
      expect_values(apply(x, [](Output in) { return ops::zeros_like(in); }), dtype, Shape(dims),
                    std::vector<double>(n, 0));
      expect_values(apply(x, [](Output in) { return ops::ones_like(in); }), dtype, Shape(dims),
                    std::vector<double>(n, 1));
    }
  }
  // Shapes known only when it runs.
  Tensor z = apply(
      Tensor::vector<int32_t>({4, 5, 6}), [](Output in) { return ops::ones_like(in); }, Shape::unknown());
  EXPECT_EQ(z.to_vector<int32_t>(), (std::vector<int32_t>{1, 1, 1}));
}

// ---- Shape and Size ----

TEST_P(ShapeOpsTest, ShapeAndSize) {
  struct Case {
    Shape placeholder;
    Tensor value;
  };
  const std::vector<Case> cases = {
      {Shape{2, 3, 4}, Tensor::zeros(DType::Float32, Shape{2, 3, 4})},
      {Shape::unknown(), Tensor::zeros(DType::Bool, Shape{5, 1})},
      {Shape{-1}, Tensor::zeros(DType::Int64, Shape{0})},
      {Shape{}, Tensor::scalar(1.0)},
      {Shape::unknown(), Tensor::zeros(DType::Int32, Shape{1, 0, 7})},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.value.shape().to_string());
    Graph g;
    auto x = ops::placeholder(g, c.value.dtype(), c.placeholder, "x");
    Output shape, size;
    {
      auto scope = on_device(g);
      shape = ops::shape(x);
      size = ops::size(x);
    }
    EXPECT_EQ(shape.dtype(), DType::Int32);
    EXPECT_EQ(shape.shape(), (Shape{c.placeholder.unknown_rank() ? -1 : c.placeholder.rank()}));
    EXPECT_EQ(size.shape(), Shape{});
    auto out = run({shape, size}, {{x, c.value}});
    std::vector<int32_t> dims;
    for (int64_t d : c.value.shape().dims()) dims.push_back(static_cast<int32_t>(d));
    EXPECT_EQ(out[0].to_vector<int32_t>(), dims);
    EXPECT_EQ(out[1].scalar<int32_t>(), c.value.num_elements());
  }
}

// Shape's output is int32: a dim past its range fails (a tensor [0, 3e9] holds no data).
TEST_P(ShapeOpsTest, ShapeRefusesADimPastInt32WhenItRuns) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape::unknown(), "x");
  Output shape, size;
  {
    auto scope = on_device(g);
    shape = ops::shape(x, "shape");
    size = ops::size(x, "size");
  }
  const Tensor wide(DType::Float32, Shape{0, 3000000000});
  expect_run_fails(shape, {{x, wide}}, "dimension 1 of shape [0,3000000000] does not fit the int32 output");
  EXPECT_EQ(run(size, {{x, wide}}).scalar<int32_t>(), 0);
}

TEST(ShapeOpsBuildTest, ShapeAndSizeRefuseWhatInt32CannotHold) {
  Graph g;
  expect_build_fails(
      [&] {
        ops::shape(ops::placeholder(g, DType::Float32, {0, 3000000000}), "s");
      },
      "s (Shape): ", "does not fit the int32 output");
  expect_build_fails(
      [&] {
        ops::size(ops::placeholder(g, DType::Float32, {100000, 100000}), "n");
      },
      "n (Size): ", "has 10000000000 elements, more than the int32 output holds");
}

// ---- Composition and attributes ----

// A chain of every data-moving op, run as one partition (on SIM: captured, then replayed).
TEST_P(ShapeOpsTest, AChainOfShapeOps) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {2, 3}, "x");
  Output y;
  {
    auto scope = on_device(g);
    auto t = ops::transpose(x);                                 // [3,2]
    auto p = ops::pad(t, {{0, 1}, {1, 0}});                     // [4,3]
    auto parts = ops::split(p, 2, 0);                           // 2 x [2,3]
    auto c = ops::concat({parts[1], parts[0]}, 1);              // [2,6]
    auto s = ops::slice(ops::tile(c, {2, 1}), {1, 1}, {2, 4});  // [2,4]
    y = ops::reshape(ops::expand_dims(s, 0), {-1});             // [8]
  }
  Tensor out = run(y, {{x, Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 2, 3)}});
  // t = [[1,4],[2,5],[3,6]]; p = [[0,1,4],[0,2,5],[0,3,6],[0,0,0]];
  // c = [[0,3,6,0,1,4],[0,0,0,0,2,5]]; tile rows c0,c1,c0,c1; slice rows 1-2, cols 1-4.
  EXPECT_EQ(floats(out), (std::vector<float>{0, 0, 0, 2, 3, 6, 0, 1}));
}

// Through a server: every op and its attrs (vectors, a tensor) cross the wire to the task that runs
// them.
TEST(ShapeOpsClusterTest, EveryOpRunsOnAServer) {
  train::Server server = train::Server::create_local_server();
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {2, 3}, "x");
  auto parts = ops::split(ops::concat({x, x}, 0), 2, 0);
  auto t = ops::transpose(ops::pad(ops::slice(parts[1], {0, 1}, {-1, 2}), {{1, 0}, {0, 0}}), {1, 0});  // [2,3]
  auto y = ops::squeeze(ops::expand_dims(ops::reshape(ops::tile(t, {1, 2}), {-1}), 0));                // [12]
  auto f = ops::add(ops::fill(g, {3}, Tensor::scalar(2.0f)),
                    ops::ones_like(ops::zeros_like(ops::fill(g, {3}, Tensor::scalar(0.0f)))));
  Session s(g, server.target());
  auto out = s.run({y, f, ops::shape(x), ops::size(x)}, {{x, Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 2, 3)}});
  // slice of x = [[2,3],[5,6]]; padded [[0,0],[2,3],[5,6]]; transposed [[0,2,5],[0,3,6]].
  EXPECT_EQ(floats(out[0]), (std::vector<float>{0, 2, 5, 0, 2, 5, 0, 3, 6, 0, 3, 6}));
  EXPECT_EQ(floats(out[1]), (std::vector<float>{3, 3, 3}));
  EXPECT_EQ(out[2].to_vector<int32_t>(), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(out[3].scalar<int32_t>(), 6);
}

// Each op keeps its arguments as attributes, for gradient functions to read.
TEST(ShapeOpsBuildTest, OpsKeepTheirArgumentsAsAttributes) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {2, 3}, "x");
  auto attr = [](const Output& y, const char* name) { return y.node()->attr<Dims>(name); };
  EXPECT_EQ(attr(ops::transpose(x, {1, 0}), "perm"), (Dims{1, 0}));
  EXPECT_EQ(attr(ops::transpose(x), "perm"), Dims{});  // reverse
  auto s = ops::slice(x, {1, 0}, {1, -1});
  EXPECT_EQ(attr(s, "begin"), (Dims{1, 0}));
  EXPECT_EQ(attr(s, "size"), (Dims{1, -1}));
  EXPECT_EQ(attr(ops::pad(x, {{1, 2}, {3, 4}}), "paddings"), (Dims{1, 2, 3, 4}));
  EXPECT_EQ(attr(ops::tile(x, {2, 1}), "multiples"), (Dims{2, 1}));
  EXPECT_EQ(attr(ops::reshape(x, {-1}), "shape"), (Dims{-1}));
  EXPECT_EQ(attr(ops::squeeze(ops::expand_dims(x, 0), {0}), "axes"), (Dims{0}));
  EXPECT_EQ(ops::concat({x, x}, -1).node()->attr<int64_t>("axis"), -1);
  EXPECT_EQ(ops::expand_dims(x, -1).node()->attr<int64_t>("axis"), -1);
  auto parts = ops::split(x, 3, 1);
  EXPECT_EQ(parts[0].node()->attr<int64_t>("num_split"), 3);
  EXPECT_EQ(parts[0].node()->attr<int64_t>("axis"), 1);
  EXPECT_EQ(ops::concat({x, x}, 0).op().type(), "ConcatV2");
}

INSTANTIATE_TEST_SUITE_P(Devices, ShapeOpsTest, ::testing::Values("CPU", "SIM"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace tessera
