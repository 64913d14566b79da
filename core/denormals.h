// Kernels run with denormal floats flushed to zero: see Note [Denormals flushed].
#pragma once

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#define TESSERA_FLUSHES_DENORMALS 1
#elif defined(__aarch64__)
#include <cstdint>
#define TESSERA_FLUSHES_DENORMALS 1
#else
#define TESSERA_FLUSHES_DENORMALS 0
#endif

namespace tessera::internal {

// Note [Denormals flushed]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Every kernel runs with the CPU's denormal (subnormal) floats flushed to zero, results and
// operands alike (x86: MXCSR's FTZ and DAZ bits; AArch64: FPCR.FZ), as TensorFlow runs its
// kernels (port::ScopedFlushDenormal on every thread of its pools and around kernels it runs on
// the caller's thread). Arithmetic that meets a denormal operand or result takes a microcode assist on x86,
// about 100 cycles instead of 1: Adam's moments decay into denormals for every weight whose
// gradient stays zero (a pixel that is zero in every image, a dead ReLU unit), and the update of
// such weights cost 105 ns per element against 1.6 (a standalone loop of ApplyAdam's rule, 17,226
// elements); in the digits MLP that was most of the update's time. Values below 2^-126 (float) or
// 2^-1022 (double) become zero, as in TensorFlow.
//
// Where: RunState::run_loop (every kernel a step runs, on whichever thread runs it: the guard
// below, restoring the caller's mode when the loop returns, because that thread may be the
// user's), and for good on the threads tessera owns that run kernels' work outside that loop (the
// thread pools' workers, the simulated accelerator's stream threads).

#if defined(__aarch64__)
inline uint64_t read_fpcr() {
  uint64_t v;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(v));
  return v;
}
inline void write_fpcr(uint64_t v) { __asm__ __volatile__("msr fpcr, %0" : : "r"(v)); }
#endif

// Flushes denormals on this thread from now on (a thread tessera owns).
inline void flush_denormals_on_this_thread() {
#if defined(__SSE__) || defined(__x86_64__)
  _mm_setcsr(_mm_getcsr() | 0x8040u);  // FTZ (bit 15) and DAZ (bit 6)
#elif defined(__aarch64__)
  write_fpcr(read_fpcr() | (uint64_t{1} << 24));  // FZ
#endif
}

// Flushes denormals on this thread while in scope, then restores the thread's mode. Reading the
// mode is cheap; it is written only when it changes (about 3 ns a write and its restore on x86).
class ScopedFlushDenormals {
 public:
#if defined(__SSE__) || defined(__x86_64__)
  ScopedFlushDenormals() : saved_(_mm_getcsr()) {
    if ((saved_ & kBits) != kBits) _mm_setcsr(saved_ | kBits);
  }
  ~ScopedFlushDenormals() {
    if ((saved_ & kBits) != kBits) _mm_setcsr(saved_);
  }

 private:
  static constexpr unsigned kBits = 0x8040u;
  const unsigned saved_;
#elif defined(__aarch64__)
  ScopedFlushDenormals() : saved_(read_fpcr()) {
    if ((saved_ & kBits) == 0) write_fpcr(saved_ | kBits);
  }
  ~ScopedFlushDenormals() {
    if ((saved_ & kBits) == 0) write_fpcr(saved_);
  }

 private:
  static constexpr uint64_t kBits = uint64_t{1} << 24;
  const uint64_t saved_;
#else
  ScopedFlushDenormals() = default;  // no known control register: nothing to do
#endif
 public:
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;
};

}  // namespace tessera::internal
