// The executor: graph shapes (wide, deep, diamonds), plan caching, error propagation, and the
// inline/pool split for expensive ops.
#include <atomic>
#include <set>

#include "tests/testing/test_util.h"

namespace tessera {
namespace {

// As TensorFlow's kernels do, tessera's run with denormal floats flushed to zero, operands and
// results (Note [Denormals flushed] in core/denormals.h), and the caller's own thread keeps its
// mode. Skipped on CPUs other than x86-64 and AArch64, whose mode tessera does not set.
TEST(ExecutorTest, KernelsFlushDenormalsToZeroAndTheCallersModeIsKept) {
#if !defined(__x86_64__) && !defined(__aarch64__)
  GTEST_SKIP() << "tessera flushes denormals on x86-64 and AArch64 only";
#endif
  volatile float denormal = 1e-40f;  // below float's smallest normal, 2^-126 (about 1.18e-38)
  volatile float one = 1.0f;
  ASSERT_NE(denormal * one, 0.0f) << "this thread already flushes denormals";
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{2}, "x");
  auto y = ops::mul(x, ops::constant(g, 1.0f));
  auto z = ops::mul(ops::constant(g, 1e-30f), ops::constant(g, 1e-15f));  // a denormal result
  Session s(g);
  auto out = s.run({y, z}, {{x, Tensor::vector<float>({1e-40f, 1e-30f})}});
  EXPECT_EQ(out[0].data<float>()[0], 0.0f);     // a denormal operand reads as zero
  EXPECT_EQ(out[0].data<float>()[1], 1e-30f);   // a normal one is untouched
  EXPECT_EQ(out[1].scalar<float>(), 0.0f);      // a denormal result is zero
  // The run restored this thread's mode: its own arithmetic keeps denormals.
  EXPECT_NE(denormal * one, 0.0f);
}

TEST(ExecutorTest, LongChainComputesInOrder) {
  Graph g;
  Output x = ops::constant(g, 0);
  auto one = ops::constant(g, 1);
  for (int i = 0; i < 10000; ++i) x = ops::add(x, one);
  Session s(g);
  EXPECT_EQ(s.run(x).scalar<int32_t>(), 10000);
}

TEST(ExecutorTest, WideGraphFetchesEveryBranch) {
  Graph g;
  auto x = ops::placeholder(g, DType::Int64, Shape{}, "x");
  std::vector<Output> outs;
  for (int i = 0; i < 2000; ++i) outs.push_back(ops::add(x, ops::constant(g, int64_t{i})));
  Session s(g);
  auto res = s.run(outs, {{x, Tensor::scalar<int64_t>(100)}});
  ASSERT_EQ(res.size(), outs.size());
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(res[i].scalar<int64_t>(), 100 + i);
}

TEST(ExecutorTest, DiamondsShareIntermediateResults) {
  // x -> (a, b) -> c, repeated: each level doubles, so 20 levels give x * 2^20.
  Graph g;
  Output x = ops::constant(g, 1.0);
  for (int i = 0; i < 20; ++i) {
    auto a = ops::identity(x);
    auto b = ops::identity(x);
    x = ops::add(a, b);
  }
  Session s(g);
  EXPECT_EQ(s.run(x).scalar<double>(), double(1 << 20));
}

TEST(ExecutorTest, ExpensiveBranchesRunOnThePoolAndJoin) {
  Graph g;
  auto a = ops::random_uniform(g, {256, 256}, DType::Float32, 1);
  std::vector<Output> branches;
  for (int i = 0; i < 8; ++i) branches.push_back(ops::reduce_sum(ops::matmul(a, a)));
  Output total = branches[0];
  for (int i = 1; i < 8; ++i) total = ops::add(total, branches[i]);
  SessionOptions opts;
  opts.inter_op_threads = 4;
  Session s(g, opts);
  RunOptions ro;
  ro.trace = true;
  RunMetadata md;
  auto out = s.run({total, branches[0]}, {}, {}, ro, &md);
  // a is random but drawn once per step: every branch is the same product.
  EXPECT_NEAR(out[0].scalar<float>(), 8 * out[1].scalar<float>(), 1e-3 * std::abs(out[0].scalar<float>()));
  EXPECT_NE(md.trace_json.find("MatMul"), std::string::npos);
}

TEST(ExecutorTest, RuntimeErrorInOneBranchFailsTheStepAndNamesTheOp) {
  Graph g;
  auto x = ops::placeholder(g, DType::Int32, Shape{}, "x");
  auto bad = ops::div(ops::constant(g, 1), x, "divide_here");
  auto good = ops::add(x, ops::constant(g, 1));
  auto both = ops::add(bad, good);
  Session s(g);
  EXPECT_THROW_MSG(s.run(both, {{x, Tensor::scalar<int32_t>(0)}}), InvalidArgumentError, "divide_here");
  EXPECT_EQ(s.run(both, {{x, Tensor::scalar<int32_t>(1)}}).scalar<int32_t>(), 3);
}

TEST(ExecutorTest, RuntimeShapeMismatchIsReportedAtRunTime) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{-1}, "x");
  auto y = ops::placeholder(g, DType::Float32, Shape{-1}, "y");
  auto sum = ops::add(x, y, "late_add");
  Session s(g);
  EXPECT_THROW_MSG(s.run(sum, {{x, Tensor::vector<float>({1, 2})}, {y, Tensor::vector<float>({1, 2, 3})}}),
                   InvalidArgumentError, "late_add");
}

TEST(ExecutorTest, PlansAreCachedPerSignatureAndSeeNewControlEdges) {
  Graph g;
  Variable v(g, Tensor::scalar<int32_t>(0), "v");
  auto inc = v.assign_add(ops::constant(g, 1));
  auto read = ops::identity(v.value(), "read");
  Session s(g);
  s.run(v.initializer());
  EXPECT_EQ(s.run(read).scalar<int32_t>(), 0);
  // A new control edge invalidates the cached plan for `read`.
  read.op().add_control_input(inc.op());
  EXPECT_EQ(s.run(read).scalar<int32_t>(), 1);
  EXPECT_EQ(s.run(read).scalar<int32_t>(), 2);
}

TEST(ExecutorTest, GraphExtendedAfterTheSessionStartedRunsNewOps) {
  Graph g;
  auto a = ops::constant(g, 2);
  Session s(g);
  EXPECT_EQ(s.run(a).scalar<int32_t>(), 2);
  auto b = ops::mul(a, a);
  EXPECT_EQ(s.run(b).scalar<int32_t>(), 4);
}

TEST(ExecutorTest, EmptyRunIsFine) {
  Graph g;
  Session s(g);
  EXPECT_TRUE(s.run(std::vector<Output>{}).empty());
}

TEST(ExecutorTest, IntermediateBuffersAreReleasedDuringTheStep) {
  // 64 chained 1M-element ops; with early release at most a few buffers are alive at once. The
  // observable part: the fetched result is right and nothing leaks under ASan.
  Graph g;
  Output x = ops::constant(g, Tensor::zeros(DType::Float32, {1 << 20}));
  auto one = ops::constant(g, 1.0f);
  for (int i = 0; i < 64; ++i) x = ops::add(x, one);
  Session s(g);
  auto out = s.run(x).to_vector<float>();
  EXPECT_EQ(out.front(), 64.0f);
  EXPECT_EQ(out.back(), 64.0f);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Every queue op here waits (capacity 1, two threads in lock step), so each completion goes
// through the hand-off to the waiting caller (Note [Async kernels]). A lost wake-up would hang a
// run: the deadline turns that into a failure instead.
class AsyncHandOffTest : public ::testing::TestWithParam<int> {};

TEST_P(AsyncHandOffTest, PingPongThroughACapacityOneQueueLosesNoWakeUp) {
  Graph g;
  testing::FedQueue q(g, 1, DType::Int32, "", "x");
  auto dequeue = q.queue.dequeue()[0];
  SessionOptions so;
  so.inter_op_threads = GetParam();
  Session s(g, so);
  RunOptions ro;
  ro.timeout = std::chrono::seconds(20);
  constexpr int kElements = 3000;
  int64_t sum = 0;
  std::string producer_error;
  std::thread producer([&] {
    try {
      for (int32_t i = 1; i <= kElements; ++i) s.run({}, q.feed(Tensor::scalar(i)), {q.enqueue}, ro);
    } catch (const Error& e) {
      producer_error = e.what();
    }
  });
  try {
    for (int i = 0; i < kElements; ++i) sum += s.run({dequeue}, {}, {}, ro)[0].scalar<int32_t>();
  } catch (const Error& e) {
    ADD_FAILURE() << "consumer: " << e.what();
    s.close();  // ends the producer's pending enqueue
  }
  producer.join();
  EXPECT_EQ(producer_error, "");
  EXPECT_EQ(sum, int64_t{kElements} * (kElements + 1) / 2);
}

INSTANTIATE_TEST_SUITE_P(PoolThreads, AsyncHandOffTest, ::testing::Values(1, 2, 4, 8));

}  // namespace
}  // namespace tessera
