// ConditionalAccumulator through sessions: the cases of TensorFlow's
// conditional_accumulator_test.py, plus build-time errors, sharing by name, stale gradients,
// timeouts and a take that waits without holding a pool thread.
//
// Where a test needs a take to be waiting before the next step, it gives it kSettle to reach the
// accumulator, as TensorFlow's tests do; the outcome checked does not depend on it.
#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <numeric>
#include <thread>

#include "core/cancellation.h"
#include "core/node.h"
#include "kernels/conditional_accumulator.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
constexpr auto kSettle = 100ms;

Output fvec(Graph& g, std::vector<float> v) { return ops::constant(g, Tensor::vector<float>(std::move(v))); }
Output fmat(Graph& g, std::vector<float> v, int64_t rows, int64_t cols) {
  return ops::constant(g, Tensor::matrix<float>(std::move(v), rows, cols));
}
float first(const Tensor& t) { return t.to_vector<float>().at(0); }
int32_t num(Session& s, const ConditionalAccumulator& q) { return s.run(q.num_accumulated()).scalar<int32_t>(); }

std::future<void> async(std::function<void()> fn) { return std::async(std::launch::async, std::move(fn)); }

RunOptions bounded(std::chrono::milliseconds t = 30s) {
  RunOptions o;
  o.timeout = t;
  return o;
}
Tensor run_bounded(Session& s, const Output& o) { return s.run({o}, {}, {}, bounded())[0]; }

// ---- Graph construction ----

TEST(ConditionalAccumulatorTest, Constructor) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape::unknown(), "", "Q");
  EXPECT_EQ(q.op().type(), "ConditionalAccumulator");
  EXPECT_EQ(q.name(), "Q");
  const internal::Node* n = q.op().node();
  EXPECT_EQ(n->attr<DType>("dtype"), DType::Float32);
  EXPECT_TRUE(n->attr<Shape>("shape").unknown_rank());
  EXPECT_EQ(n->attr<std::string>("shared_name"), "");
  EXPECT_EQ(n->attr<std::string>("reduction_type"), "MEAN");
  EXPECT_EQ(q.op().num_outputs(), 0);
  EXPECT_EQ(&q.graph(), &g);
}

TEST(ConditionalAccumulatorTest, ConstructorWithShape) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1, 5, 2, 8}, "", "Q");
  EXPECT_EQ(q.op().node()->attr<Shape>("shape"), (Shape{1, 5, 2, 8}));
  EXPECT_EQ(q.shape(), (Shape{1, 5, 2, 8}));
  EXPECT_EQ(q.take_grad(1).shape(), (Shape{1, 5, 2, 8}));
  EXPECT_EQ(q.take_grad(1).dtype(), DType::Float32);
}

TEST(ConditionalAccumulatorTest, ConstructorWithInvalidArgRaises) {
  Graph g;
  EXPECT_THROW_MSG(ConditionalAccumulator(g, DType::Float32, Shape{1}, "", "Q", "Invalid"), InvalidArgumentError,
                   "reduction_type");
  EXPECT_THROW_MSG(ConditionalAccumulator(g, DType::Int32, Shape{1}, "", "Q"), InvalidArgumentError, "dtype");
  ConditionalAccumulator null_accumulator;
  EXPECT_THROW_MSG(null_accumulator.num_accumulated(), InvalidArgumentError, "default-constructed");
}

TEST(ConditionalAccumulatorTest, ApplyGradWithWrongShapeRaisesWhenBuilt) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{3, 2}, "", "Q");
  EXPECT_THROW_MSG(q.apply_grad(fmat(g, {1, 2, 3, 4}, 2, 2)), InvalidArgumentError, "AccumulatorApplyGradient");
  EXPECT_THROW_MSG(q.apply_grad(fmat(g, {1, 2, 3}, 3, 1)), InvalidArgumentError, "has shape [3,2]");
}

TEST(ConditionalAccumulatorTest, WrongDtypesRaiseWhenBuilt) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1}, "", "Q");
  EXPECT_THROW_MSG(q.apply_grad(ops::constant(g, Tensor::vector<double>({1.0}))), InvalidArgumentError,
                   "accumulates float32, the gradient is float64");
  EXPECT_THROW_MSG(q.apply_grad(fvec(g, {1}), ops::constant(g, 1.5f)), InvalidArgumentError, "local_step");
  EXPECT_THROW_MSG(q.take_grad(ops::constant(g, Tensor::vector<int32_t>({1, 2}))), InvalidArgumentError,
                   "num_required must be a scalar");
  EXPECT_THROW_MSG(q.set_global_step(ops::constant(g, 1.0f)), InvalidArgumentError, "new_global_step");
  // An int32 local step is cast, as TensorFlow casts it.
  Operation apply = q.apply_grad(fvec(g, {1}), ops::constant(g, int32_t{0}));
  Session s(g);
  s.run(apply);
  EXPECT_EQ(num(s, q), 1);
}

// ---- Running ----

TEST(ConditionalAccumulatorTest, SizeEmpty) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape::unknown(), "", "Q");
  Session s(g);
  EXPECT_EQ(num(s, q), 0);
}

TEST(ConditionalAccumulatorTest, SetGlobalStepAndApplyGradRun) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1}, "", "Q");
  Session s(g);
  s.run(q.set_global_step(1));
  s.run(q.apply_grad(fvec(g, {10}), 1));
  EXPECT_EQ(num(s, q), 1);
}

TEST(ConditionalAccumulatorTest, Dtypes) {
  Graph g;
  Session s(g);
  for (DType dtype : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dtype));
    ConditionalAccumulator q(g, dtype, Shape{1});
    for (int e = 0; e < 10; ++e) s.run(q.apply_grad(ops::cast(fvec(g, {float(e)}), dtype)));
    EXPECT_EQ(first(run_bounded(s, ops::cast(q.take_grad(1), DType::Float32))), 4.5f);
  }
}

TEST(ConditionalAccumulatorTest, MultipleAccumulators) {
  Graph g;
  std::vector<ConditionalAccumulator> accums = {
      ConditionalAccumulator(g, DType::Float16, Shape{1}, "", "Q"),
      ConditionalAccumulator(g, DType::Float16, Shape{1}, "", "Q"),
      ConditionalAccumulator(g, DType::Float32, Shape{1}, "", "Q"),
      ConditionalAccumulator(g, DType::Float32, Shape{1}, "", "Q")};
  Session s(g);
  for (std::size_t i = 0; i < accums.size(); ++i) {
    s.run(accums[i].apply_grad(ops::cast(fvec(g, {float(i) + 10}), accums[i].dtype())));
  }
  for (std::size_t i = 0; i < accums.size(); ++i) {
    EXPECT_EQ(first(run_bounded(s, ops::cast(accums[i].take_grad(1), DType::Float32))), float(i) + 10);
  }
}

TEST(ConditionalAccumulatorTest, ApplyAndTakeGradWithShape) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{3, 2}, "", "Q");
  std::vector<Operation> applies = {q.apply_grad(fmat(g, {1, 2, 3, 4, 5, 6}, 3, 2)),
                                    q.apply_grad(fmat(g, {10, 20, 30, 40, 50, 60}, 3, 2))};
  Output take = q.take_grad(1);
  Session s(g);
  for (const Operation& a : applies) s.run(a);
  Tensor mean = run_bounded(s, take);
  EXPECT_EQ(mean.shape(), (Shape{3, 2}));
  EXPECT_EQ(mean.to_vector<float>(), (std::vector<float>{5.5f, 11, 16.5f, 22, 27.5f, 33}));
}

TEST(ConditionalAccumulatorTest, DynamicShape) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape::unknown(), "", "Q");
  auto x = ops::placeholder(g, DType::Float32, Shape::unknown(), "x");
  Operation apply = q.apply_grad(x);
  Output take = q.take_grad(1);
  Session s(g);
  s.run(apply, {{x, Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 3, 2)}});
  s.run(apply, {{x, Tensor::matrix<float>({10, 20, 30, 40, 50, 60}, 3, 2)}});
  Tensor mean = run_bounded(s, take);
  EXPECT_EQ(mean.shape(), (Shape{3, 2}));
  EXPECT_EQ(mean.to_vector<float>(), (std::vector<float>{5.5f, 11, 16.5f, 22, 27.5f, 33}));
  // A take frees the shape: the next round (global step 1) may have another.
  s.run(q.apply_grad(x, 1), {{x, Tensor::vector<float>({7})}});
  EXPECT_EQ(first(run_bounded(s, take)), 7.0f);
}

TEST(ConditionalAccumulatorTest, WrongDynamicShapeFailsWhenRun) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape::unknown(), "", "Q");
  auto x = ops::placeholder(g, DType::Float32, Shape::unknown(), "x");
  Operation apply = q.apply_grad(x);
  Session s(g);
  // The first successful apply fixes the shape.
  s.run(apply, {{x, Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 3, 2)}});
  EXPECT_THROW_MSG(s.run(apply, {{x, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2)}}), InvalidArgumentError,
                   "shape mismatch");
  EXPECT_THROW_MSG(s.run(apply, {{x, Tensor::matrix<float>({1, 2, 3}, 3, 1)}}), InvalidArgumentError, "[3,2]");
  EXPECT_EQ(num(s, q), 1);
}

TEST(ConditionalAccumulatorTest, PartialShapeIsCheckedWhenRun) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{-1, 2}, "", "Q");
  auto x = ops::placeholder(g, DType::Float32, Shape::unknown(), "x");
  Operation apply = q.apply_grad(x);
  Session s(g);
  EXPECT_THROW_MSG(s.run(apply, {{x, Tensor::vector<float>({1, 2})}}), InvalidArgumentError,
                   "expected [?,2], got [2]");
  s.run(apply, {{x, Tensor::matrix<float>({1, 2}, 1, 2)}});
  EXPECT_EQ(num(s, q), 1);
}

// Runs `apply` (a gradient of the current step) twice: q's count goes 0, 1, 2.
void expect_two_applies_counted(Session& s, const ConditionalAccumulator& q, const Operation& apply) {
  EXPECT_EQ(num(s, q), 0);
  s.run(apply);
  EXPECT_EQ(num(s, q), 1);
  s.run(apply);
  EXPECT_EQ(num(s, q), 2);
}

TEST(ConditionalAccumulatorTest, SizeAfterApplyGrad) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1}, "", "Q");
  Operation apply = q.apply_grad(fvec(g, {10}));
  Session s(g);
  expect_two_applies_counted(s, q, apply);
}

TEST(ConditionalAccumulatorTest, SizeAfterApplyGradAndTakeGrad) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1}, "", "Q");
  Operation apply = q.apply_grad(fvec(g, {10}));
  Output extract = q.take_grad(2);
  Session s(g);
  expect_two_applies_counted(s, q, apply);
  run_bounded(s, extract);  // resets the count
  EXPECT_EQ(num(s, q), 0);
  Operation apply1 = q.apply_grad(fvec(g, {10}), 1);
  for (int i = 0; i < 4; ++i) s.run(apply1);
  EXPECT_EQ(num(s, q), 4);
  run_bounded(s, extract);
  EXPECT_EQ(num(s, q), 0);
}

// take_grad with MEAN (the default) and SUM, once and repeatedly: each take increments the
// global step, so the second round applies with local step 1.
class ReductionTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ReductionTest, TakeGradOnceAndRepeatedly) {
  const bool mean = std::string(GetParam()) == "MEAN";
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1}, "", "Q", GetParam());
  Session s(g);
  for (float x : {10.0f, 20.0f}) s.run(q.apply_grad(fvec(g, {x}), 0));
  EXPECT_EQ(first(run_bounded(s, q.take_grad(1))), mean ? 15.0f : 30.0f);
  for (float x : {20.0f, 30.0f}) s.run(q.apply_grad(fvec(g, {x}), 1));
  EXPECT_EQ(first(run_bounded(s, q.take_grad(ops::constant(g, int32_t{1})))), mean ? 25.0f : 50.0f);
}

INSTANTIATE_TEST_SUITE_P(ConditionalAccumulatorTest, ReductionTest, ::testing::Values("MEAN", "SUM"));

TEST(ConditionalAccumulatorTest, InvalidTakeGradFailsWhenRun) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1}, "", "Q");
  Output take = q.take_grad(-1);
  Session s(g);
  for (float x : {10.0f, 20.0f}) s.run(q.apply_grad(fvec(g, {x})));
  EXPECT_THROW_MSG(run_bounded(s, take), InvalidArgumentError, "num_required must be positive, but was -1");
  EXPECT_EQ(num(s, q), 2);  // nothing taken
}

TEST(ConditionalAccumulatorTest, IncrementGlobalStep) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1}, "", "Q");
  Variable global_step(g, Tensor::scalar<int64_t>(0), "global_step");
  Output new_global_step = ops::add(global_step.value(), ops::constant(g, int64_t{1}));
  Output inc_global_step = global_step.assign(new_global_step);
  Operation set_global_step = q.set_global_step(new_global_step);
  Operation apply = q.apply_grad(fvec(g, {1}), 2);
  Session s(g);
  s.run(global_variables_initializer(g));
  for (int i = 0; i < 3; ++i) {
    s.run(set_global_step);
    s.run(inc_global_step);
  }
  // The accumulator's global step is 3 now: a gradient of step 2 is stale.
  s.run(apply);
  EXPECT_EQ(num(s, q), 0);
}

TEST(ConditionalAccumulatorTest, SetGlobalStepPreventsAccumulation) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1}, "", "Q");
  std::vector<int64_t> local_steps = {1000, 1001, 1002, 1003, 1004};
  std::vector<Operation> applies;
  for (int64_t x : local_steps) applies.push_back(q.apply_grad(fvec(g, {float(x)}), x));
  Output take = q.take_grad(1);
  Session s(g);
  for (int64_t ls : local_steps) {
    s.run(q.set_global_step(ls));
    for (const Operation& a : applies) s.run(a);
    double sum = 0;
    int n = 0;
    for (int64_t x : local_steps) {
      if (x >= ls) sum += double(x), ++n;
    }
    EXPECT_EQ(first(run_bounded(s, take)), float(sum / n)) << "global step " << ls;
  }
}

TEST(ConditionalAccumulatorTest, StaleGradientIsDroppedUncheckedAfterATake) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1}, "", "Q");
  auto x = ops::placeholder(g, DType::Float32, Shape::unknown(), "x");
  Operation apply_step0 = q.apply_grad(x, 0);
  Session s(g);
  s.run(apply_step0, {{x, Tensor::vector<float>({1})}});
  run_bounded(s, q.take_grad(1));  // global step 1
  // Dropped, and not even checked: TensorFlow drops a stale gradient before looking at it.
  s.run(apply_step0, {{x, Tensor::vector<float>({1, 2, 3})}});
  EXPECT_EQ(num(s, q), 0);
}

TEST(ConditionalAccumulatorTest, ParallelApplyGrad) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1}, "", "Q");
  std::vector<float> elems = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
  std::vector<Operation> applies;
  for (float e : elems) applies.push_back(q.apply_grad(fvec(g, {e}), 0));
  Output take = q.take_grad(1);
  Session s(g);
  testing::run_threads(static_cast<int>(applies.size()), [&](int i) { s.run(applies[i]); });
  EXPECT_EQ(first(run_bounded(s, take)), 55.0f);
}

// Ten takes wait; each apply (with the step the takes so far reached) completes one of them.
TEST(ConditionalAccumulatorTest, ParallelTakeGrad) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1}, "", "Q");
  std::vector<Operation> applies;
  for (int e = 0; e < 10; ++e) applies.push_back(q.apply_grad(fvec(g, {float(e)}), e));
  Output take = q.take_grad(1);
  Session s(g);
  std::mutex mu;
  std::vector<float> results;
  std::vector<std::future<void>> takers;
  for (int i = 0; i < 10; ++i) {
    takers.push_back(async([&] {
      float v = first(run_bounded(s, take));
      std::lock_guard<std::mutex> l(mu);
      results.push_back(v);
    }));
  }
  for (int e = 0; e < 10; ++e) {
    s.run(applies[e]);
    // The next apply's step is fresh only once this one was taken.
    ASSERT_TRUE(testing::wait_until([&] {
      std::lock_guard<std::mutex> l(mu);
      return results.size() == static_cast<std::size_t>(e + 1);
    }));
  }
  for (auto& t : takers) t.get();
  std::sort(results.begin(), results.end());
  EXPECT_EQ(results, (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(ConditionalAccumulatorTest, ApplyAndBlockingTake) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1}, "", "Q");
  std::vector<Operation> applies;
  for (float x : {10.0f, 20.0f, 30.0f}) applies.push_back(q.apply_grad(fvec(g, {x}), 0));
  Output take = q.take_grad(3);
  Session s(g);
  auto taker = std::async(std::launch::async, [&] { return first(run_bounded(s, take)); });
  std::this_thread::sleep_for(kSettle);
  for (const Operation& a : applies) {
    EXPECT_NE(taker.wait_for(0ms), std::future_status::ready);  // still short of 3
    s.run(a);
  }
  EXPECT_EQ(taker.get(), 20.0f);
  EXPECT_EQ(num(s, q), 0);
}

// A waiting take holds no thread: with a one-thread pool, the applies it waits for still run.
TEST(ConditionalAccumulatorTest, WaitingTakeHoldsNoPoolThread) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1}, "", "Q");
  Operation apply = q.apply_grad(fvec(g, {4}), 0);
  Output take = q.take_grad(2);
  SessionOptions so;
  so.inter_op_threads = 1;
  Session s(g, so);
  auto taker = std::async(std::launch::async, [&] { return first(run_bounded(s, take)); });
  std::this_thread::sleep_for(kSettle);
  s.run({}, {}, {apply}, bounded());
  s.run({}, {}, {apply}, bounded());
  EXPECT_EQ(taker.get(), 4.0f);
}

TEST(ConditionalAccumulatorTest, CloseCancelsABlockedTake) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1}, "", "Q");
  Output take = q.take_grad(1);
  Session s(g);
  auto taker = async([&] { EXPECT_THROW_MSG(run_bounded(s, take), CancelledError, "closed"); });
  std::this_thread::sleep_for(kSettle);
  s.close();
  taker.get();
}

// A run's deadline ends a waiting take and leaves the session and the accumulator usable: what
// was summed stays.
TEST(ConditionalAccumulatorTest, TimeoutEndsAWaitingTakeAndKeepsTheSum) {
  Graph g;
  ConditionalAccumulator q(g, DType::Float32, Shape{1}, "", "Q");
  Operation apply = q.apply_grad(fvec(g, {3}), 0);
  Output take = q.take_grad(2);
  Session s(g);
  s.run(apply);
  EXPECT_THROW(s.run({take}, {}, {}, bounded(50ms)), DeadlineExceededError);
  EXPECT_EQ(num(s, q), 1);
  s.run(apply);
  EXPECT_EQ(first(run_bounded(s, take)), 3.0f);
}

// Accumulators with one shared_name are one accumulator; one that disagrees is refused by name.
TEST(ConditionalAccumulatorTest, SharedNameSharesAndMustAgree) {
  Graph g;
  ConditionalAccumulator a(g, DType::Float32, Shape{1}, "shared", "A");
  ConditionalAccumulator b(g, DType::Float32, Shape{1}, "shared", "B");
  ConditionalAccumulator other_dtype(g, DType::Float64, Shape{1}, "shared", "C");
  ConditionalAccumulator other_reduction(g, DType::Float32, Shape{1}, "shared", "D", "SUM");
  Session s(g);
  s.run(a.apply_grad(fvec(g, {2})));
  s.run(b.apply_grad(fvec(g, {4})));
  EXPECT_EQ(num(s, a), 2);
  EXPECT_EQ(first(run_bounded(s, b.take_grad(2))), 3.0f);
  EXPECT_THROW_MSG(s.run(other_dtype.num_accumulated()), InvalidArgumentError, "shared accumulator 'shared'");
  EXPECT_THROW_MSG(s.run(other_reduction.num_accumulated()), InvalidArgumentError, "reduction type");
}

// The accumulator is placed with whatever the scope says, and its ops follow it.
TEST(ConditionalAccumulatorTest, OpsArePlacedWithTheAccumulator) {
  Graph g;
  ConditionalAccumulator q;
  {
    auto scope = g.device("/cpu:0");
    q = ConditionalAccumulator(g, DType::Float32, Shape{1}, "", "Q");
  }
  Operation apply = q.apply_grad(fvec(g, {1}));
  Output take = q.take_grad(1);
  Session s(g);
  s.run(apply);
  EXPECT_EQ(first(run_bounded(s, take)), 1.0f);
  EXPECT_EQ(apply.assigned_device(), q.op().assigned_device());
  EXPECT_EQ(take.op().assigned_device(), q.op().assigned_device());
}


// ---- The resource itself ----

// Takes complete in arrival order; cancelling the head lets a take behind it, which needs fewer,
// complete with what is summed.
TEST(ConditionalAccumulatorResourceTest, ACancelledHeadTakeLetsTheNextComplete) {
  auto acc = std::make_shared<internal::ConditionalAccumulatorResource>("acc", DType::Float32, Shape{1}, true);
  internal::CancellationManager cm_head, cm_next;
  Status head_status, next_status;
  Tensor next_value;
  bool head_done = false, next_done = false;
  acc->try_take(3, &cm_head, [&](const Status& s, Tensor) { head_status = s, head_done = true; });
  acc->try_take(1, &cm_next, [&](const Status& s, Tensor t) { next_status = s, next_value = t, next_done = true; });
  ASSERT_TRUE(acc->try_apply(0, Tensor::vector<float>({6})).ok());
  EXPECT_FALSE(head_done);
  EXPECT_FALSE(next_done);  // behind the head, which needs 3
  EXPECT_EQ(acc->num_pending_takes(), 2);
  cm_head.start_cancel(Status(ErrorCode::kCancelled, "stop"));
  ASSERT_TRUE(head_done && next_done);
  EXPECT_EQ(head_status.code(), ErrorCode::kCancelled);
  EXPECT_NE(head_status.message().find("take from accumulator 'acc' was cancelled: stop"), std::string::npos);
  ASSERT_TRUE(next_status.ok()) << next_status.to_string();
  EXPECT_EQ(first(next_value), 6.0f);
  EXPECT_EQ(acc->global_step(), 1);
  EXPECT_EQ(acc->num_pending_takes(), 0);
}

// cancel_all (a closing session) and cancel_pending_takes fail the waiting takes and keep the sum;
// a take on a manager already cancelled fails at once.
TEST(ConditionalAccumulatorResourceTest, CancelAllFailsWaitingTakesAndKeepsTheSum) {
  auto acc = std::make_shared<internal::ConditionalAccumulatorResource>("acc", DType::Float64, Shape::unknown(), false);
  internal::CancellationManager cm;
  int failures = 0;
  auto count_failure = [&](const Status& s, Tensor) { failures += s.code() == ErrorCode::kCancelled; };
  acc->try_take(2, &cm, count_failure);
  acc->try_take(2, nullptr, count_failure);
  ASSERT_TRUE(acc->try_apply(5, Tensor::vector<double>({1.5, 2})).ok());
  acc->cancel_all(Status(ErrorCode::kCancelled, "the session was closed"));
  EXPECT_EQ(failures, 2);
  EXPECT_EQ(acc->num_accumulated(), 1);
  cm.start_cancel(Status(ErrorCode::kCancelled, "late"));  // nothing registered any more
  acc->try_take(1, &cm, count_failure);
  EXPECT_EQ(failures, 3);
  Tensor sum;
  acc->try_take(1, nullptr, [&](const Status& s, Tensor t) { sum = t; });
  EXPECT_EQ(sum.to_vector<double>(), (std::vector<double>{1.5, 2}));  // SUM: the one gradient
}

}  // namespace
}  // namespace tessera
