// The graph shapes both executor impls build (tessera.cc, tbb.cc).
#pragma once

namespace executor_bench {
inline constexpr int kOps = 10000;  // ops per graph: wide (independent) or chained
}  // namespace executor_bench
