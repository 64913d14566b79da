// Soak: 8 client threads drive a ps and two worker processes for TESSERA_SOAK_SECONDS (default
// 60) and the cluster must stay healthy: no failed run, every process's peak resident memory in
// the second half within 10% of the first half's, and no file descriptor growth. Labelled `soak`
// (scripts/check-all runs it; the default test presets leave it out: it takes a minute).
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "host/child_process.h"
#include "tessera/server_process.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

int open_fds(pid_t pid) {
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (::readdir(d) != nullptr) ++n;
  ::closedir(d);
  return n - 2;  // . and ..
}

int soak_seconds() {
  const char* s = std::getenv("TESSERA_SOAK_SECONDS");
  const int v = s != nullptr ? std::atoi(s) : 60;
  return v > 0 ? v : 60;
}

TEST(ClusterSoakTest, EightClientsTwoWorkersStayHealthy) {
  const std::vector<std::string> addresses = {train::free_loopback_address(), train::free_loopback_address(),
                                              train::free_loopback_address()};
  const std::string cluster = "{\"ps\": [\"" + addresses[0] + "\"], \"worker\": [\"" + addresses[1] + "\", \"" +
                              addresses[2] + "\"]}";
  std::vector<std::unique_ptr<internal::ChildProcess>> tasks;
  for (int i = 0; i < 3; ++i) {
    tasks.push_back(std::make_unique<internal::ChildProcess>(std::vector<std::string>{
        TESSERA_CLI_PATH, "server", "--cluster", cluster, "--job", i == 0 ? "ps" : "worker", "--task",
        std::to_string(i == 0 ? 0 : i - 1)}));
    auto line = tasks.back()->read_line(60s);
    ASSERT_TRUE(line && line->find("listening") != std::string::npos) << tasks.back()->stderr_text();
  }

  // Each client: its own graph and session on worker (t % 2); a step reads a ps variable, computes
  // on the worker, pulls a tensor from the other worker, and updates the ps variable.
  struct Client {
    Graph g;
    Variable counter;
    Operation step;
    std::unique_ptr<Session> s;
  };
  constexpr int kClients = 8;
  std::vector<std::unique_ptr<Client>> clients;
  for (int t = 0; t < kClients; ++t) {
    auto c = std::make_unique<Client>();
    {
      auto ps = c->g.device("/job:ps/task:0");
      c->counter = Variable(c->g, Tensor::scalar<int64_t>(0), "counter");
    }
    Output remote;
    {
      auto other = c->g.device("/job:worker/task:" + std::to_string(1 - t % 2));
      remote = ops::reduce_sum(ops::random_uniform(c->g, {64, 64}, DType::Float32, static_cast<uint64_t>(t) + 1));
    }
    auto local = ops::matmul(ops::random_uniform(c->g, {64, 64}), ops::random_uniform(c->g, {64, 64}));
    auto checked = ops::add(ops::reduce_sum(local), remote);
    auto bump = c->counter.assign_add(ops::constant(c->g, Tensor::scalar<int64_t>(1)));
    c->step = ops::group({bump.op(), checked.op()});
    c->s = std::make_unique<Session>(c->g, "tessera://" + addresses[1 + t % 2]);
    clients.push_back(std::move(c));
  }
  clients[0]->s->run(clients[0]->counter.initializer());

  const int seconds = soak_seconds();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> runs{0}, errors{0};
  std::vector<std::thread> threads;
  for (auto& c : clients) {
    threads.emplace_back([&, c = c.get()] {
      while (!stop.load()) {
        try {
          c->s->run(c->step);
          runs++;
        } catch (const Error& e) {
          if (errors++ < 5) std::fprintf(stderr, "soak: %s\n", e.what());
        }
      }
    });
  }
  // Sample every process (this one too) once a second.
  struct Samples {
    std::vector<long> rss;
    std::vector<int> fds;
  };
  std::vector<pid_t> pids = {::getpid()};
  for (auto& t : tasks) pids.push_back(t->pid());
  std::vector<Samples> samples(pids.size());
  const auto start = Clock::now();
  while (Clock::now() - start < std::chrono::seconds(seconds)) {
    std::this_thread::sleep_for(1s);
    for (std::size_t p = 0; p < pids.size(); ++p) {
      samples[p].rss.push_back(rss_kib(pids[p]));
      samples[p].fds.push_back(open_fds(pids[p]));
    }
  }
  stop = true;
  for (auto& t : threads) t.join();

  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(runs.load(), 0);
  // Every update landed on the ps exactly once.
  EXPECT_EQ(clients[0]->s->run(clients[0]->counter.value()).scalar<int64_t>(), runs.load());
  const char* names[] = {"client", "ps", "worker 0", "worker 1"};
  std::printf("soak: %d s, %lld runs (%.0f/s), %lld errors\n", seconds, static_cast<long long>(runs.load()),
              static_cast<double>(runs.load()) / seconds, static_cast<long long>(errors.load()));
  for (std::size_t p = 0; p < pids.size(); ++p) {
    const auto& r = samples[p].rss;
    const auto& f = samples[p].fds;
    ASSERT_GE(r.size(), 2u);
    const std::size_t half = r.size() / 2;
    const long first = *std::max_element(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(half));
    const long second = *std::max_element(r.begin() + static_cast<std::ptrdiff_t>(half), r.end());
    const int fds_first = *std::max_element(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(half));
    const int fds_last = f.back();
    std::printf("soak: %-8s peak RSS first half %ld KiB, second half %ld KiB (%+.1f%%); fds %d -> %d\n", names[p],
                first, second, 100.0 * (second - first) / first, fds_first, fds_last);
    EXPECT_LE(second, first + first / 10) << names[p] << ": resident memory grew";
    EXPECT_LE(fds_last, fds_first) << names[p] << ": file descriptors grew";
  }
  for (auto& c : clients) c->s->close();
  clients.clear();
  for (auto& t : tasks) t->signal(SIGTERM);
  for (auto& t : tasks) t->wait_exit(5s);
}

}  // namespace
}  // namespace tessera
