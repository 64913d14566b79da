#include "tessera/tensor.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "core/half.h"
#include "core/host_blocks.h"
#include "core/status.h"
#include "core/tensor_buffer.h"

namespace tessera {

// ---- DType ----

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::String: return "string";
  }
  return "invalid";
}

namespace {
// dtype_size, inlinable in this file (calls to the exported function go through the PLT).
inline std::size_t size_of(DType dtype) {
  switch (dtype) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int32: return 4;
    case DType::Int64: return 8;
    case DType::Bool: return 1;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
    case DType::String: return sizeof(std::string);
  }
  return 0;
}
}  // namespace

std::size_t dtype_size(DType dtype) { return size_of(dtype); }

bool dtype_is_valid(DType dtype) { return size_of(dtype) != 0; }

bool dtype_is_floating(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float64 || dtype == DType::Float16 ||
         dtype == DType::BFloat16;
}

std::ostream& operator<<(std::ostream& os, DType dtype) { return os << dtype_name(dtype); }

// ---- Shape ----

namespace {
void check_rank(std::size_t rank) {
  if (rank > static_cast<std::size_t>(Shape::kMaxRank)) {
    throw InvalidArgumentError(
        fmt::format("shapes of rank {} are not supported (at most {})", rank, Shape::kMaxRank));
  }
}
void check_dim(int64_t d) {
  if (d < -1) throw InvalidArgumentError(fmt::format("invalid dimension {} (use -1 for unknown)", d));
}
// The product of the known dims `dims[0, rank)` must fit an int64 (as TensorFlow's TensorShape
// checks): else the element count wraps, to a small number or to 0, and every size derived from
// it is wrong. A zero dim makes any product fit.
void check_size(const std::array<int64_t, Shape::kMaxRank>& dims, int rank) {
  int64_t n = 1;
  bool overflow = false;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] == 0) return;
    if (dims[i] > 0) overflow = overflow || __builtin_mul_overflow(n, dims[i], &n);
  }
  if (overflow) {
    std::string s = "[";
    for (int i = 0; i < rank; ++i) {
      if (i > 0) s += ',';
      s += dims[i] < 0 ? std::string("?") : std::to_string(dims[i]);
    }
    throw InvalidArgumentError(fmt::format("shape {}] has more than 2^63 - 1 elements", s));
  }
}
}  // namespace

Shape::Shape(std::initializer_list<int64_t> dims) {
  check_rank(dims.size());
  for (int64_t d : dims) {
    check_dim(d);
    dims_[rank_++] = d;
  }
  check_size(dims_, rank_);
}

Shape::Shape(const std::vector<int64_t>& dims) {
  check_rank(dims.size());
  for (int64_t d : dims) {
    check_dim(d);
    dims_[rank_++] = d;
  }
  check_size(dims_, rank_);
}

Shape Shape::unknown() {
  Shape s;
  s.rank_ = -1;
  return s;
}

int64_t Shape::dim(int i) const {
  if (rank_ < 0) throw InvalidArgumentError("dim() of a shape of unknown rank");
  if (i < 0) i += rank_;
  if (i < 0 || i >= rank_) {
    throw InvalidArgumentError(fmt::format("dimension index {} out of range for shape {}", i, to_string()));
  }
  return dims_[i];
}

int64_t Shape::num_elements() const {
  if (rank_ < 0) return -1;
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[i] < 0) return -1;
    n *= dims_[i];
  }
  return n;
}

bool Shape::fully_defined() const { return num_elements() >= 0; }

std::vector<int64_t> Shape::dims() const {
  if (rank_ < 0) return {};
  return std::vector<int64_t>(dims_.begin(), dims_.begin() + rank_);
}

bool Shape::compatible_with(const Shape& o) const {
  if (rank_ < 0 || o.rank_ < 0) return true;
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[i] >= 0 && o.dims_[i] >= 0 && dims_[i] != o.dims_[i]) return false;
  }
  return true;
}

void Shape::set_dim(int i, int64_t value) {
  check_dim(value);
  if (rank_ < 0 || i < 0 || i >= rank_) throw InvalidArgumentError("set_dim: index out of range");
  const int64_t old = std::exchange(dims_[i], value);
  try {
    check_size(dims_, rank_);
  } catch (...) {
    dims_[i] = old;  // unchanged after a refusal
    throw;
  }
}

void Shape::append(int64_t value) {
  check_dim(value);
  if (rank_ < 0) throw InvalidArgumentError("append to a shape of unknown rank");
  check_rank(static_cast<std::size_t>(rank_) + 1);
  dims_[rank_] = value;         // past the rank: not part of the shape unless it passes
  check_size(dims_, rank_ + 1);
  ++rank_;
}

Shape Shape::sub_shape(int begin, int end) const {
  if (rank_ < 0) return unknown();
  if (end < 0) end = rank_;
  Shape s;
  for (int i = begin; i < end && i < rank_; ++i) s.dims_[s.rank_++] = dims_[i];
  return s;
}

std::string Shape::to_string() const {
  if (rank_ < 0) return "<unknown>";
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ",";
    s += dims_[i] < 0 ? std::string("?") : std::to_string(dims_[i]);
  }
  return s + "]";
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[i] != o.dims_[i]) return false;
  }
  return true;
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.to_string(); }

// ---- TensorBuffer ----

namespace internal {

namespace {

constexpr std::size_t kHeader = Tensor::kAlignment;
static_assert(sizeof(TensorBuffer) <= kHeader);

#if defined(__SANITIZE_ADDRESS__) || defined(TESSERA_TSAN)
constexpr bool kCacheSmallBuffers = false;  // let the sanitizers see every allocation
#else
constexpr bool kCacheSmallBuffers = true;
#endif

// Small tensors (scalars, short vectors) are the bulk of a fine-grained graph's allocations: each
// thread keeps a few blocks of one size for them, so a tiny op costs no trip to malloc.
constexpr std::size_t kSmallBytes = Tensor::kAlignment;
constexpr std::size_t kSmallBlock = kHeader + kSmallBytes;
constexpr std::size_t kSmallCacheMax = 256;

// Trivially constructed and destroyed, so an access needs no initialization guard (a guard is a
// TLS variable of its own, reached through __tls_get_addr); the blocks are freed at thread exit
// by SmallBlockCacheOwner, which a thread constructs when it first caches a block.
struct SmallBlockCache {
  std::size_t count;
  bool owned;  // this thread's SmallBlockCacheOwner exists
  bool dead;   // after thread exit (static destructors of the main thread): bypass
  void* blocks[kSmallCacheMax];
};
// initial-exec: a direct TLS access instead of a __tls_get_addr call (this is the hot path of
// every small op, and the library is loaded at start-up, not dlopen'ed late).
__attribute__((tls_model("initial-exec"))) constinit thread_local SmallBlockCache tls_small_blocks{};

struct SmallBlockCacheOwner {
  bool armed = false;
  ~SmallBlockCacheOwner() {
    auto& cache = tls_small_blocks;
    for (std::size_t i = 0; i < cache.count; ++i) std::free(cache.blocks[i]);
    cache.count = 0;
    cache.dead = true;
  }
};
thread_local SmallBlockCacheOwner tls_small_blocks_owner;

void release_small(TensorBuffer* b) {
  b->~TensorBuffer();
  auto& cache = tls_small_blocks;
  if (!cache.dead && cache.count < kSmallCacheMax) {
    if (!cache.owned) [[unlikely]] {
      tls_small_blocks_owner.armed = true;  // constructs it: its destructor runs at thread exit
      cache.owned = true;
    }
    cache.blocks[cache.count++] = b;
  } else {
    std::free(b);
  }
}

// A buffer of allocate_buffer's large path: header and data in one host block.
void release_large(TensorBuffer* b) {
  const std::size_t total = kHeader + ((b->bytes + Tensor::kAlignment - 1) / Tensor::kAlignment) * Tensor::kAlignment;
  b->~TensorBuffer();
  free_host_block(b, total);
}

// The buffer whose header starts `mem` and whose data starts kHeader bytes in, freed by `release`
// (null: std::free): host memory of its own (owned_host). ResourceExhausted for a null `mem`: the
// allocation of `bytes` failed.
inline TensorBuffer* buffer_in(void* mem, std::size_t bytes, void (*release)(TensorBuffer*)) {
  if (mem == nullptr) throw ResourceExhaustedError(fmt::format("failed to allocate {} bytes", bytes));
  auto* b = new (mem) TensorBuffer();
  b->owned_host = true;
  b->data = static_cast<char*>(mem) + kHeader;
  b->bytes = bytes;
  b->release = release;
  return b;
}

// TensorBuffer::allocate, callable inline from this file (the member itself is exported, so calls
// to it go through the PLT).
inline TensorBuffer* allocate_buffer(std::size_t bytes) {
  // One allocation holds the header and the data; the data starts kAlignment bytes in.
  if (kCacheSmallBuffers && bytes <= kSmallBytes) {
    auto& cache = tls_small_blocks;
    void* mem = cache.count > 0 ? cache.blocks[--cache.count] : std::aligned_alloc(Tensor::kAlignment, kSmallBlock);
    return buffer_in(mem, bytes, &release_small);
  }
  std::size_t total = kHeader + ((bytes + Tensor::kAlignment - 1) / Tensor::kAlignment) * Tensor::kAlignment;
  if (total >= kLargeHostBlockMin) {
    // Already-mapped pages from the large block cache (Note [Large host blocks]).
    return buffer_in(allocate_host_block(total), bytes, &release_large);
  }
  return buffer_in(std::aligned_alloc(Tensor::kAlignment, total), bytes, nullptr);
}

// String buffers hold constructed std::string objects: made here, destroyed by their release
// (never the small-block cache: its blocks are raw bytes).
void release_strings(TensorBuffer* b) {
  auto* p = static_cast<std::string*>(b->data);
  std::destroy_n(p, b->bytes / sizeof(std::string));
  b->~TensorBuffer();
  // Unsized: clang does not declare the sized aligned delete without -fsized-deallocation.
  ::operator delete(static_cast<void*>(b), std::align_val_t{Tensor::kAlignment});
}

TensorBuffer* allocate_strings(std::size_t count) {
  const std::size_t bytes = count * sizeof(std::string);
  void* mem = ::operator new(kHeader + bytes, std::align_val_t{Tensor::kAlignment}, std::nothrow);
  if (mem == nullptr) throw ResourceExhaustedError(fmt::format("failed to allocate {} strings", count));
  auto* b = new (mem) TensorBuffer();
  b->data = static_cast<char*>(mem) + kHeader;
  b->bytes = bytes;
  b->release = &release_strings;
  std::uninitialized_value_construct_n(static_cast<std::string*>(b->data), count);
  return b;
}

}  // namespace

TensorBuffer* TensorBuffer::allocate(std::size_t bytes) { return allocate_buffer(bytes); }

void copy_elements(Tensor& dst, int64_t dst_index, const Tensor& src, int64_t src_index, int64_t n) {
  TESSERA_CHECK(dst.dtype() == src.dtype());
  if (n <= 0) return;
  if (src.dtype() == DType::String) {
    const std::string* from = src.data<std::string>() + src_index;
    std::copy(from, from + n, dst.mutable_data<std::string>() + dst_index);
    return;
  }
  const std::size_t elem = dtype_size(src.dtype());
  std::memcpy(static_cast<char*>(dst.raw_mutable_data()) + dst_index * elem,
              static_cast<const char*>(src.raw_data()) + src_index * elem, static_cast<std::size_t>(n) * elem);
}

void buffer_free(TensorBuffer* b) noexcept {
  if (b->release) {
    b->release(b);
  } else {
    b->~TensorBuffer();
    std::free(b);
  }
}

bool pin_host_tensor(const Tensor& t) {
  // Smaller tensors are malloc's (or small views), and stage cheaply: no lock, no lookup for them
  // on every copy.
  if (t.is_null() || t.bytes() + kHeader < kLargeHostBlockMin || !internal::is_host_tensor(t)) return false;
  return pin_host_memory(t.raw_data(), t.bytes());
}

Tensor unowned_view(const Tensor& t) {
  if (t.is_null()) return Tensor();
  auto* b = new TensorBuffer();
  b->data = const_cast<void*>(t.raw_data());
  b->bytes = t.bytes();
  b->device = t.device();
  b->release = [](TensorBuffer* self) { delete self; };
  return adopt_buffer(b, t.dtype(), t.shape());
}

}  // namespace internal

// ---- Tensor ----

Tensor internal::adopt_buffer(TensorBuffer* buf, DType dtype, const Shape& shape) {
  TESSERA_CHECK(shape.fully_defined());
  TESSERA_CHECK(static_cast<std::size_t>(shape.num_elements()) * dtype_size(dtype) <= buf->bytes);
  Tensor t;
  t.buf_ = buf;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.num_elements_ = shape.num_elements();
  return t;
}

Tensor::Tensor(DType dtype, const Shape& shape) : dtype_(dtype), shape_(shape) {
  if (!dtype_is_valid(dtype)) {
    throw InvalidArgumentError(fmt::format("cannot allocate a tensor of invalid dtype {}", static_cast<int>(dtype)));
  }
  num_elements_ = shape.num_elements();  // -1 when not fully defined
  if (num_elements_ < 0) {
    throw InvalidArgumentError("cannot allocate a tensor of partial shape " + shape.to_string());
  }
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<std::size_t>(num_elements_), size_of(dtype), &bytes) ||
      bytes > static_cast<std::size_t>(std::numeric_limits<int64_t>::max())) {
    throw InvalidArgumentError(fmt::format("a {} tensor of shape {} needs more than 2^63 - 1 bytes",
                                           dtype_name(dtype), shape.to_string()));
  }
  buf_ = dtype == DType::String ? internal::allocate_strings(static_cast<std::size_t>(num_elements_))
                                 : internal::allocate_buffer(bytes);
}

Tensor Tensor::zeros(DType dtype, const Shape& shape) {
  Tensor t(dtype, shape);
  // String elements are constructed empty, TensorFlow's zero string.
  if (dtype != DType::String && t.bytes()) std::memset(t.raw_mutable_data(), 0, t.bytes());
  return t;
}

bool internal::is_host_tensor(const Tensor& t) noexcept {
  return t.buf_ != nullptr && (t.buf_->device.empty() || t.buf_->device == internal::kHostDeviceName);
}

std::string Tensor::device() const {
  if (!buf_) return "";
  return buf_->device.empty() ? std::string(internal::kHostDeviceName) : buf_->device;
}

void Tensor::throw_null_access() { throw InvalidArgumentError("access to the data of a null tensor"); }

void Tensor::check_vector_size(int64_t n, const Shape& shape) {
  if (!shape.fully_defined() || shape.num_elements() != n) {
    throw InvalidArgumentError(fmt::format("{} values do not fill shape {}", n, shape.to_string()));
  }
}

void Tensor::access_error(DType want, bool want_scalar) const {
  if (!buf_) throw_null_access();
  if (want != dtype_) {
    throw InvalidArgumentError(fmt::format("tensor has dtype {}, accessed as {}", dtype_name(dtype_),
                                           dtype_name(want)));
  }
  if (want_scalar && num_elements_ != 1) {
    throw InvalidArgumentError(
        fmt::format("scalar() of a tensor of shape {} ({} elements)", shape_.to_string(), num_elements_));
  }
  throw InternalError("access_error called for a valid access");
}

Tensor Tensor::reshaped(const Shape& shape) const {
  if (!shape.fully_defined() || shape.num_elements() != num_elements_) {
    throw InvalidArgumentError(fmt::format("cannot reshape a tensor of shape {} to {}",
                                           shape_.to_string(), shape.to_string()));
  }
  Tensor t(*this);
  t.shape_ = shape;
  return t;
}

Tensor Tensor::deep_copy() const {
  if (!buf_) return Tensor();
  Tensor t(dtype_, shape_);
  internal::copy_elements(t, 0, *this, 0, num_elements_);
  return t;
}

bool Tensor::is_buffer_shared() const {
  return buf_ && buf_->refs.load(std::memory_order_acquire) > 1;
}

bool Tensor::equals(const Tensor& o) const {
  if (is_null() || o.is_null()) return is_null() == o.is_null();
  if (dtype_ != o.dtype_ || shape_ != o.shape_) return false;
  if (dtype_ == DType::String) {
    const std::string* a = data<std::string>();
    return std::equal(a, a + num_elements_, o.data<std::string>());
  }
  return bytes() == 0 || std::memcmp(raw_data(), o.raw_data(), bytes()) == 0;
}

std::string Tensor::debug_string(int max_entries) const {
  if (!buf_) return "Tensor<null>";
  std::ostringstream os;
  os << "Tensor<" << dtype_name(dtype_) << " " << shape_.to_string() << ">[";
  int64_t n = std::min<int64_t>(num_elements_, max_entries);
  for (int64_t i = 0; i < n; ++i) {
    if (i) os << ", ";
    switch (dtype_) {
      case DType::Float32: os << static_cast<const float*>(buf_->data)[i]; break;
      case DType::Float64: os << static_cast<const double*>(buf_->data)[i]; break;
      case DType::Int32: os << static_cast<const int32_t*>(buf_->data)[i]; break;
      case DType::Int64: os << static_cast<const int64_t*>(buf_->data)[i]; break;
      case DType::Bool: os << (static_cast<const bool*>(buf_->data)[i] ? "true" : "false"); break;
      case DType::Float16: os << static_cast<const internal::float16_t*>(buf_->data)[i].to_float(); break;
      case DType::BFloat16: os << static_cast<const internal::bfloat16_t*>(buf_->data)[i].to_float(); break;
      case DType::String: os << '"' << static_cast<const std::string*>(buf_->data)[i] << '"'; break;
    }
  }
  if (n < num_elements_) os << ", ...";
  os << "]";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.debug_string(); }

}  // namespace tessera
