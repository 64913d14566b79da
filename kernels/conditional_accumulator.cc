#include "kernels/conditional_accumulator.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/half.h"
#include "core/logging.h"
#include "core/node.h"
#include "core/op_kernel.h"

namespace tessera::internal {

// Note [Conditional accumulators]
// TensorFlow's ConditionalAccumulator, which SyncReplicasOptimizer builds on: each worker applies
// its gradient with the local step it computed it at; the chief takes the mean of
// replicas_to_aggregate of them. The accumulator's global step is what makes this synchronous:
// a gradient whose local step is older than it was computed from variables an update has changed
// since, so it is dropped (silently, unchecked: a stale gradient is normal, not an error). A take
// increments the global step, so everything applied for the step just taken is stale from then
// on; the chief's init op sets it to the real global step (AccumulatorSetGlobalStep).
//
// An apply never waits (the sum has no capacity). A take waits as an attempt, in arrival order,
// as a queue's dequeue does (Note [Queue attempts] in kernels/queue_resource.cc): the kernel is
// asynchronous, so a waiting take holds no thread. Attempts complete under mu_ (the mean is
// computed there, as TensorFlow does), their callbacks run after mu_ is released. A take waiting
// when its step is cancelled (a deadline, a closed session) or when the session or server closes
// (cancel_all) fails with CancelledError; the sum is kept. Cancellation registration follows the
// queues': only a take that has to wait registers, under mu_ (lock order mu_ -> the manager's).
//
// 16-bit gradients are summed in float32 (as tessera's reducing kernels accumulate) and rounded
// once when taken; TensorFlow sums them in half. Dense gradients only: TensorFlow's
// SparseConditionalAccumulator (IndexedSlices) has no counterpart, as tessera has no
// IndexedSlices (gradients of gather are dense).

namespace {

// Element i of a float tensor of any accumulated dtype, as the type we sum in.
template <class Sum>
Sum element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::Float16: return static_cast<Sum>(static_cast<float>(t.data<float16_t>()[i]));
    case DType::BFloat16: return static_cast<Sum>(static_cast<float>(t.data<bfloat16_t>()[i]));
    case DType::Float32: return static_cast<Sum>(t.data<float>()[i]);
    case DType::Float64: return static_cast<Sum>(t.data<double>()[i]);
    default: TESSERA_CHECK(false); return Sum{};
  }
}

// The dtype the sum of `dtype` gradients is kept in.
DType sum_dtype(DType dtype) { return dtype == DType::Float64 ? DType::Float64 : DType::Float32; }

template <class Sum>
void add_into(Tensor& sum, const Tensor& grad) {
  Sum* s = sum.mutable_data<Sum>();
  const int64_t n = sum.num_elements();
  if (grad.dtype() == sum.dtype()) {
    const Sum* g = grad.data<Sum>();
    for (int64_t i = 0; i < n; ++i) s[i] += g[i];
  } else {
    for (int64_t i = 0; i < n; ++i) s[i] += element<Sum>(grad, i);
  }
}

}  // namespace

bool is_accumulator_dtype(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float32 || dtype == DType::Float64;
}

ConditionalAccumulatorResource::ConditionalAccumulatorResource(std::string name, DType dtype, Shape shape, bool mean)
    : name_(std::move(name)), dtype_(dtype), shape_(std::move(shape)), mean_(mean) {
  TESSERA_CHECK(is_accumulator_dtype(dtype_));
}

ConditionalAccumulatorResource::~ConditionalAccumulatorResource() {
  // Normally empty: a closing session cancels its steps first. (Cancellation callbacks hold only
  // a weak reference.)
  cancel_pending_takes(errors::cancelled("accumulator '{}' was destroyed", name_));
}

Status ConditionalAccumulatorResource::try_apply(int64_t local_step, const Tensor& grad, bool* applied) {
  if (applied != nullptr) *applied = false;
  std::vector<Take> finished;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (local_step < global_step_) return Status();  // stale: dropped (Note [Conditional accumulators])
    if (grad.is_null()) return errors::invalid_argument("accumulator '{}': a null gradient", name_);
    if (grad.dtype() != dtype_) {
      return errors::invalid_argument("accumulator '{}' accumulates {}, the gradient is {}", name_,
                                      dtype_name(dtype_), dtype_name(grad.dtype()));
    }
    if (!shape_.is_compatible_value(grad.shape())) {
      return errors::invalid_argument("accumulator '{}': shape mismatch: expected {}, got {}", name_,
                                      shape_.to_string(), grad.shape().to_string());
    }
    if (count_ > 0 && sum_.shape() != grad.shape()) {
      return errors::invalid_argument("accumulator '{}': shape mismatch: expected {} (the gradients summed so far), got {}",
                                      name_, sum_.shape().to_string(), grad.shape().to_string());
    }
    if (count_ == 0) {
      // A buffer of our own: the gradient's may be shared with the step that computed it.
      sum_ = Tensor::zeros(sum_dtype(dtype_), grad.shape());
    }
    if (sum_.dtype() == DType::Float64) {
      add_into<double>(sum_, grad);
    } else {
      add_into<float>(sum_, grad);
    }
    ++count_;
    if (applied != nullptr) *applied = true;
    flush_locked(&finished);
  }
  finish(&finished);
  return Status();
}

void ConditionalAccumulatorResource::try_take(int64_t num_required, CancellationManager* cm, TakeCallback done) {
  if (num_required < 1) {
    done(errors::invalid_argument("accumulator '{}': argument num_required must be positive, but was {}", name_,
                                  num_required),
         Tensor());
    return;
  }
  std::vector<Take> finished;
  {
    std::lock_guard<std::mutex> l(mu_);
    Take take;
    take.id = next_id_++;
    take.num_required = num_required;
    take.cm = cm;
    take.done = std::move(done);
    const int64_t id = take.id;
    if (cm != nullptr && cm->is_cancelled()) {
      take.status = cancelled(cm->reason());
      finished.push_back(std::move(take));
    } else {
      takes_.push_back(std::move(take));
      flush_locked(&finished);
      auto waiting = std::find_if(takes_.begin(), takes_.end(), [id](const Take& t) { return t.id == id; });
      if (cm != nullptr && waiting != takes_.end()) {
        std::weak_ptr<ConditionalAccumulatorResource> self = weak_from_this();
        TESSERA_CHECK(!self.expired());  // owned by a shared_ptr, as documented
        waiting->token = cm->register_callback([self, id](const Status& reason) {
          if (auto acc = self.lock()) acc->cancel(id, reason);
        });
        if (waiting->token == CancellationManager::kInvalidToken) {  // cancelled meanwhile
          waiting->status = cancelled(cm->reason());
          finished.push_back(std::move(*waiting));
          takes_.erase(waiting);
        }
      }
    }
  }
  finish(&finished);
}

void ConditionalAccumulatorResource::set_global_step(int64_t step) {
  std::lock_guard<std::mutex> l(mu_);
  if (step < global_step_) {
    TESSERA_LOG(kWarning, "accumulator '{}': the global step goes back from {} to {}", name_, global_step_, step);
  }
  global_step_ = step;
}

void ConditionalAccumulatorResource::cancel_pending_takes(const Status& reason) {
  std::vector<Take> finished;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (Take& t : takes_) {
      t.status = cancelled(reason);
      finished.push_back(std::move(t));
    }
    takes_.clear();
  }
  finish(&finished);
}

void ConditionalAccumulatorResource::cancel_all(const Status& reason) { cancel_pending_takes(reason); }

int64_t ConditionalAccumulatorResource::num_accumulated() const {
  std::lock_guard<std::mutex> l(mu_);
  return count_;
}

int64_t ConditionalAccumulatorResource::global_step() const {
  std::lock_guard<std::mutex> l(mu_);
  return global_step_;
}

int ConditionalAccumulatorResource::num_pending_takes() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(takes_.size());
}

std::string ConditionalAccumulatorResource::debug_string() const {
  std::lock_guard<std::mutex> l(mu_);
  return fmt::format("conditional accumulator '{}' ({} {}, {} summed, global step {}, {} takes waiting)", name_,
                     dtype_name(dtype_), shape_.to_string(), count_, global_step_, takes_.size());
}

void ConditionalAccumulatorResource::flush_locked(std::vector<Take>* finished) {
  while (!takes_.empty() && count_ >= takes_.front().num_required) {
    Take& t = takes_.front();
    t.result = take_sum_locked();
    finished->push_back(std::move(t));
    takes_.pop_front();
  }
}

Tensor ConditionalAccumulatorResource::take_sum_locked() {
  ++global_step_;
  const int64_t n = sum_.num_elements();
  Tensor out;
  if (sum_.dtype() == dtype_) {  // float32 and float64: divide in place and hand the buffer over
    out = std::move(sum_);
    if (mean_) {
      if (dtype_ == DType::Float64) {
        double* p = out.mutable_data<double>();
        const auto c = static_cast<double>(count_);
        for (int64_t i = 0; i < n; ++i) p[i] /= c;
      } else {
        float* p = out.mutable_data<float>();
        const auto c = static_cast<float>(count_);
        for (int64_t i = 0; i < n; ++i) p[i] /= c;
      }
    }
  } else {  // 16-bit: round the float32 sum (or mean) once
    out = Tensor(dtype_, sum_.shape());
    const float* s = sum_.data<float>();
    const float c = mean_ ? static_cast<float>(count_) : 1.0f;
    for (int64_t i = 0; i < n; ++i) {
      if (dtype_ == DType::Float16) {
        out.mutable_data<float16_t>()[i] = float16_t(s[i] / c);
      } else {
        out.mutable_data<bfloat16_t>()[i] = bfloat16_t(s[i] / c);
      }
    }
  }
  sum_ = Tensor();
  count_ = 0;
  return out;
}

void ConditionalAccumulatorResource::cancel(int64_t id, const Status& reason) {
  std::vector<Take> finished;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = std::find_if(takes_.begin(), takes_.end(), [id](const Take& t) { return t.id == id; });
    if (it == takes_.end()) return;  // completed meanwhile
    it->status = cancelled(reason);
    finished.push_back(std::move(*it));
    takes_.erase(it);
    // The takes behind it may complete now (a smaller num_required than the head's).
    flush_locked(&finished);
  }
  finish(&finished);
}

Status ConditionalAccumulatorResource::cancelled(const Status& reason) const {
  if (reason.ok()) return errors::cancelled("take from accumulator '{}' was cancelled", name_);
  // The reason's own code: a run's deadline stays DeadlineExceeded, as a queue's wait does.
  return Status(reason.code(), fmt::format("take from accumulator '{}' was cancelled: {}", name_, reason.message()));
}

void ConditionalAccumulatorResource::finish(std::vector<Take>* finished) {
  for (Take& t : *finished) {
    if (t.cm != nullptr && t.token != CancellationManager::kInvalidToken) {
      // False when the cancellation callback is running: it finds no take and returns.
      (void)t.cm->deregister_callback(t.token);
    }
    t.done(t.status, std::move(t.result));
  }
}

}  // namespace tessera::internal
