// The wire format (distributed/wire.h): tensor metadata and its validation, attrs, graphs (round trip,
// sessions on decoded graphs, rejection of malformed GraphDefs), Status, headers, and decoding of
// arbitrary bytes.
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/message_differencer.h>
#include <nlohmann/json.hpp>

#include "core/executor.h"
#include "core/node.h"
#include "core/direct_session.h"
#include "core/op_registry.h"
#include "tests/testing/test_util.h"
#include "tests/testing/wire_model.h"
#include "distributed/wire.h"

namespace tessera {
namespace {

namespace wire = internal::wire;
namespace pb = ::tessera::wire;
using google::protobuf::util::MessageDifferencer;

const std::vector<DType> kAllDtypes = {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::Bool,
                                       DType::Float16, DType::BFloat16};

// A tensor of `shape` whose bytes are a pattern (0/1 for bools).
Tensor patterned(DType dtype, const Shape& shape) {
  Tensor t(dtype, shape);
  auto* p = static_cast<unsigned char*>(t.raw_mutable_data());
  for (std::size_t i = 0; i < t.bytes(); ++i) {
    p[i] = dtype == DType::Bool ? static_cast<unsigned char>(i % 3 == 0) : static_cast<unsigned char>(i * 7 + 1);
  }
  return t;
}

#define EXPECT_STATUS(expr, want_code, substring)                                                   \
  do {                                                                                              \
    const ::tessera::Status _s = (expr);                                                            \
    EXPECT_EQ(_s.code(), (want_code)) << _s.to_string();                                            \
    EXPECT_NE(_s.message().find(substring), std::string::npos)                                      \
        << "message '" << _s.message() << "' lacks '" << (substring) << "'";                        \
  } while (0)

// ---- Tensors ----

TEST(WireTensorTest, MetaRoundTripsEveryDtypeAndShape) {
  const std::vector<Shape> shapes = {Shape{}, Shape{0}, Shape{5}, Shape{2, 3}, Shape{2, 0, 4},
                                     Shape{1, 2, 1, 2, 1, 2, 1, 2}};
  for (DType dtype : kAllDtypes) {
    for (const Shape& shape : shapes) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dtype), shape.to_string()));
      Tensor t = patterned(dtype, shape);
      wire::TensorMeta meta = wire::encode_tensor_meta(t, 3);
      EXPECT_EQ(meta.dtype(), static_cast<int>(dtype));
      EXPECT_EQ(meta.dims_size(), shape.rank());
      EXPECT_EQ(meta.byte_size(), t.bytes());
      EXPECT_EQ(meta.frame(), 3u);
      // Through the wire: serialized, parsed, validated, copied.
      wire::TensorMeta parsed;
      ASSERT_TRUE(parsed.ParseFromString(meta.SerializeAsString()));
      EXPECT_TRUE(wire::validate_tensor_meta(parsed, t.bytes()).ok());
      auto back = wire::decode_tensor(parsed, t.bytes() ? t.raw_data() : nullptr, t.bytes());
      ASSERT_TRUE(back.ok()) << back.status().to_string();
      EXPECT_TRUE(back.value().equals(t));
      EXPECT_EQ(back.value().shape(), shape);
      if (t.bytes() != 0) {
        EXPECT_NE(back.value().raw_data(), t.raw_data());  // a copy
      }
    }
  }
}

TEST(WireTensorTest, InlineTensorProtoRoundTrips) {
  Tensor t = Tensor::matrix<double>({1.5, -2, 3, 4e10, 5, 6}, 2, 3);
  auto p = wire::encode_tensor_proto(t);
  ASSERT_TRUE(p.ok());
  auto back = wire::decode_tensor_proto(p.value());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(back.value().equals(t));
  EXPECT_STATUS(wire::encode_tensor_proto(Tensor()).status(), ErrorCode::kInvalidArgument, "null tensor");
}

TEST(WireTensorTest, NullTensorEncodesAsInvalidAndIsRejected) {
  wire::TensorMeta meta = wire::encode_tensor_meta(Tensor(), 1);
  EXPECT_EQ(meta.dtype(), pb::DT_INVALID);
  EXPECT_STATUS(wire::decode_tensor(meta, nullptr, 0).status(), ErrorCode::kInvalidArgument, "unknown dtype 0");
}

wire::TensorMeta meta_of(int dtype, std::vector<int64_t> dims, uint64_t byte_size) {
  wire::TensorMeta m;
  m.set_dtype(static_cast<pb::DType>(dtype));
  for (int64_t d : dims) m.add_dims(d);
  m.set_byte_size(byte_size);
  m.set_frame(1);
  return m;
}

TEST(WireTensorTest, RejectsUnknownDtypeNumbers) {
  std::vector<char> bytes(16);
  for (int bad : {0, 4, 8, 11, -1, 1000}) {  // 7 is DT_STRING
    EXPECT_STATUS(wire::validate_tensor_meta(meta_of(bad, {4}, 16), 16), ErrorCode::kInvalidArgument,
                  fmt::format("unknown dtype {}", bad));
    EXPECT_STATUS(wire::decode_tensor(meta_of(bad, {4}, 16), bytes.data(), 16).status(),
                  ErrorCode::kInvalidArgument, "unknown dtype");
  }
}

TEST(WireTensorTest, RejectsNegativeDims) {
  EXPECT_STATUS(wire::validate_tensor_meta(meta_of(1, {2, -1}, 0), 0), ErrorCode::kInvalidArgument,
                "shape [2,-1] has dimension -1");
  EXPECT_STATUS(wire::validate_tensor_meta(meta_of(1, {-5}, 0), 0), ErrorCode::kInvalidArgument,
                "dimension -5");
}

TEST(WireTensorTest, RejectsOverflowingDims) {
  const int64_t big = int64_t{1} << 32;
  EXPECT_STATUS(wire::validate_tensor_meta(meta_of(1, {big, big}, 0), 0), ErrorCode::kInvalidArgument,
                "overflows (more than 2^63 elements)");
  // Elements fit, bytes do not: 2^62 int64 elements.
  EXPECT_STATUS(wire::validate_tensor_meta(meta_of(9, {int64_t{1} << 31, int64_t{1} << 31}, 0), 0),
                ErrorCode::kInvalidArgument, "more than 2^63 bytes");
  // A zero dimension makes the tensor empty, but the other dims must still multiply without
  // overflow (Shape::num_elements multiplies left to right).
  EXPECT_TRUE(wire::validate_tensor_meta(meta_of(1, {int64_t{1} << 40, 0, int64_t{1} << 20}, 0), 0).ok());
  EXPECT_STATUS(wire::validate_tensor_meta(meta_of(1, {big, big, big, 0}, 0), 0), ErrorCode::kInvalidArgument,
                "overflows");
}

TEST(WireTensorTest, RejectsByteSizeAndFrameMismatches) {
  EXPECT_STATUS(wire::validate_tensor_meta(meta_of(1, {2, 3}, 25), 24), ErrorCode::kInvalidArgument,
                "byte_size 25 does not match shape [2,3] of float32 (24 bytes)");
  EXPECT_STATUS(wire::validate_tensor_meta(meta_of(9, {}, 4), 4), ErrorCode::kInvalidArgument,
                "byte_size 4 does not match shape [] of int64 (8 bytes)");
  std::vector<char> bytes(32);
  EXPECT_STATUS(wire::decode_tensor(meta_of(1, {2, 3}, 24), bytes.data(), 32).status(), ErrorCode::kInvalidArgument,
                "needs 24 bytes, the frame holds 32");
  EXPECT_STATUS(wire::decode_tensor(meta_of(1, {2, 3}, 24), bytes.data(), 20).status(), ErrorCode::kInvalidArgument,
                "the frame holds 20");
  EXPECT_STATUS(wire::decode_tensor(meta_of(1, {2}, 8), nullptr, 8).status(), ErrorCode::kInvalidArgument,
                "null data");
}

TEST(WireTensorTest, RejectsTensorsOverTheCapWithoutAllocating) {
  // 32 GiB claimed, consistent metadata: refused before anything is allocated.
  const uint64_t huge = uint64_t{8} << 30;
  EXPECT_STATUS(wire::validate_tensor_meta(meta_of(1, {int64_t{8} << 30}, huge * 4), 16),
                ErrorCode::kResourceExhausted, "exceed the limit of 4294967296 bytes");
  // The cap is a parameter.
  EXPECT_STATUS(wire::validate_tensor_meta(meta_of(1, {1024}, 4096), 4096, /*max_bytes=*/1024),
                ErrorCode::kResourceExhausted, "4096 bytes (shape [1024] of float32) exceed the limit of 1024");
  std::vector<char> bytes(4096);
  EXPECT_TRUE(wire::decode_tensor(meta_of(1, {1024}, 4096), bytes.data(), 4096, /*max_bytes=*/4096).ok());
  EXPECT_STATUS(wire::decode_tensor(meta_of(1, {1024}, 4096), bytes.data(), 4096, 4095).status(),
                ErrorCode::kResourceExhausted, "exceed the limit");
}

TEST(WireTensorTest, RejectsRankAboveTheMaximum) {
  std::vector<int64_t> dims(Shape::kMaxRank + 1, 1);
  EXPECT_STATUS(wire::validate_tensor_meta(meta_of(1, dims, 4), 4), ErrorCode::kInvalidArgument,
                "rank 9 is not supported (at most 8)");
  dims.resize(Shape::kMaxRank);
  EXPECT_TRUE(wire::validate_tensor_meta(meta_of(1, dims, 4), 4).ok());
}

TEST(WireTensorTest, RejectsBoolBytesOtherThanZeroOrOne) {
  const unsigned char bytes[] = {0, 1, 2, 1};
  EXPECT_STATUS(wire::decode_tensor(meta_of(10, {4}, 4), bytes, 4).status(), ErrorCode::kInvalidArgument,
                "bool element 2 holds byte 2");
  const unsigned char good[] = {0, 1, 1, 0};
  auto t = wire::decode_tensor(meta_of(10, {4}, 4), good, 4);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t.value().to_vector<bool>(), (std::vector<bool>{false, true, true, false}));
}

// ---- Attrs ----

TEST(WireAttrTest, EveryAlternativeRoundTrips) {
  const std::vector<internal::AttrValue> values = {
      internal::AttrValue(int64_t{-42}),
      internal::AttrValue(2.5),
      internal::AttrValue(true),
      internal::AttrValue(DType::Int64),
      internal::AttrValue(Shape{-1, 3}),
      internal::AttrValue(Shape::unknown()),
      internal::AttrValue(std::string("bytes\xff\x00 ok", 9)),
      internal::AttrValue(Tensor::vector<int32_t>({1, 2, 3})),
      internal::AttrValue(std::vector<int64_t>{0, -1, 7}),
      internal::AttrValue(std::vector<DType>{DType::Bool, DType::Float64}),
      internal::AttrValue(std::vector<Shape>{Shape{}, Shape::unknown(), Shape{2, -1}}),
  };
  for (const auto& v : values) {
    SCOPED_TRACE(v.index());
    auto p = wire::encode_attr(v);
    ASSERT_TRUE(p.ok());
    pb::AttrValue parsed;
    ASSERT_TRUE(parsed.ParseFromString(p.value().SerializeAsString()));
    auto back = wire::decode_attr(parsed);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_EQ(back.value().index(), v.index());
    const bool same = std::visit(
        [&](const auto& want) {
          using T = std::decay_t<decltype(want)>;
          const T& got = std::get<T>(back.value());
          if constexpr (std::is_same_v<T, Tensor>) {
            return got.equals(want);
          } else {
            return got == want;
          }
        },
        v);
    EXPECT_TRUE(same);
  }
}

TEST(WireAttrTest, RejectsMalformedShapesAndUnsetValues) {
  pb::ShapeProto s;
  s.set_unknown_rank(true);
  s.add_dims(3);
  EXPECT_STATUS(wire::decode_shape(s).status(), ErrorCode::kInvalidArgument, "unknown rank lists 1 dims");
  s.Clear();
  s.add_dims(-2);
  EXPECT_STATUS(wire::decode_shape(s).status(), ErrorCode::kInvalidArgument, "dimension -2");
  s.Clear();
  for (int i = 0; i < 9; ++i) s.add_dims(1);
  EXPECT_STATUS(wire::decode_shape(s).status(), ErrorCode::kInvalidArgument, "rank 9");
  s.Clear();
  s.add_dims(int64_t{1} << 40);
  s.add_dims(-1);
  s.add_dims(int64_t{1} << 40);
  EXPECT_STATUS(wire::decode_shape(s).status(), ErrorCode::kInvalidArgument, "more than 2^63 elements");
  EXPECT_STATUS(wire::decode_attr(pb::AttrValue()).status(), ErrorCode::kInvalidArgument, "not set");
  pb::AttrValue list;
  list.mutable_list_type()->add_value(static_cast<pb::DType>(42));
  EXPECT_STATUS(wire::decode_attr(list).status(), ErrorCode::kInvalidArgument, "unknown dtype 42");
}

// ---- Graphs ----

struct Model {
  Graph g;
  Output result;      // a small math graph over a variable, constants and random ops
  Output dequeued;    // a batch through the FIFO queue
  Operation init;
  Operation enqueue;
};

// build_wire_model's math (tests/testing/wire_model.h), plus a queue (vector<DType> and
// vector<Shape> attrs) and a control edge added afterwards.
void build_model(Model& m) {
  Graph& g = m.g;
  const testing::WireModel math = testing::build_wire_model(g);
  const Output x = math.x;
  m.result = math.result;
  m.init = math.init;

  FIFOQueue q(g, 8, {DType::Int32, DType::Float32}, {Shape{2}, Shape{}}, "", "queue");
  m.enqueue = q.enqueue_many({ops::constant(g, Tensor::matrix<int32_t>({1, 2, 3, 4, 5, 6}, 3, 2)),
                              ops::constant(g, Tensor::vector<float>({0.5f, 1.5f, 2.5f}))});
  auto batch = q.dequeue_many(2);
  m.dequeued = ops::add(batch[0], batch[0], "doubled");
  q.close(false);
  q.size();
  q.is_closed();
  ops::reduce_max(ops::identity(ops::neg(x)), {}, false);
  // A control edge added afterwards, from an early node to a later one.
  Operation late = ops::no_op(g, "late");
  x.op().add_control_input(late);
}

StatusOr<wire::GraphDef> encode_all(const Graph& g) { return wire::encode_graph(g.impl()); }

const wire::NodeDef* find_def(const wire::GraphDef& def, const std::string& name) {
  for (const auto& n : def.node()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

TEST(WireGraphTest, RoundTripReencodesIdentically) {
  Model m;
  build_model(m);
  auto def = encode_all(m.g);
  ASSERT_TRUE(def.ok()) << def.status().to_string();
  EXPECT_EQ(def.value().version(), wire::kWireVersion);
  EXPECT_EQ(def.value().node_size(), m.g.num_operations());

  // Through bytes, as it travels.
  wire::GraphDef parsed;
  ASSERT_TRUE(parsed.ParseFromString(def.value().SerializeAsString()));
  Graph g2;
  std::vector<internal::Node*> added;
  Status st = wire::decode_graph(parsed, &g2.impl(), &added);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(static_cast<int>(added.size()), m.g.num_operations());

  auto def2 = encode_all(g2);
  ASSERT_TRUE(def2.ok()) << def2.status().to_string();
  std::string diff;
  MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(def.value(), def2.value())) << diff;

  // Names, types, devices, colocation, resources and control inputs survive exactly.
  for (Operation op : m.g.operations()) {
    SCOPED_TRACE(op.name());
    Operation op2 = g2.operation(op.name());
    EXPECT_EQ(op2.type(), op.type());
    EXPECT_EQ(op2.device(), op.device());
    EXPECT_EQ(op2.num_inputs(), op.num_inputs());
    EXPECT_EQ(op2.num_outputs(), op.num_outputs());
    for (int i = 0; i < op.num_outputs(); ++i) {
      EXPECT_EQ(op2.output(i).dtype(), op.output(i).dtype());
      EXPECT_EQ(op2.output(i).shape(), op.output(i).shape());
    }
    std::vector<std::string> c1, c2;
    for (auto c : op.control_inputs()) c1.push_back(c.name());
    for (auto c : op2.control_inputs()) c2.push_back(c.name());
    EXPECT_EQ(c1, c2);
    internal::Node* n1 = op.node();
    internal::Node* n2 = op2.node();
    EXPECT_EQ(n1->resource ? n1->resource->name : "", n2->resource ? n2->resource->name : "");
    ASSERT_EQ(n1->colocate_with.size(), n2->colocate_with.size());
    for (std::size_t i = 0; i < n1->colocate_with.size(); ++i) {
      EXPECT_EQ(n1->colocate_with[i]->name, n2->colocate_with[i]->name);
    }
  }

  // Spot checks of the encoding itself.
  const wire::NodeDef* mm = find_def(def.value(), "layer/mm");
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->input(0), "x:0");
  EXPECT_EQ(mm->input(1), "w:0");
  EXPECT_EQ(mm->input(2), "^w/Assign");
  EXPECT_TRUE(mm->attr().at("transpose_b").b());
  const wire::NodeDef* r = find_def(def.value(), "r");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->device(), "/job:localhost/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(r->attr().at("seed").i(), 7);
  const wire::NodeDef* z = find_def(def.value(), "z");
  ASSERT_NE(z, nullptr);
  ASSERT_EQ(z->colocate_with_size(), 1);
  EXPECT_EQ(z->colocate_with(0), "w");
  const wire::NodeDef* queue = find_def(def.value(), "queue");
  ASSERT_NE(queue, nullptr);
  EXPECT_EQ(queue->attr().at("component_types").list_type().value_size(), 2);
  EXPECT_EQ(queue->attr().at("shapes").list_shape().value(0).dims(0), 2);
  const wire::NodeDef* assign = find_def(def.value(), "w/Assign");
  ASSERT_NE(assign, nullptr);
  EXPECT_EQ(assign->resource(), "w");
  // "x" gained a control input on a later node: encoded after it.
  int x_at = -1, late_at = -1;
  for (int i = 0; i < def.value().node_size(); ++i) {
    if (def.value().node(i).name() == "x") x_at = i;
    if (def.value().node(i).name() == "late") late_at = i;
  }
  EXPECT_LT(late_at, x_at);
}

TEST(WireGraphTest, SessionOnTheDecodedGraphComputesTheSameFetches) {
  Model m;
  build_model(m);
  auto def = encode_all(m.g);
  ASSERT_TRUE(def.ok()) << def.status().to_string();
  Graph g2;
  ASSERT_TRUE(wire::decode_graph(def.value(), &g2.impl()).ok());

  auto run = [](Graph& g, const std::string& result, const std::string& dequeued, const std::string& init,
                const std::string& enqueue) {
    Session s(g);
    s.run(g.operation(init));
    s.run(g.operation(enqueue));
    return std::make_pair(s.run(g.output(result)), s.run(g.output(dequeued)));
  };
  auto [r1, d1] = run(m.g, m.result.name(), m.dequeued.name(), m.init.name(), m.enqueue.name());
  auto [r2, d2] = run(g2, m.result.name(), m.dequeued.name(), m.init.name(), m.enqueue.name());
  EXPECT_EQ(r1.shape(), (Shape{2, 1}));
  EXPECT_TRUE(r1.equals(r2)) << r1.debug_string() << " vs " << r2.debug_string();
  EXPECT_EQ(d1.to_vector<int32_t>(), (std::vector<int32_t>{2, 4, 6, 8}));
  EXPECT_TRUE(d1.equals(d2));
}

TEST(WireGraphTest, DecodesIntoAGraphThatAlreadyHasTheReferencedNodes) {
  // ExtendSession: the new nodes name existing ones.
  Graph g;
  ops::constant(g, 2.0f, "a");
  Graph more;
  Output a2 = ops::constant(more, 2.0f, "a");
  ops::square(ops::add(a2, a2, "b"), "c");
  std::vector<const internal::Node*> subset = {more.operation("b").node(), more.operation("c").node()};
  EXPECT_STATUS(wire::encode_graph(more.impl(), subset).status(), ErrorCode::kInvalidArgument,
                "input 'a' of node 'b' is not among the nodes encoded");
  auto def = encode_all(more);
  ASSERT_TRUE(def.ok());
  def.value().mutable_node()->erase(def.value().mutable_node()->begin());  // drop "a"
  ASSERT_TRUE(wire::decode_graph(def.value(), &g.impl()).ok());
  Session s(g);
  EXPECT_EQ(s.run(g.output("c:0")).scalar<float>(), 16.0f);
}

TEST(WireGraphTest, EncodeRejectsCyclesAndForeignNodes) {
  Graph g;
  Operation a = ops::no_op(g, "a");
  Operation b = ops::no_op(g, "b");
  b.add_control_input(a);
  a.add_control_input(b);
  EXPECT_STATUS(encode_all(g).status(), ErrorCode::kInvalidArgument, "cycle (through 'a', 'b')");
  Graph other;
  Operation c = ops::no_op(other, "c");
  EXPECT_STATUS(wire::encode_graph(g.impl(), {c.node()}).status(), ErrorCode::kInvalidArgument,
                "belongs to another graph");
  EXPECT_STATUS(wire::encode_graph(other.impl(), {c.node(), c.node()}).status(), ErrorCode::kInvalidArgument,
                "listed twice");
}

// Hand-written GraphDefs.
wire::NodeDef* add_node(wire::GraphDef& def, const std::string& name, const std::string& op,
                        std::vector<std::string> inputs = {}) {
  wire::NodeDef* n = def.add_node();
  n->set_name(name);
  n->set_op(op);
  for (auto& in : inputs) n->add_input(in);
  return n;
}
void set_tensor(wire::NodeDef* n, const Tensor& t) {
  *(*n->mutable_attr())["value"].mutable_tensor() = wire::encode_tensor_proto(t).value();
}
wire::GraphDef base_def() {
  wire::GraphDef def;
  def.set_version(wire::kWireVersion);
  set_tensor(add_node(def, "c", "Const"), Tensor::scalar<float>(1.0f));
  return def;
}
Status decode(const wire::GraphDef& def) {
  Graph g;
  return wire::decode_graph(def, &g.impl());
}

// A while loop's frame crosses in its nodes' loop attrs (Note [While loops on the wire]): the
// decoded graph runs the loop, its nested loop and its gradient as the original does.
TEST(WireGraphTest, WhileLoopsSurviveTheRoundTrip) {
  Graph g;
  Output x = ops::constant(g, 1.5, "x");
  std::vector<Output> r = ops::while_loop(
      [&](const std::vector<Output>& v) { return ops::less(v[0], ops::constant(g, 3)); },
      [&](const std::vector<Output>& v) {
        Output inner = ops::while_loop([&](Output w) { return ops::less(w, ops::constant(g, 10.0)); },
                                       [&](Output w) { return ops::add(w, x); }, v[1]);
        return std::vector<Output>{ops::add(v[0], ops::constant(g, 1)), ops::mul(inner, x)};
      },
      {ops::constant(g, 0), x});
  Output dx = gradients({r[1]}, {x})[0];
  auto def = encode_all(g);
  ASSERT_TRUE(def.ok()) << def.status().to_string();
  Graph g2;
  Status decoded = wire::decode_graph(def.value(), &g2.impl());
  ASSERT_TRUE(decoded.ok()) << decoded.to_string();
  Session s1(g), s2(g2);
  const double y = s1.run(r[1]).scalar<double>();
  EXPECT_EQ(s2.run(g2.output(r[1].name())).scalar<double>(), y);
  EXPECT_EQ(s2.run(g2.output(dx.name())).scalar<double>(), s1.run(dx).scalar<double>());
  // The decoded graph's loops are loops: a body tensor is not readable outside.
  const internal::Node* arg = g2.operation("while/loop_var").node();
  ASSERT_NE(arg->while_frame, nullptr);
  EXPECT_EQ(arg->while_frame->name, "while");
  EXPECT_EQ(g2.operation(r[1].op().name()).node()->loop, arg->while_frame);
}

TEST(WireGraphTest, DecodeRejectsMalformedWhileLoops) {
  Graph g;
  Output x = ops::constant(g, 1.0f, "x");
  ops::while_loop([&](Output v) { return ops::less(v, ops::constant(g, 4.0f)); },
                  [&](Output v) { return ops::add(v, v); }, x);
  auto def = encode_all(g);
  ASSERT_TRUE(def.ok()) << def.status().to_string();
  auto find = [](wire::GraphDef& d, const std::string& name) {
    for (auto& n : *d.mutable_node()) {
      if (n.name() == name) return &n;
    }
    return static_cast<wire::NodeDef*>(nullptr);
  };
  auto set_string = [](wire::NodeDef* n, const char* key, const std::string& v) {
    (*n->mutable_attr())[key] = wire::encode_attr(internal::AttrValue(v)).value();
  };
  {  // the cond names a node outside the loop
    wire::GraphDef bad = def.value();
    set_string(find(bad, "while/While"), "_loop_cond", "x:0");
    EXPECT_STATUS(decode(bad), ErrorCode::kInvalidArgument, "'x:0' is no output of a node of its loop");
  }
  {  // a loop variable's argument is missing
    wire::GraphDef bad = def.value();
    find(bad, "while/loop_var")->mutable_attr()->erase("_loop_arg");
    EXPECT_STATUS(decode(bad), ErrorCode::kInvalidArgument, "1 loop variables, 0 arguments");
  }
  {  // the While inside its own loop
    wire::GraphDef bad = def.value();
    set_string(find(bad, "while/While"), "_frame", "while");
    EXPECT_STATUS(decode(bad), ErrorCode::kInvalidArgument, "the While is a node of its own loop");
  }
  {  // an attr of the loop's family that is not one
    wire::GraphDef bad = def.value();
    set_string(find(bad, "while/While"), "_loop_extra", "1");
    EXPECT_STATUS(decode(bad), ErrorCode::kInvalidArgument, "unexpected attr '_loop_extra'");
  }
}

TEST(WireGraphTest, DecodeAcceptsAnyTopologicalOrderAndBareInputNames) {
  wire::GraphDef def;
  def.set_version(wire::kWireVersion);
  add_node(def, "sq", "Square", {"c"});  // "c" = "c:0", defined later
  set_tensor(add_node(def, "c", "Const"), Tensor::scalar<float>(3.0f));
  Graph g;
  std::vector<internal::Node*> added;
  ASSERT_TRUE(wire::decode_graph(def, &g.impl(), &added).ok());
  ASSERT_EQ(added.size(), 2u);
  EXPECT_EQ(added[0]->name, "c");
  Session s(g);
  EXPECT_EQ(s.run(g.output("sq:0")).scalar<float>(), 9.0f);
}

TEST(WireGraphTest, DecodeRejectsUnknownOps) {
  wire::GraphDef def = base_def();
  add_node(def, "f", "Frobnicate", {"c:0"});
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "node 'f': unknown op type 'Frobnicate'");
}

TEST(WireGraphTest, DecodeRejectsDuplicateNames) {
  wire::GraphDef def = base_def();
  set_tensor(add_node(def, "c", "Const"), Tensor::scalar<float>(2.0f));
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "duplicate name 'c'");
  // Against a node the graph already has.
  Graph g;
  ops::constant(g, 5.0f, "c");
  EXPECT_STATUS(wire::decode_graph(base_def(), &g.impl()), ErrorCode::kInvalidArgument,
                "duplicate name 'c': the graph already has");
  EXPECT_EQ(g.num_operations(), 1);
}

TEST(WireGraphTest, DecodeRejectsDanglingInputs) {
  wire::GraphDef def = base_def();
  add_node(def, "sq", "Square", {"nowhere:0"});
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "dangling input: input 'nowhere' of node 'sq'");
  def = base_def();
  add_node(def, "n", "NoOp", {"^ghost"});
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "control input 'ghost'");
  def = base_def();
  add_node(def, "id", "Identity", {"c:0"})->set_resource("missing_var");
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "resource 'missing_var'");
  def = base_def();
  add_node(def, "id", "Identity", {"c:0"})->add_colocate_with("elsewhere");
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "colocate_with 'elsewhere'");
}

TEST(WireGraphTest, DecodeRejectsBadOutputIndices) {
  wire::GraphDef def = base_def();
  add_node(def, "sq", "Square", {"c:1"});
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "bad output index: input 'c:1', but 'c' (Const) has 1");
  for (const char* bad : {"c:-1", "c:x", "c:", "c:1x", "c:+1", "c:99999999999999999999"}) {
    def = base_def();
    add_node(def, "sq", "Square", {bad});
    EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "bad output index");
  }
}

TEST(WireGraphTest, DecodeRejectsCycles) {
  wire::GraphDef def = base_def();
  add_node(def, "a", "Identity", {"b:0"});
  add_node(def, "b", "Identity", {"a:0"});
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "cycle (through 'a', 'b')");
  def = base_def();
  add_node(def, "self", "NoOp", {"^self"});
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "cycle (through 'self')");
}

TEST(WireGraphTest, DecodeRejectsWrongMissingOrUnexpectedAttrs) {
  wire::GraphDef def;
  def.set_version(wire::kWireVersion);
  wire::NodeDef* p = add_node(def, "p", "Placeholder");
  (*p->mutable_attr())["dtype"].set_i(1);
  *(*p->mutable_attr())["shape"].mutable_shape() = wire::encode_shape(Shape{2});
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "attr 'dtype' must be of type type, got int");
  (*p->mutable_attr())["dtype"].set_type(pb::DT_FLOAT);
  EXPECT_TRUE(decode(def).ok());
  (*p->mutable_attr())["extra"].set_b(true);
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "unexpected attr 'extra'");
  p->mutable_attr()->erase("extra");
  p->mutable_attr()->erase("shape");
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "missing attr 'shape' of type shape");
  // A bad value inside an attr.
  (*p->mutable_attr())["shape"].mutable_shape()->add_dims(-7);
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "attr 'shape': shape [-7] has dimension -7");
  // Const with a malformed inline tensor.
  def = base_def();
  (*def.mutable_node(0)->mutable_attr())["value"].mutable_tensor()->mutable_meta()->set_byte_size(8);
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "byte_size 8 does not match");
}

TEST(WireGraphTest, DecodeRejectsWhatShapeInferenceRejects) {
  wire::GraphDef def = base_def();
  set_tensor(add_node(def, "i", "Const"), Tensor::scalar<int32_t>(1));
  add_node(def, "sum", "Add", {"c:0", "i:0"});
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "sum (Add): inputs must have the same dtype");
  def = base_def();
  add_node(def, "sum", "Add", {"c:0"});
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "expects 2 inputs, got 1");
  // A queue op must name its queue as its resource.
  def = base_def();
  add_node(def, "size", "QueueSize");
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "must act on a FIFOQueue");
  def = base_def();
  add_node(def, "size", "QueueSize")->set_resource("c");
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "must act on a FIFOQueue");
}

TEST(WireGraphTest, DecodeRejectsMalformedNamesInputsDevicesAndVersions) {
  wire::GraphDef def = base_def();
  def.set_version(2);
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "GraphDef has wire version 2, this build speaks wire version 1");
  def.set_version(0);
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "no wire version");
  def = base_def();
  add_node(def, "", "NoOp");
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "has no name");
  def = base_def();
  add_node(def, "a:b", "NoOp");
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "node name 'a:b' is not valid");
  def = base_def();
  add_node(def, "sq", "Square", {"^c", "c:0"});
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "data input 'c:0' follows a control input");
  def = base_def();
  add_node(def, "n", "NoOp")->set_device("cpu:0");
  EXPECT_STATUS(decode(def), ErrorCode::kInvalidArgument, "malformed device spec 'cpu:0'");
  def = base_def();
  add_node(def, "n", "NoOp")->set_device("/cpu:0");
  Graph g;
  ASSERT_TRUE(wire::decode_graph(def, &g.impl()).ok());
  EXPECT_EQ(g.operation("n").device(), "/cpu:0");  // preserved exactly
}

TEST(WireGraphTest, DecodeLeavesTheGraphScopesAsTheyWere) {
  Graph g;
  Output a = ops::constant(g, 1.0f, "a");
  auto dev = g.device("/device:CPU:0");
  auto ns = g.name_scope("outer");
  auto cd = g.control_dependencies({a.op()});
  ASSERT_TRUE(wire::decode_graph(base_def(), &g.impl()).ok());
  EXPECT_EQ(g.operation("c").device(), "");
  EXPECT_TRUE(g.operation("c").control_inputs().empty());
  Output b = ops::constant(g, 2.0f, "b");
  EXPECT_EQ(b.op().name(), "outer/b");
  EXPECT_EQ(b.op().device(), "/device:CPU:0");
  ASSERT_EQ(b.op().control_inputs().size(), 1u);
}

TEST(WireGraphTest, EveryRegisteredOpHasAnAttrSchema) {
  // An op missing from wire_attr_schema.cc's table is Unimplemented; every registered op must be receivable.
  // (A wrong table would trip a TESSERA_CHECK in a shape function here.)
  for (const std::string& type : internal::OpRegistry::global().op_types()) {
    SCOPED_TRACE(type);
    wire::GraphDef def;
    def.set_version(wire::kWireVersion);
    add_node(def, "node", type);
    Status st = decode(def);
    EXPECT_NE(st.code(), ErrorCode::kUnimplemented) << st.to_string();
  }
}

// ---- Status ----

TEST(WireStatusTest, RoundTripsEveryCodeAndMessageIntact) {
  for (int code = 1; code <= static_cast<int>(ErrorCode::kUnauthenticated); ++code) {
    const std::string message = fmt::format("op 'x' failed: code {} \xff\xfe", code) + std::string(1, '\0') + "tail";
    Status s(static_cast<ErrorCode>(code), message);
    pb::Status parsed;
    ASSERT_TRUE(parsed.ParseFromString(wire::from_status(s).SerializeAsString()));
    Status back = wire::to_status(parsed);
    EXPECT_EQ(back.code(), s.code());
    EXPECT_EQ(back.message(), message);
  }
  EXPECT_TRUE(wire::to_status(wire::from_status(Status())).ok());
  EXPECT_EQ(wire::from_status(Status()).code(), 0);
  pb::Status odd;
  odd.set_code(99);
  odd.set_message("from the future");
  EXPECT_STATUS(wire::to_status(odd), ErrorCode::kUnknown, "(error code 99) from the future");
  odd.set_code(-3);
  EXPECT_STATUS(wire::to_status(odd), ErrorCode::kUnknown, "(error code -3)");
}

// ---- Headers and bodies ----

TEST(WireHeaderTest, RequestAndResponseHeadersRoundTrip) {
  pb::RunStepRequest body;
  body.set_version(wire::kWireVersion);
  body.set_session_handle("s1");
  body.add_fetch("result:0");
  auto* feed = body.add_feed();
  feed->set_name("x:0");
  *feed->mutable_meta() = wire::encode_tensor_meta(Tensor::vector<float>({1, 2}), 1);
  const std::string bytes = wire::make_request_header(17, "RunStep", body, 250).SerializeAsString();
  auto h = wire::parse_request_header(bytes.data(), bytes.size());
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h.value().request_id(), 17u);
  EXPECT_EQ(h.value().method(), "RunStep");
  EXPECT_EQ(h.value().deadline_ms(), 250);
  auto b = wire::parse_body<pb::RunStepRequest>(h.value().body());
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_TRUE(MessageDifferencer::Equals(b.value(), body));

  const std::string err =
      wire::make_response_header(17, Status(ErrorCode::kNotFound, "no op 'y'"), nullptr).SerializeAsString();
  auto r = wire::parse_response_header(err.data(), err.size());
  ASSERT_TRUE(r.ok());
  EXPECT_STATUS(wire::to_status(r.value().status()), ErrorCode::kNotFound, "no op 'y'");
  pb::RunStepResponse resp;
  resp.set_version(wire::kWireVersion);
  resp.set_trace_json("{}");
  const std::string ok = wire::make_response_header(18, Status(), &resp).SerializeAsString();
  r = wire::parse_response_header(ok.data(), ok.size());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(wire::to_status(r.value().status()).ok());
  EXPECT_EQ(wire::parse_body<pb::RunStepResponse>(r.value().body()).value().trace_json(), "{}");
}

// A traced partition's spans cross tasks on the wall clock and come back on the receiver's
// now_micros() clock (here the same process: the times survive to within the clocks' reading).
TEST(WireTraceTest, SpansRoundTripAndAPeersExtremeTimesAreSafe) {
  const int64_t t0 = internal::now_micros();
  std::vector<internal::TraceRecord> records = {{"mul", "Mul", "/job:w/replica:0/task:1/device:CPU:0", "", 42, t0, t0 + 7},
                                                {"copy", "copy", "/job:w/replica:0/task:1/device:SIM:0", "h2d", 0, t0 + 3, t0 + 9}};
  pb::RunGraphResponse response;
  wire::encode_trace(records, response.mutable_trace());
  ASSERT_EQ(response.trace_size(), 2);
  EXPECT_NE(response.trace(0).start_wall_us(), t0);  // on another clock (the epoch's)
  const std::vector<internal::TraceRecord> back = wire::decode_trace(response.trace());
  ASSERT_EQ(back.size(), 2u);
  for (std::size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].name, records[i].name);
    EXPECT_EQ(back[i].category, records[i].category);
    EXPECT_EQ(back[i].device, records[i].device);
    EXPECT_EQ(back[i].lane, records[i].lane);
    EXPECT_EQ(back[i].thread, records[i].thread);
    EXPECT_NEAR(static_cast<double>(back[i].start_us), static_cast<double>(records[i].start_us), 1000.0);
    EXPECT_EQ(back[i].end_us - back[i].start_us, records[i].end_us - records[i].start_us);
  }
  // A peer's nonsense: no overflow (UBSan checks), and no span ends before it starts.
  pb::RunGraphResponse hostile;
  pb::TraceSpan* a = hostile.add_trace();
  a->set_start_wall_us(std::numeric_limits<int64_t>::min());
  a->set_end_wall_us(std::numeric_limits<int64_t>::max());
  pb::TraceSpan* b = hostile.add_trace();
  b->set_start_wall_us(std::numeric_limits<int64_t>::max());
  b->set_end_wall_us(5);
  const std::vector<internal::TraceRecord> odd = wire::decode_trace(hostile.trace());
  ASSERT_EQ(odd.size(), 2u);
  EXPECT_LE(odd[0].start_us, odd[0].end_us);
  EXPECT_EQ(odd[1].end_us, odd[1].start_us);
  const auto json = nlohmann::json::parse(internal::trace_to_json(odd, internal::now_micros()));
  EXPECT_EQ(json.at("traceEvents").size(), 4u);  // one process (device ""), one thread, two spans
}

TEST(WireHeaderTest, RejectsWrongVersionsAndEmptyMethods) {
  wire::RequestHeader h;
  h.set_version(2);
  h.set_method("RunStep");
  std::string bytes = h.SerializeAsString();
  EXPECT_STATUS(wire::parse_request_header(bytes.data(), bytes.size()).status(), ErrorCode::kInvalidArgument,
                "request header has wire version 2, this build speaks wire version 1");
  h.set_version(0);
  bytes = h.SerializeAsString();
  EXPECT_STATUS(wire::parse_request_header(bytes.data(), bytes.size()).status(), ErrorCode::kInvalidArgument,
                "no wire version");
  h.set_version(1);
  h.clear_method();
  bytes = h.SerializeAsString();
  EXPECT_STATUS(wire::parse_request_header(bytes.data(), bytes.size()).status(), ErrorCode::kInvalidArgument,
                "names no method");
  wire::ResponseHeader r;
  r.set_version(7);
  bytes = r.SerializeAsString();
  EXPECT_STATUS(wire::parse_response_header(bytes.data(), bytes.size()).status(), ErrorCode::kInvalidArgument,
                "response header has wire version 7");
  pb::CreateSessionRequest body;
  body.set_version(3);
  EXPECT_STATUS(wire::parse_body<pb::CreateSessionRequest>(body.SerializeAsString()).status(),
                ErrorCode::kInvalidArgument, "tessera.wire.CreateSessionRequest has wire version 3");
  EXPECT_STATUS(wire::parse_body<pb::CreateSessionRequest>("\xff\xff\xff").status(), ErrorCode::kInvalidArgument,
                "malformed tessera.wire.CreateSessionRequest");
  // A nested message is not a body.
  EXPECT_STATUS(wire::parse_body<pb::TensorMeta>("").status(), ErrorCode::kInternal, "not a top-level wire message");
}

// peek_request_method reads the method alone (never_blocks in transport/server.cc picks the
// thread by it): the one a full parse finds, and nothing from bytes a full parse refuses.
TEST(WireHeaderTest, PeeksTheMethodWithoutParsing) {
  google::protobuf::LogSilencer quiet;
  pb::CloseSessionRequest body;
  body.set_version(1);
  body.set_session_handle(std::string(200, 's'));
  const std::string full = wire::make_request_header(5, "CloseSession", body, 100).SerializeAsString();
  EXPECT_EQ(wire::peek_request_method(full.data(), full.size()), std::optional<std::string_view>("CloseSession"));
  // The view points into the bytes: no copy.
  EXPECT_EQ(wire::peek_request_method(full.data(), full.size())->data(), full.data() + full.find("CloseSession"));
  // No method field: "", as a parse gives.
  wire::RequestHeader no_method;
  no_method.set_version(1);
  no_method.set_body("b");
  const std::string unnamed = no_method.SerializeAsString();
  EXPECT_EQ(wire::peek_request_method(unnamed.data(), unnamed.size()), std::optional<std::string_view>(""));
  EXPECT_EQ(wire::peek_request_method(nullptr, 0), std::optional<std::string_view>(""));
  // Fields in any order, unknown ones skipped, a repeated method: the last one wins, as in a parse.
  std::string reordered = full + wire::make_request_header(0, "RunGraph", body).SerializeAsString();
  reordered += std::string("\x98\x06\x07", 3);  // field 99, varint 7: unknown
  wire::RequestHeader parsed;
  ASSERT_TRUE(parsed.ParseFromString(reordered));
  EXPECT_EQ(wire::peek_request_method(reordered.data(), reordered.size()), std::optional<std::string_view>(parsed.method()));
  EXPECT_EQ(parsed.method(), "RunGraph");
  // Every truncation a parse refuses is refused; what a parse accepts has the parse's method.
  for (std::size_t n = 0; n < full.size(); ++n) {
    wire::RequestHeader h;
    const bool parses = h.ParseFromArray(full.data(), static_cast<int>(n));
    const auto peeked = wire::peek_request_method(full.data(), n);
    if (!parses) {
      EXPECT_EQ(peeked, std::nullopt) << n;
    } else {
      EXPECT_EQ(peeked, std::optional<std::string_view>(h.method())) << n;
    }
  }
  // Garbage: a tag with field number 0, a length past the end, an end-group tag.
  for (const std::string& bad : {std::string("\x00\x01", 2), std::string("\x1a\x09" "abc"), std::string("\x0c")}) {
    EXPECT_EQ(wire::peek_request_method(bad.data(), bad.size()), std::nullopt) << bad.size();
  }
}

// read_request_header / read_response_header (Note [Headers read in place] in
// distributed/wire_headers.cc) against the generated parser: the same bytes accepted, the same
// fields, the same errors.
void expect_read_as_parsed(const std::string& bytes, const std::string& what) {
  SCOPED_TRACE(what + " (" + std::to_string(bytes.size()) + " bytes)");
  auto parsed = wire::parse_request_header(bytes.data(), bytes.size());
  auto read = wire::read_request_header(bytes.data(), bytes.size());
  ASSERT_EQ(read.ok(), parsed.ok()) << (read.ok() ? parsed.status() : read.status()).to_string();
  if (!parsed.ok()) {
    EXPECT_EQ(read.status().code(), parsed.status().code());
    EXPECT_EQ(read.status().message(), parsed.status().message());
  } else {
    EXPECT_EQ(read.value().version(), parsed.value().version());
    EXPECT_EQ(read.value().request_id(), parsed.value().request_id());
    EXPECT_EQ(read.value().method(), parsed.value().method());
    EXPECT_EQ(read.value().deadline_ms(), parsed.value().deadline_ms());
    EXPECT_EQ(read.value().body(), parsed.value().body());
  }
  auto parsed_reply = wire::parse_response_header(bytes.data(), bytes.size());
  auto read_reply = wire::read_response_header(bytes.data(), bytes.size());
  ASSERT_EQ(read_reply.ok(), parsed_reply.ok())
      << (read_reply.ok() ? parsed_reply.status() : read_reply.status()).to_string();
  if (!parsed_reply.ok()) {
    EXPECT_EQ(read_reply.status().message(), parsed_reply.status().message());
  } else {
    EXPECT_EQ(read_reply.value().request_id(), parsed_reply.value().request_id());
    EXPECT_EQ(read_reply.value().body(), parsed_reply.value().body());
    const Status status = wire::to_status(parsed_reply.value().status());
    EXPECT_EQ(read_reply.value().status().code(), status.code());
    EXPECT_EQ(read_reply.value().status().message(), status.message());
  }
}

TEST(WireHeaderTest, ReadsHeadersInPlaceAsTheParserDoes) {
  google::protobuf::LogSilencer quiet;  // invalid UTF-8 in string fields is logged by protobuf
  pb::CloseSessionRequest body;
  body.set_version(1);
  body.set_session_handle(std::string(100, 's'));
  const std::string request = wire::make_request_header(7, "CloseSession", body, 250).SerializeAsString();
  auto read = wire::read_request_header(request.data(), request.size());
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_EQ(read.value().request_id(), 7u);
  EXPECT_EQ(read.value().method(), "CloseSession");
  EXPECT_EQ(read.value().deadline_ms(), 250);
  EXPECT_EQ(read.value().body(), body.SerializeAsString());
  // Views into the bytes: nothing copied.
  EXPECT_EQ(read.value().method().data(), request.data() + request.find("CloseSession"));
  EXPECT_GE(read.value().body().data(), request.data());
  EXPECT_LE(read.value().body().data() + read.value().body().size(), request.data() + request.size());

  const std::string ok_reply = wire::make_response_header(9, Status(), &body).SerializeAsString();
  auto reply = wire::read_response_header(ok_reply.data(), ok_reply.size());
  ASSERT_TRUE(reply.ok());
  EXPECT_TRUE(reply.value().status().ok());
  EXPECT_EQ(reply.value().request_id(), 9u);
  EXPECT_EQ(reply.value().body(), body.SerializeAsString());
  const std::string error_reply =
      wire::make_response_header(9, errors::not_found("no tensor 'x'"), nullptr).SerializeAsString();
  reply = wire::read_response_header(error_reply.data(), error_reply.size());
  ASSERT_TRUE(reply.ok());
  EXPECT_STATUS(reply.value().status(), ErrorCode::kNotFound, "no tensor 'x'");
  EXPECT_TRUE(reply.value().body().empty());
  // A status field repeated: its occurrences merge, as in the parse.
  pb::ResponseHeader code_only;
  code_only.mutable_status()->set_code(static_cast<int>(ErrorCode::kAborted));
  pb::ResponseHeader message_only;
  message_only.mutable_status()->set_message("merged");
  expect_read_as_parsed(error_reply + code_only.SerializeAsString() + message_only.SerializeAsString(), "statuses");

  for (const std::string& base : {request, ok_reply, error_reply}) {
    // Every truncation.
    for (std::size_t n = 0; n <= base.size(); ++n) expect_read_as_parsed(base.substr(0, n), "truncated");
    // Fields around it, one at a time: what protobuf takes and what it refuses.
    const std::vector<std::pair<std::string, std::string>> fields = {
        {std::string("\x00", 1), "tag 0"},
        {std::string("\x02\x00", 2), "field number 0"},
        {"\x0c", "an end-group tag with no group"},
        {"\x0e", "wire type 6"},
        {"\x0f", "wire type 7"},
        {"\x0d\x01\x00\x00\x00", "version as fixed32: an unknown field"},
        {"\x18\x05", "the method as a varint: an unknown field"},
        {"\x1a\x02\xc3\x28", "the method in invalid UTF-8"},
        {"\x1a\x02\xc3\xa9", "the method in valid UTF-8"},
        {"\x1a\x00", "an empty method"},
        {"\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "a 10-byte varint"},
        {"\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", "a 10-byte varint past 64 bits"},
        {"\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x81\x00", "an 11-byte varint"},
        {std::string("\x08\xff\xff\xff\xff\x7f", 6), "a version past 32 bits"},
        {std::string("\x88\x80\x80\x80\x00\x01", 6), "a 5-byte tag"},
        {std::string("\x88\x80\x80\x80\x80\x00\x01", 7), "a 6-byte tag"},
        {std::string("\x88\x80\x80\x80\x7f\x01", 6), "a 5-byte tag past 32 bits"},
        {std::string("\x2a\x81\x80\x80\x80\x00x", 7), "a 5-byte length"},
        {std::string("\x2a\x81\x80\x80\x80\x80\x00x", 8), "a 6-byte length"},
        {std::string("\x2a\xff\xff\xff\xff\x07", 6), "a length past the bytes"},
        {std::string("\x2a\xff\xff\xff\xff\x08", 6), "a length of 2 GiB"},
        {std::string("\xa1\x06\x01\x02\x03\x04\x05\x06\x07\x08", 10), "an unknown fixed64"},
        {std::string("\xa1\x06\x01\x02\x03", 5), "a short fixed64"},
        {std::string("\xa5\x06\x01\x02\x03\x04", 6), "an unknown fixed32"},
        {std::string("\xa3\x06\x08\x01\xa4\x06", 6), "an unknown group"},
        {std::string("\xa3\x06\x08\x01\xac\x06", 6), "a group closed by another field's end tag"},
        {std::string("\xa3\x06\x08\x01", 4), "a group never closed"},
        {std::string("\xa3\x06\x00\xa4\x06", 5), "tag 0 inside a group"},
        {"\x1a\x01X", "another method"},
        {"\x2a\x01X", "another body"},
        {"\x22\x02\x08\x01", "a status field (a request's deadline with another wire type)"},
    };
    for (const auto& [field, what] : fields) {
      expect_read_as_parsed(field + base, what + " before");
      expect_read_as_parsed(base + field, what + " after");
    }
    // Unknown groups nested 100 deep (protobuf's limit) and 101.
    for (int depth : {99, 100, 101}) {
      std::string nested;
      for (int i = 0; i < depth; ++i) nested += std::string("\xa3\x06", 2);
      for (int i = 0; i < depth; ++i) nested += std::string("\xa4\x06", 2);
      expect_read_as_parsed(base + nested, "groups nested " + std::to_string(depth) + " deep");
    }
    // Random mutations: bytes flipped, inserted, removed.
    std::mt19937 rng(42);
    for (int i = 0; i < 3000; ++i) {
      std::string m = base;
      for (int k = 1 + static_cast<int>(rng() % 3); k > 0; --k) {
        const std::size_t at = m.empty() ? 0 : rng() % m.size();
        switch (rng() % 3) {
          case 0:
            if (!m.empty()) m[at] = static_cast<char>(rng());
            break;
          case 1: m.insert(m.begin() + static_cast<std::ptrdiff_t>(at), static_cast<char>(rng())); break;
          default:
            if (!m.empty()) m.erase(at, 1);
        }
      }
      expect_read_as_parsed(m, "mutation " + std::to_string(i));
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(WireHeaderTest, RejectsGarbageAndTruncatedHeaders) {
  google::protobuf::LogSilencer quiet;  // invalid UTF-8 in string fields is logged by protobuf
  pb::CloseSessionRequest body;
  body.set_version(1);
  body.set_session_handle(std::string(64, 's'));
  const std::string full = wire::make_request_header(5, "CloseSession", body).SerializeAsString();
  // Cut inside the body: a length-delimited field whose bytes are missing.
  EXPECT_STATUS(wire::parse_request_header(full.data(), full.size() - 1).status(), ErrorCode::kInvalidArgument,
                "malformed request header");
  int refused = 0;
  for (std::size_t n = 0; n < full.size(); ++n) {
    auto h = wire::parse_request_header(full.data(), n);
    if (!h.ok()) {
      ++refused;
      continue;
    }
    // A prefix that happens to end on a field boundary parses; it must still be a valid header.
    EXPECT_EQ(h.value().version(), wire::kWireVersion);
    EXPECT_FALSE(h.value().method().empty());
  }
  EXPECT_GT(refused, static_cast<int>(full.size()) / 2);
  EXPECT_FALSE(wire::parse_request_header(nullptr, 0).ok());
  EXPECT_FALSE(wire::parse_response_header("", 0).ok());

  std::mt19937 rng(1234);
  std::vector<unsigned char> buf;
  for (int i = 0; i < 3000; ++i) {
    buf.resize(rng() % 200);
    for (auto& c : buf) c = static_cast<unsigned char>(rng());
    auto h = wire::parse_request_header(buf.data(), buf.size());
    if (h.ok()) {
      EXPECT_EQ(h.value().version(), wire::kWireVersion);
      EXPECT_FALSE(h.value().method().empty());
    }
    auto r = wire::parse_response_header(buf.data(), buf.size());
    if (r.ok()) {
      EXPECT_EQ(r.value().version(), wire::kWireVersion);
    }
  }
}

// Arbitrary bytes and mutations of valid messages through every decoder: errors, never crashes.
// TESSERA_WIRE_FUZZ_ITERATIONS runs longer (under the asan preset, say).
TEST(WireFuzzTest, DecodersSurviveMutatedInput) {
  const char* env = std::getenv("TESSERA_WIRE_FUZZ_ITERATIONS");
  const int iterations = env != nullptr ? std::atoi(env) : 400;
  google::protobuf::LogSilencer quiet;
  Model m;
  build_model(m);
  const std::string graph_bytes = encode_all(m.g).value().SerializeAsString();
  const std::string meta_bytes =
      wire::encode_tensor_meta(Tensor::matrix<float>({1, 2, 3, 4}, 2, 2), 1).SerializeAsString();
  std::vector<char> frame(64, 1);
  std::mt19937 rng(99);
  int graphs_decoded = 0;
  for (int i = 0; i < iterations; ++i) {
    std::string g = graph_bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) g[rng() % g.size()] = static_cast<char>(rng());
    if (rng() % 4 == 0) g.resize(rng() % g.size());
    wire::GraphDef def;
    if (def.ParseFromString(g)) {
      Graph out;
      if (wire::decode_graph(def, &out.impl()).ok()) {
        ++graphs_decoded;
        EXPECT_TRUE(encode_all(out).ok());  // what decodes, encodes
      }
    }
    std::string t = meta_bytes;
    t[rng() % t.size()] = static_cast<char>(rng());
    wire::TensorMeta meta;
    if (meta.ParseFromString(t)) {
      auto decoded = wire::decode_tensor(meta, frame.data(), rng() % frame.size());
      (void)decoded;
    }
  }
  // Most single-byte mutations hit names or values that still decode; the point is no crash.
  SUCCEED() << graphs_decoded << " mutated graphs decoded";
}

}  // namespace
}  // namespace tessera
