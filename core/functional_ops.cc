// TensorFlow's map_fn, scan, foldl and foldr (tessera/control_flow.h), as TF 1.15 builds them: a
// while loop over the elements, which reads each from a TensorArray the elements were unstacked
// into (captured by the loop) and writes each result into another (a loop variable the body only
// writes, so it keeps no history under a gradient: Note [Tensor arrays] in
// core/tensor_array_ops.cc).
#include <fmt/format.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/op_functions.h"
#include "tessera/control_flow.h"
#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/tensor_array.h"

namespace tessera::ops {
namespace {

// The number of elements of `elems` (split along dim 0): a constant when the graph knows it.
Output num_elements(Graph& g, const Output& elems, const std::string& what) {
  const Shape s = elems.shape();
  if (!s.unknown_rank() && s.rank() < 1) {
    throw InvalidArgumentError(fmt::format("{}: elems {} is a scalar; it needs a dimension to split", what, elems.name()));
  }
  if (!s.unknown_rank() && s.dim(0) >= 0) return constant(g, static_cast<int32_t>(s.dim(0)));
  return gather(shape(elems), constant(g, 0));
}

void expect_elems(const std::vector<Output>& elems, const std::string& what) {
  if (elems.empty()) throw InvalidArgumentError(fmt::format("{}: no elems", what));
  for (std::size_t j = 0; j < elems.size(); ++j) {
    if (elems[j].is_null()) throw InvalidArgumentError(fmt::format("{}: elems[{}] is null", what, j));
  }
}

// The elements of `elems`, one array each.
std::vector<TensorArray> unstacked(Graph& g, const std::vector<Output>& elems, const Output& n,
                                   const std::string& what) {
  std::vector<TensorArray> out;
  for (const Output& e : elems) {
    (void)num_elements(g, e, what);  // (a scalar is an error)
    out.push_back(TensorArray(g, e.dtype(), n, {.name = what + "_elems"}).unstack(e));
  }
  return out;
}

// scan's loop, or a fold's (`stack` false: only the last accumulator).
Output scan_loop(const std::function<Output(Output, Output)>& fn, Output elems, Output initializer, bool reverse,
                 bool stack, const std::string& name) {
  if (!fn) throw InvalidArgumentError(fmt::format("{}: fn is not callable", name));
  expect_elems({elems}, name);
  Graph& g = internal::graph_of(elems);
  const Output n = num_elements(g, elems, name);
  const TensorArray in = unstacked(g, {elems}, n, name)[0];
  const Output zero = constant(g, 0), one = constant(g, 1);
  // Element k of the pass (k = 0, 1, ...): index k, or n - 1 - k in reverse.
  auto position = [&](const Output& k) { return reverse ? sub(sub(n, one), k) : k; };
  Output start = zero;
  const bool from_first = initializer.is_null();
  if (from_first) {
    // TF: the first element is the first accumulator, and the pass starts at the next one.
    initializer = in.read(position(zero));
    start = one;
  }
  const TensorArray out(g, initializer.dtype(), n, {.name = name + "_results"});
  // (From the first element, that element is the first result, as TF's.)
  const TensorArray first = stack && from_first ? out.write(position(zero), initializer) : out;
  WhileOptions options;
  options.name = name;
  const std::vector<Output> r = while_loop(
      [&](const std::vector<Output>& v) { return less(v[0], n); },
      [&](const std::vector<Output>& v) {
        const Output at = position(v[0]);
        Output a = fn(v[1], in.read(at));
        if (a.is_null()) throw InvalidArgumentError(fmt::format("{}: fn returned a null tensor", name));
        if (a.dtype() != initializer.dtype()) {
          throw InvalidArgumentError(fmt::format("{}: fn returned {} for an accumulator of {}", name,
                                                 dtype_name(a.dtype()), dtype_name(initializer.dtype())));
        }
        std::vector<Output> next{add(v[0], one), a};
        if (stack) next.push_back(first.with_flow(v[2]).write(at, a).flow());
        return next;
      },
      stack ? std::vector<Output>{start, initializer, first.flow()} : std::vector<Output>{start, initializer},
      options);
  return stack ? first.with_flow(r[2]).stack() : r[1];
}

}  // namespace

std::vector<Output> map_fn(const std::function<std::vector<Output>(const std::vector<Output>&)>& fn,
                           const std::vector<Output>& elems, std::vector<DType> dtypes, std::string name) {
  if (name.empty()) name = "map";
  if (!fn) throw InvalidArgumentError(fmt::format("{}: fn is not callable", name));
  expect_elems(elems, name);
  Graph& g = internal::graph_of(elems[0]);
  if (dtypes.empty()) {
    for (const Output& e : elems) dtypes.push_back(e.dtype());
  }
  const Output n = num_elements(g, elems[0], name);
  const std::vector<TensorArray> in = unstacked(g, elems, n, name);
  std::vector<TensorArray> out;
  std::vector<Output> vars{constant(g, 0)};
  for (DType d : dtypes) {
    out.push_back(TensorArray(g, d, n, {.name = name + "_results"}));
    vars.push_back(out.back().flow());
  }
  WhileOptions options;
  options.name = name;
  const std::vector<Output> r = while_loop(
      [&](const std::vector<Output>& v) { return less(v[0], n); },
      [&](const std::vector<Output>& v) {
        std::vector<Output> x;
        for (const TensorArray& a : in) x.push_back(a.read(v[0]));
        const std::vector<Output> y = fn(x);
        if (y.size() != dtypes.size()) {
          throw InvalidArgumentError(
              fmt::format("{}: fn returned {} results where {} are expected", name, y.size(), dtypes.size()));
        }
        std::vector<Output> next{add(v[0], constant(g, 1))};
        for (std::size_t j = 0; j < y.size(); ++j) {
          if (y[j].is_null()) throw InvalidArgumentError(fmt::format("{}: fn's result {} is null", name, j));
          if (y[j].dtype() != dtypes[j]) {
            throw InvalidArgumentError(fmt::format("{}: fn's result {} is {}, the dtype given is {}", name, j,
                                                   dtype_name(y[j].dtype()), dtype_name(dtypes[j])));
          }
          next.push_back(out[j].with_flow(v[1 + j]).write(v[0], y[j]).flow());
        }
        return next;
      },
      vars, options);
  std::vector<Output> results;
  for (std::size_t j = 0; j < out.size(); ++j) results.push_back(out[j].with_flow(r[1 + j]).stack());
  return results;
}

Output map_fn(const std::function<Output(Output)>& fn, Output elems, std::optional<DType> dtype, std::string name) {
  if (!fn) throw InvalidArgumentError(fmt::format("{}: fn is not callable", name.empty() ? "map" : name));
  if (elems.is_null()) throw InvalidArgumentError(fmt::format("{}: elems is null", name.empty() ? "map" : name));
  return map_fn([&](const std::vector<Output>& x) { return std::vector<Output>{fn(x[0])}; }, {elems},
                {dtype.value_or(elems.dtype())}, std::move(name))[0];
}

Output scan(const std::function<Output(Output, Output)>& fn, Output elems, Output initializer, bool reverse,
            std::string name) {
  return scan_loop(fn, std::move(elems), std::move(initializer), reverse, true, name.empty() ? "scan" : name);
}

Output foldl(const std::function<Output(Output, Output)>& fn, Output elems, Output initializer, std::string name) {
  return scan_loop(fn, std::move(elems), std::move(initializer), false, false, name.empty() ? "foldl" : name);
}

Output foldr(const std::function<Output(Output, Output)>& fn, Output elems, Output initializer, std::string name) {
  return scan_loop(fn, std::move(elems), std::move(initializer), true, false, name.empty() ? "foldr" : name);
}

}  // namespace tessera::ops
