// The seed's multithreading example, made correct.
//
// In the original, every thread opened its own Session and the queue had no QueueRunner, so
// nothing ever filled it. Here one session is shared by all threads (Session::run is thread-safe),
// input_producer registers a QueueRunner that enqueues the rows of c, and the Coordinator stops and
// joins every thread, re-raising the first real error.
#include <mutex>
#include <set>
#include <thread>

#include "examples/examples.h"
#include "tessera/tessera.h"

namespace tessera::examples {

int queue_add(std::ostream& out, bool log_placement) {
  Graph g;
  auto a = ops::constant(g, Tensor::vector<int32_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}), "a");
  auto b = ops::constant(g, 2, "b");
  auto c = ops::add(a, b, "c");  // broadcasts: c = [3 .. 12]
  // One epoch, in order; the queue closes after the last row.
  FIFOQueue queue = train::input_producer(c, /*num_epochs=*/1, /*shuffle=*/false, /*capacity=*/4);
  Output element = queue.dequeue()[0];

  Session session(g);
  train::Coordinator coord;
  std::vector<std::thread> threads = train::start_queue_runners(session, coord);

  std::mutex mu;
  std::multiset<int32_t> seen;
  std::set<int> takers;  // the threads that got at least one result
  for (int t = 0; t < 10; ++t) {
    threads.emplace_back([&, t] {
      coord.stop_on_exception([&] {
        while (!coord.should_stop()) {
          int32_t v = session.run(element).scalar<int32_t>();  // OutOfRangeError once drained
          std::lock_guard<std::mutex> l(mu);
          seen.insert(v);
          takers.insert(t);
          out << "thread " << t << ": result " << v << "\n";
        }
      });
    });
  }
  coord.join(threads);  // the reader threads end at OutOfRange, which requests the stop
  std::multiset<int32_t> expected;
  for (int i = 3; i <= 12; ++i) expected.insert(i);
  // Which threads win the dequeues is the scheduler's call: on 2 cores one thread may take most.
  out << "queue_add: " << seen.size() << " results dequeued by " << takers.size() << " of the 10 threads, "
      << (seen == expected ? "each of 3..12 exactly once" : "WRONG") << "\n";
  report_placement(out, g, log_placement);
  return seen == expected ? 0 : 1;
}

}  // namespace tessera::examples
