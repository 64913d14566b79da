// The seed's distributed example, made correct: a two-task cluster, ops pinned to each task, and
// ten threads calling run on one session whose target is task 0.
#include <atomic>
#include <thread>

#include <fmt/format.h>

#include "examples/examples.h"
#include "tessera/tessera.h"

namespace tessera::examples {

int seed_cluster(std::ostream& out, bool log_placement) {
  // Both tasks in this process, on ports the system picks (the addresses a ClusterSpec lists must
  // be known first: take two free ones from local servers, then serve the cluster there).
  std::vector<std::string> addresses;
  for (int i = 0; i < 2; ++i) {
    auto probe = train::Server::create_local_server();
    addresses.push_back(probe.target().substr(std::string("tessera://").size()));
  }
  train::ClusterSpec cluster({{"local", addresses}});
  train::Server task0(cluster, "local", 0);
  train::Server task1(cluster, "local", 1);
  out << "cluster " << cluster.to_json() << "\n";

  Graph g;
  auto x = ops::constant(g, Tensor::scalar<int32_t>(2), "x");
  Output y1, y2, y;
  {
    auto scope = g.device("/job:local/task:1");
    y2 = ops::sub(x, ops::constant(g, Tensor::scalar<int32_t>(66)), "y2");
  }
  {
    auto scope = g.device("/job:local/task:0");
    y1 = ops::add(x, ops::constant(g, Tensor::scalar<int32_t>(300)), "y1");
    y = ops::add(y1, y2, "y");
  }
  Session session(g, task0.target());
  std::atomic<int> right{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 10; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) (session.run(y).scalar<int32_t>() == 238 ? right : wrong)++;
    });
  }
  for (auto& t : threads) t.join();
  out << fmt::format("y = (x + 300) + (x - 66) with x = 2: y2 on /job:local/task:1, y1 and y on task 0; "
                     "10 threads x 10 runs on {}: {} right (238), {} wrong\n",
                     task0.target(), right.load(), wrong.load());
  report_placement(out, g, log_placement);
  return wrong.load() == 0 && right.load() == 100 ? 0 : 1;
}

}  // namespace tessera::examples
