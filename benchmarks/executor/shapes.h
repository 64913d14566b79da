// The graph shapes both executor impls build (tessera.cc, tbb.cc), and what the chain's variants
// do around each run.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

namespace executor_bench {

inline constexpr int kOps = 10000;  // ops per graph: wide (independent) or chained
// The long chain: its plan (tessera) or its nodes (TBB) are tens of MiB, past any core's caches,
// so each run reads them from memory (benchmarks/README.md, "executor_chain_10k and the machine").
inline constexpr int kLongOps = 300000;
// A cold run: before each (untimed), this many bytes are written, which pushes the graph out of
// the caches (more than the last level of the VMs measured).
inline constexpr std::size_t kEvictBytes = std::size_t{64} << 20;
// Cold runs per repetition: each is preceded by writing kEvictBytes, which takes far longer
// than the run. Read them on a quiet machine: beside other work the scheduler tends to preempt
// the thread just after the eviction used up its share, and real time then measures the wait.
inline constexpr int kColdRuns = 50;

// Writes a line of every 64 bytes of a kEvictBytes buffer.
inline void evict_caches() {
  static std::vector<char> junk(kEvictBytes);
  for (std::size_t i = 0; i < junk.size(); i += 64) junk[i] = static_cast<char>(junk[i] + 1);
  benchmark::ClobberMemory();
}

// Times `run` once per iteration; cold: each after evict_caches(), outside the timing.
template <class Fn>
void time_runs(benchmark::State& state, bool cold, Fn&& run) {
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      evict_caches();
      state.ResumeTiming();
    }
    run();
  }
}

// The chain's variants, as both impls register them.
struct ChainVariant {
  const char* name;
  int ops;
  bool cold;
};
inline constexpr ChainVariant kChain10k{"BM_executor_chain_10k", kOps, false};
inline constexpr ChainVariant kChains[] = {
    kChain10k, {"BM_executor_chain_300k", kLongOps, false}, {"BM_executor_chain_10k_cold", kOps, true}};

// Registers `<variant name>/<impl>`, which runs chain(state, impl, variant.ops, variant.cold).
using ChainFn = void (*)(benchmark::State& state, const char* impl, int ops, bool cold);
inline void register_chain(const ChainVariant& v, const char* impl, ChainFn chain) {
  benchmark::internal::Benchmark* b =
      benchmark::RegisterBenchmark((std::string(v.name) + "/" + impl).c_str(), [v, impl, chain](benchmark::State& state) {
        chain(state, impl, v.ops, v.cold);
      });
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
  if (v.cold) b->Iterations(kColdRuns);
}

}  // namespace executor_bench
