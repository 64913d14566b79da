// Many threads running one session: correctness of every result at 1, 2, 4 and 8 threads.
#include <atomic>

#include "tests/testing/test_util.h"

namespace tessera {
namespace {

class SessionConcurrencyTest : public ::testing::TestWithParam<int> {};

TEST_P(SessionConcurrencyTest, EachThreadGetsItsOwnFeedsResult) {
  const int threads = GetParam();
  Graph g;
  auto x = ops::placeholder(g, DType::Int64, Shape{}, "x");
  auto y = ops::add(ops::mul(x, ops::constant(g, int64_t{3})), ops::constant(g, int64_t{1}));
  Session s(g);
  std::atomic<int> wrong{0};
  testing::run_threads(threads, [&](int id) {
    for (int64_t i = 0; i < 500; ++i) {
      int64_t in = id * 100000 + i;
      if (s.run(y, {{x, Tensor::scalar(in)}}).scalar<int64_t>() != 3 * in + 1) wrong++;
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(SessionConcurrencyTest, DifferentSignaturesConcurrently) {
  const int threads = GetParam();
  Graph g;
  auto a = ops::constant(g, Tensor::vector<float>({1, 2, 3, 4}));
  auto b = ops::square(a);
  auto c = ops::reduce_sum(b);
  auto d = ops::reduce_max(a);
  Session s(g);
  std::atomic<int> wrong{0};
  testing::run_threads(threads, [&](int id) {
    for (int i = 0; i < 300; ++i) {
      switch ((id + i) % 3) {
        case 0: if (s.run(c).scalar<float>() != 30.0f) wrong++; break;
        case 1: if (s.run(d).scalar<float>() != 4.0f) wrong++; break;
        default: {
          auto r = s.run({b, c});
          if (r[0].to_vector<float>() != std::vector<float>{1, 4, 9, 16} || r[1].scalar<float>() != 30.0f) wrong++;
        }
      }
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(SessionConcurrencyTest, ErrorsInSomeThreadsDoNotDisturbOthers) {
  const int threads = GetParam();
  Graph g;
  auto x = ops::placeholder(g, DType::Int32, Shape{}, "x");
  auto y = ops::div(ops::constant(g, 100), x, "quotient");
  Session s(g);
  std::atomic<int> wrong{0};
  testing::run_threads(threads, [&](int id) {
    for (int i = 0; i < 200; ++i) {
      int32_t d = (i % 4 == 0) ? 0 : 5;
      try {
        int32_t r = s.run(y, {{x, Tensor::scalar(d)}}).scalar<int32_t>();
        if (d == 0 || r != 20) wrong++;
      } catch (const InvalidArgumentError&) {
        if (d != 0) wrong++;
      }
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(SessionConcurrencyTest, DedicatedPoolSizes) {
  const int threads = GetParam();
  Graph g;
  auto a = ops::random_uniform(g, {128, 128}, DType::Float32, 3);
  std::vector<Output> parts;
  for (int i = 0; i < 4; ++i) parts.push_back(ops::reduce_sum(ops::matmul(a, a)));
  SessionOptions opts;
  opts.inter_op_threads = threads;
  Session s(g, opts);
  testing::run_threads(threads, [&](int) {
    for (int i = 0; i < 10; ++i) {
      auto r = s.run(parts);
      for (const auto& t : r) ASSERT_FLOAT_EQ(t.scalar<float>(), r[0].scalar<float>());
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Threads, SessionConcurrencyTest, ::testing::ValuesIn(testing::kThreadCounts));

}  // namespace
}  // namespace tessera
