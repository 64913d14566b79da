// Kernels run with denormal floats flushed to zero: see Note [Denormals flushed].
#pragma once

#include <cstdint>

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace tessera::internal {

// Note [Denormals flushed]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Every kernel runs with the CPU's denormal (subnormal) floats flushed to zero, results and
// operands alike (x86: MXCSR's FTZ and DAZ bits; AArch64: FPCR.FZ), as TensorFlow runs its
// kernels (port::ScopedFlushDenormal on every thread of its pools and around kernels it runs on
// the caller's thread). Arithmetic that meets a denormal operand or result takes a microcode
// assist on x86, about 100 cycles instead of 1: Adam's moments decay into denormals for every weight whose
// gradient stays zero (a pixel that is zero in every image, a dead ReLU unit), and the update of
// such weights cost 105 ns per element against 1.6 (a standalone loop of ApplyAdam's rule, 17,226
// elements); in the digits MLP that was most of the update's time. Values below 2^-126 (float) or
// 2^-1022 (double) become zero, as in TensorFlow.
//
// Where: RunState::run_loop (every kernel a step runs, on whichever thread runs it: the guard
// below, restoring the caller's mode when the loop returns, because that thread may be the
// user's), and for good on the threads tessera owns that run kernels' work outside that loop (the
// thread pools' workers, the simulated accelerator's stream threads).

// The thread's floating-point mode register and the bits of it that flush denormals; a CPU without
// known ones has none (nothing is written).
#if defined(__SSE__) || defined(__x86_64__)
using FpMode = unsigned;
inline constexpr FpMode kFlushDenormalBits = 0x8040u;  // MXCSR: FTZ (bit 15) and DAZ (bit 6)
inline FpMode read_fp_mode() { return _mm_getcsr(); }
inline void write_fp_mode(FpMode mode) { _mm_setcsr(mode); }
#elif defined(__aarch64__)
using FpMode = uint64_t;
inline constexpr FpMode kFlushDenormalBits = uint64_t{1} << 24;  // FPCR: FZ
inline FpMode read_fp_mode() {
  FpMode mode;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(mode));
  return mode;
}
inline void write_fp_mode(FpMode mode) { __asm__ __volatile__("msr fpcr, %0" : : "r"(mode)); }
#else
using FpMode = unsigned;
inline constexpr FpMode kFlushDenormalBits = 0;
inline FpMode read_fp_mode() { return 0; }
inline void write_fp_mode(FpMode) {}
#endif

// Flushes denormals on this thread from now on (a thread tessera owns).
inline void flush_denormals_on_this_thread() { write_fp_mode(read_fp_mode() | kFlushDenormalBits); }

// Flushes denormals on this thread while in scope, then restores the thread's mode. Reading the
// mode is cheap; it is written only when it changes (about 3 ns a write and its restore on x86).
class ScopedFlushDenormals {
 public:
  ScopedFlushDenormals() : saved_(read_fp_mode()) {
    if (changes()) write_fp_mode(saved_ | kFlushDenormalBits);
  }
  ~ScopedFlushDenormals() {
    if (changes()) write_fp_mode(saved_);
  }
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

 private:
  bool changes() const { return (saved_ & kFlushDenormalBits) != kFlushDenormalBits; }
  const FpMode saved_;
};

}  // namespace tessera::internal
