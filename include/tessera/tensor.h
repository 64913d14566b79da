// Dense tensors: dtype, shape and a refcounted, 64-byte aligned buffer.
//
//   auto t = tessera::Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 2, 3);
//   t.shape();                       // [2,3]
//   auto v = t.to_vector<float>();   // {1,2,3,4,5,6}
//   tessera::Tensor u = t;           // shares the buffer: no copy
//
// Copying a Tensor copies a handle, never the data; a tensor fed to, fetched from or passed inside
// a session is the same buffer. Writers that need a private copy (variables) check
// `is_buffer_shared()` and copy on write. A Tensor object is not synchronized: share it between
// threads by copying the handle, which is safe.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/errors.h"

namespace tessera {

// The values are TensorFlow's DataType numbers. Float16 (IEEE binary16) and BFloat16 have no host
// element type in this API: make and read them through ops::cast. Their arithmetic is float32
// rounded back, with float32 accumulation in reductions and matmul.
// String (TensorFlow's DT_STRING) holds std::string elements, in host memory only: ops with a
// string input or output run on the CPU, and arithmetic refuses them.
enum class DType : int {
  Float32 = 1, Float64 = 2, Int32 = 3, Int64 = 9, Bool = 10, String = 7, BFloat16 = 14, Float16 = 19
};

std::string_view dtype_name(DType dtype);  // "float32", ...
std::size_t dtype_size(DType dtype);  // String: sizeof(std::string) (elements are objects, not bytes)
bool dtype_is_floating(DType dtype);  // float32, float64, float16, bfloat16
bool dtype_is_valid(DType dtype);     // one of the enumerators (DType(77) is not)
std::ostream& operator<<(std::ostream& os, DType dtype);

template <class T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::Float32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::Float64; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::Bool; };
template <> struct DTypeOf<std::string> { static constexpr DType value = DType::String; };
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// A possibly partial shape. Shape{} is a scalar, -1 is an unknown dimension and Shape::unknown()
// has unknown rank. Ranks up to kMaxRank are supported (more raises InvalidArgumentError).
class Shape {
 public:
  static constexpr int kMaxRank = 8;

  Shape() = default;  // scalar
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);
  static Shape unknown();

  int rank() const { return rank_; }            // -1 when unknown
  bool unknown_rank() const { return rank_ < 0; }
  int64_t dim(int i) const;                     // negative i counts from the end
  // Product of the dims; -1 when the rank or a dim is unknown.
  int64_t num_elements() const;
  bool fully_defined() const;
  std::vector<int64_t> dims() const;

  // True when some fully defined shape matches both.
  bool compatible_with(const Shape& other) const;
  // True when `concrete` (fully defined) is one of the shapes this partial shape allows.
  bool is_compatible_value(const Shape& concrete) const { return compatible_with(concrete); }

  void set_dim(int i, int64_t value);
  void append(int64_t value);
  Shape sub_shape(int begin, int end = -1) const;  // dims [begin, end); end -1 = rank
  std::string to_string() const;                   // "[2,3]", "[?,3]", "<unknown>"

  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  int rank_ = 0;
  std::array<int64_t, kMaxRank> dims_{};
};
std::ostream& operator<<(std::ostream& os, const Shape& s);

namespace internal {
// The refcounted storage behind Tensor (internal: defined here so that handle copies inline).
// Host buffers are one aligned allocation: this header in the first 64 bytes, the data after it.
// Other allocators (devices, pinned memory, received frames) set `release` to free their memory.
struct TensorBuffer {
  std::atomic<int> refs{1};
  // The data is host memory of this buffer's own (allocate_buffer's): the holder of its only
  // reference may overwrite it as another tensor's (OpKernelContext::forward_input_or_allocate_output).
  // False for device memory, received frames, views and strings.
  bool owned_host = false;
  void* data = nullptr;
  std::size_t bytes = 0;
  // Frees the buffer (including this header) when set; else std::free of the header.
  void (*release)(TensorBuffer*) = nullptr;
  // Name of the device holding the data; "" = host memory.
  std::string device;

  static TensorBuffer* allocate(std::size_t bytes);
};
void buffer_free(TensorBuffer* b) noexcept;  // when the last reference goes
inline void buffer_ref(TensorBuffer* b) noexcept { b->refs.fetch_add(1, std::memory_order_relaxed); }
inline void buffer_unref(TensorBuffer* b) noexcept {
  // A sole owner needs no atomic read-modify-write: nobody else can take a new reference.
  if (b->refs.load(std::memory_order_acquire) == 1 || b->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    buffer_free(b);
  }
}
}  // namespace internal

class Tensor;
namespace internal {
// A tensor holding `buf` (its one reference moves in); device allocators build tensors this way.
// `shape` must be fully defined and fit `buf->bytes`. Defined in core/tensor.cc.
Tensor adopt_buffer(TensorBuffer* buf, DType dtype, const Shape& shape);
// True when `t` holds the only reference to host memory of its own buffer (TensorBuffer::owned_host):
// whoever owns `t` may then overwrite its data, nobody else can see it.
bool is_sole_owner_of_host_buffer(const Tensor& t) noexcept;
// True when `t` is not null and lives in host memory: t.device() is the host's, without building
// the name. Defined in core/tensor.cc.
bool is_host_tensor(const Tensor& t) noexcept;
}  // namespace internal

class Tensor {
 public:
  static constexpr std::size_t kAlignment = 64;

  Tensor() = default;  // null: no dtype, no data
  // Allocates an uninitialized tensor.
  Tensor(DType dtype, const Shape& shape);
  static Tensor zeros(DType dtype, const Shape& shape);

  template <class T> static Tensor scalar(T value) {
    Tensor t(dtype_of<T>, Shape{});
    *t.mutable_data<T>() = std::move(value);
    return t;
  }
  // String scalars: non-template, so that a literal ("a.csv") picks them.
  static Tensor scalar(std::string value) { return scalar<std::string>(std::move(value)); }
  static Tensor scalar(const char* value) { return scalar<std::string>(std::string(value)); }
  template <class T> static Tensor vector(std::vector<T> values) {
    const auto n = static_cast<int64_t>(values.size());
    return from_vector<T>(std::move(values), Shape{n});
  }
  static Tensor vector(std::vector<std::string> values) { return vector<std::string>(std::move(values)); }
  template <class T> static Tensor matrix(std::vector<T> values, int64_t rows, int64_t cols) {
    return from_vector<T>(std::move(values), Shape{rows, cols});
  }
  template <class T> static Tensor from_vector(std::vector<T> values, const Shape& shape) {
    check_vector_size(static_cast<int64_t>(values.size()), shape);
    Tensor t(dtype_of<T>, shape);
    if constexpr (std::is_same_v<T, bool>) {
      for (std::size_t i = 0; i < values.size(); ++i) t.mutable_data<bool>()[i] = values[i];
    } else if constexpr (std::is_same_v<T, std::string>) {
      std::string* p = t.mutable_data<std::string>();
      for (std::size_t i = 0; i < values.size(); ++i) p[i] = std::move(values[i]);
    } else if (!values.empty()) {
      std::memcpy(t.raw_mutable_data(), values.data(), values.size() * sizeof(T));
    }
    return t;
  }

  Tensor(const Tensor& o) noexcept
      : buf_(o.buf_), dtype_(o.dtype_), shape_(o.shape_), num_elements_(o.num_elements_) {
    if (buf_) internal::buffer_ref(buf_);
  }
  Tensor(Tensor&& o) noexcept
      : buf_(o.buf_), dtype_(o.dtype_), shape_(o.shape_), num_elements_(o.num_elements_) {
    o.buf_ = nullptr;
  }
  Tensor& operator=(const Tensor& o) noexcept {
    if (o.buf_) internal::buffer_ref(o.buf_);
    if (buf_) internal::buffer_unref(buf_);
    buf_ = o.buf_;
    dtype_ = o.dtype_;
    shape_ = o.shape_;
    num_elements_ = o.num_elements_;
    return *this;
  }
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      if (buf_) internal::buffer_unref(buf_);
      buf_ = o.buf_;
      o.buf_ = nullptr;
      dtype_ = o.dtype_;
      shape_ = o.shape_;
      num_elements_ = o.num_elements_;
    }
    return *this;
  }
  ~Tensor() {
    if (buf_) internal::buffer_unref(buf_);
  }

  bool is_null() const { return buf_ == nullptr; }
  // Drops the reference: the tensor becomes null.
  void reset() noexcept {
    if (buf_) internal::buffer_unref(buf_);
    buf_ = nullptr;
  }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t num_elements() const { return num_elements_; }
  std::size_t bytes() const { return static_cast<std::size_t>(num_elements_) * dtype_size(dtype_); }
  // Full name of the device whose memory holds the data.
  std::string device() const;

  template <class T> T scalar() const {
    check_access(dtype_of<T>, /*want_scalar=*/true);
    return *data<T>();
  }
  template <class T> std::vector<T> to_vector() const {
    check_access(dtype_of<T>, /*want_scalar=*/false);
    const T* p = data<T>();
    return std::vector<T>(p, p + num_elements_);
  }

  // Typed access to the host buffer. The dtype must match (checked: InvalidArgumentError).
  template <class T> const T* data() const {
    check_access(dtype_of<T>, false);
    return static_cast<const T*>(raw_data());
  }
  template <class T> T* mutable_data() {
    check_access(dtype_of<T>, false);
    return static_cast<T*>(raw_mutable_data());
  }
  const void* raw_data() const {
    if (!buf_) throw_null_access();
    return buf_->data;
  }
  void* raw_mutable_data() {
    if (!buf_) throw_null_access();
    return buf_->data;
  }

  // A tensor with the same buffer and a new shape of the same number of elements.
  Tensor reshaped(const Shape& shape) const;
  // A deep copy in a fresh buffer.
  Tensor deep_copy() const;
  // True when another Tensor shares this buffer (copy-on-write writers check this).
  bool is_buffer_shared() const;
  // Elementwise equality of dtype, shape and values (bytes; strings by value).
  bool equals(const Tensor& other) const;
  // Short printable form: dtype, shape and up to `max_entries` values.
  std::string debug_string(int max_entries = 16) const;

 private:
  friend Tensor internal::adopt_buffer(internal::TensorBuffer* buf, DType dtype, const Shape& shape);
  friend bool internal::is_sole_owner_of_host_buffer(const Tensor& t) noexcept;
  friend bool internal::is_host_tensor(const Tensor& t) noexcept;
  static void check_vector_size(int64_t n, const Shape& shape);
  void check_access(DType want, bool want_scalar) const {
    if (buf_ == nullptr || want != dtype_ || (want_scalar && num_elements_ != 1)) {
      access_error(want, want_scalar);
    }
  }
  [[noreturn]] void access_error(DType want, bool want_scalar) const;
  [[noreturn]] static void throw_null_access();

  internal::TensorBuffer* buf_ = nullptr;  // Owned reference.
  DType dtype_ = DType::Float32;
  Shape shape_;
  int64_t num_elements_ = 0;
};
std::ostream& operator<<(std::ostream& os, const Tensor& t);

inline bool internal::is_sole_owner_of_host_buffer(const Tensor& t) noexcept {
  // A sole holder's count cannot rise meanwhile: nobody else has a handle to copy.
  return t.buf_ != nullptr && t.buf_->owned_host && t.buf_->refs.load(std::memory_order_acquire) == 1;
}

}  // namespace tessera
