#include "device/cuda/gpu_op_kernel.h"

#include <condition_variable>

#include "core/executor.h"
#include "core/op_registry.h"
#include "device/cuda/cuda_status.h"

namespace tessera::internal {

// Note [GPU kernels]
// ~~~~~~~~~~~~~~~~~~
// A GPU kernel is asynchronous and stream-ordered (Note [Stream-ordered kernels] in
// core/executor.cc): compute_async checks that every input is in the GPU's memory (an input that is
// not is an InternalError naming the op: a missing transfer), then run() checks shapes and dtypes
// on the host exactly as the CPU kernel does (same messages), allocates the outputs in GPU memory
// and launches on compute stream 0, and the kernel is done as soon as it has launched: successors
// follow on the stream, and the host waits only where a host consumer needs the data. Launch
// errors fail the op (GpuLaunchCheck); device-side failures (an integer division by zero) come
// back through a flag copied to pinned memory and read by GpuRun::finish once the stream has run
// it, failing the step. Nothing is kept alive past the launch: stream order keeps freed memory
// from reuse (Note [Stream-ordered memory] in device/sim_kernels.cc). Without a StreamWork (a
// kernel run outside a step) the kernel is done only when the stream has run its work.
//
// Given no device (the kernel test harness runs every registered kernel on host tensors that way),
// a GPU kernel runs the op's CPU kernel: OpKernelContext's device nullptr means the host CPU.

void GpuLaunchCheck::check(cudaError_t error, std::string_view what) {
  if (error != cudaSuccess) report(cuda_error(error, what));
}

void GpuLaunchCheck::report(const Status& s) {
  if (s.ok()) return;
  StreamWork* work = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (work_ == nullptr) {
      if (status_.ok()) status_ = s;
      return;
    }
    work = work_;
  }
  work->fail(s.with_prefix(node_.debug_name() + ": "));
}

Status GpuLaunchCheck::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void GpuLaunchCheck::hand_over(StreamWork* work) {
  std::lock_guard<std::mutex> lock(mu_);
  work_ = work;
}

gpu::Elem gpu_elem(DType dtype) {
  switch (dtype) {
    case DType::Float32: return gpu::Elem::kF32;
    case DType::Float64: return gpu::Elem::kF64;
    case DType::Int32: return gpu::Elem::kI32;
    case DType::Int64: return gpu::Elem::kI64;
    case DType::Bool: return gpu::Elem::kBool;
    case DType::Float16: return gpu::Elem::kF16;
    case DType::BFloat16: return gpu::Elem::kBF16;
    case DType::String: break;  // host memory only: never on a GPU
  }
  return gpu::Elem::kBool;
}

void GpuOpKernel::compute(OpKernelContext& ctx) {
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  compute_async(ctx, [&] {
    std::lock_guard<std::mutex> lock(mu);
    finished = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return finished; });
}

void GpuOpKernel::compute_on_host(OpKernelContext& ctx, std::function<void()> done) {
  std::call_once(cpu_once_, [&] {
    const KernelFactory* factory = OpRegistry::global().find_kernel(node().type, "CPU");
    if (factory == nullptr) {
      cpu_status_ = errors::unimplemented("no CPU kernel for op type {} to run on the host", node().type);
      return;
    }
    try {
      cpu_ = (*factory)(node());
    } catch (...) {
      cpu_status_ = status_from_current_exception();
    }
  });
  if (cpu_ == nullptr) {
    ctx.fail(cpu_status_);
    done();
    return;
  }
  cpu_->compute_async(ctx, std::move(done));
}

void GpuOpKernel::compute_async(OpKernelContext& ctx, std::function<void()> done) {
  Device* device = ctx.device();
  if (device == nullptr || device->type() == "CPU") return compute_on_host(ctx, std::move(done));
  auto* gpu = dynamic_cast<CudaDevice*>(device);
  if (gpu == nullptr) {
    ctx.fail(errors::internal("a GPU kernel must run on a GPU device, not on {}", device->name()));
    done();
    return;
  }
  if (needs_inputs_on_device()) {
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& in = ctx.input(i);
      if (!in.is_null() && in.device() != gpu->name()) {
        ctx.fail(errors::internal("input {} is in the memory of {}, not of {} (missing transfer)", i, in.device(),
                                  gpu->name()));
        done();
        return;
      }
    }
  }
  const int64_t start = ctx.trace() != nullptr ? now_micros() : 0;
  CudaStream& stream = gpu->cuda_compute_stream(0);
  GpuRun r{*gpu, stream, std::make_shared<GpuLaunchCheck>(node())};
  if (StreamWork* work = ctx.stream_work(); work != nullptr) {
    r.recorder = work->recorder();
    r.node = &node();
  }
  try {
    run(ctx, r);
  } catch (...) {
    ctx.fail(status_from_current_exception());
  }
  if (Status launched = r.launch_check->status(); !launched.ok()) ctx.fail(launched);
  auto trace = [&ctx, gpu, &stream, start] { ctx.trace_on_stream(*gpu, stream, start); };
  if (!r.launched) {  // nothing on the GPU (an error, an empty output, a shared buffer)
    if (r.finish && ctx.status().ok()) ctx.fail(r.finish());
    trace();
    done();
    return;
  }
  if (StreamWork* work = ctx.stream_work(); work != nullptr) {
    // Stream-ordered: done now. What the launched work finds later fails the step.
    r.launch_check->hand_over(work);
    TraceSink* sink = ctx.trace();
    if (r.finish || sink != nullptr) {
      work->issued_then(*gpu, stream, node(),
                        [this, finish = std::move(r.finish), sink, gpu, &stream, start](Status s) -> Status {
                          if (sink != nullptr) trace_stream_span(*sink, node(), *gpu, stream, start);
                          if (!s.ok() || !finish) return Status();
                          try {
                            return finish();
                          } catch (...) {
                            return status_from_current_exception();
                          }
                        });
    } else {
      work->issued(*gpu, stream, node());
    }
    if (r.recorder != nullptr) {
      for (const Tensor& t : r.keep_alive) r.recorder->retain(t);  // the replays use them too
    }
    r.keep_alive.clear();
    done();
    return;
  }
  stream.then([&ctx, gpu, trace, finish = std::move(r.finish), keep = std::move(r.keep_alive),
               done = std::move(done)](Status s) mutable {
    if (!s.ok()) {
      // An asynchronous fault (the stream's event failed): the GPU is failed for good, and the
      // reason names this op, whose launch the fault followed.
      gpu->fail_after(ctx.node().debug_name(), s).ignore();  // the op fails with the stream's own error
      ctx.fail(s);
    } else if (finish) {
      try {
        ctx.fail(finish());
      } catch (...) {
        ctx.fail(status_from_current_exception());
      }
    }
    keep.clear();
    trace();
    done();
  });
}

}  // namespace tessera::internal
