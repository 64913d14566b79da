// Device memory limits and running out of memory (API.md, Devices): a per-process cap set with
// set_memory_limit, ResourceExhaustedError naming the op with the bytes asked for, in use and
// reserved, and a session that goes on working once the memory is there. On a simulated
// accelerator, so it runs on any machine.
#include <string>
#include <vector>

#include <gmock/gmock.h>

#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

std::string sim0() {
  for (const DeviceInfo& d : list_devices()) {
    if (d.type == "SIM") return d.name;
  }
  return add_simulated_accelerators(1).front();
}

// a (n x 1) times b (1 x n) on the accelerator: an n x n float32 output from 2n inputs.
struct Outer {
  Graph g;
  Output a = ops::placeholder(g, DType::Float32, Shape{-1, 1}, "a");
  Output b = ops::placeholder(g, DType::Float32, Shape{1, -1}, "b");
  Output outer;
  explicit Outer(const std::string& device) {
    auto scope = g.device(device);
    outer = ops::matmul(a, b, false, false, "outer");
  }
  std::vector<Tensor> run(Session& s, int64_t n) {
    Tensor ta(DType::Float32, Shape{n, 1}), tb(DType::Float32, Shape{1, n});
    for (int64_t i = 0; i < n; ++i) {
      ta.mutable_data<float>()[i] = 1.0f;
      tb.mutable_data<float>()[i] = static_cast<float>(i);
    }
    return s.run({outer}, {{a, ta}, {b, tb}});
  }
};

TEST(DeviceMemoryTest, PastTheLimitAnOpFailsResourceExhaustedNamingItAndTheFiguresAndTheSessionGoesOn) {
  const std::string device = sim0();
  set_memory_limit(device, 1 << 20);
  EXPECT_EQ(memory_stats(device).limit_bytes, 1 << 20);
  Outer m(device);
  Session s(m.g);
  try {
    m.run(s, 1024);  // a 4 MiB output
    FAIL() << "expected ResourceExhaustedError";
  } catch (const ResourceExhaustedError& e) {
    const std::string what = e.what();
    EXPECT_THAT(what, HasSubstr("outer (MatMul)"));
    EXPECT_THAT(what, HasSubstr(device));
    EXPECT_THAT(what, HasSubstr("4194304 bytes asked for"));
    EXPECT_THAT(what, HasSubstr("in use"));
    EXPECT_THAT(what, HasSubstr("reserved"));
    EXPECT_THAT(what, HasSubstr("limit 1048576"));
  }
  // Under the limit the same session runs, and what the failed step held was freed.
  auto small = m.run(s, 64);
  ASSERT_EQ(small[0].shape(), (Shape{64, 64}));
  EXPECT_FLOAT_EQ(small[0].data<float>()[63], 63.0f);
  EXPECT_LE(memory_stats(device).in_use_bytes, 1 << 20);
  // Lifting the cap lets the big step through.
  set_memory_limit(device, 0);
  EXPECT_NE(memory_stats(device).limit_bytes, 1 << 20);
  auto big = m.run(s, 1024);
  EXPECT_FLOAT_EQ(big[0].data<float>()[1024 * 1024 - 1], 1023.0f);
  EXPECT_GE(memory_stats(device).peak_bytes, 4 << 20);
}

TEST(DeviceMemoryTest, BadLimitsAreClearErrors) {
  const std::string device = sim0();
  EXPECT_THROW(set_memory_limit(device, -1), InvalidArgumentError);
  EXPECT_THROW(set_memory_limit("/device:NOPE:0", 1 << 20), NotFoundError);
  EXPECT_THROW(set_memory_limit("/device:", 1 << 20), InvalidArgumentError);
}

}  // namespace
}  // namespace tessera
