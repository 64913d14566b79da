// NumPy's str() of what Session.run returns (host/numpy_format.h). The steps are those of NumPy's
// arrayprint: a formatter chosen from the elements that will be shown (FloatingFormat,
// IntegerFormat, BoolFormat, repr for the bytes of an object array), then _formatArray's layout.
#include "host/numpy_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/half.h"

namespace tessera::internal {
namespace {

// NumPy's print options, as TF's LoggingTensorHook leaves them (it sets suppress=True only).
constexpr int kPrecision = 8;
constexpr int64_t kThreshold = 1000;  // more elements than this: only kEdgeItems at each end
constexpr int64_t kEdgeItems = 3;
constexpr int kLineWidth = 75;

enum class FloatKind { Half, Single, Double };

// A finite value in decimal: digits[0] '.' digits[1..] times 10^exponent.
struct Decimal {
  bool negative = false;
  std::string digits;  // at least one digit
  int exponent = 0;
};

// The same value written positionally: int_part '.' frac.
struct Positional {
  bool negative = false;
  std::string int_part;
  std::string frac;
};

std::string printf_double(const char* format, int precision, double v) {
  char buf[512];  // "%.8f" of the largest double is 309 digits and 9 more
  const int n = std::snprintf(buf, sizeof buf, format, precision, v);
  return std::string(buf, static_cast<std::size_t>(std::clamp(n, 0, static_cast<int>(sizeof buf) - 1)));
}

// "-d.ddde+XX", as printf's %e and to_chars' scientific write it.
Decimal parse_scientific(std::string_view s) {
  Decimal d;
  std::size_t i = 0;
  if (!s.empty() && s[0] == '-') {
    d.negative = true;
    i = 1;
  }
  const std::size_t e = s.find('e', i);
  for (std::size_t k = i; k < e && k < s.size(); ++k) {
    if (s[k] != '.') d.digits += s[k];
  }
  if (e != std::string_view::npos) d.exponent = std::atoi(std::string(s.substr(e + 1)).c_str());
  return d;
}

// "-ddd.ddd", as printf's %f writes it.
Positional parse_fixed(std::string_view s) {
  Positional p;
  if (!s.empty() && s[0] == '-') {
    p.negative = true;
    s.remove_prefix(1);
  }
  const std::size_t dot = s.find('.');
  p.int_part = std::string(s.substr(0, dot));
  if (dot != std::string_view::npos) p.frac = std::string(s.substr(dot + 1));
  return p;
}

void strip_trailing_zeros(std::string& digits, std::size_t keep) {
  while (digits.size() > keep && digits.back() == '0') digits.pop_back();
}

// True when the decimal `d` reads back as the float16 whose magnitude bits are `mag` (finite,
// nonzero): closer to it than to either neighbour, or halfway with its mantissa even.
bool reads_back_as_half(double d, uint16_t mag) {
  const double h = half_bits_to_float(mag);
  const double below = mag == 1 ? 0.0 : half_bits_to_float(static_cast<uint16_t>(mag - 1));
  const double above = mag == 0x7bff ? 65536.0 : half_bits_to_float(static_cast<uint16_t>(mag + 1));
  const double a = std::fabs(d);
  const double low = (below + h) / 2;  // exact: halves have 11 significant bits
  const double high = (h + above) / 2;
  const bool even = (mag & 1u) == 0;
  return (a > low || (a == low && even)) && (a < high || (a == high && even));
}

// The fewest digits that read back as `v` in its own type (NumPy's Dragon4, unique mode).
Decimal shortest(double v, FloatKind kind) {
  if (v == 0) return Decimal{std::signbit(v), "0", 0};
  char buf[64];
  if (kind == FloatKind::Double || kind == FloatKind::Single) {
    const auto r = kind == FloatKind::Double
                       ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific)
                       : std::to_chars(buf, buf + sizeof buf, static_cast<float>(v), std::chars_format::scientific);
    return parse_scientific(std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
  }
  const auto mag = static_cast<uint16_t>(float_to_half_bits(static_cast<float>(v)) & 0x7fffu);
  for (int digits = 1; digits < 5; ++digits) {
    const std::string s = printf_double("%.*e", digits - 1, v);
    if (reads_back_as_half(std::strtod(s.c_str(), nullptr), mag)) return parse_scientific(s);
  }
  return parse_scientific(printf_double("%.*e", 4, v));  // 5 significant digits tell every half apart
}

Positional to_positional(const Decimal& d) {
  Positional p;
  p.negative = d.negative;
  const int n = static_cast<int>(d.digits.size());
  if (d.digits == "0") {
    p.int_part = "0";
  } else if (d.exponent >= 0) {
    p.int_part = d.digits.substr(0, static_cast<std::size_t>(std::min(n, d.exponent + 1)));
    if (n < d.exponent + 1) p.int_part.append(static_cast<std::size_t>(d.exponent + 1 - n), '0');
    if (n > d.exponent + 1) p.frac = d.digits.substr(static_cast<std::size_t>(d.exponent + 1));
  } else {
    p.int_part = "0";
    p.frac = std::string(static_cast<std::size_t>(-d.exponent - 1), '0') + d.digits;
  }
  return p;
}

// dragon4_positional(unique=True, precision=kPrecision, trim='.'): the shortest digits, or the
// value rounded to kPrecision decimals (ties to even, as printf) when those need more.
Positional positional(double v, FloatKind kind) {
  const Decimal d = shortest(v, kind);
  const int frac_digits = std::max(0, static_cast<int>(d.digits.size()) - 1 - d.exponent);
  if (frac_digits <= kPrecision) return to_positional(d);
  Positional p = parse_fixed(printf_double("%.*f", kPrecision, v));
  strip_trailing_zeros(p.frac, 0);
  return p;
}

// dragon4_scientific(unique=True, precision=kPrecision, trim='.').
Decimal scientific(double v, FloatKind kind) {
  Decimal d = shortest(v, kind);
  if (static_cast<int>(d.digits.size()) - 1 <= kPrecision) return d;
  d = parse_scientific(printf_double("%.*e", kPrecision, v));
  strip_trailing_zeros(d.digits, 1);
  return d;
}

int exponent_digits(int exponent) {
  return std::max(2, static_cast<int>(std::to_string(std::abs(exponent)).size()));
}

std::string exponent_text(int exponent, int digits) {
  return fmt::format("e{}{:0{}d}", exponent < 0 ? '-' : '+', std::abs(exponent), digits);
}

std::string non_finite(double v) {
  if (std::isnan(v)) return "nan";
  return v < 0 ? "-inf" : "inf";
}

// NumPy's scalar str: positional from 1e-4 up to a bound that depends on the type, else
// scientific; the shortest digits either way ("1.0", "0.64000005", "1e+16", "1.5e-05").
std::string scalar_float(double v, FloatKind kind) {
  if (!std::isfinite(v)) return non_finite(v);
  const double bound = kind == FloatKind::Half ? 1e3 : kind == FloatKind::Single ? 1e6 : 1e16;
  const double a = std::fabs(v);
  const Decimal d = shortest(v, kind);
  if (a == 0 || (a >= 1e-4 && a < bound)) {
    const Positional p = to_positional(d);
    return (p.negative ? "-" : "") + p.int_part + "." + (p.frac.empty() ? "0" : p.frac);
  }
  std::string s = (d.negative ? "-" : "") + d.digits.substr(0, 1);
  if (d.digits.size() > 1) s += "." + d.digits.substr(1);
  return s + exponent_text(d.exponent, exponent_digits(d.exponent));
}

std::string pad_left(std::string s, std::size_t width) {
  if (s.size() < width) s.insert(0, width - s.size(), ' ');
  return s;
}

// NumPy's FloatingFormat (floatmode 'maxprec', suppress=True), fitted to the elements shown: one
// notation for all of them, the integer parts right-aligned, the fractions padded on the right
// with spaces (positional) or with digits to a common count (scientific).
class FloatFormat {
 public:
  FloatFormat(const std::vector<double>& shown, FloatKind kind) : kind_(kind) {
    double max_abs = 0;
    bool any_finite = false;
    bool any_non_finite = false;
    bool negative_inf = false;
    for (double x : shown) {
      if (std::isfinite(x)) {
        any_finite = true;
        max_abs = std::max(max_abs, std::fabs(x));
      } else {
        any_non_finite = true;
        negative_inf = negative_inf || (std::isinf(x) && x < 0);
      }
    }
    // Exponent notation from 10^min(8, the type's decimal precision) up (NumPy 2).
    scientific_ = max_abs >= (kind == FloatKind::Half ? 1e3 : kind == FloatKind::Single ? 1e6 : 1e8);
    if (any_finite && scientific_) {
      for (double x : shown) {
        if (!std::isfinite(x)) continue;
        const Decimal d = scientific(x, kind);
        precision_ = std::max(precision_, static_cast<int>(d.digits.size()) - 1);
        pad_left_ = std::max(pad_left_, d.negative ? 2 : 1);
        exp_size_ = std::max(exp_size_, exponent_digits(d.exponent));
      }
      pad_right_ = exp_size_ + 2 + precision_;
    } else if (any_finite) {
      for (double x : shown) {
        if (!std::isfinite(x)) continue;
        const Positional p = positional(x, kind);
        pad_left_ = std::max(pad_left_, static_cast<int>(p.int_part.size()) + (p.negative ? 1 : 0));
        pad_right_ = std::max(pad_right_, static_cast<int>(p.frac.size()));
      }
    }
    if (any_non_finite) {  // room for "nan" and "-inf"
      const int offset = pad_right_ + 1;
      pad_left_ = std::max({pad_left_, 3 - offset, 3 + (negative_inf ? 1 : 0) - offset});
    }
  }

  std::string operator()(double x) const {
    if (!std::isfinite(x)) return pad_left(non_finite(x), static_cast<std::size_t>(pad_left_ + pad_right_ + 1));
    if (scientific_) {
      // Every element with precision_ digits of its exact value (min_digits = precision).
      const Decimal d = parse_scientific(printf_double("%.*e", precision_, x));
      return pad_left((d.negative ? "-" : "") + d.digits.substr(0, 1), static_cast<std::size_t>(pad_left_)) + "." +
             d.digits.substr(1) + exponent_text(d.exponent, exp_size_);
    }
    const Positional p = positional(x, kind_);
    std::string frac = p.frac;
    frac.append(static_cast<std::size_t>(std::max(0, pad_right_ - static_cast<int>(frac.size()))), ' ');
    return pad_left((p.negative ? "-" : "") + p.int_part, static_cast<std::size_t>(pad_left_)) + "." + frac;
  }

 private:
  FloatKind kind_;
  bool scientific_ = false;
  int precision_ = 0;
  int pad_left_ = 0;
  int pad_right_ = 0;
  int exp_size_ = 0;
};

// Python's repr of bytes: b'...', or b"..." when the bytes hold a ' and no ".
std::string bytes_repr(const std::string& s) {
  const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out = "b";
  out += quote;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < 0x20 || u >= 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

// ml_dtypes prints a bfloat16 as printf's %g.
std::string bfloat16_text(double v) {
  if (std::isnan(v)) return "nan";
  return printf_double("%.*g", 6, v);
}

FloatKind float_kind(DType dtype) {
  switch (dtype) {
    case DType::Float16: return FloatKind::Half;
    case DType::Float32: return FloatKind::Single;
    default: return FloatKind::Double;
  }
}

double float_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::Float32: return t.data<float>()[i];
    case DType::Float64: return t.data<double>()[i];
    case DType::Float16: return static_cast<const float16_t*>(t.raw_data())[i].to_float();
    case DType::BFloat16: return static_cast<const bfloat16_t*>(t.raw_data())[i].to_float();
    default: return 0;
  }
}

int64_t int_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::Int32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
}

std::string scalar_str(const Tensor& t) {
  switch (t.dtype()) {
    case DType::Float32:
    case DType::Float64:
    case DType::Float16: return scalar_float(float_at(t, 0), float_kind(t.dtype()));
    case DType::BFloat16: return bfloat16_text(float_at(t, 0));
    case DType::Int32:
    case DType::Int64: return std::to_string(int_at(t, 0));
    case DType::Bool: return t.data<bool>()[0] ? "True" : "False";
    case DType::String: return bytes_repr(t.data<std::string>()[0]);
  }
  return t.debug_string();
}

// _formatArray: nested brackets; the last axis's elements separated by a space and wrapped at the
// line width; the other axes' rows on lines of their own, a blank line more per axis further out;
// past kThreshold elements only kEdgeItems at each end of a longer axis, and "..." between.
class Layout {
 public:
  Layout(const Shape& shape, bool summarize, std::function<std::string(int64_t)> element)
      : shape_(shape), summarize_(summarize), element_(std::move(element)), strides_(static_cast<std::size_t>(shape.rank()), 1) {
    for (int d = shape.rank() - 2; d >= 0; --d) strides_[d] = strides_[d + 1] * shape.dim(d + 1);
  }

  std::string format() const { return recurse(0, 0, " ", kLineWidth); }

  // The flat indices of the elements shown, in order.
  std::vector<int64_t> shown() const {
    std::vector<int64_t> out;
    collect(0, 0, out);
    return out;
  }

 private:
  bool summarized(int axis) const { return summarize_ && 2 * kEdgeItems < shape_.dim(axis); }

  void collect(int axis, int64_t offset, std::vector<int64_t>& out) const {
    if (axis == shape_.rank()) {
      out.push_back(offset);
      return;
    }
    const int64_t n = shape_.dim(axis);
    for (int64_t i = 0; i < n; ++i) {
      if (summarized(axis) && i == kEdgeItems) i = n - kEdgeItems;
      collect(axis + 1, offset + i * strides_[axis], out);
    }
  }

  std::string recurse(int axis, int64_t offset, const std::string& hanging, int width) const {
    if (axis == shape_.rank()) return element_(offset);
    const int64_t n = shape_.dim(axis);
    const bool summary = summarized(axis);
    const int64_t leading = summary ? kEdgeItems : 0;
    const int64_t trailing = summary ? kEdgeItems : n;
    const std::string next_hanging = hanging + ' ';
    auto child = [&](int64_t i) { return recurse(axis + 1, offset + i * strides_[axis], next_hanging, width - 1); };
    std::string s;
    if (axis + 1 == shape_.rank()) {
      const std::size_t elem_width = static_cast<std::size_t>(width - 1);  // room for the ']'
      std::string line = hanging;
      auto extend = [&](const std::string& word) {
        if (line.size() + word.size() > elem_width && line.size() > hanging.size()) {
          while (!line.empty() && line.back() == ' ') line.pop_back();
          s += line + '\n';
          line = hanging;
        }
        line += word;
      };
      for (int64_t i = 0; i < leading; ++i) {
        extend(child(i));
        line += ' ';
      }
      if (summary) {
        extend("...");
        line += ' ';
      }
      for (int64_t i = trailing; i > 1; --i) {
        extend(child(n - i));
        line += ' ';
      }
      extend(child(n - 1));
      s += line;
    } else {
      const std::string line_sep(static_cast<std::size_t>(shape_.rank() - axis - 1), '\n');
      for (int64_t i = 0; i < leading; ++i) s += hanging + child(i) + line_sep;
      if (summary) s += hanging + "..." + line_sep;
      for (int64_t i = trailing; i > 1; --i) s += hanging + child(n - i) + line_sep;
      s += hanging + child(n - 1);
    }
    return "[" + s.substr(hanging.size()) + "]";
  }

  const Shape& shape_;
  const bool summarize_;
  const std::function<std::string(int64_t)> element_;
  std::vector<int64_t> strides_;
};

std::string array_str(const Tensor& t) {
  if (t.num_elements() == 0) return "[]";
  const bool summarize = t.num_elements() > kThreshold;
  const Shape& shape = t.shape();
  const std::vector<int64_t> shown = Layout(shape, summarize, nullptr).shown();
  switch (t.dtype()) {
    case DType::Float32:
    case DType::Float64:
    case DType::Float16: {
      std::vector<double> values;
      values.reserve(shown.size());
      for (int64_t i : shown) values.push_back(float_at(t, i));
      const FloatFormat format(values, float_kind(t.dtype()));
      return Layout(shape, summarize, [&](int64_t i) { return format(float_at(t, i)); }).format();
    }
    case DType::BFloat16:
      return Layout(shape, summarize, [&](int64_t i) { return bfloat16_text(float_at(t, i)); }).format();
    case DType::Int32:
    case DType::Int64: {
      std::size_t width = 0;
      for (int64_t i : shown) width = std::max(width, std::to_string(int_at(t, i)).size());
      return Layout(shape, summarize, [&](int64_t i) { return pad_left(std::to_string(int_at(t, i)), width); }).format();
    }
    case DType::Bool:
      return Layout(shape, summarize, [&](int64_t i) { return std::string(t.data<bool>()[i] ? " True" : "False"); }).format();
    case DType::String:
      return Layout(shape, summarize, [&](int64_t i) { return bytes_repr(t.data<std::string>()[i]); }).format();
  }
  return t.debug_string();
}

}  // namespace

std::string numpy_str(const Tensor& t) {
  return t.shape().rank() == 0 ? scalar_str(t) : array_str(t);
}

}  // namespace tessera::internal
