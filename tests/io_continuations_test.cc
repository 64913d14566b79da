// Continuations an I/O thread runs itself (Note [Continuations on I/O threads] in
// core/io_continuations.h): the scope and defer_to_io_thread on their own, then the executor's
// side of it: an async kernel completed inside a scope (as a channel's I/O thread completes a
// pull) has its cheap successors run on that thread once the completion returned, at most
// kIoContinuationNodes of them, and its expensive ones elsewhere. (The channel's side is in
// rpc_test: AsyncCompletionsRunWhatTheyDeferOnTheIoThread.)
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/executor.h"
#include "core/io_continuations.h"
#include "core/node.h"
#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using internal::defer_to_io_thread;
using internal::IoCompletionScope;

TEST(IoContinuationsTest, OutsideAScopeNothingIsTaken) {
  bool ran = false;
  std::function<void()> fn = [&] { ran = true; };
  EXPECT_FALSE(defer_to_io_thread(fn));
  ASSERT_TRUE(fn);  // left alone: the caller runs it its own way
  fn();
  EXPECT_TRUE(ran);
}

TEST(IoContinuationsTest, DeferredContinuationsRunInOrderWhenTheScopeCloses) {
  std::vector<int> order;
  {
    IoCompletionScope scope;
    for (int k = 0; k < 3; ++k) {
      std::function<void()> fn = [&order, k] { order.push_back(k); };
      EXPECT_TRUE(defer_to_io_thread(fn));
    }
    EXPECT_TRUE(order.empty());  // not before the completion returned
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  std::function<void()> after = [] {};
  EXPECT_FALSE(defer_to_io_thread(after));  // the scope is closed
}

TEST(IoContinuationsTest, ARunningContinuationCannotDeferMore) {
  bool refused = false;
  {
    IoCompletionScope scope;
    std::function<void()> fn = [&] {
      std::function<void()> nested = [] {};
      refused = !defer_to_io_thread(nested);
    };
    ASSERT_TRUE(defer_to_io_thread(fn));
  }
  EXPECT_TRUE(refused);
}

TEST(IoContinuationsTest, AThrowingContinuationDoesNotStopTheNext) {
  bool second = false;
  {
    IoCompletionScope scope;
    std::function<void()> bad = [] { throw std::runtime_error("boom"); };
    std::function<void()> good = [&] { second = true; };
    ASSERT_TRUE(defer_to_io_thread(bad));
    ASSERT_TRUE(defer_to_io_thread(good));
  }
  EXPECT_TRUE(second);
}

TEST(IoContinuationsTest, NestedScopesRunTheirOwnAndRestoreTheOuter) {
  std::vector<std::string> order;
  {
    IoCompletionScope outer;
    std::function<void()> a = [&] { order.push_back("outer"); };
    ASSERT_TRUE(defer_to_io_thread(a));
    {
      IoCompletionScope inner;
      std::function<void()> b = [&] { order.push_back("inner"); };
      ASSERT_TRUE(defer_to_io_thread(b));
    }
    EXPECT_EQ(order, (std::vector<std::string>{"inner"}));
    std::function<void()> c = [&] { order.push_back("outer again"); };
    EXPECT_TRUE(defer_to_io_thread(c));
  }
  EXPECT_EQ(order, (std::vector<std::string>{"inner", "outer", "outer again"}));
}

// ---- The executor's side ----

// TestParked: an async, cheap kernel with no inputs that parks its `done` (and context) for the
// test to complete from a thread of its choosing; its output is 1.
// TestRootMark: a cheap root that records whether TestParked had parked when it ran.
// TestCheapStep / TestExpensiveStep: output = input + 1, recording the thread they ran on.
struct Lot {
  std::mutex mu;
  internal::OpKernelContext* ctx = nullptr;  // guarded by mu
  std::function<void()> done;                // guarded by mu
  bool parked_before_mark = false;           // guarded by mu
  std::map<std::string, std::thread::id> ran;  // guarded by mu: node name -> thread
  std::atomic<bool> mark_ran{false};
};
Lot& lot() {
  static Lot* l = new Lot;
  return *l;
}

Status scalar_shape(internal::ShapeContext& c) {
  c.add_output(DType::Float32, Shape{});
  return Status();
}

class ParkedKernel final : public internal::OpKernel {
 public:
  using OpKernel::OpKernel;
  bool is_async() const override { return true; }
  bool is_expensive() const override { return false; }
  void compute(internal::OpKernelContext&) override {}
  void compute_async(internal::OpKernelContext& ctx, std::function<void()> done) override {
    std::lock_guard<std::mutex> l(lot().mu);
    lot().ctx = &ctx;
    lot().done = std::move(done);
  }
};

class RootMarkKernel final : public internal::OpKernel {
 public:
  using OpKernel::OpKernel;
  bool is_expensive() const override { return false; }
  void compute(internal::OpKernelContext& ctx) override {
    {
      std::lock_guard<std::mutex> l(lot().mu);
      lot().parked_before_mark = lot().done != nullptr;
    }
    ctx.allocate_output(0, Shape{}).mutable_data<float>()[0] = 0;
    lot().mark_ran.store(true);
  }
};

template <bool kExpensive>
class StepKernel final : public internal::OpKernel {
 public:
  using OpKernel::OpKernel;
  bool is_expensive() const override { return kExpensive; }
  void compute(internal::OpKernelContext& ctx) override {
    {
      std::lock_guard<std::mutex> l(lot().mu);
      lot().ran[name()] = std::this_thread::get_id();
    }
    ctx.allocate_output(0, Shape{}).mutable_data<float>()[0] = ctx.input(0).scalar<float>() + 1;
  }
};
using CheapStepKernel = StepKernel<false>;
using ExpensiveStepKernel = StepKernel<true>;

TESSERA_REGISTER_OP(internal::OpDef{"TestParked", scalar_shape});
TESSERA_REGISTER_KERNEL("TestParked", "CPU", ParkedKernel);
TESSERA_REGISTER_OP(internal::OpDef{"TestRootMark", scalar_shape});
TESSERA_REGISTER_KERNEL("TestRootMark", "CPU", RootMarkKernel);
TESSERA_REGISTER_OP(internal::OpDef{"TestCheapStep", scalar_shape});
TESSERA_REGISTER_KERNEL("TestCheapStep", "CPU", CheapStepKernel);
TESSERA_REGISTER_OP(internal::OpDef{"TestExpensiveStep", scalar_shape});
TESSERA_REGISTER_KERNEL("TestExpensiveStep", "CPU", ExpensiveStepKernel);

Output add(Graph& g, const std::string& type, const std::string& name, std::vector<Output> inputs = {}) {
  internal::NodeSpec spec;
  spec.type = type;
  spec.name = name;
  spec.inputs = std::move(inputs);
  return Output(g.impl().add_node(std::move(spec)), 0);
}

// A graph whose roots are a TestRootMark and a TestParked (made in that order: the executor's
// stack runs the parked one first, then the mark, so the mark running means TestParked's
// compute_async has returned and its completion is a late one, Note [Async kernels]).
struct ParkedGraph {
  Graph g;
  Output mark = add(g, "TestRootMark", "mark");
  Output parked = add(g, "TestParked", "parked");
};

// Runs `fetches` of `graph` on a thread of its own; returns once TestParked has parked and its
// compute_async returned. The step's deadline bounds the test if the completion never comes.
class ParkedRun {
 public:
  ParkedRun(ParkedGraph& graph, std::vector<Output> fetches) : session_(graph.g) {
    {
      std::lock_guard<std::mutex> l(lot().mu);
      lot().ctx = nullptr;
      lot().done = nullptr;
      lot().ran.clear();
    }
    lot().mark_ran.store(false);
    fetches.push_back(graph.mark);
    thread_ = std::thread([this, fetches] {
      RunOptions options;
      options.timeout = std::chrono::seconds(20);
      try {
        outputs_ = session_.run(fetches, {}, {}, options);
      } catch (const std::exception& e) {
        error_ = e.what();
      }
    });
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!lot().mark_ran.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ~ParkedRun() {
    if (thread_.joinable()) thread_.join();
  }
  // The parked kernel's output is 1; then its `done`, on this thread.
  static void complete_parked() {
    internal::OpKernelContext* ctx;
    std::function<void()> done;
    {
      std::lock_guard<std::mutex> l(lot().mu);
      ctx = lot().ctx;
      done = std::move(lot().done);
    }
    ASSERT_NE(ctx, nullptr);
    ctx->allocate_output(0, Shape{}).mutable_data<float>()[0] = 1;
    done();
  }
  std::vector<Tensor> join() {
    thread_.join();
    EXPECT_EQ(error_, "");
    return outputs_;
  }
  std::thread::id run_thread() const { return thread_.get_id(); }

 private:
  Session session_;
  std::thread thread_;
  std::vector<Tensor> outputs_;
  std::string error_;
};

std::map<std::string, std::thread::id> ran() {
  std::lock_guard<std::mutex> l(lot().mu);
  return lot().ran;
}

bool parked_before_mark() {
  std::lock_guard<std::mutex> l(lot().mu);
  return lot().parked_before_mark;
}

TEST(IoContinuationsTest, ALateCompletionsCheapSuccessorsRunOnTheIoThreadAfterItReturned) {
  ParkedGraph graph;
  Output a = add(graph.g, "TestCheapStep", "a", {graph.parked});
  Output b = add(graph.g, "TestCheapStep", "b", {a});
  ParkedRun run(graph, {b});
  ASSERT_TRUE(lot().mark_ran.load());
  ASSERT_TRUE(parked_before_mark()) << "the roots ran in the other order: the completion would not be late";
  {
    IoCompletionScope scope;
    ParkedRun::complete_parked();
    EXPECT_TRUE(ran().empty()) << "the continuation ran inside the completion, not after it";
  }
  auto where = ran();
  ASSERT_EQ(where.size(), 2u);
  EXPECT_EQ(where["a"], std::this_thread::get_id());
  EXPECT_EQ(where["b"], std::this_thread::get_id());
  auto out = run.join();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].scalar<float>(), 3);
}

TEST(IoContinuationsTest, WithoutAScopeTheCompletingThreadRunsNothing) {
  ParkedGraph graph;
  Output a = add(graph.g, "TestCheapStep", "a", {graph.parked});
  ParkedRun run(graph, {a});
  ASSERT_TRUE(parked_before_mark());
  ParkedRun::complete_parked();  // an enqueue's thread, say: Note [Async kernels]
  auto out = run.join();
  EXPECT_EQ(out[0].scalar<float>(), 2);
  auto where = ran();
  ASSERT_EQ(where.count("a"), 1u);
  EXPECT_NE(where["a"], std::this_thread::get_id());
}

TEST(IoContinuationsTest, ExpensiveSuccessorsAreNotRunOnTheIoThread) {
  ParkedGraph graph;
  Output cheap = add(graph.g, "TestCheapStep", "cheap", {graph.parked});
  Output expensive = add(graph.g, "TestExpensiveStep", "expensive", {graph.parked});
  Output after = add(graph.g, "TestExpensiveStep", "after", {cheap});
  ParkedRun run(graph, {expensive, after});
  ASSERT_TRUE(parked_before_mark());
  {
    IoCompletionScope scope;
    ParkedRun::complete_parked();
  }
  auto out = run.join();
  EXPECT_EQ(out[0].scalar<float>(), 2);
  EXPECT_EQ(out[1].scalar<float>(), 3);
  auto where = ran();
  EXPECT_EQ(where["cheap"], std::this_thread::get_id());
  EXPECT_NE(where["expensive"], std::this_thread::get_id());
  EXPECT_NE(where["after"], std::this_thread::get_id());
}

TEST(IoContinuationsTest, TheIoThreadRunsAtMostItsShareOfAChain) {
  ParkedGraph graph;
  const int n = 3 * internal::kIoContinuationNodes;
  Output x = graph.parked;
  for (int k = 0; k < n; ++k) x = add(graph.g, "TestCheapStep", "c" + std::to_string(k), {x});
  ParkedRun run(graph, {x});
  ASSERT_TRUE(parked_before_mark());
  {
    IoCompletionScope scope;
    ParkedRun::complete_parked();
  }
  auto out = run.join();
  EXPECT_EQ(out[0].scalar<float>(), 1 + n);
  auto where = ran();
  ASSERT_EQ(where.size(), static_cast<std::size_t>(n));
  int here = 0;
  for (int k = 0; k < n; ++k) {
    const bool on_io = where["c" + std::to_string(k)] == std::this_thread::get_id();
    // The first kIoContinuationNodes of the chain, and none after.
    EXPECT_EQ(on_io, k < internal::kIoContinuationNodes) << "node c" << k;
    here += on_io;
  }
  EXPECT_EQ(here, internal::kIoContinuationNodes);
}

}  // namespace
}  // namespace tessera
