// TensorFlow's tf.TensorArray: a list of tensors of one dtype and shape, written and read by index
// (most often one element per iteration of a while loop), then stacked into one tensor.
//
//   // The squares of 0..n-1, as a loop writes them (n an int32 scalar; zero, one int32 constants).
//   TensorArray ta(g, DType::Float32, n);
//   std::vector<Output> r = ops::while_loop(
//       [&](const std::vector<Output>& v) { return ops::less(v[0], n); },
//       [&](const std::vector<Output>& v) {
//         Output x = ops::cast(v[0], DType::Float32);
//         return std::vector<Output>{ops::add(v[0], one), ta.with_flow(v[1]).write(v[0], ops::square(x)).flow()};
//       },
//       {zero, ta.flow()});
//   Output squares = ta.with_flow(r[1]).stack();   // [n]
//
// An array is a value, as TensorFlow 2's TensorList (Note [Tensor arrays] in
// core/tensor_array_ops.cc): write and scatter return a new array (TF1's `ta = ta.write(i, x)`),
// and flow() is the tensor that carries it, which a while loop takes as a loop variable and
// with_flow() turns back into an array. Its value is the stacked tensor itself, [size, element
// shape...], so stack() costs nothing, and a loop's write touches one element (the loop hands the
// array to its write, which reuses its buffer).
//
// Where tessera differs from TF 1.15, and why:
//  - An element never written reads as zeros (TF2's TensorList), once the element shape is known
//    (an element_shape given, or any element written); TF1 raises. Writing an index twice keeps
//    the last value (TF2), where TF1 raises; a scatter naming one index twice is an error.
//  - Every element has one shape (TF1's infer_shape=True), so concat() joins elements of one first
//    dim and there is no split() into elements of differing ones; no clear_after_read (arrays
//    are values: reading never consumes).
//  - dynamic_size arrays grow to the index written (one copy of the array per growth).
//  - Gradients flow through write, read, scatter, gather, stack and unstack, inside while loops
//    too; gradient arrays are not shared between reads (TF1's grad(source)): an element read
//    twice receives both gradients, summed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/graph.h"

namespace tessera {

struct TensorArrayOptions {
  // Writes past the end grow the array (TF's dynamic_size); otherwise they are InvalidArgumentError.
  bool dynamic_size = false;
  // What is known of each element's shape (unknown: learned from the first write, when built and
  // when run).
  Shape element_shape = Shape::unknown();
  std::string name = "TensorArray";
};

class TensorArray {
 public:
  // An array of `size` elements (an int32 or int64 scalar; 0 with dynamic_size for an empty one
  // that grows), each of `dtype`: zeros of element_shape when that is fully defined, else none
  // written yet.
  TensorArray(Graph& g, DType dtype, Output size, TensorArrayOptions options = {});
  TensorArray(Graph& g, DType dtype, int64_t size, TensorArrayOptions options = {});

  DType dtype() const;
  // The element shape known when the graph is built: the option's, refined by every write.
  Shape element_shape() const;
  bool dynamic_size() const;
  // The array's value ([size, element shape...], or [size, 0] before the first write of an array
  // whose element shape is unknown): what a while loop carries as a loop variable.
  Output flow() const { return flow_; }
  // This array (its dtype, options and element shape) with the value `flow`: a loop variable
  // inside a loop's body, or a loop's result after it.
  TensorArray with_flow(Output flow) const;

  // The array with element `index` (an int32 or int64 scalar) set to `value`.
  TensorArray write(Output index, Output value, std::string name = "") const;
  TensorArray write(int64_t index, Output value, std::string name = "") const;
  // Element `index`.
  Output read(Output index, std::string name = "") const;
  Output read(int64_t index, std::string name = "") const;
  // The elements at `indices` (an int vector), stacked; and the array with those elements set to
  // the rows of `value`.
  Output gather(Output indices, std::string name = "") const;
  TensorArray scatter(Output indices, Output value, std::string name = "") const;
  // Every element, stacked: [size, element shape...].
  Output stack(std::string name = "") const;
  // Every element joined along its first dimension: [size * d0, d1, ...] for elements [d0, d1, ...]
  // (TF's concat; here every element has one shape, and d1... must be known when built).
  Output concat(std::string name = "") const;
  // The array whose elements are the rows of `value` (its size must be the array's, unless
  // dynamic_size).
  TensorArray unstack(Output value, std::string name = "") const;
  // The number of elements, an int32 scalar.
  Output size(std::string name = "") const;

 private:
  struct State;
  TensorArray(std::shared_ptr<State> state, Output flow) : state_(std::move(state)), flow_(std::move(flow)) {}
  void learn_element_shape(const Shape& shape, const char* what) const;

  std::shared_ptr<State> state_;  // shared by the arrays made from this one (with_flow, write, ...)
  Output flow_;
};

}  // namespace tessera
