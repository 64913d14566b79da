// CPU kernels of the reader ops (core/reader_ops.cc): the TextLineReader resource and
// ReaderReadV2, which reads one line with it, dequeuing file names from a queue as files end.
//
// Note [Reader waits]
// A read that needs a new file dequeues a name with QueueResource::try_dequeue, which calls back
// instead of blocking: like the queue kernels, ReaderReadV2 is asynchronous and holds no pool
// thread while the filename queue is empty. The reader serves reads in arrival order (its
// `waiters_`); one dequeue is outstanding at a time, made with the cancellation manager of the
// read at the head (its "owner"), so a run timeout or a session close ends that wait through the
// queue. A read behind the head ends through its own manager (registered with the reader). Lines
// are read under the reader's lock, so each goes to exactly one read; callbacks run outside it.
// A failed dequeue (the queue closed and empty: OutOfRangeError) fails the owner's read only; the
// next read dequeues again, and fails the same way.
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/op_kernel.h"
#include "core/op_registry.h"
#include "kernels/queue_resource.h"

namespace tessera::internal {
namespace {

// Lines of one file through zlib (gzip decompressed, anything else as it is). Not synchronized.
class LineFile {
 public:
  LineFile() = default;
  LineFile(const LineFile&) = delete;
  LineFile& operator=(const LineFile&) = delete;
  ~LineFile() { close(); }

  Status open(const std::string& path) {
    close();
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr) {
      const int err = errno;
      if (err == ENOENT) return errors::not_found("file '{}' not found", path);
      return errors::invalid_argument("cannot open file '{}': {}", path, err != 0 ? std::strerror(err) : "out of memory");
    }
    path_ = path;
    line_ = 0;
    return Status();
  }
  bool is_open() const { return file_ != nullptr; }
  void close() {
    if (file_ != nullptr) gzclose(file_);
    file_ = nullptr;
  }
  const std::string& path() const { return path_; }
  int64_t line_number() const { return line_; }

  // The next line without its "\n" or "\r\n" into *line: true, or false at the end of the file.
  StatusOr<bool> next(std::string* line) {
    line->clear();
    char buf[4096];
    bool any = false;
    while (gzgets(file_, buf, sizeof buf) != nullptr) {
      any = true;
      const std::size_t n = std::strlen(buf);
      line->append(buf, n);
      if (n > 0 && buf[n - 1] == '\n') break;
    }
    int code = Z_OK;
    const char* message = gzerror(file_, &code);
    if (code != Z_OK && code != Z_STREAM_END) {
      return Status(ErrorCode::kDataLoss, fmt::format("cannot read file '{}' after line {}: {}", path_, line_,
                                                      code == Z_ERRNO ? std::strerror(errno) : message));
    }
    if (!any) return false;
    if (!line->empty() && line->back() == '\n') line->pop_back();
    if (!line->empty() && line->back() == '\r') line->pop_back();
    ++line_;
    return true;
  }

 private:
  gzFile file_ = nullptr;
  std::string path_;
  int64_t line_ = 0;
};

// A TextLineReader's state in a session (Note [Reader waits]). Owned by a std::shared_ptr.
class TextLineReaderResource : public ResourceBase, public std::enable_shared_from_this<TextLineReaderResource> {
 public:
  // (status, key, value)
  using ReadCallback = std::function<void(const Status&, std::string, std::string)>;

  explicit TextLineReaderResource(int64_t skip_header_lines) : skip_(skip_header_lines) {}

  std::string debug_string() const override {
    std::lock_guard<std::mutex> l(mu_);
    return fmt::format("TextLineReader ({}, {} reads waiting)",
                       file_.is_open() ? fmt::format("at {}:{}", file_.path(), file_.line_number()) : "no file",
                       waiters_.size());
  }

  int64_t skip_header_lines() const { return skip_; }

  void read(std::shared_ptr<QueueResource> queue, CancellationManager* cm, ReadCallback done) {
    std::unique_lock<std::mutex> l(mu_);
    const uint64_t id = next_id_++;
    CancellationManager::Token token = CancellationManager::kInvalidToken;
    if (cm != nullptr) {
      token = cm->register_callback([self = shared_from_this(), id](const Status& reason) { self->cancel(id, reason); });
      if (token == CancellationManager::kInvalidToken) {
        l.unlock();
        return done(cm->reason(), "", "");
      }
    }
    waiters_.push_back(Waiter{id, cm, token, std::move(done)});
    pump(std::move(l), std::move(queue));
  }

  void cancel_all(const Status& reason) override {
    std::vector<Finished> finished;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto it = waiters_.begin(); it != waiters_.end();) {
        if (dequeuing_ && it->id == owner_) {
          ++it;  // its dequeue ends through the queue
          continue;
        }
        finished.push_back(Finished{std::move(*it), reason, "", ""});
        it = waiters_.erase(it);
      }
    }
    finish(finished);
  }

 private:
  struct Waiter {
    uint64_t id;
    CancellationManager* cm;
    CancellationManager::Token token;
    ReadCallback done;
  };
  struct Finished {
    Waiter waiter;
    Status status;
    std::string key;
    std::string value;
  };

  static void finish(std::vector<Finished>& finished) {
    for (Finished& f : finished) {
      if (f.waiter.cm != nullptr) f.waiter.cm->deregister_callback(f.waiter.token);
      f.waiter.done(f.status, std::move(f.key), std::move(f.value));
    }
  }

  // A read behind the head (or the head, while no dequeue is outstanding) ends with `reason`.
  void cancel(uint64_t id, const Status& reason) {
    std::vector<Finished> finished;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (dequeuing_ && id == owner_) return;  // the queue ends its dequeue with the same reason
      for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
        if (it->id != id) continue;
        finished.push_back(Finished{std::move(*it), reason, "", ""});
        waiters_.erase(it);
        break;
      }
    }
    finish(finished);
  }

  // Serves waiting reads from the open file; when it ends and reads still wait, dequeues the next
  // file name (once at a time). Called with `l` held; releases it.
  void pump(std::unique_lock<std::mutex> l, std::shared_ptr<QueueResource> queue) {
    std::vector<Finished> finished;
    std::string line;
    while (!waiters_.empty() && file_.is_open()) {
      auto got = file_.next(&line);
      if (!got.ok() || !got.value()) {
        file_.close();
        if (!got.ok()) {  // the read that met the error reports it; the file is dropped
          finished.push_back(Finished{std::move(waiters_.front()), got.status(), "", ""});
          waiters_.pop_front();
        }
        continue;
      }
      finished.push_back(
          Finished{std::move(waiters_.front()), Status(), fmt::format("{}:{}", file_.path(), file_.line_number()), line});
      waiters_.pop_front();
    }
    const bool dequeue = !waiters_.empty() && !dequeuing_;
    CancellationManager* cm = nullptr;
    if (dequeue) {
      dequeuing_ = true;
      owner_ = waiters_.front().id;
      cm = waiters_.front().cm;
    }
    l.unlock();
    finish(finished);
    if (!dequeue) return;
    // May call back at once, on this thread (not holding mu_).
    queue->try_dequeue(cm, [self = shared_from_this(), queue](const Status& s, std::vector<QueueResource::Tuple> got) {
      self->on_file_name(s, std::move(got), queue);
    });
  }

  void on_file_name(const Status& s, std::vector<QueueResource::Tuple> got, std::shared_ptr<QueueResource> queue) {
    std::unique_lock<std::mutex> l(mu_);
    dequeuing_ = false;
    Status failed = s;
    if (failed.ok()) {
      const Tensor& name = got.at(0).at(0);
      if (name.dtype() != DType::String || name.num_elements() != 1) {
        failed = errors::invalid_argument("the filename queue gave a {} {}, not a string scalar",
                                          dtype_name(name.dtype()), name.shape().to_string());
      } else {
        failed = open(name.data<std::string>()[0]);
      }
    }
    if (!failed.ok()) {
      // The owner's read fails (it is still the head: reads behind it were not served).
      std::vector<Finished> finished;
      for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
        if (it->id != owner_) continue;
        finished.push_back(Finished{std::move(*it), failed, "", ""});
        waiters_.erase(it);
        break;
      }
      l.unlock();
      finish(finished);
      l.lock();
    }
    pump(std::move(l), std::move(queue));
  }

  // Opens `path` and skips its header lines. Called with mu_ held.
  Status open(const std::string& path) {
    TESSERA_RETURN_IF_ERROR(file_.open(path));
    std::string line;
    for (int64_t i = 0; i < skip_; ++i) {
      auto got = file_.next(&line);
      if (!got.ok()) {
        file_.close();
        return got.status();
      }
      if (!got.value()) break;  // shorter than its header: nothing to read
    }
    return Status();
  }

  const int64_t skip_;
  mutable std::mutex mu_;
  LineFile file_;                 // guarded by mu_
  std::deque<Waiter> waiters_;    // guarded by mu_: reads in arrival order
  bool dequeuing_ = false;        // guarded by mu_: a file name dequeue is outstanding
  uint64_t owner_ = 0;            // guarded by mu_: the read whose manager that dequeue uses
  uint64_t next_id_ = 0;          // guarded by mu_
};

// "TextLineReaderV2": makes the reader in this session's resources when run (the client session's
// own on a cluster task: a reader has no shared name, Note [Private resources]).
StatusOr<std::shared_ptr<TextLineReaderResource>> get_reader(OpKernelContext& ctx, const std::string& name,
                                                             int64_t skip) {
  auto found = ctx.private_resources().lookup_or_create<TextLineReaderResource>(
      name, [&]() -> StatusOr<std::shared_ptr<TextLineReaderResource>> {
        return std::make_shared<TextLineReaderResource>(skip);
      });
  if (!found.ok()) return found.status();
  if (found.value()->skip_header_lines() != skip) {
    return errors::invalid_argument("reader '{}' skips {} header lines, {} requested", name,
                                    found.value()->skip_header_lines(), skip);
  }
  return found;
}

class ReaderCreateOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void compute(OpKernelContext& ctx) override {
    auto r = get_reader(ctx, name(), node().attr<int64_t>("skip_header_lines"));
    if (!r.ok()) ctx.fail(r.status());
  }
  bool is_expensive() const override { return false; }
};

TESSERA_REGISTER_KERNEL("TextLineReaderV2", "CPU", ReaderCreateOp);

class ReaderReadOp : public OpKernel {
 public:
  explicit ReaderReadOp(const Node& n) : OpKernel(n) { TESSERA_CHECK(n.resource != nullptr); }
  bool is_async() const override { return true; }
  void compute(OpKernelContext& ctx) override { TESSERA_CHECK(false); }
  void compute_async(OpKernelContext& ctx, std::function<void()> done) override {
    auto queue = get_queue(ctx, *node().resource);
    if (!queue.ok()) {
      ctx.fail(queue.status());
      return done();
    }
    auto reader = reader_.get([&] {
      return get_reader(ctx, node().attr<std::string>("reader"), node().attr<int64_t>("skip_header_lines"));
    });
    if (!reader.ok()) {
      ctx.fail(reader.status());
      return done();
    }
    reader.value()->read(std::move(queue).value(), &ctx.cancellation(),
                         [&ctx, done = std::move(done)](const Status& s, std::string key, std::string value) {
                           if (!s.ok()) {
                             ctx.fail(s);
                           } else {
                             ctx.set_output(0, Tensor::scalar(std::move(key)));
                             ctx.set_output(1, Tensor::scalar(std::move(value)));
                           }
                           done();
                         });
  }

 private:
  CachedResource<TextLineReaderResource> reader_;
};

TESSERA_REGISTER_KERNEL("ReaderReadV2", "CPU", ReaderReadOp);

}  // namespace
}  // namespace tessera::internal
