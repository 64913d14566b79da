// Tensors, shapes, errors and device names: the value types every other part builds on.
#include <cstdint>

#include "core/device_name.h"
#include "core/status.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

TEST(ShapeTest, RanksDimsAndElements) {
  EXPECT_EQ(Shape{}.rank(), 0);
  EXPECT_EQ(Shape{}.num_elements(), 1);
  Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.dim(1), 3);
  EXPECT_EQ(s.dim(-1), 4);
  EXPECT_EQ(s.num_elements(), 24);
  EXPECT_EQ(s.to_string(), "[2,3,4]");
  EXPECT_THROW(s.dim(3), InvalidArgumentError);
}

TEST(ShapeTest, PartialAndUnknownShapes) {
  Shape partial{-1, 3};
  EXPECT_FALSE(partial.fully_defined());
  EXPECT_EQ(partial.num_elements(), -1);
  EXPECT_EQ(partial.to_string(), "[?,3]");
  EXPECT_TRUE(partial.compatible_with(Shape{5, 3}));
  EXPECT_FALSE(partial.compatible_with(Shape{5, 4}));
  EXPECT_FALSE(partial.compatible_with(Shape{3}));
  EXPECT_TRUE(Shape::unknown().compatible_with(Shape{1, 2, 3}));
  EXPECT_EQ(Shape::unknown().rank(), -1);
  EXPECT_EQ(Shape::unknown().to_string(), "<unknown>");
}

TEST(ShapeTest, RejectsBadDimsAndRanks) {
  EXPECT_THROW((Shape{-2}), InvalidArgumentError);
  EXPECT_THROW((Shape{1, 1, 1, 1, 1, 1, 1, 1, 1}), InvalidArgumentError);
}

// Element counts that do not fit an int64 are refused where the shape is made: they used to wrap
// (to 4 elements, or to 0) and every size derived from them was wrong.
TEST(ShapeTest, ElementCountsThatOverflowAreRefused) {
  constexpr int64_t kBig = int64_t{1} << 62;
  EXPECT_THROW((Shape{kBig + 1, 4}), InvalidArgumentError);
  EXPECT_THROW((Shape{int64_t{1} << 40, int64_t{1} << 40}), InvalidArgumentError);
  EXPECT_THROW(Shape(std::vector<int64_t>{kBig, 2}), InvalidArgumentError);
  EXPECT_THROW((Shape{-1, kBig, 4}), InvalidArgumentError) << "the known dims alone overflow";
  try {
    Shape{kBig + 1, 4};
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("[4611686018427387905,4]"), std::string::npos) << e.what();
  }
  // A zero dim makes any product fit; the largest count that fits is fine.
  EXPECT_EQ((Shape{0, kBig, kBig}).num_elements(), 0);
  EXPECT_EQ((Shape{kBig, 1}).num_elements(), kBig);
  Shape s{kBig, 1};
  EXPECT_THROW(s.set_dim(1, 2), InvalidArgumentError);
  EXPECT_EQ(s.dim(1), 1) << "unchanged after the refusal";
  EXPECT_THROW(s.append(4), InvalidArgumentError);
  EXPECT_EQ(s.rank(), 2);
}

TEST(TensorTest, SizesThatOverflowOrInvalidDTypesAreRefused) {
  EXPECT_THROW(Tensor::zeros(DType::Float32, Shape{int64_t{1} << 62, 2}), InvalidArgumentError)
      << "2^63 elements fit no byte count";
  EXPECT_THROW(Tensor(DType::Float64, Shape{int64_t{1} << 61, 3}), InvalidArgumentError)
      << "3 * 2^61 elements fit, 8 bytes each do not";
  EXPECT_THROW(Tensor(static_cast<DType>(77), Shape{2}), InvalidArgumentError);
  EXPECT_FALSE(dtype_is_valid(static_cast<DType>(77)));
  EXPECT_TRUE(dtype_is_valid(DType::BFloat16));
}

TEST(TensorTest, OpsRefuseInvalidDTypesAndShapesThatOverflowNamingTheOp) {
  Graph g;
  Output x = ops::placeholder(g, DType::Float32, Shape{2}, "x");
  try {
    ops::cast(x, static_cast<DType>(77), "bad_cast");
    ADD_FAILURE() << "cast to DType(77) was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("bad_cast"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::placeholder(g, static_cast<DType>(77)), InvalidArgumentError);
  // Broadcasting [2^40, 1] with [1, 2^40] would make 2^80 elements.
  Output a = ops::placeholder(g, DType::Float32, Shape{int64_t{1} << 40, 1}, "a");
  Output b = ops::placeholder(g, DType::Float32, Shape{1, int64_t{1} << 40}, "b");
  try {
    ops::add(a, b, "too_big");
    ADD_FAILURE() << "a 2^80-element broadcast was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("too_big"), std::string::npos) << e.what();
  }
}

TEST(TensorTest, FactoriesAndAccessors) {
  auto s = Tensor::scalar(2.5f);
  EXPECT_EQ(s.dtype(), DType::Float32);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.scalar<float>(), 2.5f);
  auto v = Tensor::vector<int64_t>({1, 2, 3});
  EXPECT_EQ(v.shape(), (Shape{3}));
  EXPECT_EQ(v.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  auto m = Tensor::matrix<double>({1, 2, 3, 4, 5, 6}, 2, 3);
  EXPECT_EQ(m.shape(), (Shape{2, 3}));
  EXPECT_EQ(m.data<double>()[5], 6.0);
  auto b = Tensor::vector<bool>({true, false, true});
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(b.bytes(), 3u);
  EXPECT_EQ(s.device(), "/job:localhost/replica:0/task:0/device:CPU:0");
}

TEST(TensorTest, BuffersAre64ByteAligned) {
  for (int n : {1, 3, 17, 1000, 100000}) {
    Tensor t(DType::Float32, Shape{n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u) << n;
  }
}

TEST(TensorTest, CopiesShareTheBufferAndDeepCopyDoesNot) {
  auto a = Tensor::vector<float>({1, 2});
  EXPECT_FALSE(a.is_buffer_shared());
  Tensor b = a;
  EXPECT_TRUE(a.is_buffer_shared());
  EXPECT_EQ(a.raw_data(), b.raw_data());
  Tensor c = a.deep_copy();
  EXPECT_NE(c.raw_data(), a.raw_data());
  EXPECT_TRUE(c.equals(a));
  b = Tensor();
  EXPECT_FALSE(a.is_buffer_shared());
  auto r = a.reshaped(Shape{2, 1});
  EXPECT_EQ(r.raw_data(), a.raw_data());
  EXPECT_THROW(a.reshaped(Shape{3}), InvalidArgumentError);
}

TEST(TensorTest, WrongAccessIsInvalidArgument) {
  auto t = Tensor::vector<int32_t>({1, 2});
  EXPECT_THROW_MSG(t.to_vector<float>(), InvalidArgumentError, "int32");
  EXPECT_THROW_MSG(t.scalar<int32_t>(), InvalidArgumentError, "[2]");
  EXPECT_THROW(Tensor().scalar<float>(), InvalidArgumentError);
  EXPECT_THROW(Tensor::from_vector<float>({1, 2, 3}, Shape{2, 2}), InvalidArgumentError);
  EXPECT_THROW(Tensor(DType::Float32, Shape{-1, 2}), InvalidArgumentError);
}

TEST(TensorTest, DebugStringShowsDtypeShapeAndValues) {
  auto t = Tensor::vector<int32_t>({7, 8});
  EXPECT_EQ(t.debug_string(), "Tensor<int32 [2]>[7, 8]");
}

TEST(ErrorTest, EveryCodeThrowsItsSubclassWithTheMessage) {
  EXPECT_THROW(throw_error(ErrorCode::kOutOfRange, "m"), OutOfRangeError);
  EXPECT_THROW(throw_error(ErrorCode::kCancelled, "m"), CancelledError);
  EXPECT_THROW(throw_error(ErrorCode::kDataLoss, "m"), DataLossError);
  EXPECT_THROW(throw_error(ErrorCode::kUnavailable, "m"), UnavailableError);
  for (int c = 1; c <= 16; ++c) {
    try {
      throw_error(static_cast<ErrorCode>(c), "message here");
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_EQ(static_cast<int>(e.code()), c);
      EXPECT_EQ(e.message(), "message here");
    }
  }
}

TEST(ErrorTest, StatusRoundTripsThroughExceptions) {
  Status s(ErrorCode::kFailedPrecondition, "x not ready");
  EXPECT_EQ(s.to_string(), "FailedPrecondition: x not ready");
  try {
    s.raise();
  } catch (...) {
    Status back = status_from_current_exception();
    EXPECT_EQ(back.code(), ErrorCode::kFailedPrecondition);
    EXPECT_EQ(back.message(), "x not ready");
  }
  EXPECT_NO_THROW(Status().raise());
}

TEST(DeviceNameTest, ParsesFullPartialAndLegacySpecs) {
  using internal::DeviceSpec;
  auto full = DeviceSpec::parse("/job:worker/replica:0/task:3/device:GPU:1").value();
  EXPECT_EQ(*full.job, "worker");
  EXPECT_EQ(*full.task, 3);
  EXPECT_EQ(*full.type, "GPU");
  EXPECT_EQ(*full.id, 1);
  auto legacy = DeviceSpec::parse("/gpu:0").value();
  EXPECT_EQ(*legacy.type, "GPU");
  EXPECT_EQ(*legacy.id, 0);
  auto any = DeviceSpec::parse("/device:CPU:*").value();
  EXPECT_FALSE(any.id.has_value());
  EXPECT_TRUE(any.matches(DeviceSpec::parse("/job:a/task:0/device:CPU:3").value()));
  EXPECT_EQ(DeviceSpec::parse("/job:ps").value().merged_with(DeviceSpec::parse("/cpu:0").value()).to_string(),
            "/job:ps/device:CPU:0");
  for (const char* bad : {"cpu:0", "/job:", "/task:x", "/device:GPU:x", "/foo:1", "//", "/device:G-PU:0"}) {
    EXPECT_FALSE(DeviceSpec::parse(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace tessera
