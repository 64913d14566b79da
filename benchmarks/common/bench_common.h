// Helpers shared by the benchmark programs (header only; benchmarks/common has no CMakeLists.txt,
// so it is not a workload folder).
//
// Conventions every benchmark follows (the suite runner and the README rely on them):
//   * name "BM_<workload>/<impl>[/...]", e.g. BM_session_run_add/tessera/real_time;
//   * the label is the impl ("tessera", "tbb", "mutex_queue", "mutex");
//   * graphs and other fixtures are built outside the timing loop, warmed up, and their result is
//     checked once before anything is timed (a wrong result skips the benchmark with an error).
#pragma once

#include <string>

#include <benchmark/benchmark.h>

namespace tessera_bench {

// Marks the run as `impl` (label) so the runner can tell ours from the baseline.
inline void set_impl(benchmark::State& state, const char* impl) { state.SetLabel(impl); }

// Checks a result before timing; on failure skips the benchmark with `what` and returns false.
inline bool check(benchmark::State& state, bool ok, const std::string& what) {
  if (!ok) state.SkipWithError(("correctness check failed: " + what).c_str());
  return ok;
}

// A counter of seconds per unit of work (`units` per iteration, all threads together), as an
// inverted rate: shown as e.g. "25.1n" = 25.1 ns per unit. Counters are summed over benchmark
// threads and multiplied by the total iteration count, hence the division by threads().
inline benchmark::Counter per_unit(const benchmark::State& state, double units) {
  return benchmark::Counter(units / state.threads(),
                            benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// Reports `units` of work per iteration: items per second, and the per_op counter (per_unit).
inline void report_per_op(benchmark::State& state, int64_t units) {
  state.SetItemsProcessed(state.iterations() * units);
  state.counters["per_op"] = per_unit(state, static_cast<double>(units));
}

}  // namespace tessera_bench
