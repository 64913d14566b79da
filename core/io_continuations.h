// Continuations an I/O thread runs itself instead of waking another thread for them.
//
//   // The I/O thread, around each completion it delivers:
//   {
//     IoCompletionScope scope;
//     done(std::move(reply));   // may call defer_to_io_thread(fn) somewhere down its path
//   }                           // fn runs here, on this thread, after done returned
//
// See Note [Continuations on I/O threads].
#pragma once

#include <functional>
#include <vector>

namespace tessera::internal {

// Note [Continuations on I/O threads]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An asynchronous kernel that waits on the network (a _Recv pulling from another task) completes
// on the RPC channel's I/O thread. Handing its continuation to the pool cost a pool thread's
// wake-up per message: the hop that held the runtime's small pulls at 0.67-0.71 of raw ZeroMQ
// (benchmarks/README.md, "Figures behind the transport's notes"). So the I/O thread offers to
// run it. Around each completion it delivers it opens an IoCompletionScope; a continuation handed
// to defer_to_io_thread inside it runs on this thread when the scope closes, after the
// completion returned. There the I/O thread's stack holds no lock of the completion's path, so
// the continuation may take any lock that path took.
// Bounds, so that one message's continuation cannot stall the thread that serves the others:
// * Only what a completion defers is taken. While deferred continuations run, the thread
//   refuses more: an enqueue there that wakes another step's dequeue hands that step to the
//   pool, as any other thread does.
// * The executor runs only cheap nodes on the I/O thread, at most kIoContinuationNodes of them,
//   and hands expensive nodes, the rest of its work and a run_async step's end on (Note [Async
//   kernels] in core/executor.cc).
// * Device partitions never defer: their nodes issue stream work.

// While alive, this thread takes continuations (defer_to_io_thread); the destructor runs them,
// in the order they came, each to its end (one that throws is logged and the next still runs).
// Nests: an inner scope runs its own continuations and restores the outer one's.
class IoCompletionScope {
 public:
  IoCompletionScope();
  ~IoCompletionScope();
  IoCompletionScope(const IoCompletionScope&) = delete;
  IoCompletionScope& operator=(const IoCompletionScope&) = delete;

 private:
  std::vector<std::function<void()>> deferred_;
  std::vector<std::function<void()>>* outer_;  // the enclosing scope's, restored by the destructor
};

// Inside an IoCompletionScope (and not inside a continuation it is running): takes `fn`, to run
// when the scope closes, and returns true. Anywhere else returns false and leaves `fn` alone.
bool defer_to_io_thread(std::function<void()>& fn);

}  // namespace tessera::internal
