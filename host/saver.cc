// train::Saver (checkpoints of variables through Session::run), the checkpoint file format, and
// the directory's "checkpoint" index file (latest_checkpoint, get_checkpoint_state).
#include "tessera/saver.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/crc32c.h"
#include "core/file_util.h"
#include "core/logging.h"
#include "core/node.h"
#include "core/string_tensor.h"
#include "host/little_endian.h"
#include "tessera/errors.h"
#include "tessera/ops.h"

namespace tessera::train {

// Note [Checkpoint format]
// A checkpoint is one file: a fixed header, an index of the tensors, then their bytes. All
// integers are little-endian; checksums are CRC-32C (core/crc32c.h).
//
//   offset 0   magic       8 bytes  0x89 'T' 'S' 'R' 'C' 'K' 'P' 'T'  (0x89: not text, not ELF)
//          8   version     u32      kFormatVersion (1)
//         12   count       u32      number of tensors
//         16   index_size  u64      bytes of the index
//         24   data_size   u64      bytes of all the tensors' data
//         32   header_crc  u32      CRC-32C of bytes [0, 32)
//         36   index       index_size bytes: `count` entries, each
//                            u32 name_size, name (UTF-8, the variable's name), u32 dtype (DType's
//                            value, TensorFlow's DataType number), u32 rank, i64 dims[rank],
//                            u64 byte_size (= product of dims * dtype size; strings: their
//                            encoding's, core/string_tensor.h), u32 data_crc
//                            (CRC-32C of the tensor's bytes)
//              index_crc   u32      CRC-32C of the index
//              data        data_size bytes: each tensor's bytes in index order, row-major, in the
//                          host's layout (little-endian; bool one byte, 0 or 1), unpadded
//   The file ends there: its size is exactly 36 + index_size + 4 + data_size.
//
// Reading verifies everything before returning anything (restore assigns nothing otherwise): the
// magic, the header's checksum, then the version (a newer one is UnimplementedError, not data
// loss: its checksum was right), the file size against the header (truncated or extended), the
// index's checksum, every entry (known dtype, rank <= Shape::kMaxRank, dims >= 0, byte_size that
// fits the shape, no duplicate names, sizes adding up to data_size), then each tensor's bytes
// against its checksum (and bool bytes being 0 or 1). Any failure is DataLossError naming the file
// and, where there is one, the tensor. A CRC detects every error burst of up to 32 bits, so any
// single changed byte is caught; the index's checksum covers the tensors' checksums.

// Note [Checkpoint files on disk]
// Writing is atomic: the bytes go to a temporary file beside the target ("<path>.tmp-<pid>-<n>",
// created exclusively), which is fsynced, closed and renamed over the target; then the directory
// is fsynced so the rename itself is durable. A reader or a crash sees the old file or the new
// one, and a failed write removes its temporary file. The index file is replaced the same way.
//
// The index file, "checkpoint" in the checkpoint's directory, is JSON (TensorFlow writes a text
// protobuf with the same two fields):
//   {"model_checkpoint_path": "model-300",
//    "all_model_checkpoint_paths": ["model-100", "model-200", "model-300"]}
// Paths of checkpoints in that directory are stored as file names, so the directory can be moved
// or copied; others as absolute paths. Readers resolve relative paths against the directory.
// Save updates it after the checkpoint file is in place and deletes older checkpoints only after
// that, so the index never names a file that a finished save deleted.

namespace {

namespace fs = std::filesystem;
using internal::crc32c::extend;
using internal::crc32c::value;

static_assert(std::endian::native == std::endian::little,
              "checkpoint files hold the tensors' bytes in little-endian order (Note [Checkpoint format])");

constexpr char kMagic[8] = {'\x89', 'T', 'S', 'R', 'C', 'K', 'P', 'T'};
constexpr uint32_t kFormatVersion = 1;
constexpr std::size_t kHeaderCrcOffset = 32;
constexpr std::size_t kHeaderBytes = 36;
constexpr const char* kIndexFileName = "checkpoint";

// ---- Little-endian encoding ----

using internal::get_u32;
using internal::get_u64;
using internal::put_u32;
using internal::put_u64;

// Reads the index: each method returns false when fewer bytes than it needs are left.
class ByteReader {
 public:
  explicit ByteReader(std::string_view bytes) : bytes_(bytes) {}
  std::size_t remaining() const { return bytes_.size() - pos_; }
  bool u32(uint32_t* v) {
    if (remaining() < 4) return false;
    *v = get_u32(bytes_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool u64(uint64_t* v) {
    if (remaining() < 8) return false;
    *v = get_u64(bytes_.data() + pos_);
    pos_ += 8;
    return true;
  }
  bool bytes(std::size_t n, std::string* out) {
    if (remaining() < n) return false;
    out->assign(bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }

 private:
  std::string_view bytes_;
  std::size_t pos_ = 0;
};

std::optional<DType> dtype_from_u32(uint32_t v) {
  for (DType d : {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::Bool,
                  DType::BFloat16, DType::Float16, DType::String}) {
    if (static_cast<uint32_t>(d) == v) return d;
  }
  return std::nullopt;
}

// ---- Files ----

// The typed error for a failed system call (TensorFlow's errno mapping, in short).
[[noreturn]] void throw_errno(int err, const std::string& what) {
  const std::string message = fmt::format("{}: {}", what, std::generic_category().message(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR: throw NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS: throw PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
    case ENOMEM:
    case EMFILE:
    case ENFILE: throw ResourceExhaustedError(message);
    case EEXIST: throw AlreadyExistsError(message);
    case EISDIR:
    case ENOTEMPTY:
    case ENAMETOOLONG:
    case EINVAL: throw InvalidArgumentError(message);
    default: throw UnknownError(message);
  }
}

// An open file descriptor, closed when destroyed. Not thread-safe.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // Closes now; the errno of a failed close (0 on success).
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

void write_all(int fd, std::string_view bytes, const std::string& path) {
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(errno, fmt::format("cannot write '{}'", path));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

// Makes a rename in `dir` durable. Some file systems cannot fsync a directory (EINVAL): nothing
// more can be done there.
void fsync_directory(const fs::path& dir) {
  const std::string d = dir.empty() ? std::string(".") : dir.string();
  FileDescriptor fd(::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) throw_errno(errno, fmt::format("cannot open directory '{}'", d));
  if (::fsync(fd.get()) != 0 && errno != EINVAL) throw_errno(errno, fmt::format("cannot fsync directory '{}'", d));
}

// Replaces `path` with the concatenation of `chunks`, atomically (Note [Checkpoint files on disk]).
void write_file_atomically(const std::string& path, const std::vector<std::string_view>& chunks) {
  static std::atomic<uint64_t> next_temp{0};
  std::string temp;
  int raw_fd = -1;
  for (int attempt = 0; raw_fd < 0; ++attempt) {
    temp = fmt::format("{}.tmp-{}-{}", path, ::getpid(), next_temp.fetch_add(1, std::memory_order_relaxed));
    raw_fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (raw_fd < 0 && (errno != EEXIST || attempt >= 100)) {
      throw_errno(errno, fmt::format("cannot create '{}'", temp));
    }
  }
  FileDescriptor fd(raw_fd);
  try {
    for (std::string_view chunk : chunks) write_all(fd.get(), chunk, temp);
    if (::fsync(fd.get()) != 0) throw_errno(errno, fmt::format("cannot fsync '{}'", temp));
    if (int err = fd.close(); err != 0) throw_errno(err, fmt::format("cannot close '{}'", temp));
    if (::rename(temp.c_str(), path.c_str()) != 0) {
      throw_errno(errno, fmt::format("cannot rename '{}' to '{}'", temp, path));
    }
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  fsync_directory(fs::path(path).parent_path());
}

// Reads exactly n bytes at `offset`; a file that ends early changed since it was measured.
void read_exactly(int fd, void* out, std::size_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_errno(errno, fmt::format("cannot read checkpoint '{}'", path));
    }
    if (got == 0) {
      throw DataLossError(fmt::format("checkpoint '{}': truncated while being read (did it change?)", path));
    }
    p += got;
    n -= static_cast<std::size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

// ---- The checkpoint file ----

struct IndexEntry {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
  uint64_t byte_size = 0;
  uint32_t crc = 0;
};

// Writes `tensors` (host tensors, named by `names`) to `path` atomically.
void write_checkpoint_file(const std::string& path, const std::vector<std::string>& names,
                           const std::vector<Tensor>& tensors) {
  std::string index;
  uint64_t data_size = 0;
  // Each tensor's bytes: its own, or a string tensor's encoding (kept here until written).
  std::vector<std::string> encoded;
  std::vector<std::string_view> data;
  for (const Tensor& t : tensors) {
    if (t.dtype() == DType::String) {
      encoded.push_back(internal::encode_strings(t));
    }
  }
  for (std::size_t i = 0, s = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    data.push_back(t.dtype() == DType::String ? std::string_view(encoded[s++])
                                              : std::string_view(static_cast<const char*>(t.raw_data()), t.bytes()));
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    put_u32(index, static_cast<uint32_t>(names[i].size()));
    index += names[i];
    put_u32(index, static_cast<uint32_t>(t.dtype()));
    put_u32(index, static_cast<uint32_t>(t.shape().rank()));
    for (int64_t d : t.shape().dims()) put_u64(index, static_cast<uint64_t>(d));
    put_u64(index, data[i].size());
    put_u32(index, data[i].empty() ? value(nullptr, 0) : value(data[i].data(), data[i].size()));
    data_size += data[i].size();
  }
  std::string head(kMagic, sizeof(kMagic));
  put_u32(head, kFormatVersion);
  put_u32(head, static_cast<uint32_t>(tensors.size()));
  put_u64(head, index.size());
  put_u64(head, data_size);
  put_u32(head, value(head.data(), head.size()));
  head += index;
  put_u32(head, value(index.data(), index.size()));

  std::vector<std::string_view> chunks{head};
  for (std::string_view d : data) {
    if (!d.empty()) chunks.push_back(d);
  }
  write_file_atomically(path, chunks);
}

std::vector<std::pair<std::string, Tensor>> read_checkpoint_file(const std::string& path) {
  auto loss = [&path](const std::string& what) {
    return DataLossError(fmt::format("checkpoint '{}': {}", path, what));
  };
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw_errno(errno, fmt::format("cannot open checkpoint '{}'", path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_errno(errno, fmt::format("cannot stat checkpoint '{}'", path));
  if (!S_ISREG(st.st_mode)) throw InvalidArgumentError(fmt::format("checkpoint '{}' is not a regular file", path));
  const auto size = static_cast<uint64_t>(st.st_size);

  // Header.
  if (size < kHeaderBytes) {
    throw loss(fmt::format("truncated: {} bytes, shorter than the {}-byte header", size, kHeaderBytes));
  }
  char header[kHeaderBytes];
  read_exactly(fd.get(), header, kHeaderBytes, 0, path);
  if (std::memcmp(header, kMagic, sizeof(kMagic)) != 0) {
    throw loss("not a tessera checkpoint (wrong magic bytes)");
  }
  const uint32_t header_crc = get_u32(header + kHeaderCrcOffset);
  if (const uint32_t computed = value(header, kHeaderCrcOffset); computed != header_crc) {
    throw loss(fmt::format("header checksum mismatch (stored {:#010x}, computed {:#010x})", header_crc, computed));
  }
  if (const uint32_t version = get_u32(header + 8); version != kFormatVersion) {
    throw UnimplementedError(fmt::format("checkpoint '{}': format version {}; this build reads version {}", path,
                                         version, kFormatVersion));
  }
  const uint32_t count = get_u32(header + 12);
  const uint64_t index_size = get_u64(header + 16);
  const uint64_t data_size = get_u64(header + 24);
  uint64_t expected = 0;
  const bool overflow = __builtin_add_overflow(index_size, data_size, &expected) ||
                        __builtin_add_overflow(expected, uint64_t{kHeaderBytes + 4}, &expected);
  if (overflow || expected > size) {
    throw loss(fmt::format("truncated: the file has {} bytes, its header describes {}", size,
                           overflow ? std::string("more than 2^64") : std::to_string(expected)));
  }
  if (expected < size) {
    throw loss(fmt::format("trailing bytes: the file has {} bytes, its header describes {}", size, expected));
  }

  // Index.
  std::string index(static_cast<std::size_t>(index_size) + 4, '\0');
  read_exactly(fd.get(), index.data(), index.size(), kHeaderBytes, path);
  const uint32_t index_crc = get_u32(index.data() + index_size);
  index.resize(static_cast<std::size_t>(index_size));
  if (const uint32_t computed = value(index.data(), index.size()); computed != index_crc) {
    throw loss(fmt::format("index checksum mismatch (stored {:#010x}, computed {:#010x})", index_crc, computed));
  }
  ByteReader r(index);
  std::vector<IndexEntry> entries;
  std::set<std::string> seen;
  uint64_t total = 0;
  for (uint32_t i = 0; i < count; ++i) {
    IndexEntry e;
    uint32_t name_size = 0, dtype = 0, rank = 0;
    if (!r.u32(&name_size) || !r.bytes(name_size, &e.name)) {
      throw loss(fmt::format("index entry {} of {}: the index ends inside the name", i, count));
    }
    const std::string what = fmt::format("tensor '{}' (index entry {})", e.name, i);
    if (e.name.empty()) throw loss(fmt::format("index entry {}: empty tensor name", i));
    if (!seen.insert(e.name).second) throw loss(fmt::format("{}: the name appears twice", what));
    if (!r.u32(&dtype) || !r.u32(&rank)) throw loss(fmt::format("{}: the index ends inside the entry", what));
    const std::optional<DType> d = dtype_from_u32(dtype);
    if (!d) throw loss(fmt::format("{}: unknown dtype {}", what, dtype));
    e.dtype = *d;
    if (rank > static_cast<uint32_t>(Shape::kMaxRank)) {
      throw loss(fmt::format("{}: rank {} exceeds the maximum {}", what, rank, Shape::kMaxRank));
    }
    std::vector<int64_t> dims(rank);
    uint64_t elements = 1;
    bool overflow = false;
    for (auto& dim : dims) {
      uint64_t raw = 0;
      if (!r.u64(&raw)) throw loss(fmt::format("{}: the index ends inside the shape", what));
      dim = static_cast<int64_t>(raw);
      if (dim < 0) throw loss(fmt::format("{}: negative dimension {}", what, dim));
      overflow = overflow || __builtin_mul_overflow(elements, raw, &elements);
    }
    e.shape = Shape(dims);
    uint64_t expected_bytes = 0;
    overflow = overflow || __builtin_mul_overflow(elements, static_cast<uint64_t>(dtype_size(e.dtype)), &expected_bytes);
    if (!r.u64(&e.byte_size) || !r.u32(&e.crc)) throw loss(fmt::format("{}: the index ends inside the entry", what));
    // A string tensor's bytes are its encoding: at least a length per element (decoding checks
    // the rest).
    const bool fits = e.dtype == DType::String ? !overflow && e.byte_size / sizeof(uint64_t) >= elements
                                               : !overflow && e.byte_size == expected_bytes;
    if (!fits) {
      throw loss(fmt::format("{}: {} bytes do not fit {} {}", what, e.byte_size, dtype_name(e.dtype),
                             e.shape.to_string()));
    }
    if (e.byte_size > data_size - total) {
      throw loss(fmt::format("{}: its {} bytes run past the data section", what, e.byte_size));
    }
    total += e.byte_size;
    entries.push_back(std::move(e));
  }
  if (r.remaining() != 0) throw loss(fmt::format("{} bytes left over after the index's {} entries", r.remaining(), count));
  if (total != data_size) {
    throw loss(fmt::format("the tensors hold {} bytes, the header says {}", total, data_size));
  }

  // Data: read straight into the tensors, each checked against its checksum.
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(entries.size());
  uint64_t offset = kHeaderBytes + index_size + 4;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    IndexEntry& e = entries[i];
    auto check_crc = [&](const void* bytes) {
      const uint32_t computed = e.byte_size == 0 ? value(nullptr, 0) : value(bytes, e.byte_size);
      if (computed != e.crc) {
        throw loss(fmt::format("tensor '{}' (index entry {}): data checksum mismatch (stored {:#010x}, computed {:#010x})",
                               e.name, i, e.crc, computed));
      }
    };
    if (e.dtype == DType::String) {
      std::string bytes(static_cast<std::size_t>(e.byte_size), '\0');
      if (e.byte_size > 0) read_exactly(fd.get(), bytes.data(), e.byte_size, offset, path);
      check_crc(bytes.data());
      auto t = internal::decode_strings(bytes, e.shape);
      if (!t.ok()) throw loss(fmt::format("tensor '{}' (index entry {}): {}", e.name, i, t.status().message()));
      offset += e.byte_size;
      out.emplace_back(std::move(e.name), std::move(t).value());
      continue;
    }
    Tensor t(e.dtype, e.shape);
    if (e.byte_size > 0) read_exactly(fd.get(), t.raw_mutable_data(), e.byte_size, offset, path);
    check_crc(t.raw_data());
    if (e.dtype == DType::Bool) {
      // A bool other than 0 or 1 is undefined behaviour to read: refuse it here.
      const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
      for (uint64_t k = 0; k < e.byte_size; ++k) {
        if (bytes[k] > 1) throw loss(fmt::format("tensor '{}': bool element {} is {}", e.name, k, bytes[k]));
      }
    }
    offset += e.byte_size;
    out.emplace_back(std::move(e.name), std::move(t));
  }
  return out;
}

// ---- The index file ----

fs::path index_file_path(const fs::path& dir) { return dir / kIndexFileName; }

// How the index file of `dir` records `checkpoint`: its file name when it lives in `dir`.
std::string index_entry(const fs::path& dir, const std::string& checkpoint) {
  const fs::path p(checkpoint);
  if (p.parent_path().lexically_normal() == dir.lexically_normal()) return p.filename().string();
  std::error_code ec;
  fs::path absolute = fs::absolute(p, ec);
  return ec ? checkpoint : absolute.lexically_normal().string();
}

std::string resolve_in(const fs::path& dir, const std::string& recorded) {
  if (recorded.empty()) return recorded;
  const fs::path p(recorded);
  return p.is_absolute() ? recorded : (dir / p).string();
}

void write_index_file(const fs::path& dir, const std::string& latest, const std::vector<std::string>& all) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["model_checkpoint_path"] = index_entry(dir, latest);
  auto& list = j["all_model_checkpoint_paths"] = nlohmann::ordered_json::array();
  for (const auto& p : all) list.push_back(index_entry(dir, p));
  const std::string text = j.dump(2) + "\n";
  write_file_atomically(index_file_path(dir).string(), {text});
}

// Why the saver must not delete `path` as an old checkpoint of directory `dir` ("" when it may):
// it must be a regular file (not a link) directly in `dir`, other than the index file, that starts
// with the checkpoint magic.
std::string why_not_deletable(const fs::path& dir, const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  const fs::path here = fs::weakly_canonical(dir.empty() ? fs::path(".") : dir, ec);
  const fs::path its = fs::weakly_canonical(p.parent_path().empty() ? fs::path(".") : p.parent_path(), ec);
  if (ec || here != its) return fmt::format("it is not in the saver's directory '{}'", dir.string());
  if (p.filename() == kIndexFileName) return "it is the directory's index file";
  const fs::file_status status = fs::symlink_status(p, ec);
  if (ec || !fs::is_regular_file(status)) return "it is not a regular file";
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  char magic[sizeof(kMagic)] = {};
  if (fd.get() < 0 || ::pread(fd.get(), magic, sizeof(magic), 0) != static_cast<ssize_t>(sizeof(magic)) ||
      std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return "it is not a checkpoint file";
  }
  return "";
}

// Removes the temporary files that saves of processes no longer running left in `dir` (a process
// killed mid-save, SIGXFSZ under `ulimit -f`): "<name>.tmp-<pid>-<n>" whose pid does not exist.
void remove_stale_temporaries(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir.empty() ? fs::path(".") : dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::size_t at = name.rfind(".tmp-");
    if (at == std::string::npos) continue;
    unsigned long pid = 0, n = 0;
    char extra = 0;
    if (std::sscanf(name.c_str() + at, ".tmp-%lu-%lu%c", &pid, &n, &extra) != 2 || pid == 0) continue;
    if (static_cast<pid_t>(pid) == ::getpid()) continue;  // this process's own saves are in flight
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to ask
    std::error_code removed;
    if (fs::is_regular_file(entry.symlink_status(removed)) && fs::remove(entry.path(), removed)) {
      TESSERA_LOG(kInfo, "Saver: removed '{}', left by a save of process {} that did not finish", entry.path().string(), pid);
    }
  }
}

}  // namespace

// ---- Saver ----

struct Saver::State {
  std::vector<Variable> vars;
  std::vector<std::string> names;     // the checkpoint's keys: vars[i].name(), or the names a map gave
  std::vector<Output> values;         // what save fetches
  std::vector<Output> placeholders;   // what restore feeds
  Operation restore_op;               // the group of the assigns
  SaverOptions options;

  struct Kept {
    std::string path;
    std::chrono::system_clock::time_point written;
  };
  std::mutex mu;  // serializes saves
  std::vector<Kept> last;                                 // guarded by mu; oldest first
  std::chrono::system_clock::time_point next_keep_time;  // guarded by mu
};

namespace {

Saver::State& checked(const std::shared_ptr<Saver::State>& st) {
  if (!st) throw InvalidArgumentError("use of a default-constructed Saver");
  return *st;
}

Graph& graph_of(const std::vector<Variable>& vars) {
  if (vars.empty()) {
    throw InvalidArgumentError("Saver: an empty variable list means every variable of a graph: use Saver(graph)");
  }
  return vars.front().op().graph();
}

// While it lives, ops are built outside the device, colocation and control-dependency scopes of
// the code that builds the Saver: the restore placeholders stay unplaced (fed on the client) and
// restoring runs nothing else. The name scope still applies.
class OutsideScopes {
 public:
  explicit OutsideScopes(internal::GraphImpl& g)
      : g_(g), device_(g.device_scope_), colocation_(g.colocation_scope_), control_(g.control_scope_),
        functions_(std::exchange(g.device_functions_, {})) {
    g_.device_scope_.clear();
    g_.colocation_scope_.clear();
    g_.control_scope_.clear();
  }
  ~OutsideScopes() {
    g_.device_scope_ = device_;
    g_.device_functions_ = std::move(functions_);
    g_.colocation_scope_ = colocation_;
    g_.control_scope_ = control_;
  }
  OutsideScopes(const OutsideScopes&) = delete;
  OutsideScopes& operator=(const OutsideScopes&) = delete;

 private:
  internal::GraphImpl& g_;
  std::string device_;
  std::vector<internal::Node*> colocation_;
  std::vector<internal::Node*> control_;
  std::vector<internal::GraphImpl::DeviceFunctionScope> functions_;
};

// `h` hours as a clock duration; at most a million hours (a larger count would overflow it).
std::chrono::system_clock::duration hours(double h) {
  using Hours = std::chrono::duration<double, std::ratio<3600>>;
  return std::chrono::duration_cast<std::chrono::system_clock::duration>(Hours(std::min(h, 1e6)));
}

}  // namespace

Saver::Saver(Graph& g, std::vector<Variable> var_list, SaverOptions options) {
  if (var_list.empty()) var_list = global_variables(g);
  std::vector<std::pair<std::string, Variable>> vars;
  for (auto& v : var_list) {
    std::string name = v.name();  // InvalidArgumentError for a default-constructed Variable
    vars.emplace_back(std::move(name), std::move(v));
  }
  state_ = make_state(g, std::move(vars), /*named=*/false, std::move(options));
}

std::shared_ptr<Saver::State> Saver::make_state(Graph& g, std::vector<std::pair<std::string, Variable>> vars, bool named,
                                                SaverOptions options) {
  if (vars.empty()) throw InvalidArgumentError("Saver: no variables to save");
  if (options.name.empty()) throw InvalidArgumentError("Saver: SaverOptions::name must not be empty");
  auto st = std::make_shared<State>();
  std::set<std::string> seen;
  std::map<internal::Node*, std::string> key_of;  // a variable restored under two names is a mistake (TF's too)
  for (const auto& [key, v] : vars) {
    const std::string& name = v.name();  // InvalidArgumentError for a default-constructed Variable
    if (&v.op().graph() != &g) throw InvalidArgumentError(fmt::format("Saver: variable '{}' is in another graph", name));
    if (named) {
      if (key.empty()) throw InvalidArgumentError(fmt::format("Saver: variable '{}' has an empty checkpoint name", name));
      auto [it, added] = key_of.emplace(v.op().node(), key);
      if (!added) {
        throw InvalidArgumentError(fmt::format("Saver: variable '{}' is listed under two checkpoint names, '{}' and '{}'",
                                               name, it->second, key));
      }
    } else if (!seen.insert(name).second) {
      throw InvalidArgumentError(fmt::format("Saver: variable '{}' is listed twice (checkpoint keys are variable names)", name));
    }
    st->names.push_back(key);
    st->values.push_back(v.value());
  }
  {
    OutsideScopes outside(g.impl());
    GraphScope scope = g.name_scope(options.name);
    std::vector<Operation> assigns;
    for (const auto& [key, v] : vars) {
      Output fed = ops::placeholder(g, v.dtype(), v.shape(), v.name() + "/restore_value");
      st->placeholders.push_back(fed);
      assigns.push_back(v.assign(fed).op());
    }
    st->restore_op = ops::group(assigns, "restore_all");
  }
  for (auto& [key, v] : vars) st->vars.push_back(std::move(v));
  if (!(options.keep_checkpoint_every_n_hours > 0)) options.keep_checkpoint_every_n_hours = 0;  // NaN too
  st->next_keep_time = std::chrono::system_clock::now() + hours(options.keep_checkpoint_every_n_hours);
  st->options = std::move(options);
  return st;
}

Saver::Saver(std::vector<Variable> var_list, SaverOptions options)
    : Saver(graph_of(var_list), var_list, std::move(options)) {}

std::string Saver::save(Session& session, const std::string& save_path_prefix, std::optional<int64_t> global_step) {
  State& st = checked(state_);
  const std::string path = global_step ? fmt::format("{}-{}", save_path_prefix, *global_step) : save_path_prefix;
  const fs::path file(path);
  if (save_path_prefix.empty() || file.filename().empty()) {
    throw InvalidArgumentError(fmt::format("Saver::save: '{}' names no file", path));
  }
  if (file.filename() == kIndexFileName) {
    throw InvalidArgumentError(fmt::format("Saver::save: '{}' would replace the directory's index file", path));
  }
  const fs::path dir = file.parent_path();
  std::error_code ec;
  if (!dir.empty() && !fs::is_directory(dir, ec)) {
    throw NotFoundError(fmt::format("Saver::save: the directory '{}' of '{}' does not exist", dir.string(), path));
  }

  std::lock_guard<std::mutex> lock(st.mu);
  remove_stale_temporaries(dir);
  const std::vector<Tensor> values = session.run(st.values);
  const bool existed = fs::exists(file, ec);
  write_checkpoint_file(path, st.names, values);

  // Bookkeeping: this checkpoint becomes the newest (saving to the same path again moves it).
  // Undone, with the new file, if the index cannot be written: no file is left unlisted.
  const std::vector<State::Kept> last_before = st.last;
  const auto next_keep_before = st.next_keep_time;
  const int max_to_keep = st.options.max_to_keep;
  std::vector<std::string> to_delete;
  if (max_to_keep > 0) {
    std::erase_if(st.last, [&](const State::Kept& k) { return k.path == path; });
    st.last.push_back({path, std::chrono::system_clock::now()});
    while (st.last.size() > static_cast<std::size_t>(max_to_keep)) {
      State::Kept oldest = std::move(st.last.front());
      st.last.erase(st.last.begin());
      if (st.options.keep_checkpoint_every_n_hours > 0 && oldest.written >= st.next_keep_time) {
        st.next_keep_time += hours(st.options.keep_checkpoint_every_n_hours);
        continue;  // kept for good, no longer managed
      }
      to_delete.push_back(std::move(oldest.path));
    }
  }
  std::vector<std::string> all;
  if (max_to_keep > 0) {
    for (const auto& k : st.last) all.push_back(k.path);
  } else {
    all.push_back(path);
  }
  try {
    write_index_file(dir, path, all);
  } catch (...) {
    st.last = last_before;
    st.next_keep_time = next_keep_before;
    if (!existed) fs::remove(file, ec);
    throw;
  }
  for (const auto& old : to_delete) {
    // Only a checkpoint file of this directory: the list may come from recover_last_checkpoints,
    // whose paths come from an index file anyone may have written.
    if (std::string why = why_not_deletable(dir, old); !why.empty()) {
      TESSERA_LOG(kWarning, "Saver: not deleting old checkpoint '{}': {}", old, why);
    } else if (!fs::remove(old, ec) && ec) {
      TESSERA_LOG(kWarning, "Saver: cannot delete old checkpoint '{}': {}", old, ec.message());
    }
  }
  return path;
}

void Saver::restore(Session& session, const std::string& save_path) const {
  const State& st = checked(state_);
  auto tensors = read_checkpoint(save_path);  // the whole file, verified, before any assignment
  FeedMap feeds;
  for (std::size_t i = 0; i < st.vars.size(); ++i) {
    const Variable& v = st.vars[i];
    // "'w'", or "'w/ExponentialMovingAverage' (restored into 'w')" for a Saver given names.
    const std::string what =
        st.names[i] == v.name() ? fmt::format("'{}'", v.name()) : fmt::format("'{}' (restored into '{}')", st.names[i], v.name());
    auto it = tensors.find(st.names[i]);
    if (it == tensors.end()) {
      throw NotFoundError(fmt::format("Saver::restore: variable {} not found in checkpoint '{}'", what, save_path));
    }
    const Tensor& t = it->second;
    if (t.dtype() != v.dtype()) {
      throw InvalidArgumentError(fmt::format("Saver::restore: variable {} is {}, checkpoint '{}' holds {}",
                                             what, dtype_name(v.dtype()), save_path, dtype_name(t.dtype())));
    }
    if (!v.shape().is_compatible_value(t.shape())) {
      throw InvalidArgumentError(fmt::format("Saver::restore: variable {} has shape {}, checkpoint '{}' holds {}",
                                             what, v.shape().to_string(), save_path, t.shape().to_string()));
    }
    feeds.emplace(st.placeholders[i], t);
  }
  session.run(std::vector<Output>{}, feeds, {st.restore_op});
}

std::vector<std::string> Saver::last_checkpoints() const {
  State& st = checked(state_);
  std::lock_guard<std::mutex> lock(st.mu);
  std::vector<std::string> out;
  for (const auto& k : st.last) out.push_back(k.path);
  return out;
}

void Saver::recover_last_checkpoints(const std::vector<std::string>& checkpoint_paths) {
  State& st = checked(state_);
  std::vector<State::Kept> kept;
  for (const auto& p : checkpoint_paths) {
    struct stat s {};
    if (::stat(p.c_str(), &s) != 0) continue;
    kept.push_back({p, std::chrono::system_clock::from_time_t(s.st_mtime)});
  }
  std::lock_guard<std::mutex> lock(st.mu);
  st.last = std::move(kept);
}

const std::vector<Variable>& Saver::var_list() const { return checked(state_).vars; }
Operation Saver::restore_op() const { return checked(state_).restore_op; }

// ---- Free functions ----

std::map<std::string, Tensor> read_checkpoint(const std::string& path) {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : read_checkpoint_file(path)) out.emplace(std::move(name), std::move(t));
  return out;
}

std::optional<CheckpointState> get_checkpoint_state(const std::string& checkpoint_dir) {
  const fs::path dir(checkpoint_dir);
  const fs::path file = index_file_path(dir);
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::nullopt;
  auto malformed = [&](const std::string& what) {
    return DataLossError(fmt::format("checkpoint index '{}': {}", file.string(), what));
  };
  // Bounded: an index lists a few paths, and anyone may have written the file.
  constexpr std::size_t kMaxIndexBytes = std::size_t{16} << 20;
  StatusOr<std::string> text = internal::read_small_file(file.string(), "checkpoint index", kMaxIndexBytes);
  if (!text.ok()) {
    if (text.status().code() == ErrorCode::kInvalidArgument) throw malformed(text.status().message());
    text.status().raise();
  }
  StatusOr<nlohmann::json> parsed = internal::parse_json_bounded(text.value(), "it");
  if (!parsed.ok()) throw malformed(parsed.status().message());
  const nlohmann::json& j = parsed.value();
  if (!j.is_object()) throw malformed("not a JSON object");
  auto latest = j.find("model_checkpoint_path");
  if (latest == j.end() || !latest->is_string()) throw malformed("no string \"model_checkpoint_path\"");
  CheckpointState state;
  state.model_checkpoint_path = resolve_in(dir, latest->get<std::string>());
  if (auto all = j.find("all_model_checkpoint_paths"); all != j.end()) {
    if (!all->is_array()) throw malformed("\"all_model_checkpoint_paths\" is not an array");
    for (const auto& p : *all) {
      if (!p.is_string()) throw malformed("\"all_model_checkpoint_paths\" holds a non-string");
      state.all_model_checkpoint_paths.push_back(resolve_in(dir, p.get<std::string>()));
    }
  }
  return state;
}

std::optional<std::string> latest_checkpoint(const std::string& checkpoint_dir) {
  auto state = get_checkpoint_state(checkpoint_dir);
  if (!state || state->model_checkpoint_path.empty()) return std::nullopt;
  std::error_code ec;
  if (!fs::is_regular_file(state->model_checkpoint_path, ec)) return std::nullopt;
  return state->model_checkpoint_path;
}

}  // namespace tessera::train
