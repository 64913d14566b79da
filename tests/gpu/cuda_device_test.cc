// The CUDA device in isolation (label gpu): registration, streams, events and the completion path
// (Note [CUDA streams] in device/cuda/cuda_stream.cc), copies through pinned staging from 1 byte
// to 64 MiB, and the caching allocator over cudaMalloc. Every test skips itself without a GPU,
// except the one that checks what happens then.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "core/host_blocks.h"
#include "core/tensor_buffer.h"
#include "device/sim_device.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/testing/test_util.h"

namespace tessera::internal {
namespace {

using gpu_testing::Latch;
using gpu_testing::to_device;
using gpu_testing::to_host;
using tessera::testing::kThreadCounts;
using tessera::testing::run_threads;

constexpr std::size_t kMiB = 1024 * 1024;

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override { TESSERA_REQUIRE_GPU(gpu_); }
  // A device of its own, for tests that put streams in error or tear a device down.
  std::unique_ptr<CudaDevice> own_device() {
    auto d = CudaDevice::create(gpu_->ordinal());
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    return d.ok() ? std::move(d).value() : nullptr;
  }
  CudaDevice* gpu_ = nullptr;
};

// ----- Registration -----

TEST(CudaRegistrationTest, WithoutAGpuRegistersNoneAndDoesNotThrow) {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) GTEST_SKIP() << "this machine has a GPU";
  (void)cudaGetLastError();
  DeviceRegistry registry;
  auto n = register_cuda_devices(registry);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(n.value(), 0);
  EXPECT_TRUE(registry.devices().empty());
}

TEST_F(CudaDeviceTest, RegistersEveryVisibleGpu) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  auto gpus = gpu_testing::gpu_registry().find_all("/device:GPU:*").value();
  ASSERT_EQ(static_cast<int>(gpus.size()), count);
  for (int i = 0; i < count; ++i) {
    EXPECT_EQ(gpus[i]->name(), "/job:localhost/replica:0/task:0/device:GPU:" + std::to_string(i));
    EXPECT_EQ(gpus[i]->type(), "GPU");
    EXPECT_EQ(gpus[i]->id(), i);
  }
  EXPECT_EQ(gpu_testing::gpu_registry().find("/gpu:0").value(), gpus[0]);
  EXPECT_FALSE(gpu_->gpu_name().empty());
  EXPECT_GT(gpu_->multiprocessor_count(), 0);
  EXPECT_GT(gpu_->total_memory(), 0u);
  EXPECT_GT(gpu_->cost_profile().flops_per_second, 0);
  EXPECT_EQ(gpu_->num_compute_streams(), 1);
  for (const char* op : {"Add", "MatMul", "Sum", "Cast", "RandomNormal", "Const", "AssignAdd"}) {
    EXPECT_TRUE(gpu_->has_kernel(op)) << op;
  }
  EXPECT_EQ(register_cuda_devices(gpu_testing::gpu_registry()).status().code(), ErrorCode::kAlreadyExists);
}

TEST_F(CudaDeviceTest, MoreComputeStreamsWhenAsked) {
  CudaDeviceOptions options;
  options.num_compute_streams = 3;
  auto d = CudaDevice::create(gpu_->ordinal(), options);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d.value()->num_compute_streams(), 3);
  EXPECT_NE(d.value()->cuda_stream(0), d.value()->cuda_stream(2));
  options.num_compute_streams = 0;
  EXPECT_EQ(CudaDevice::create(gpu_->ordinal(), options).status().code(), ErrorCode::kInvalidArgument);
}

// ----- Streams, events, the completion path -----

TEST_F(CudaDeviceTest, LaunchesAndHostWorkRunInOrder) {
  CudaStream& s = gpu_->cuda_compute_stream();
  auto buffer = gpu_->allocate_tensor(DType::Int32, Shape{1 << 20}).value();
  void* p = buffer.raw_mutable_data();
  std::mutex mu;
  std::vector<int> order;
  std::atomic<int> wrong{0};
  for (int i = 0; i < 20; ++i) {
    s.launch([&, i, p](cudaStream_t raw) {
      ASSERT_EQ(cudaMemsetAsync(p, i, buffer.bytes(), raw), cudaSuccess);
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(2 * i);
    });
    // Host work sees the GPU work before it: the memset has run (and it may call CUDA).
    s.enqueue([&, i, p] {
      unsigned char first = 0;
      if (cudaMemcpy(&first, p, 1, cudaMemcpyDeviceToHost) != cudaSuccess || first != i) ++wrong;
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(2 * i + 1);
    });
  }
  ASSERT_TRUE(s.synchronize().ok());
  EXPECT_EQ(wrong.load(), 0);
  std::vector<int> want(40);
  for (int i = 0; i < 40; ++i) want[i] = i;
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, want);
}

TEST_F(CudaDeviceTest, ThenRunsOnTheCompletionThreadOnceTheWorkHasRun) {
  CudaStream& s = gpu_->cuda_compute_stream();
  std::atomic<bool> worked{false};
  s.enqueue([&] { worked = true; });
  Latch done;
  std::thread::id callback_thread;
  std::atomic<bool> saw_work{false};
  s.then([&](Status st) {
    EXPECT_TRUE(st.ok()) << st.to_string();
    saw_work = worked.load();
    callback_thread = std::this_thread::get_id();
    done.open();
  });
  ASSERT_TRUE(done.wait());
  EXPECT_TRUE(saw_work.load());
  EXPECT_NE(callback_thread, std::this_thread::get_id());
}

TEST_F(CudaDeviceTest, EventsOrderWorkAcrossStreams) {
  CudaStream& a = gpu_->cuda_compute_stream();
  CudaStream& b = gpu_->cuda_device_to_host_stream();
  const std::size_t bytes = 64 * kMiB;
  auto src = gpu_->allocate_tensor(DType::Bool, Shape{static_cast<int64_t>(bytes)}).value();
  auto dst = gpu_->allocate_tensor(DType::Bool, Shape{static_cast<int64_t>(bytes)}).value();
  void* ps = src.raw_mutable_data();
  void* pd = dst.raw_mutable_data();
  a.launch([=](cudaStream_t raw) {
    ASSERT_EQ(cudaMemsetAsync(ps, 0, bytes, raw), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(ps, 1, bytes, raw), cudaSuccess);  // long enough to lose a race
  });
  Event written;
  ASSERT_TRUE(a.record(written).ok());
  ASSERT_TRUE(b.wait(written).ok());
  b.launch([=](cudaStream_t raw) { ASSERT_EQ(cudaMemcpyAsync(pd, ps, bytes, cudaMemcpyDeviceToDevice, raw), cudaSuccess); });
  ASSERT_TRUE(b.synchronize().ok());
  EXPECT_TRUE(written.completed());
  auto back = to_host(*gpu_, dst);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  const bool* v = back.value().data<bool>();
  std::size_t ones = 0;
  for (std::size_t i = 0; i < bytes; ++i) ones += v[i] ? 1 : 0;
  EXPECT_EQ(ones, bytes);
}

TEST_F(CudaDeviceTest, WaitsOnAnEventFromAnywhereWithoutBlocking) {
  CudaStream& s = gpu_->cuda_compute_stream();
  Event gate;  // completed by this thread, as a CPU or SIM stream would complete one
  ASSERT_TRUE(gate.mark_recorded().ok());
  std::atomic<bool> ran{false};
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(s.wait(gate).ok());
  s.enqueue([&] { ran = true; });
  Event after;
  ASSERT_TRUE(s.record(after).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1)) << "wait() blocked";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(ran.load());
  EXPECT_FALSE(after.completed());
  gate.complete(Status());
  ASSERT_TRUE(after.wait_for(std::chrono::seconds(30)));
  EXPECT_TRUE(after.status().ok());
  EXPECT_TRUE(ran.load());
}

TEST_F(CudaDeviceTest, EventsAreOneShotAndWaitsNeedARecord) {
  CudaStream& s = gpu_->cuda_compute_stream();
  Event e;
  ASSERT_TRUE(s.record(e).ok());
  EXPECT_EQ(s.record(e).code(), ErrorCode::kFailedPrecondition);
  Event never;
  EXPECT_EQ(s.wait(never).code(), ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(e.wait_for(std::chrono::seconds(30)));
}

TEST_F(CudaDeviceTest, AThrowingWorkItemPutsTheStreamInError) {
  auto d = own_device();
  ASSERT_NE(d, nullptr);
  CudaStream& s = d->cuda_compute_stream();
  std::atomic<bool> launched_after{false};
  std::atomic<bool> worked_after{false};
  s.enqueue([] { throw std::runtime_error("work failed"); });
  s.launch([&](cudaStream_t) { launched_after = true; });
  s.enqueue([&] { worked_after = true; });
  Latch done;
  Status seen;
  s.then([&](Status st) {
    seen = st;
    done.open();
  });
  ASSERT_TRUE(done.wait());
  EXPECT_FALSE(seen.ok());
  EXPECT_NE(seen.message().find("work failed"), std::string::npos) << seen.to_string();
  EXPECT_FALSE(launched_after.load());
  EXPECT_FALSE(worked_after.load());
  EXPECT_FALSE(s.status().ok());
  // The other streams are unaffected.
  EXPECT_TRUE(d->cuda_host_to_device_stream().synchronize().ok());
}

TEST_F(CudaDeviceTest, AFailedWaitedOnEventPutsTheWaitingStreamInError) {
  auto d = own_device();
  ASSERT_NE(d, nullptr);
  Event failed;
  ASSERT_TRUE(failed.mark_recorded().ok());
  failed.complete(errors::internal("upstream broke"));
  CudaStream& s = d->cuda_compute_stream();
  ASSERT_TRUE(s.wait(failed).ok());
  const Status st = s.synchronize();
  EXPECT_EQ(st.code(), ErrorCode::kInternal);
  EXPECT_NE(st.message().find("upstream broke"), std::string::npos) << st.to_string();
}

TEST_F(CudaDeviceTest, ALaunchThatThrowsPutsTheStreamInError) {
  auto d = own_device();
  ASSERT_NE(d, nullptr);
  CudaStream& s = d->cuda_compute_stream();
  s.launch([](cudaStream_t) { throw std::runtime_error("launch failed"); });
  const Status st = s.synchronize();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("launch failed"), std::string::npos) << st.to_string();
}

TEST_F(CudaDeviceTest, ManyThreadsLaunchOnOneStream) {
  CudaStream& s = gpu_->cuda_compute_stream();
  auto buffer = gpu_->allocate_tensor(DType::Float32, Shape{4096}).value();
  void* p = buffer.raw_mutable_data();
  for (int threads : kThreadCounts) {
    SCOPED_TRACE(threads);
    std::atomic<int> launched{0};
    std::atomic<int> completed{0};
    run_threads(threads, [&](int) {
      for (int i = 0; i < 200; ++i) {
        s.launch([&, p](cudaStream_t raw) {
          if (cudaMemsetAsync(p, 0, 4096 * sizeof(float), raw) == cudaSuccess) ++launched;
        });
        s.then([&](Status st) {
          if (st.ok()) ++completed;
        });
      }
    });
    ASSERT_TRUE(s.synchronize().ok());
    EXPECT_EQ(launched.load(), threads * 200);
    EXPECT_EQ(completed.load(), threads * 200);
  }
}

TEST_F(CudaDeviceTest, DestructionDrainsQueuedWork) {
  auto d = own_device();
  ASSERT_NE(d, nullptr);
  std::atomic<int> work{0};
  std::atomic<int> callbacks{0};
  Event gate;
  ASSERT_TRUE(gate.mark_recorded().ok());
  CudaStream& s = d->cuda_compute_stream();
  ASSERT_TRUE(s.wait(gate).ok());  // everything below is still queued when the gate opens
  for (int i = 0; i < 100; ++i) {
    s.enqueue([&] { ++work; });
    s.then([&](Status) { ++callbacks; });
  }
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate.complete(Status());
  });
  d.reset();  // drains: waits for the gate, the work and every completion
  opener.join();
  EXPECT_EQ(work.load(), 100);
  EXPECT_EQ(callbacks.load(), 100);
}

// ----- Copies -----

Tensor random_tensor(DType dtype, int64_t n, std::mt19937& gen) {
  Tensor t(dtype, Shape{n});
  auto* bytes = static_cast<unsigned char*>(t.raw_mutable_data());
  if (dtype == DType::Bool) {
    for (int64_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(gen() & 1);
  } else {
    for (std::size_t i = 0; i < t.bytes(); ++i) bytes[i] = static_cast<unsigned char>(gen());
  }
  return t;
}

TEST_F(CudaDeviceTest, CopiesRoundTripFromOneByteTo64MiB) {
  std::mt19937 gen(7);
  const std::vector<int64_t> bytes = {0,       1,           3,           255,         4096,        65537,
                                      kMiB + 7, 2 * kMiB - 1, 2 * kMiB,     2 * kMiB + 1, 8 * kMiB + 1,
                                      24 * kMiB + 5, 64 * kMiB};
  for (int64_t n : bytes) {
    for (DType dtype : {DType::Bool, DType::Int32}) {
      if (dtype == DType::Int32 && n % 4 != 0) continue;
      SCOPED_TRACE(std::to_string(n) + " bytes as " + std::string(dtype_name(dtype)));
      const int64_t elements = dtype == DType::Bool ? n : n / 4;
      Tensor host = random_tensor(dtype, elements, gen);
      auto on_gpu = to_device(*gpu_, host);
      ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().to_string();
      EXPECT_EQ(on_gpu.value().device(), gpu_->name());
      EXPECT_EQ(on_gpu.value().shape(), host.shape());
      auto back = to_host(*gpu_, on_gpu.value());
      ASSERT_TRUE(back.ok()) << back.status().to_string();
      EXPECT_EQ(back.value().device(), kHostDeviceName);
      EXPECT_TRUE(back.value().equals(host));
    }
  }
}

// Small pieces, so that a few MiB make dozens: each copy's pieces are staged (and copied out of
// staging) by several threads at once, from several copying threads, and every byte lands where it
// belongs; with no staging threads the calling and completion threads do it all.
TEST_F(CudaDeviceTest, CopiesCutIntoPiecesForTheStagingThreadsRoundTrip) {
  for (int stagers : {0, 3}) {
    SCOPED_TRACE(std::to_string(stagers) + " staging threads");
    CudaDeviceOptions options;
    options.staging_threads = stagers;
    options.copy_piece_bytes = 64 * 1024;
    auto device = CudaDevice::create(gpu_->ordinal(), options);
    ASSERT_TRUE(device.ok()) << device.status().to_string();
    CudaDevice& gpu = *device.value();
    for (int threads : {1, 4}) {
      std::atomic<int> wrong{0};
      run_threads(threads, [&](int t) {
        std::mt19937 gen(static_cast<unsigned>(100 * stagers + t));
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{65535}, int64_t{65536}, int64_t{65537},
                          int64_t{5 * kMiB + 3}, int64_t{1} + static_cast<int64_t>(gen() % (3 * kMiB))}) {
          Tensor host = random_tensor(DType::Bool, n, gen);
          auto on_gpu = to_device(gpu, host);
          auto back = on_gpu.ok() ? to_host(gpu, on_gpu.value()) : on_gpu;
          if (!back.ok() || !back.value().equals(host)) ++wrong;
        }
      });
      EXPECT_EQ(wrong.load(), 0) << threads << " copying threads";
    }
    EXPECT_EQ(gpu.staging().stats().in_use_bytes, 0);
  }
}

// The calibration's measurement (core/calibration.h caches it): every field measured and in the
// range of any GPU of the last decade, transfers slower than the device's own memory.
TEST_F(CudaDeviceTest, MeasuresItsCostProfile) {
  auto gpu = own_device();
  ASSERT_NE(gpu, nullptr);
  const DeviceCostProfile p = gpu->measure_cost_profile();
  EXPECT_GT(p.flops_per_second, 1e12);
  EXPECT_LT(p.flops_per_second, 1e15);
  EXPECT_GT(p.memory_bandwidth, 1e11);
  EXPECT_LT(p.memory_bandwidth, 2e13);
  EXPECT_GT(p.transfer_bandwidth, 1e9);
  EXPECT_LT(p.transfer_bandwidth, p.memory_bandwidth);
  EXPECT_GT(p.transfer_latency_seconds, 1e-7);
  EXPECT_LT(p.transfer_latency_seconds, 1e-2);
  EXPECT_EQ(gpu->staging().stats().in_use_bytes, 0);
  std::printf("measured: %.1f TFLOP/s, memory %.0f GB/s, transfers %.1f GB/s + %.1f us\n",
              p.flops_per_second / 1e12, p.memory_bandwidth / 1e9, p.transfer_bandwidth / 1e9,
              p.transfer_latency_seconds * 1e6);
}

TEST_F(CudaDeviceTest, CopiesOfEveryDTypeAndShape) {
  std::mt19937 gen(11);
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::Bool}) {
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{3, 5}, Shape{2, 0, 4}, Shape{7, 3, 2}}) {
      Tensor host(dtype, shape);
      auto* p = static_cast<unsigned char*>(host.raw_mutable_data());
      for (std::size_t i = 0; i < host.bytes(); ++i) p[i] = dtype == DType::Bool ? (gen() & 1) : gen();
      auto on_gpu = to_device(*gpu_, host);
      ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().to_string();
      auto back = to_host(*gpu_, on_gpu.value());
      ASSERT_TRUE(back.ok());
      EXPECT_TRUE(back.value().equals(host)) << dtype_name(dtype) << " " << shape.to_string();
    }
  }
}

TEST_F(CudaDeviceTest, CopiesRejectTheWrongMemoryAndForeignStreams) {
  Tensor host = Tensor::vector<float>({1, 2, 3});
  Tensor on_gpu = to_device(*gpu_, host).value();
  auto code_of = [](const StatusOr<Tensor>& r) { return r.status().code(); };
  EXPECT_EQ(code_of(to_device(*gpu_, on_gpu)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(to_host(*gpu_, host)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(to_device(*gpu_, Tensor())), ErrorCode::kInvalidArgument);
  SimDevice sim(0);
  auto foreign = gpu_testing::wait_copy(
      [&](auto done) { gpu_->copy_to_device(host, sim.compute_stream(), std::move(done)); });
  EXPECT_EQ(code_of(foreign), ErrorCode::kInvalidArgument);
}

TEST_F(CudaDeviceTest, CopiesReuseTheirStagingBuffers) {
  // 512 KiB: under kLargeHostBlockMin, so from malloc and never pinned (Note [Pinned host
  // blocks]); a tensor in a large block would be pinned and copied straight, with no staging.
  Tensor host = Tensor::zeros(DType::Float32, Shape{128 * 1024});
  ASSERT_LT(host.bytes(), kLargeHostBlockMin);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(to_device(*gpu_, host).ok());  // warm up
  const auto before = gpu_->staging().stats();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(to_device(*gpu_, host).ok());
  const auto after = gpu_->staging().stats();
  EXPECT_EQ(after.num_pinned_allocs, before.num_pinned_allocs);
  EXPECT_GE(after.reuses - before.reuses, 10);
  EXPECT_EQ(after.in_use_bytes, 0);
}

TEST_F(CudaDeviceTest, ConcurrentCopiesFromManyThreads) {
  for (int threads : kThreadCounts) {
    SCOPED_TRACE(threads);
    std::atomic<int> wrong{0};
    run_threads(threads, [&](int t) {
      std::mt19937 gen(static_cast<unsigned>(t) + 100);
      for (int i = 0; i < 10; ++i) {
        Tensor host = random_tensor(DType::Bool, 1 + static_cast<int64_t>(gen() % (3 * kMiB)), gen);
        auto on_gpu = to_device(*gpu_, host);
        if (!on_gpu.ok()) {
          ++wrong;
          continue;
        }
        auto back = to_host(*gpu_, on_gpu.value());
        if (!back.ok() || !back.value().equals(host)) ++wrong;
      }
    });
    EXPECT_EQ(wrong.load(), 0);
  }
}

// ----- Device memory -----

TEST_F(CudaDeviceTest, TheCachingAllocatorReusesDeviceMemory) {
  CachingAllocator& memory = gpu_->caching_allocator();
  { auto warm = gpu_->allocate_tensor(DType::Float32, Shape{1 << 18}).value(); }
  const auto before = memory.caching_stats();
  for (int i = 0; i < 10; ++i) {
    auto t = gpu_->allocate_tensor(DType::Float32, Shape{1 << 18});
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t.value().device(), gpu_->name());
  }
  const auto after = memory.caching_stats();
  EXPECT_EQ(after.num_backing_allocs, before.num_backing_allocs) << "cudaMalloc called again";
  EXPECT_EQ(after.cache_hits - before.cache_hits, 10);
  cudaPointerAttributes attributes{};
  auto t = gpu_->allocate_tensor(DType::Float32, Shape{16}).value();
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, t.raw_data()), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attributes.device, gpu_->ordinal());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw_data()) % 256, 0u);
}

TEST_F(CudaDeviceTest, EmptyCacheReturnsUnusedRegions) {
  auto d = own_device();
  ASSERT_NE(d, nullptr);
  {
    auto big = d->allocate_tensor(DType::Float32, Shape{8 << 20}).value();  // 32 MiB
  }
  const auto held = d->caching_allocator().caching_stats();
  EXPECT_GE(held.bytes_reserved, static_cast<int64_t>(32 * kMiB));
  EXPECT_GE(d->caching_allocator().empty_cache(), 32 * kMiB);
  EXPECT_EQ(d->caching_allocator().caching_stats().bytes_reserved, 0);
}

TEST_F(CudaDeviceTest, OutOfDeviceMemoryIsResourceExhausted) {
  auto d = own_device();
  ASSERT_NE(d, nullptr);
  const auto elements = static_cast<int64_t>(d->total_memory());  // 4x the GPU's memory as float32
  auto too_big = d->allocate_tensor(DType::Float32, Shape{elements});
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), ErrorCode::kResourceExhausted);
  const Status why = d->caching_allocator().last_backing_error();
  EXPECT_NE(why.message().find("cudaErrorMemoryAllocation"), std::string::npos) << why.to_string();
  // The device is still fine.
  auto small = d->allocate_tensor(DType::Float32, Shape{1024});
  ASSERT_TRUE(small.ok());
  EXPECT_TRUE(to_host(*d, small.value()).ok());
}

}  // namespace
}  // namespace tessera::internal

namespace tessera::internal {
namespace {

// Two GPUs that reach each other's memory copy peer to peer: the bytes arrive, on the
// destination's copy stream, without host memory.
TEST(CudaPeerTest, ATensorCopiesFromOneGpuToAnotherPeerToPeer) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) {
    (void)cudaGetLastError();
    GTEST_SKIP() << "needs two GPUs";
  }
  auto a = CudaDevice::create(0);
  auto b = CudaDevice::create(1);
  ASSERT_TRUE(a.ok() && b.ok());
  if (!b.value()->can_copy_from_peer(*a.value())) GTEST_SKIP() << "GPU 1 cannot reach GPU 0's memory";
  Tensor host(DType::Float32, Shape{1 << 20});
  for (int64_t i = 0; i < host.num_elements(); ++i) host.mutable_data<float>()[i] = static_cast<float>(i % 977);
  auto on_a = tessera::testing::copy_to_device_now(*a.value(), host);
  ASSERT_TRUE(on_a.ok()) << on_a.status().to_string();
  std::promise<StatusOr<Tensor>> got;
  b.value()->copy_from_peer(on_a.value(), *a.value(), b.value()->host_to_device_stream(),
                            [&](StatusOr<Tensor> t) { got.set_value(std::move(t)); });
  auto on_b = got.get_future().get();
  ASSERT_TRUE(on_b.ok()) << on_b.status().to_string();
  EXPECT_EQ(on_b.value().device(), b.value()->name());
  auto back = tessera::testing::copy_to_host_now(*b.value(), on_b.value());
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back.value().equals(host));
}

}  // namespace
}  // namespace tessera::internal
