// summary::FileWriter: TensorFlow's event files (Note [Event files]), written by a thread of its
// own, and the conversion of a Graph into the GraphDef that TensorBoard's graph tab renders.
#include "tessera/summary.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include "core/file_util.h"
#include "core/logging.h"
#include "core/node.h"
#include "core/status.h"
#include "core/summary.pb.h"
#include "host/event_file.h"
#include "tessera/errors.h"

namespace tessera::summary {

// Note [Event files]
// A run's events go to `<logdir>/events.out.tfevents.<10-digit unix seconds>.<hostname>`, as
// TensorFlow names them (TensorBoard reads every file whose name holds "tfevents"). The file is
// created exclusively; when the name is taken (two writers in one second) ".<pid>.<n>" is
// appended, so no writer ever overwrites another's file. Each record is a serialized `Event`
// (core/summary.proto) in TFRecord framing (host/event_file.h); the first record of every file is
// an Event holding only wall_time and file_version "brain.Event:2", which TensorBoard checks.
//
// add_* build and frame the Event on the caller's thread (the wall time is the call's) and put it
// on a queue of max_queue records, blocking while it is full; the writer thread moves records into
// its pending list and writes that list when it holds max_queue records, every flush_secs, on
// flush() and on close(). Records are written with write(2) straight from memory, so a written
// record is visible to TensorBoard at once; nothing is buffered in stdio.
//
// A failure after construction never reaches add_* (the training loop): before each write the
// writer checks that its file is still the one at its path (a removed directory or file leaves
// write(2) succeeding into an unlinked inode, which would lose events silently). When it is gone,
// or a write fails, the writer logs one warning for the episode, keeps the pending records (the
// newest kMaxPending; what it drops is counted and logged), and retries only at the next periodic
// or explicit flush, not at every full queue: it re-makes the directory and opens a new file
// (file_version first) when the old one is gone or unusable. A failed write is cut back off the
// file (ftruncate), so a torn record never sits before good ones. What close() still cannot write
// is logged as an error with its count.
//
// add_graph: one NodeDef per node (inputs "name", "name:1", control inputs "^name"; the device the
// latest session placed it on, else the requested one; attrs mapped to AttrValue, tensors as
// tensor_content; `_output_shapes` as TF's add_shapes=True) and versions.producer kGraphProducer.

namespace {

namespace tb = ::tessera::tensorboard;
using internal::Node;

constexpr const char* kFileVersion = "brain.Event:2";
// The GraphDef version of TF 1.6 (January 2018): a TF1 tool importing the graph treats it as one
// of its own era. TensorBoard's graph tab does not read it.
constexpr int kGraphProducer = 27;
// Records kept while the file cannot be written: at most this many (or max_queue, if larger), the
// newest. About 10000 summaries of a few hundred bytes each: a few MB.
constexpr std::size_t kMaxPending = 10000;
// A name taken in the same second gets ".<pid>.<n>"; past this many, creation gives up.
constexpr int kMaxNameAttempts = 1000;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The typed error of errno `err` for `what` on `path`, as TensorFlow maps errno: EACCES and the like
// PermissionDenied, ENOENT NotFound, a path through (or onto) something that is not a directory
// FailedPrecondition, a full disk ResourceExhausted, the rest file_error's.
Status errno_status(int err, std::string_view what, const std::string& path) {
  const std::string message = fmt::format("FileWriter: cannot {} '{}': {}", what, path, std::strerror(err));
  switch (err) {
    case EACCES:
    case EPERM:
    case EROFS:
      return Status(ErrorCode::kPermissionDenied, message);
    case ENOENT:
      return Status(ErrorCode::kNotFound, message);
    case ENOTDIR:
    case EISDIR:
    case EEXIST:
    case ELOOP:
      return Status(ErrorCode::kFailedPrecondition, message);
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return Status(ErrorCode::kResourceExhausted, message);
    default:
      return internal::file_error(err, what, path);
  }
}

// mkdir -p: every missing component of `dir` made (0777 less the umask).
Status make_dirs(const std::string& dir) {
  if (dir.empty()) return errors::invalid_argument("FileWriter: the log directory is an empty path");
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    const std::string prefix = dir.substr(0, pos);
    if (prefix.empty()) continue;
    if (::mkdir(prefix.c_str(), 0777) == 0) continue;
    int err = errno;
    if (err == EEXIST) {
      struct stat st;
      if (::stat(prefix.c_str(), &st) != 0) {
        err = errno;
      } else if (S_ISDIR(st.st_mode)) {
        continue;
      } else {
        err = ENOTDIR;
      }
    }
    Status s = errno_status(err, "make directory", prefix);
    if (prefix.size() < dir.size()) s = Status(s.code(), fmt::format("{} (making '{}')", s.message(), dir));
    return s;
  }
  return Status::ok_status();
}

Status write_all(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, "write event file", path);
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return Status::ok_status();
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::string framed_event(tb::Event& event) {
  std::string bytes;
  event.SerializeToString(&bytes);
  return internal::tfrecord(bytes);
}

}  // namespace

// An open event file: the descriptor, its path and identity (to notice that the path no longer
// leads to it), and the bytes written so far (to cut a failed write back off). Outside the
// anonymous namespace: FileWriter::Impl holds one, and a unity build would otherwise warn that a
// type with linkage holds one without (-Wsubobject-linkage).
struct EventFile {
  int fd = -1;
  std::string path;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
};

namespace {

// Makes a new event file in `logdir` (which must exist), its file_version record written.
StatusOr<EventFile> create_event_file(const std::string& logdir) {
  const double wall_time = now_seconds();
  std::string base = logdir;
  if (base.back() != '/') base += '/';
  base += fmt::format("events.out.tfevents.{:010d}.{}", static_cast<long long>(wall_time), hostname());
  EventFile file;
  for (int attempt = 0; attempt < kMaxNameAttempts; ++attempt) {
    file.path = attempt == 0 ? base : fmt::format("{}.{}.{}", base, ::getpid(), attempt);
    file.fd = ::open(file.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (file.fd >= 0) break;
    if (errno != EEXIST) return errno_status(errno, "create event file", file.path);
  }
  if (file.fd < 0) return errno_status(EEXIST, "create event file", file.path);
  struct stat st;
  if (::fstat(file.fd, &st) != 0) {
    Status s = errno_status(errno, "stat event file", file.path);
    ::close(file.fd);
    return s;
  }
  file.dev = st.st_dev;
  file.ino = st.st_ino;
  tb::Event event;
  event.set_wall_time(wall_time);
  event.set_step(0);
  event.set_file_version(kFileVersion);
  const std::string record = framed_event(event);
  if (Status s = write_all(file.fd, record, file.path); !s.ok()) {
    ::close(file.fd);
    ::unlink(file.path.c_str());
    return s;
  }
  file.size = static_cast<off_t>(record.size());
  return file;
}

// Whether `file.path` still leads to the file `file.fd` writes (not removed, not replaced).
bool still_there(const EventFile& file) {
  struct stat st;
  return ::stat(file.path.c_str(), &st) == 0 && st.st_dev == file.dev && st.st_ino == file.ino;
}

// ---- Graph -> GraphDef ----

void to_shape_proto(const Shape& shape, tb::TensorShapeProto* out) {
  if (shape.unknown_rank()) {
    out->set_unknown_rank(true);
    return;
  }
  for (int64_t d : shape.dims()) out->add_dim()->set_size(d < 0 ? -1 : d);
}

tb::DataType to_data_type(DType dtype) { return static_cast<tb::DataType>(static_cast<int>(dtype)); }

void to_tensor_proto(const Tensor& t, tb::TensorProto* out) {
  if (t.is_null()) return;
  out->set_dtype(to_data_type(t.dtype()));
  to_shape_proto(t.shape(), out->mutable_tensor_shape());
  if (t.dtype() == DType::String) {
    const std::string* p = t.data<std::string>();
    for (int64_t i = 0; i < t.num_elements(); ++i) out->add_string_val(p[i]);
  } else {
    // The host's bytes are TensorFlow's: little-endian, row-major, bool one byte.
    out->set_tensor_content(static_cast<const char*>(t.raw_data()), t.bytes());
  }
}

void to_attr_value(const internal::AttrValue& value, tb::AttrValue* out) {
  std::visit(
      [out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          out->set_i(v);
        } else if constexpr (std::is_same_v<T, double>) {
          out->set_f(static_cast<float>(v));  // TF's AttrValue holds floats
        } else if constexpr (std::is_same_v<T, bool>) {
          out->set_b(v);
        } else if constexpr (std::is_same_v<T, DType>) {
          out->set_type(to_data_type(v));
        } else if constexpr (std::is_same_v<T, Shape>) {
          to_shape_proto(v, out->mutable_shape());
        } else if constexpr (std::is_same_v<T, std::string>) {
          out->set_s(v);
        } else if constexpr (std::is_same_v<T, Tensor>) {
          to_tensor_proto(v, out->mutable_tensor());
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          auto* list = out->mutable_list();
          for (int64_t i : v) list->add_i(i);
        } else if constexpr (std::is_same_v<T, std::vector<DType>>) {
          auto* list = out->mutable_list();
          for (DType d : v) list->add_type(to_data_type(d));
        } else if constexpr (std::is_same_v<T, std::vector<Shape>>) {
          auto* list = out->mutable_list();
          for (const Shape& s : v) to_shape_proto(s, list->add_shape());
        } else {
          static_assert(sizeof(T) == 0, "an AttrValue alternative without a mapping to TensorBoard's AttrValue");
        }
      },
      value);
}

std::string input_name(const internal::Endpoint& e) {
  return e.index == 0 ? e.node->name : fmt::format("{}:{}", e.node->name, e.index);
}

std::string graph_def_bytes(const Graph& g) {
  internal::GraphImpl& impl = g.impl();
  tb::GraphDef def;
  def.mutable_versions()->set_producer(kGraphProducer);
  std::vector<const Node*> nodes;
  {
    // Nodes never change once added, except their control inputs, which change under this lock.
    std::shared_lock<std::shared_mutex> lock(impl.mutex());
    const int n = impl.num_nodes_locked();
    nodes.reserve(static_cast<std::size_t>(n));
    for (int id = 0; id < n; ++id) {
      const Node* node = impl.node_locked(id);
      nodes.push_back(node);
      tb::NodeDef* nd = def.add_node();
      nd->set_name(node->name);
      nd->set_op(node->type);
      for (const internal::Endpoint& e : node->inputs) nd->add_input(input_name(e));
      for (const Node* c : node->control_inputs) nd->add_input("^" + c->name);
      auto& attrs = *nd->mutable_attr();
      for (const auto& [key, value] : node->attrs) to_attr_value(value, &attrs[key]);
      auto* shapes = attrs["_output_shapes"].mutable_list();
      for (const Shape& s : node->output_shapes) to_shape_proto(s, shapes->add_shape());
    }
  }
  // Placements live under their own lock (GraphImpl::placement_of), taken outside the graph's.
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    std::string placed = impl.placement_of(nodes[i]);
    def.mutable_node(static_cast<int>(i))->set_device(placed.empty() ? nodes[i]->requested_device : placed);
  }
  std::string bytes;
  def.SerializeToString(&bytes);
  return bytes;
}

}  // namespace

// The state behind a FileWriter. Thread safety: add_*, flush, close and reopen may be called from
// any threads at once; close and reopen are serialized by lifecycle_mu, the queue and flags are
// guarded by mu, and the writer state (file, pending, failing, dropped) belongs to the writer
// thread while it runs and to close()/reopen() (holding lifecycle_mu) while none runs.
struct FileWriter::Impl {
  Impl(std::string dir, int max_queue_in, std::chrono::seconds flush_secs_in)
      : logdir(std::move(dir)), max_queue(static_cast<std::size_t>(max_queue_in)), flush_secs(flush_secs_in) {}
  ~Impl() { close(); }

  // Opens a new event file (raising its error) and starts the writer thread.
  void open();
  void enqueue(std::string record, const char* what);
  void flush();
  void close();
  void run();            // the writer thread
  void write_pending();  // the writer thread
  // Logs the first failure of an episode (`gone`: the file that vanished, if that began it).
  void report_failure(const Status& status, const std::string& gone = "");
  void set_path(const std::string& p) {
    std::lock_guard<std::mutex> l(mu);
    path = p;
  }

  const std::string logdir;
  const std::size_t max_queue;
  const std::chrono::seconds flush_secs;

  std::mutex lifecycle_mu;  // close() and reopen()
  mutable std::mutex mu;
  std::condition_variable work_cv;     // to the writer: records, a flush request, stop
  std::condition_variable space_cv;    // to add_*: room in the queue, or closed
  std::condition_variable flushed_cv;  // to flush(): flush_done advanced
  std::deque<std::string> queue;       // guarded by mu: framed records
  bool accepting = false;              // guarded by mu: open, not closing
  bool stop = false;                   // guarded by mu: the writer's last round
  uint64_t flush_requested = 0;        // guarded by mu
  uint64_t flush_done = 0;             // guarded by mu
  std::string path;                    // guarded by mu
  std::thread thread;

  // Writer state (see the class comment).
  EventFile file;
  std::deque<std::string> pending;  // framed records taken from the queue, not yet written
  bool failing = false;             // since the last failure, until a write succeeds
  uint64_t dropped = 0;             // records dropped from `pending` and not yet reported
};

void FileWriter::Impl::open() {
  if (Status s = make_dirs(logdir); !s.ok()) s.raise();
  file = create_event_file(logdir).value_or_raise();
  pending.clear();
  failing = false;
  dropped = 0;
  {
    std::lock_guard<std::mutex> l(mu);
    path = file.path;
    accepting = true;
    stop = false;
  }
  thread = std::thread([this] { run(); });
}

void FileWriter::Impl::enqueue(std::string record, const char* what) {
  std::unique_lock<std::mutex> l(mu);
  space_cv.wait(l, [&] { return !accepting || queue.size() < max_queue; });
  if (!accepting) {
    throw FailedPreconditionError(
        fmt::format("FileWriter::{}: the writer of '{}' is closed (reopen() it first)", what, logdir));
  }
  queue.push_back(std::move(record));
  work_cv.notify_one();
}

void FileWriter::Impl::flush() {
  std::unique_lock<std::mutex> l(mu);
  if (!accepting) return;  // closed, or closing (which writes everything)
  const uint64_t target = ++flush_requested;
  work_cv.notify_one();
  flushed_cv.wait(l, [&] { return flush_done >= target; });
}

void FileWriter::Impl::close() {
  std::lock_guard<std::mutex> lc(lifecycle_mu);
  {
    std::lock_guard<std::mutex> l(mu);
    if (!accepting) return;
    accepting = false;
    stop = true;
  }
  work_cv.notify_one();
  space_cv.notify_all();
  thread.join();  // its last round writes what was queued
  if (!pending.empty() || dropped > 0) {
    TESSERA_LOG(kError, "FileWriter: {} events could not be written to '{}' and are lost", pending.size() + dropped,
                logdir);
  }
  pending.clear();
  dropped = 0;
  if (file.fd >= 0 && ::close(file.fd) != 0) {
    TESSERA_LOG(kWarning, "FileWriter: closing '{}': {}", file.path, std::strerror(errno));
  }
  file = EventFile{};
  set_path("");
}

void FileWriter::Impl::run() {
  std::unique_lock<std::mutex> l(mu);
  auto next_flush = std::chrono::steady_clock::now() + flush_secs;
  for (;;) {
    work_cv.wait_until(l, next_flush, [&] { return stop || flush_requested > flush_done || !queue.empty(); });
    const bool took = !queue.empty();
    while (!queue.empty()) {
      pending.push_back(std::move(queue.front()));
      queue.pop_front();
    }
    if (took) space_cv.notify_all();
    const std::size_t cap = std::max(kMaxPending, max_queue);
    if (pending.size() > cap) {
      const std::size_t n = pending.size() - cap;
      pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(n));
      dropped += n;
    }
    const uint64_t flush_target = flush_requested;
    const bool stopping = stop;
    const bool periodic = std::chrono::steady_clock::now() >= next_flush;
    // While failing, only a flush retries: a full queue would retry (and fail) every few events.
    const bool full = !failing && pending.size() >= max_queue;
    if (stopping || periodic || full || flush_target > flush_done) {
      l.unlock();
      try {
        write_pending();
      } catch (...) {  // bad_alloc: keep the thread (and the records) for the next flush
        report_failure(status_from_current_exception());
      }
      l.lock();
      if (periodic) next_flush = std::chrono::steady_clock::now() + flush_secs;
      flush_done = std::max(flush_done, flush_target);
      flushed_cv.notify_all();
    }
    if (stopping) {
      flush_done = flush_requested;
      flushed_cv.notify_all();
      return;
    }
  }
}

void FileWriter::Impl::report_failure(const Status& status, const std::string& gone) {
  if (!failing) {
    // The status's message names the path and strerror ("FileWriter: cannot write ...").
    TESSERA_LOG(kWarning, "{}{}; keeping {} events for '{}' and retrying at the next flush", status.message(),
                gone.empty() ? std::string() : fmt::format(" (event file '{}' is gone)", gone), pending.size(),
                logdir);
  }
  failing = true;
}

void FileWriter::Impl::write_pending() {
  if (dropped > 0) {
    TESSERA_LOG(kWarning, "FileWriter: dropped the {} oldest events for '{}', which could not be written", dropped,
                logdir);
    dropped = 0;
  }
  // Nothing to write: leave a removed directory removed until there is.
  if (pending.empty()) return;
  std::string gone;  // why the file is replaced, for the one warning
  if (file.fd >= 0 && !still_there(file)) {
    gone = file.path;
    ::close(file.fd);
    file = EventFile{};
  }
  if (file.fd < 0) {
    Status s = make_dirs(logdir);
    StatusOr<EventFile> made = s.ok() ? create_event_file(logdir) : StatusOr<EventFile>(s);
    if (!made.ok()) {
      report_failure(made.status(), gone);
      return;
    }
    file = std::move(made).value();
    set_path(file.path);
    if (!gone.empty() && !failing) {
      TESSERA_LOG(kWarning, "FileWriter: event file '{}' is gone (removed?); writing {} pending events to '{}'", gone,
                  pending.size(), file.path);
    }
  }
  std::string bytes;
  std::size_t total = 0;
  for (const std::string& r : pending) total += r.size();
  bytes.reserve(total);
  for (const std::string& r : pending) bytes += r;
  if (Status s = write_all(file.fd, bytes, file.path); !s.ok()) {
    // A torn record before good ones would end a reader's file early: cut it off, or give up the
    // file (the retry opens a new one).
    if (::ftruncate(file.fd, file.size) != 0 || ::lseek(file.fd, file.size, SEEK_SET) < 0) {
      ::close(file.fd);
      file = EventFile{};
    }
    report_failure(s);
    return;
  }
  file.size += static_cast<off_t>(bytes.size());
  if (failing) {
    TESSERA_LOG(kInfo, "FileWriter: wrote {} kept events to '{}'; writing again", pending.size(), file.path);
    failing = false;
  }
  pending.clear();
}

// ---- FileWriter ----

FileWriter::FileWriter(std::string logdir, int max_queue, std::chrono::seconds flush_secs) {
  if (max_queue < 1) {
    throw InvalidArgumentError(fmt::format("FileWriter: max_queue must be at least 1, got {}", max_queue));
  }
  if (flush_secs.count() < 1) {
    throw InvalidArgumentError(
        fmt::format("FileWriter: flush_secs must be at least 1 second, got {}", flush_secs.count()));
  }
  impl_ = std::make_unique<Impl>(std::move(logdir), max_queue, flush_secs);
  impl_->open();
}

FileWriter::~FileWriter() = default;  // Impl's destructor closes
FileWriter::FileWriter(FileWriter&&) noexcept = default;
FileWriter& FileWriter::operator=(FileWriter&& o) noexcept {
  if (this != &o) impl_ = std::move(o.impl_);  // the old Impl closes as it goes
  return *this;
}

void FileWriter::add_summary(const Tensor& serialized, int64_t global_step) {
  if (serialized.is_null() || serialized.dtype() != DType::String || serialized.shape().rank() != 0) {
    throw InvalidArgumentError(fmt::format(
        "FileWriter::add_summary: want a String scalar holding a serialized Summary (what summary ops "
        "and merge return), got {}",
        serialized.is_null() ? std::string("a null tensor")
                             : fmt::format("{} {}", dtype_name(serialized.dtype()), serialized.shape().to_string())));
  }
  tb::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(global_step);
  const std::string& bytes = serialized.scalar<std::string>();
  if (!event.mutable_summary()->ParseFromString(bytes)) {
    throw InvalidArgumentError(fmt::format(
        "FileWriter::add_summary: the String scalar does not hold a serialized Summary ({} bytes)", bytes.size()));
  }
  if (!impl_) throw FailedPreconditionError("FileWriter::add_summary: the writer was moved from");
  impl_->enqueue(framed_event(event), "add_summary");
}

void FileWriter::add_graph(const Graph& g) {
  if (!impl_) throw FailedPreconditionError("FileWriter::add_graph: the writer was moved from");
  tb::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(0);
  event.set_graph_def(graph_def_bytes(g));
  impl_->enqueue(framed_event(event), "add_graph");
}

void FileWriter::flush() {
  if (impl_) impl_->flush();
}

void FileWriter::close() {
  if (impl_) impl_->close();
}

void FileWriter::reopen() {
  if (!impl_) throw FailedPreconditionError("FileWriter::reopen: the writer was moved from");
  std::lock_guard<std::mutex> lc(impl_->lifecycle_mu);
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    if (impl_->accepting) return;  // not closed: nothing to do (TF's reopen)
  }
  if (impl_->thread.joinable()) impl_->thread.join();  // closed: the writer has returned
  impl_->open();
}

const std::string& FileWriter::logdir() const {
  static const std::string kNone;
  return impl_ ? impl_->logdir : kNone;
}

std::string FileWriter::path() const {
  if (!impl_) return "";
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->path;
}

}  // namespace tessera::summary
