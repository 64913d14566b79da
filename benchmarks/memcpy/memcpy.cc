// Workload memcpy, impl memcpy: host memory bandwidth, one thread, std::memcpy of 64 MiB between
// two buffers that were written (so faulted in) before timing. Not a tessera workload: the
// yardstick the suite prints beside the transport figures.
//
//   BM_memcpy_64MiB/memcpy   bytes_per_second = bytes copied per second (each byte is read once
//                            and written once, so the memory traffic is twice that)
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "common/bench_common.h"

namespace {

constexpr std::size_t kBytes = std::size_t{64} << 20;

void BM_memcpy_64MiB(benchmark::State& state, const char* impl) {
  tessera_bench::set_impl(state, impl);
  auto src = std::make_unique<uint32_t[]>(kBytes / 4);
  auto dst = std::make_unique<uint32_t[]>(kBytes / 4);
  for (std::size_t i = 0; i < kBytes / 4; ++i) {
    src[i] = static_cast<uint32_t>(i * 2654435761u);
    dst[i] = 0;
  }
  // Checked once: the copy is exact.
  std::memcpy(dst.get(), src.get(), kBytes);
  if (!tessera_bench::check(state, std::memcmp(dst.get(), src.get(), kBytes) == 0, "copy differs")) return;
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), kBytes);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kBytes));
}

}  // namespace

BENCHMARK_CAPTURE(BM_memcpy_64MiB, memcpy, "memcpy")->UseRealTime()->Unit(benchmark::kMillisecond);
