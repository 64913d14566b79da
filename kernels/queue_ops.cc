// CPU kernels of the queue ops (core/queue_ops.cc) and LimitEpochs. One set of kernels serves
// every queue type: they act on the QueueResource base (kernels/queue_resource.h).
//
// Enqueue, dequeue and close are asynchronous (Note [Async kernels] in core/executor.cc): they
// hand an attempt to the queue resource and return; the queue calls back, from whichever thread
// completes, cancels or closes, and the callback calls `done` (never under the queue's lock, see
// Note [Queue attempts] in kernels/fifo_queue.cc). The step's CancellationManager is passed along,
// so a run timeout or a session close ends a wait with its reason.
#include <atomic>

#include <fmt/format.h>

#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "core/queue_ops.h"
#include "core/shape_util.h"
#include "kernels/fifo_queue.h"
#include "kernels/random_shuffle_queue.h"
#include "kernels/resource_create_op.h"

namespace tessera::internal {
namespace {

using Tuple = QueueResource::Tuple;

std::string dtypes_string(const std::vector<DType>& dtypes) {
  std::string out = "[";
  for (std::size_t i = 0; i < dtypes.size(); ++i) out += (i ? ", " : "") + std::string(dtype_name(dtypes[i]));
  return out + "]";
}

}  // namespace

// The queue `queue_node` describes, created in this session's resources on first use. A queue
// shared by name must agree with every node that names it (type, capacity, min_after_dequeue,
// dtypes and shapes, as TensorFlow checks; not the seed).
StatusOr<std::shared_ptr<QueueResource>> get_queue(OpKernelContext& ctx, const Node& queue_node) {
  const auto& shared_name = queue_node.attr<std::string>("shared_name");
  const std::string key = shared_name.empty() ? queue_node.name : shared_name;
  const int64_t capacity = queue_node.attr<int64_t>("capacity");
  const auto& dtypes = queue_node.attr<std::vector<DType>>("component_types");
  const auto& shapes = queue_node.attr<std::vector<Shape>>("shapes");
  const bool shuffle = queue_node.type == "RandomShuffleQueueV2";
  const char* kind = shuffle ? "RandomShuffleQueue" : "FIFOQueue";
  const int64_t min_after_dequeue = shuffle ? queue_node.attr<int64_t>("min_after_dequeue") : 0;
  // Without a shared name the queue is the client session's own (Note [Private resources]).
  ResourceMgr& resources = shared_name.empty() ? ctx.private_resources() : ctx.resources();
  auto found = resources.lookup_or_create<QueueResource>(
      key, [&]() -> StatusOr<std::shared_ptr<QueueResource>> {
        std::shared_ptr<QueueResource> q;
        if (shuffle) {
          const auto seed = static_cast<uint64_t>(queue_node.attr<int64_t>("seed"));
          q = std::make_shared<RandomShuffleQueueResource>(key, capacity, min_after_dequeue, seed, dtypes, shapes);
        } else {
          q = std::make_shared<FIFOQueueResource>(key, capacity, dtypes, shapes);
        }
        return q;
      });
  if (!found.ok()) return found.status();
  const QueueResource& q = *found.value();
  if (std::string_view(q.kind()) != kind) {
    return errors::invalid_argument("shared queue '{}' is a {} but a {} was requested", key, q.kind(), kind);
  }
  if (q.capacity() != capacity) {
    return errors::invalid_argument("shared queue '{}' has capacity {} but requested capacity was {}",
                                    key, q.capacity(), capacity);
  }
  if (q.min_after_dequeue() != min_after_dequeue) {
    return errors::invalid_argument(
        "shared queue '{}' has min_after_dequeue {} but requested min_after_dequeue was {}", key,
        q.min_after_dequeue(), min_after_dequeue);
  }
  if (q.dtypes() != dtypes) {
    return errors::invalid_argument(
        "shared queue '{}' has component types {} but requested component types were {}", key,
        dtypes_string(q.dtypes()), dtypes_string(dtypes));
  }
  if (q.shapes() != shapes) {
    return errors::invalid_argument(
        "shared queue '{}' has component shapes {} but requested component shapes were {}", key,
        shapes_string(q.shapes()), shapes_string(shapes));
  }
  return found;
}

namespace {

// Base of the ops that act on a queue: `resource` is the queue node. The queue (and the check
// that a shared one agrees) is looked up once per kernel.
class QueueOpKernel : public OpKernel {
 public:
  explicit QueueOpKernel(const Node& n) : OpKernel(n) {
    TESSERA_CHECK(n.resource != nullptr && is_queue_type(n.resource->type));
  }

 protected:
  StatusOr<QueueResource*> queue(OpKernelContext& ctx) {
    return queue_.get([&] { return get_queue(ctx, *node().resource); });
  }
  // For async kernels: the queue, or nullptr after failing the op and calling `done`.
  QueueResource* queue_or_finish(OpKernelContext& ctx, const std::function<void()>& done) {
    auto q = queue(ctx);
    if (q.ok()) return q.value();
    ctx.fail(q.status());
    done();
    return nullptr;
  }
  // The queue's completion callback for an enqueue or close: records a failure, ends the op.
  static QueueResource::EnqueueCallback complete_op(OpKernelContext& ctx, std::function<void()> done) {
    return [&ctx, done = std::move(done)](const Status& s) {
      if (!s.ok()) ctx.fail(s);
      done();
    };
  }

 private:
  CachedResource<QueueResource> queue_;
};

// "FIFOQueue" and "RandomShuffleQueueV2": create the queue (and check a shared one agrees) when run.
TESSERA_REGISTER_KERNEL("FIFOQueue", "CPU", ResourceCreateOp<get_queue>);
TESSERA_REGISTER_KERNEL("RandomShuffleQueueV2", "CPU", ResourceCreateOp<get_queue>);

class EnqueueOp : public QueueOpKernel {
 public:
  explicit EnqueueOp(const Node& n) : QueueOpKernel(n), many_(n.type == "QueueEnqueueMany") {}
  bool is_async() const override { return true; }
  void compute(OpKernelContext& ctx) override { TESSERA_CHECK(false); }
  void compute_async(OpKernelContext& ctx, std::function<void()> done) override {
    QueueResource* q = queue_or_finish(ctx, done);
    if (q == nullptr) return;
    Tuple components;
    for (int i = 0; i < ctx.num_inputs(); ++i) components.push_back(ctx.input(i));
    Status valid = many_ ? q->validate_batch(components) : q->validate_tuple(components);
    if (!valid.ok()) {
      ctx.fail(valid);
      done();
      return;
    }
    if (many_) {
      q->try_enqueue_batch(std::move(components), &ctx.cancellation(), complete_op(ctx, std::move(done)));
    } else {
      q->try_enqueue_element(std::move(components), &ctx.cancellation(), complete_op(ctx, std::move(done)));
    }
  }

 private:
  const bool many_;
};

TESSERA_REGISTER_KERNEL("QueueEnqueue", "CPU", EnqueueOp);
TESSERA_REGISTER_KERNEL("QueueEnqueueMany", "CPU", EnqueueOp);

class DequeueOp : public QueueOpKernel {
 public:
  explicit DequeueOp(const Node& n)
      : QueueOpKernel(n),
        many_(n.type != "QueueDequeue"),
        allow_small_(n.type == "QueueDequeueUpTo"),
        n_(many_ ? n.attr<int64_t>("n") : 1) {}
  bool is_async() const override { return true; }
  void compute(OpKernelContext& ctx) override { TESSERA_CHECK(false); }
  void compute_async(OpKernelContext& ctx, std::function<void()> done) override {
    QueueResource* q = queue_or_finish(ctx, done);
    if (q == nullptr) return;
    if (n_ == 0) {  // an empty batch at once, as in TensorFlow (needs the queue's shapes)
      auto empty = q->empty_batch();
      if (!empty.ok()) {
        ctx.fail(empty.status());
      } else {
        for (std::size_t i = 0; i < empty.value().size(); ++i) ctx.set_output(static_cast<int>(i), empty.value()[i]);
      }
      done();
      return;
    }
    q->try_dequeue_stacked(n_, many_, allow_small_, &ctx.cancellation(),
                                   [&ctx, done = std::move(done)](const Status& s, Tuple out) {
                                     if (!s.ok()) {
                                       ctx.fail(s);
                                     } else {
                                       for (std::size_t i = 0; i < out.size(); ++i) {
                                         ctx.set_output(static_cast<int>(i), std::move(out[i]));
                                       }
                                     }
                                     done();
                                   });
  }

 private:
  const bool many_;
  const bool allow_small_;
  const int64_t n_;
};

TESSERA_REGISTER_KERNEL("QueueDequeue", "CPU", DequeueOp);
TESSERA_REGISTER_KERNEL("QueueDequeueMany", "CPU", DequeueOp);
TESSERA_REGISTER_KERNEL("QueueDequeueUpTo", "CPU", DequeueOp);

class CloseOp : public QueueOpKernel {
 public:
  explicit CloseOp(const Node& n)
      : QueueOpKernel(n), cancel_pending_(n.attr<bool>("cancel_pending_enqueues")) {}
  bool is_async() const override { return true; }
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override { TESSERA_CHECK(false); }
  void compute_async(OpKernelContext& ctx, std::function<void()> done) override {
    QueueResource* q = queue_or_finish(ctx, done);
    if (q == nullptr) return;
    q->close(cancel_pending_, &ctx.cancellation(), complete_op(ctx, std::move(done)));
  }

 private:
  const bool cancel_pending_;
};

TESSERA_REGISTER_KERNEL("QueueClose", "CPU", CloseOp);

class QueueSizeOp : public QueueOpKernel {
 public:
  using QueueOpKernel::QueueOpKernel;
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override {
    auto q = queue(ctx);
    if (!q.ok()) return ctx.fail(q.status());
    Tensor& out = ctx.allocate_output(0, Shape{});
    if (node().type == "QueueSize") {
      *out.mutable_data<int32_t>() = static_cast<int32_t>(q.value()->size());
    } else {
      *out.mutable_data<bool>() = q.value()->is_closed();
    }
  }
};

TESSERA_REGISTER_KERNEL("QueueSize", "CPU", QueueSizeOp);
TESSERA_REGISTER_KERNEL("QueueIsClosed", "CPU", QueueSizeOp);

// LimitEpochs' counter: how many times this session ran the node.
class EpochCounter : public ResourceBase {
 public:
  std::string debug_string() const override {
    return fmt::format("epoch counter ({} runs)", runs.load(std::memory_order_relaxed));
  }
  std::atomic<int64_t> runs{0};
};

class LimitEpochsOp : public OpKernel {
 public:
  explicit LimitEpochsOp(const Node& n) : OpKernel(n), limit_(n.attr<int64_t>("num_epochs")) {}
  bool is_expensive() const override { return false; }
  void compute(OpKernelContext& ctx) override {
    // The client session's own, as TF's epochs local variable that each session initializes.
    auto counter = ctx.private_resources().lookup_or_create<EpochCounter>(
        name(), []() -> StatusOr<std::shared_ptr<EpochCounter>> { return std::make_shared<EpochCounter>(); });
    if (!counter.ok()) return ctx.fail(counter.status());
    if (counter.value()->runs.fetch_add(1, std::memory_order_relaxed) >= limit_) {
      return ctx.fail(errors::out_of_range("reached the limit of {} epochs", limit_));
    }
    ctx.set_output(0, ctx.input(0));
  }

 private:
  const int64_t limit_;
};

TESSERA_REGISTER_KERNEL("LimitEpochs", "CPU", LimitEpochsOp);

}  // namespace
}  // namespace tessera::internal
