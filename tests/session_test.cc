// Sessions: feeds, fetches, targets, pruning, errors, deadlines, close, tracing.
#include <atomic>
#include <thread>

#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using testing::kThreadCounts;

TEST(SessionTest, AddsTwoConstants) {
  Graph g;
  auto c = ops::add(ops::constant(g, 1), ops::constant(g, 2), "c");
  Session s(g);
  EXPECT_EQ(s.run(c).scalar<int32_t>(), 3);
  EXPECT_EQ(c.op().assigned_device(), "/job:localhost/replica:0/task:0/device:CPU:0");
}

TEST(SessionTest, FeedsAPlaceholderAndFetchesSeveralOutputs) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {-1, 2}, "x");
  auto y = ops::mul(x, ops::constant(g, 2.0f));
  auto z = ops::add(y, ops::constant(g, 1.0f));
  Session s(g);
  auto out = s.run({y, z, y}, {{x, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2)}});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{3, 5, 7, 9}));
  EXPECT_TRUE(out[2].equals(out[0]));
  EXPECT_EQ(out[1].shape(), (Shape{2, 2}));
}

TEST(SessionTest, FeedingAnIntermediateOutputPrunesItsProducer) {
  Graph g;
  auto p = ops::placeholder(g, DType::Int32, Shape{}, "p");  // never fed: running it would fail
  auto mid = ops::add(p, ops::constant(g, 1), "mid");
  auto out = ops::mul(mid, ops::constant(g, 10), "out");
  Session s(g);
  EXPECT_EQ(s.run(out, {{mid, Tensor::scalar<int32_t>(4)}}).scalar<int32_t>(), 40);
  // Fetching a fed tensor returns the fed value.
  EXPECT_EQ(s.run(mid, {{mid, Tensor::scalar<int32_t>(7)}}).scalar<int32_t>(), 7);
}

TEST(SessionTest, FeedIsNotCopied) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{3}, "x");
  auto y = ops::identity(x);
  Session s(g);
  auto in = Tensor::vector<float>({1, 2, 3});
  auto out = s.run(y, {{x, in}});
  EXPECT_EQ(out.raw_data(), in.raw_data());
}

TEST(SessionTest, MissingFeedNamesThePlaceholder) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{2}, "input_x");
  auto y = ops::neg(x);
  Session s(g);
  EXPECT_THROW_MSG(s.run(y), InvalidArgumentError, "input_x");
  // The session stays usable.
  EXPECT_EQ(s.run(y, {{x, Tensor::vector<float>({1, -2})}}).to_vector<float>(), (std::vector<float>{-1, 2}));
}

TEST(SessionTest, WrongFeedDtypeOrShapeIsInvalidArgument) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {-1, 3}, "feature");
  auto y = ops::identity(x);
  Session s(g);
  EXPECT_THROW_MSG(s.run(y, {{x, Tensor::vector<int32_t>({1, 2, 3})}}), InvalidArgumentError, "feature");
  EXPECT_THROW_MSG(s.run(y, {{x, Tensor::vector<float>({1, 2, 3})}}), InvalidArgumentError, "[?,3]");
  EXPECT_THROW_MSG(s.run(y, {{x, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2)}}), InvalidArgumentError, "feature");
  EXPECT_EQ(s.run(y, {{x, Tensor::matrix<float>({1, 2, 3}, 1, 3)}}).shape(), (Shape{1, 3}));
}

TEST(SessionTest, FetchFromAnotherGraphOrNullIsRejected) {
  Graph g1, g2;
  auto a = ops::constant(g1, 1.0f);
  auto b = ops::constant(g2, 2.0f, "other");
  Session s(g1);
  EXPECT_THROW_MSG(s.run(b), InvalidArgumentError, "other:0");
  EXPECT_THROW(s.run(Output()), InvalidArgumentError);
  EXPECT_THROW(s.run(Operation()), InvalidArgumentError);
  EXPECT_EQ(s.run(a).scalar<float>(), 1.0f);
}

TEST(SessionTest, CycleIsRejectedNamingAnOp) {
  Graph g;
  auto a = ops::identity(ops::constant(g, 1), "loop_a");
  auto b = ops::identity(a, "loop_b");
  a.op().add_control_input(b.op());
  Session s(g);
  EXPECT_THROW_MSG(s.run(b), InvalidArgumentError, "loop_");
  // Ops outside the cycle still run.
  auto c = ops::constant(g, 5);
  EXPECT_EQ(s.run(c).scalar<int32_t>(), 5);
}

TEST(SessionTest, ControlDependenciesOrderOps) {
  Graph g;
  Variable v(g, Tensor::scalar<int32_t>(0), "counter");
  auto inc = v.assign_add(ops::constant(g, 1));
  Output read;
  {
    // read_value: a read taken when it runs (v.value() is taken when the variable's node runs,
    // which the scope does not order, so which value it saw depended on the executor's order).
    auto deps = g.control_dependencies({inc.op()});
    read = ops::identity(v.read_value(), "read_after");
  }
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(read).scalar<int32_t>(), 1);
  EXPECT_EQ(s.run(read).scalar<int32_t>(), 2);
}

TEST(SessionTest, TargetsRunForTheirEffectOnly) {
  Graph g;
  Variable v(g, Tensor::scalar<int64_t>(10), "v");
  auto dec = v.assign_sub(ops::constant(g, int64_t{3}));
  Session s(g);
  s.run(v.initializer());
  auto out = s.run({}, {}, {dec.op(), dec.op()});  // listed twice: runs once
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(s.run(v.value()).scalar<int64_t>(), 7);
}

TEST(SessionTest, RunAfterCloseIsCancelled) {
  Graph g;
  auto c = ops::constant(g, 1);
  Session s(g);
  s.close();
  EXPECT_THROW_MSG(s.run(c), CancelledError, "closed");
}

TEST(SessionTest, MalformedDeviceSpecIsInvalidArgument) {
  Graph g;
  EXPECT_THROW_MSG({ auto scope = g.device("/job:ps/task:x"); }, InvalidArgumentError, "/job:ps/task:x");
  EXPECT_THROW(g.device("cpu:0"), InvalidArgumentError);
}

TEST(SessionTest, SoftPlacementFallsBackToTheCpu) {
  Graph g;
  Output y;
  {
    auto scope = g.device("/gpu:0");
    y = ops::add(ops::constant(g, 1.0f), ops::constant(g, 2.0f), "on_gpu");
  }
  EXPECT_EQ(y.op().device(), "/device:GPU:0");
  Session soft(g);
  EXPECT_EQ(soft.run(y).scalar<float>(), 3.0f);
  SessionOptions strict;
  strict.allow_soft_placement = false;
  Session hard(g, strict);
  EXPECT_THROW_MSG(hard.run(y), InvalidArgumentError, "device:CPU:0");
}

TEST(SessionTest, PartialDeviceScopesMerge) {
  Graph g;
  Output y;
  {
    auto outer = g.device("/job:localhost/task:0");
    auto inner = g.device("/cpu:0");
    y = ops::constant(g, 1.0f);
  }
  EXPECT_EQ(y.op().device(), "/job:localhost/task:0/device:CPU:0");
  SessionOptions strict;
  strict.allow_soft_placement = false;
  Session s(g, strict);
  EXPECT_EQ(s.run(y).scalar<float>(), 1.0f);
}

TEST(SessionTest, TraceListsEveryExecutedOp) {
  // Constants are hoisted into the step's slots (they never run), so they have no event.
  Graph g;
  auto a = ops::constant(g, 1.0f, "ta");
  auto b = ops::square(a, "tb");
  auto c = ops::neg(b, "tc");
  Session s(g);
  RunOptions opts;
  opts.trace = true;
  RunMetadata md;
  s.run({c}, {}, {}, opts, &md);
  EXPECT_NE(md.trace_json.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(md.trace_json.find("\"name\":\"tb\""), std::string::npos);
  EXPECT_NE(md.trace_json.find("\"name\":\"tc\""), std::string::npos);
  EXPECT_EQ(md.trace_json.find("\"name\":\"ta\""), std::string::npos);
  RunMetadata untraced;
  s.run({c}, {}, {}, RunOptions{}, &untraced);
  EXPECT_TRUE(untraced.trace_json.empty());
}

TEST(SessionTest, MovedFromSessionRefusesToRun) {
  Graph g;
  auto c = ops::constant(g, 1);
  Session a(g);
  Session b(std::move(a));
  EXPECT_EQ(b.run(c).scalar<int32_t>(), 1);
  EXPECT_THROW(a.run(c), FailedPreconditionError);  // NOLINT(bugprone-use-after-move)
}

TEST(SessionTest, TargetsOtherThanLocalAndClusterAreInvalidArgument) {
  Graph g;
  EXPECT_NO_THROW(Session(g, ""));
  EXPECT_NO_THROW(Session(g, "local"));
  EXPECT_THROW(Session(g, "localhost:2222"), InvalidArgumentError);
  EXPECT_THROW(Session(g, "tessera://"), InvalidArgumentError);
}

TEST(SessionTest, NegativeInterOpThreadsIsInvalidArgumentNamingTheOption) {
  Graph g;
  ops::constant(g, 1.0f);
  SessionOptions o;
  o.inter_op_threads = -1;
  EXPECT_THROW_MSG(Session(g, o), InvalidArgumentError, "inter_op_threads must be >= 0, got -1");
}

}  // namespace
}  // namespace tessera
