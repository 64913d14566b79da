// The executor's slot reuse (Note [Slot reuse] in core/executor.cc): outputs whose lifetimes cannot
// overlap share a step slot, and an output no one reads is not stored. Each test builds a graph
// where a wrong reuse would overwrite or drop a value some node or fetch still needs, and checks
// every value over several runs of the same plan (its step arrays are reused).
#include <thread>
#include <vector>

#include "tests/testing/test_util.h"

namespace tessera {
namespace {

TEST(ExecutorSlotReuseTest, ChainValuesFetchedMidwayKeepTheirValues) {
  Graph g;
  auto p = ops::placeholder(g, DType::Int32, Shape{}, "p");
  auto one = ops::constant(g, 1);
  std::vector<Output> xs;
  Output x = p;
  for (int i = 0; i < 200; ++i) {
    x = ops::add(x, one);
    xs.push_back(x);
  }
  Session s(g);
  for (int32_t base : {0, 1000, -7}) {
    auto out = s.run({xs[49], xs[99], xs[150], xs[199], p}, {{p, Tensor::scalar(base)}});
    EXPECT_EQ(out[0].scalar<int32_t>(), base + 50);
    EXPECT_EQ(out[1].scalar<int32_t>(), base + 100);
    EXPECT_EQ(out[2].scalar<int32_t>(), base + 151);
    EXPECT_EQ(out[3].scalar<int32_t>(), base + 200);
    EXPECT_EQ(out[4].scalar<int32_t>(), base);
  }
}

TEST(ExecutorSlotReuseTest, ControlSuccessorMayStoreInTheSlotItsPredecessorReleased) {
  // v is read only by r; w runs after r (a control edge) and has one output, so it may take v's
  // slot. Every value is fetched or feeds a fetched value.
  Graph g;
  auto p = ops::placeholder(g, DType::Int32, Shape{}, "p");
  auto q = ops::placeholder(g, DType::Int32, Shape{}, "q");
  auto v = ops::add(p, ops::constant(g, 1), "v");
  auto r = ops::add(v, ops::constant(g, 10), "r");
  Output w, u;
  {
    auto scope = g.control_dependencies({r.op()});
    w = ops::mul(q, ops::constant(g, 3), "w");
  }
  u = ops::add(w, r, "u");
  Session s(g);
  for (int32_t i = 0; i < 5; ++i) {
    auto out = s.run({r, w, u}, {{p, Tensor::scalar(i)}, {q, Tensor::scalar(100 + i)}});
    EXPECT_EQ(out[0].scalar<int32_t>(), i + 11);
    EXPECT_EQ(out[1].scalar<int32_t>(), 3 * (100 + i));
    EXPECT_EQ(out[2].scalar<int32_t>(), 3 * (100 + i) + i + 11);
  }
}

TEST(ExecutorSlotReuseTest, ValueWithSeveralReadersSurvivesUntilTheLastRead) {
  Graph g;
  auto p = ops::placeholder(g, DType::Int64, Shape{}, "p");
  Output x = p;
  for (int i = 0; i < 50; ++i) {
    auto v = ops::add(x, ops::constant(g, int64_t{1}));
    auto a = ops::add(v, ops::constant(g, int64_t{1}));   // v + 1
    auto b = ops::mul(v, ops::constant(g, int64_t{2}));   // 2v
    auto c = ops::sub(b, a);                               // v - 1
    x = ops::sub(ops::add(c, v), v);                       // v - 1
  }
  Session s(g);
  for (int64_t base : {int64_t{0}, int64_t{5}}) {
    // Each round adds 1 then subtracts 1: x stays at base.
    EXPECT_EQ(s.run(x, {{p, Tensor::scalar(base)}}).scalar<int64_t>(), base);
  }
}

TEST(ExecutorSlotReuseTest, FailedStepThenSuccessfulStepsOfTheSamePlan) {
  Graph g;
  auto p = ops::placeholder(g, DType::Int32, Shape{}, "p");
  auto z = ops::placeholder(g, DType::Int32, Shape{}, "z");
  auto one = ops::constant(g, 1);
  Output x = p;
  for (int i = 0; i < 100; ++i) x = ops::add(x, one);
  x = ops::div(x, z, "divide_here");
  for (int i = 0; i < 100; ++i) x = ops::add(x, one);
  Session s(g);
  for (int round = 0; round < 3; ++round) {
    EXPECT_THROW(s.run(x, {{p, Tensor::scalar(0)}, {z, Tensor::scalar(0)}}), InvalidArgumentError);
    EXPECT_EQ(s.run(x, {{p, Tensor::scalar(100)}, {z, Tensor::scalar(2)}}).scalar<int32_t>(), 200);
  }
}

TEST(ExecutorSlotReuseTest, ConcurrentRunsOfOneChainEachGetTheirOwnValues) {
  Graph g;
  auto p = ops::placeholder(g, DType::Int32, Shape{}, "p");
  auto one = ops::constant(g, 1);
  Output x = p;
  for (int i = 0; i < 1000; ++i) x = ops::add(x, one);
  for (int threads : {1, 2, 4, 8}) {
    SessionOptions so;
    so.inter_op_threads = threads;
    Session s(g, so);
    std::vector<std::thread> workers;
    std::vector<int> wrong(8, 0);
    for (int t = 0; t < 8; ++t) {
      workers.emplace_back([&, t] {
        for (int32_t k = 0; k < 50; ++k) {
          const int32_t base = t * 100000 + k;
          if (s.run(x, {{p, Tensor::scalar(base)}}).scalar<int32_t>() != base + 1000) ++wrong[t];
        }
      });
    }
    for (auto& w : workers) w.join();
    for (int t = 0; t < 8; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t << ", pool of " << threads;
  }
}

TEST(ExecutorSlotReuseTest, OutputsNoOneReadsAreComputedAndStillFetchableLater) {
  Graph g;
  auto p = ops::placeholder(g, DType::Int32, Shape{}, "p");
  std::vector<Output> outs;
  std::vector<Operation> adds;
  for (int i = 0; i < 300; ++i) {
    outs.push_back(ops::add(p, ops::constant(g, i)));
    adds.push_back(outs.back().op());
  }
  Operation all = ops::group(adds, "all");
  Session s(g);
  for (int round = 0; round < 3; ++round) {
    s.run(all, {{p, Tensor::scalar(round)}});
    auto res = s.run({outs[0], outs[150], outs[299]}, {{p, Tensor::scalar(round)}});
    EXPECT_EQ(res[0].scalar<int32_t>(), round);
    EXPECT_EQ(res[1].scalar<int32_t>(), round + 150);
    EXPECT_EQ(res[2].scalar<int32_t>(), round + 299);
  }
}

TEST(ExecutorSlotReuseTest, AsyncOpWhoseOutputNoOneReadsRunsAsATarget) {
  Graph g;
  testing::FedQueue q(g, 10, DType::Int32, "", "x");
  auto dequeue = q.queue.dequeue()[0];
  auto after = ops::add(dequeue, ops::constant(g, 1));
  Session s(g);
  for (int32_t i = 0; i < 4; ++i) s.run(q.enqueue, q.feed(Tensor::scalar(i)));
  s.run(dequeue.op());  // 0 dequeued, its value read by no one
  EXPECT_EQ(s.run(after).scalar<int32_t>(), 2);
  EXPECT_EQ(s.run(dequeue).scalar<int32_t>(), 2);
  EXPECT_EQ(s.run(q.queue.size()).scalar<int32_t>(), 1);
}

TEST(ExecutorSlotReuseTest, ExpensiveOpsInAChainHandTheirSlotsOn) {
  // 256 x 256 matmuls are expensive (run on the pool); each reads the previous one's output once.
  Graph g;
  std::vector<float> eye(256 * 256, 0.0f);
  for (int i = 0; i < 256; ++i) eye[i * 256 + i] = 1.0f;
  auto identity = ops::constant(g, Tensor::matrix<float>(eye, 256, 256));
  auto p = ops::placeholder(g, DType::Float32, Shape{256, 256}, "p");
  Output x = p;
  for (int i = 0; i < 8; ++i) x = ops::add(ops::matmul(x, identity), ops::constant(g, 1.0f));
  Session s(g);
  for (float base : {0.0f, 2.5f}) {
    auto out = s.run(x, {{p, Tensor::from_vector<float>(std::vector<float>(256 * 256, base), Shape{256, 256})}})
                   .to_vector<float>();
    EXPECT_EQ(out.front(), base + 8.0f);
    EXPECT_EQ(out.back(), base + 8.0f);
  }
}

}  // namespace
}  // namespace tessera
