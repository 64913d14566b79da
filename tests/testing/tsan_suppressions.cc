// ThreadSanitizer's suppressions, linked into every test program (tests/CMakeLists.txt).
//
// libzmq is not instrumented: the lock-free pipes it hands messages over with are invisible to
// TSan, so a race reported with libzmq in one of its stacks (libzmq's I/O thread reading a frame we
// wrote, or writing one we read) is not ours. Programs that use no ZeroMQ never have libzmq in a
// stack, so the suppression costs them nothing. (The `tessera` command has its own copy.)
// OpenBLAS likewise: a large GEMM runs on its own worker threads, handed the operands through its
// uninstrumented queue, so TSan sees them write memory another thread allocated with no order
// between the two. Whether our buffers are intact around a GEMM is what stream_order_test's guard
// patterns check.
// libsodium too: with CURVE, libzmq's I/O thread decrypts each message into the buffer it then
// hands over, inside libsodium, whose frames are all a report's stack shows of that write.
// TESSERA_TSAN: set by the tsan preset (CMakeLists.txt), which takes GCC's __SANITIZE_THREAD__ back.
#if defined(TESSERA_TSAN)
extern "C" const char* __tsan_default_suppressions() {
  return "race:libzmq.so\nrace:libopenblas.so\nrace:libsodium.so\n";
}
#endif
