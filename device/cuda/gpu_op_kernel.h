// The base of the GPU op kernels (device type "GPU"): asynchronous kernels that check their
// inputs on the host, allocate outputs in GPU memory, launch on the device's compute stream and
// are done once launched, stream-ordered (Note [GPU kernels] in gpu_op_kernel.cc).
//
//   class NegGpuOp final : public GpuOpKernel {
//     using GpuOpKernel::GpuOpKernel;
//     void run(OpKernelContext& ctx, GpuRun& r) override {
//       Tensor& y = ctx.allocate_output(0, ctx.input(0).shape());
//       r.launch([check = r.launch_check, x = ctx.input(0).raw_data(), p = y.raw_mutable_data(),
//                 n = y.num_elements()](cudaStream_t s) { check->check(gpu::launch_unary(..., s), "Neg"); });
//     }
//   };
#pragma once

#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/op_kernel.h"
#include "core/select_ops.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/gpu_launch.h"

namespace tessera::internal {

// The launch errors of one kernel run. A launch normally runs at once, inside run(), and its error
// fails the op; a launch queued behind a wait runs after the kernel is done for the executor, and
// its error then fails the step (StreamWork::fail). Thread-safe.
class GpuLaunchCheck {
 public:
  explicit GpuLaunchCheck(const Node& node) : node_(node) {}
  // Records the CUDA error of a launch (nothing when cudaSuccess).
  void check(cudaError_t error, std::string_view what);
  // Records a failed launch's status (nothing when OK): a cuBLAS call's.
  void report(const Status& s);
  // The first error recorded so far (before hand_over).
  Status status() const;
  // Errors from now on go to `work`, naming the op.
  void hand_over(StreamWork* work);

 private:
  const Node& node_;
  mutable std::mutex mu_;
  Status status_;               // guarded by mu_
  StreamWork* work_ = nullptr;  // guarded by mu_
};

// What a GPU kernel's run() issues. Thread-compatible (one run at a time).
struct GpuRun {
  CudaDevice& device;  // Not owned.
  CudaStream& stream;  // Not owned.
  // Launched functions report their CUDA errors here (capture it by value, never the context:
  // launched work may run after the kernel is done).
  std::shared_ptr<GpuLaunchCheck> launch_check;
  bool launched = false;
  // Runs once the launched work has completed without error, on the completion thread (reads
  // back device flags); its error fails the op (or, once the kernel is done, the step).
  std::function<Status()> finish;
  // Device tensors that must live until the launched work has been issued (temporaries, replaced
  // values); stream order keeps their memory from reuse after that.
  std::vector<Tensor> keep_alive;

  // Set while the step is captured (Note [Captured partitions] in core/captured_partition.cc):
  // launches are recorded there too, under `node`.
  StreamRecorder* recorder = nullptr;
  const Node* node = nullptr;

  void launch(std::function<void(cudaStream_t)> fn) {
    launched = true;
    if (recorder != nullptr) {
      // Issued again into the graph, its errors go to the StreamWork of that issue.
      recorder->record(*node, [fn, check = launch_check](void* native, StreamWork& work) {
        check->hand_over(&work);
        fn(static_cast<cudaStream_t>(native));
      });
    }
    stream.launch(std::move(fn));
  }
};
gpu::Elem gpu_elem(DType dtype);

// Where a kernel reports a bad index input it finds on the device: two int64 values in device
// memory (the first bad position and its value, or a scan's flag and axis), and the pinned buffer
// they are read back into for GpuRun::finish. Made before the launch; shared by the launched
// function and GpuRun::finish.
struct BadIndexReport {
  int64_t* device = nullptr;
  std::shared_ptr<PinnedStagingPool::Buffer> readback;

  static StatusOr<std::shared_ptr<BadIndexReport>> make(OpKernelContext& ctx, GpuRun& r) {
    Tensor flag = ctx.allocate_temp(DType::Int64, Shape{2});
    auto staged = r.device.staging().acquire(2 * sizeof(int64_t));
    if (!staged.ok()) return staged.status();
    auto report = std::make_shared<BadIndexReport>();
    report->device = flag.mutable_data<int64_t>();
    report->readback = std::make_shared<PinnedStagingPool::Buffer>(std::move(staged).value());
    r.keep_alive.push_back(std::move(flag));
    return report;
  }
  // Every byte of both values set to `byte` on the stream: 0x7f starts the position at nearly
  // INT64_MAX ("none").
  cudaError_t reset(cudaStream_t s, int byte = 0x7f) const {
    return cudaMemsetAsync(device, byte, 2 * sizeof(int64_t), s);
  }
  cudaError_t read_back(cudaStream_t s) const {
    return cudaMemcpyAsync(readback->data(), device, 2 * sizeof(int64_t), cudaMemcpyDeviceToHost, s);
  }
  // Once the stream has run the work: the first bad position (>= count when none) and its value.
  std::pair<int64_t, int64_t> result() const {
    int64_t got[2] = {};
    std::memcpy(got, readback->data(), sizeof(got));
    readback->release();
    return {got[0], got[1]};
  }
  // As result(), for `count` gather indices: InvalidArgument naming the first outside [0, limit).
  Status index_status(int64_t count, int64_t limit) const {
    const auto [i, v] = result();
    if (i >= 0 && i < count) return index_out_of_range(i, v, limit);
    return Status();
  }
};

// Thread-safe as far as run() is: the base keeps only the lazily made CPU kernel.
class GpuOpKernel : public OpKernel {
 public:
  explicit GpuOpKernel(const Node& node) : OpKernel(node) {}

  bool is_async() const override { return true; }
  // The host side of a GPU kernel only checks and launches: never worth a pool thread.
  bool is_expensive() const override { return false; }
  // Blocks until compute_async is done: for callers that cannot wait asynchronously. Never call it
  // on a device's completion thread.
  void compute(OpKernelContext& ctx) override;
  void compute_async(OpKernelContext& ctx, std::function<void()> done) override;

 protected:
  // The op on a GPU: check inputs, allocate outputs, then issue GPU work through r.launch.
  // Record failures with ctx.fail before the first launch; afterwards touch ctx only from the
  // launched functions and r.finish (they may run on other threads).
  virtual void run(OpKernelContext& ctx, GpuRun& r) = 0;
  // Whether every input must already be in the device's memory (checked before run()).
  virtual bool needs_inputs_on_device() const { return true; }

  // Runs the op's CPU kernel instead: what a GPU kernel does when it is given host tensors and no
  // device (OpKernelContext's device nullptr means the host CPU), as the kernel test harness does.
  void compute_on_host(OpKernelContext& ctx, std::function<void()> done);

 private:
  std::once_flag cpu_once_;
  std::unique_ptr<OpKernel> cpu_;  // set once under cpu_once_
  Status cpu_status_;              // set once under cpu_once_
};

// A GPU kernel of an op with an "axis" attr (GatherV2, ArgMax, ArgMin, GatherGrad, ConcatV2, Split),
// read once. Thread-safe as far as run() is.
class AxisGpuOpKernel : public GpuOpKernel {
 public:
  explicit AxisGpuOpKernel(const Node& n) : GpuOpKernel(n), axis_(n.attr<int64_t>("axis")) {}

 protected:
  const int64_t axis_;
};

// A GPU kernel that keeps no state: its run() is the function kRun, so that an op with nothing to
// hold between runs is written as a function, not a class. Thread-safe.
//
//   void bias_add_gpu(OpKernelContext& ctx, GpuRun& r) { ... }
//   TESSERA_REGISTER_KERNEL("BiasAdd", "GPU", StatelessGpuOp<bias_add_gpu>);
template <void (*kRun)(OpKernelContext&, GpuRun&)>
class StatelessGpuOp final : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;

 protected:
  void run(OpKernelContext& ctx, GpuRun& r) override { kRun(ctx, r); }
};

}  // namespace tessera::internal
