// The table of distributed/wire_attr_schema.h: every registered op's attrs, by the file that
// registers the op.
#include "distributed/wire_attr_schema.h"

#include <initializer_list>

#include "tessera/tensor.h"

namespace tessera::internal::wire {

const std::unordered_map<std::string_view, std::vector<AttrSpec>>& op_attr_schema() {
  static const auto* table = [] {
    const std::vector<AttrSpec> none;
    const AttrSpec dtype{"dtype", kKind<DType>};
    const AttrSpec shape{"shape", kKind<Shape>};
    const AttrSpec seed{"seed", kKind<int64_t>};
    const std::vector<AttrSpec> reduction{{"axes", kKind<std::vector<int64_t>>}, {"keep_dims", kKind<bool>}};
    const std::vector<AttrSpec> assign{{"_initializer", kKind<bool>, /*required=*/false}};
    const std::vector<AttrSpec> dequeue_n{{"n", kKind<int64_t>}};
    const std::vector<AttrSpec> conv{{"strides", kKind<std::vector<int64_t>>}, {"padding", kKind<std::string>}};
    const std::vector<AttrSpec> pool{{"ksize", kKind<std::vector<int64_t>>}, conv[0], conv[1]};
    // core/training_ops.cc: every Apply* op records use_locking, plus the names of its slots.
    const std::vector<AttrSpec> apply{{"use_locking", kKind<bool>}};
    auto with = [](std::vector<AttrSpec> base, std::initializer_list<AttrSpec> more) {
      base.insert(base.end(), more);
      return base;
    };
    auto* t = new std::unordered_map<std::string_view, std::vector<AttrSpec>>{
        // core/array_ops.cc
        {"Const", {{"value", kKind<Tensor>}}},
        {"Placeholder", {dtype, shape}},
        {"Identity", none},
        {"NoOp", none},
        // core/control_flow_ops.cc
        {"Switch", none},
        {"Merge", none},
        // core/while_ops.cc (the loop's frame crosses in attrs decode_graph takes off first, Note
        // [While loops on the wire] in distributed/wire.cc)
        {"_LoopArg", {dtype, shape}},
        {"While", {{"T", kKind<std::vector<DType>>}, {"shapes", kKind<std::vector<Shape>>}}},
        // core/tensor_array_ops.cc
        {"TensorArrayNew", {dtype, {"element_shape", kKind<Shape>}}},
        {"TensorArrayScatter", {{"dynamic_size", kKind<bool>}}},
        {"TensorArrayUnstack", {{"dynamic_size", kKind<bool>}}},
        {"TensorArrayRead", {{"element_shape", kKind<Shape>}}},
        {"TensorArrayStack", {{"element_shape", kKind<Shape>}, {"size", kKind<int64_t>}}},
        {"TensorArraySize", none},
        {"TensorArrayZeroRows", none},
        // The summary ops (core/summary_ops.cc): the tag is the node's name.
        {"ScalarSummary", none},
        {"HistogramSummary", none},
        {"MergeSummary", none},
        // core/math_ops.cc
        {"Add", none}, {"Sub", none}, {"Mul", none}, {"Div", none}, {"Maximum", none}, {"Minimum", none},
        {"Neg", none}, {"Relu", none}, {"Square", none}, {"Exp", none}, {"Log", none}, {"Sqrt", none},
        {"Tanh", none}, {"Sigmoid", none}, {"Pow", none}, {"Floor", none}, {"Sin", none}, {"Cos", none},
        {"Abs", none}, {"Sign", none}, {"Relu6", none}, {"Rsqrt", none}, {"Reciprocal", none},
        {"Softplus", none}, {"Elu", none},
        {"MatMul", {{"transpose_a", kKind<bool>}, {"transpose_b", kKind<bool>}}},
        {"Sum", reduction}, {"Mean", reduction}, {"Max", reduction}, {"Min", reduction}, {"Prod", reduction},
        {"Cast", {dtype}},
        {"RandomUniform", {shape, dtype, seed}},
        {"RandomNormal", {shape, dtype, seed, {"mean", kKind<double>}, {"stddev", kKind<double>}}},
        {"RandomShuffle", {seed}},
        // core/shape_ops.cc
        {"Reshape", {{"shape", kKind<std::vector<int64_t>>}}},
        {"Transpose", {{"perm", kKind<std::vector<int64_t>>}}},
        {"ConcatV2", {{"axis", kKind<int64_t>}}},
        {"TopKV2", {{"k", kKind<int64_t>}}}, {"InTopK", {{"k", kKind<int64_t>}}},
        {"Split", {{"num_split", kKind<int64_t>}, {"axis", kKind<int64_t>}}},
        {"Slice", {{"begin", kKind<std::vector<int64_t>>}, {"size", kKind<std::vector<int64_t>>}}},
        {"ExpandDims", {{"axis", kKind<int64_t>}}},
        {"Squeeze", {{"axes", kKind<std::vector<int64_t>>}}},
        {"Tile", {{"multiples", kKind<std::vector<int64_t>>}}},
        {"Pad", {{"paddings", kKind<std::vector<int64_t>>}}},
        {"Fill", {shape, {"value", kKind<Tensor>}}},
        {"ZerosLike", none}, {"OnesLike", none}, {"Shape", none}, {"Size", none},
        // core/select_ops.cc
        {"Equal", none}, {"NotEqual", none}, {"Less", none}, {"LessEqual", none}, {"Greater", none},
        {"GreaterEqual", none}, {"LogicalAnd", none}, {"LogicalOr", none}, {"LogicalNot", none},
        {"SelectV2", none}, {"AddN", none},
        {"GatherV2", {{"axis", kKind<int64_t>}}},
        {"OneHot",
         {{"axis", kKind<int64_t>}, {"depth", kKind<int64_t>}, {"on_value", kKind<double>},
          {"off_value", kKind<double>}}},
        {"ArgMax", {{"axis", kKind<int64_t>}}}, {"ArgMin", {{"axis", kKind<int64_t>}}},
        // core/scan_ops.cc
        {"Cumsum", {{"exclusive", kKind<bool>}, {"reverse", kKind<bool>}}},
        {"Cumprod", {{"exclusive", kKind<bool>}, {"reverse", kKind<bool>}}},
        // core/gradients.cc
        {"SumToShapeOf", none}, {"ReshapeToShapeOf", none},
        // core/nn_ops.cc
        {"Softmax", none}, {"LogSoftmax", none}, {"SparseSoftmaxCrossEntropyWithLogits", none},
        {"SoftmaxCrossEntropyWithLogits", none}, {"BiasAdd", none}, {"BiasAddGrad", none}, {"L2Loss", none},
        {"Dropout", {{"keep_prob", kKind<double>}, seed}},
        {"TruncatedNormal", {shape, dtype, seed}},
        {"StopGradient", none}, {"ReluGrad", none}, {"TanhGrad", none}, {"SigmoidGrad", none}, {"SqrtGrad", none},
        {"GatherGrad", {{"axis", kKind<int64_t>}}},
        // core/conv_ops.cc
        {"Conv2D", conv}, {"Conv2DBackpropInput", conv}, {"Conv2DBackpropFilter", conv},
        {"MaxPool", pool}, {"AvgPool", pool}, {"MaxPoolGrad", pool}, {"AvgPoolGrad", pool},
        // core/variable_ops.cc
        {"VariableV2", {dtype, shape}},
        {"_ReadVariable", none},
        {"Assign", assign}, {"AssignAdd", assign}, {"AssignSub", assign},
        // core/training_ops.cc
        {"ApplyGradientDescent", apply},
        {"ApplyMomentum", with(apply, {{"accum", kKind<std::string>}, {"use_nesterov", kKind<bool>}})},
        {"ApplyAdam", with(apply, {{"m", kKind<std::string>}, {"v", kKind<std::string>}})},
        {"ApplyAdagrad", with(apply, {{"accum", kKind<std::string>}})},
        {"ApplyRMSProp", with(apply, {{"ms", kKind<std::string>}, {"mom", kKind<std::string>}})},
        {"CountUpTo", {{"limit", kKind<int64_t>}}},
        // core/variable_ops.cc: the readiness ops (Note [Readiness ops])
        {"IsVariableInitialized", {{"var_name", kKind<std::string>}}},
        {"_ListUninitialized", {{"names", kKind<Tensor>}}},
        // core/queue_ops.cc
        {"FIFOQueue",
         {{"capacity", kKind<int64_t>},
          {"component_types", kKind<std::vector<DType>>},
          {"shapes", kKind<std::vector<Shape>>},
          {"shared_name", kKind<std::string>}}},
        {"QueueEnqueue", none}, {"QueueEnqueueMany", none}, {"QueueDequeue", none},
        {"QueueDequeueMany", dequeue_n}, {"QueueDequeueUpTo", dequeue_n},
        {"QueueClose", {{"cancel_pending_enqueues", kKind<bool>}}},
        {"QueueSize", none}, {"QueueIsClosed", none},
        {"LimitEpochs", {{"num_epochs", kKind<int64_t>}}},
        {"RandomShuffleQueueV2",
         {{"capacity", kKind<int64_t>}, {"min_after_dequeue", kKind<int64_t>}, seed,
          {"component_types", kKind<std::vector<DType>>}, {"shapes", kKind<std::vector<Shape>>},
          {"shared_name", kKind<std::string>}}},
        // core/reader_ops.cc
        {"TextLineReaderV2", {{"skip_header_lines", kKind<int64_t>}}},
        {"ReaderReadV2", {{"reader", kKind<std::string>}, {"skip_header_lines", kKind<int64_t>}}},
        // core/parsing_ops.cc
        {"DecodeCSV", {{"field_delim", kKind<std::string>}, {"use_quote_delim", kKind<bool>}}},
        // core/accumulator_ops.cc
        {"ConditionalAccumulator",
         {dtype, shape, {"shared_name", kKind<std::string>}, {"reduction_type", kKind<std::string>}}},
        {"AccumulatorApplyGradient", none}, {"AccumulatorTakeGradient", none},
        {"AccumulatorNumAccumulated", none}, {"AccumulatorSetGlobalStep", none}, {"_AccumulatorCancelTakes", none},
        // core/sendrecv_ops.cc: the exchange between the partitions of a cluster step
        {"_Send",
         {{"tensor_name", kKind<std::string>}, {"send_device", kKind<std::string>},
          {"recv_device", kKind<std::string>}}},
        {"_Recv",
         {{"tensor_name", kKind<std::string>}, {"send_device", kKind<std::string>},
          {"recv_device", kKind<std::string>}, dtype, shape, {"may_be_dead", kKind<bool>, /*required=*/false}}},
    };
    return t;
  }();
  return *table;
}

}  // namespace tessera::internal::wire
