#include "tests/testing/test_util.h"

#include "host/child_process.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace tessera::testing {

void run_threads(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) threads.emplace_back(body, i);
  for (auto& t : threads) t.join();
}

bool wait_until(const std::function<bool()>& cond, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return cond();
}

namespace {

// Entries of a /proc directory, without "." and "..".
int count_entries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n;
}

}  // namespace

int threads_of(int pid) { return count_entries("/proc/" + std::to_string(pid) + "/task"); }

int open_fds(int pid) { return count_entries("/proc/" + std::to_string(pid) + "/fd"); }

long proc_status_kib(int pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  const std::string key = field + ":";
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::strtol(line.c_str() + key.size(), nullptr, 10);
  }
  return -1;
}

long rss_kib(int pid) { return proc_status_kib(pid, "VmRSS"); }

std::optional<std::string> probe_line(internal::ChildProcess& probe, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (auto now = std::chrono::steady_clock::now(); now < until; now = std::chrono::steady_clock::now()) {
    std::optional<std::string> line =
        probe.read_line(std::chrono::duration_cast<std::chrono::milliseconds>(until - now));
    if (!line) return std::nullopt;
    if (line->rfind("probe:", 0) == 0) return line;
  }
  return std::nullopt;
}

std::vector<std::string> environment_without_malloc_settings() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    if (var.rfind("GLIBC_TUNABLES=", 0) != 0 && var.rfind("MALLOC_", 0) != 0 &&
        var.rfind("TESSERA_MALLOC_TUNING=", 0) != 0) {
      env.push_back(var);
    }
  }
  return env;
}

void TempDirTest::SetUp() {
  dir_ = std::filesystem::temp_directory_path() /
         (prefix_ + "_" + std::to_string(::getpid()) + "_" +
          ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
}

void TempDirTest::TearDown() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void expect_share_refused(Session& s, const QueueBase& a, const QueueBase& b, const std::string& what) {
  s.run(a.op());
  EXPECT_THROW_MSG(s.run(b.op()), InvalidArgumentError, what);
  EXPECT_THROW_MSG(s.run(b.size()), InvalidArgumentError, what);
}

std::vector<std::string> random_parts(std::mt19937& rng, std::size_t max_size) {
  std::vector<std::string> parts(1 + rng() % 4);
  for (auto& p : parts) {
    p.resize(rng() % max_size);
    for (auto& c : p) c = static_cast<char>(rng());
  }
  return parts;
}

}  // namespace tessera::testing
