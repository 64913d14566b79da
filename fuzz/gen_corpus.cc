// Writes the well-formed seeds of the fuzz corpus: fuzz_gen_corpus OUT_DIR writes
// OUT_DIR/<target>/<name> for every target of fuzz/CMakeLists.txt. The committed fuzz/corpus/ is
// this program's output plus the inputs that once crashed a target, kept as regressions under
// descriptive names (fuzz/README.md lists them). To refresh the seeds after a wire format change:
//   build/cpu/fuzz/fuzz_gen_corpus fuzz/corpus
// Graphs are built with the public API and encoded with encode_graph, messages with the wire
// helpers, so the seeds are what a real peer sends; the texts are TensorFlow's and Slurm's examples.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "fuzz/fuzz_util.h"
#include "distributed/wire.h"
#include "tests/testing/wire_model.h"

namespace {

using namespace tessera;
namespace wire = tessera::internal::wire;
namespace pb = ::tessera::wire;
namespace fs = std::filesystem;

fs::path g_out;
int g_written = 0;

void write(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_out / target;
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + (dir / name).string());
  ++g_written;
}

// Serialized with map entries (attrs) in key order, so that regenerating gives the same bytes.
std::string serialize(const google::protobuf::Message& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!m.SerializeToCodedStream(&coded)) throw std::runtime_error("cannot serialize a " + m.GetTypeName());
  }
  return out;
}

pb::GraphDef encode(const Graph& g) { return wire::encode_graph(g.impl()).value_or_raise(); }

// ---- graph_decode ----

// The wire test's model (tests/testing/wire_model.h), with a control edge added afterwards.
void model(Graph& g) {
  const Output x = testing::build_wire_model(g).x;
  Operation late = ops::no_op(g, "late");
  x.op().add_control_input(late);
}

void math(Graph& g) {
  Output a = ops::placeholder(g, DType::Float32, {-1, 3}, "a");
  Output b = ops::placeholder(g, DType::Float32, {4, 1, 1}, "b");
  Output c = ops::constant(g, Tensor::vector<float>({1, 2, 3}), "c");
  Output sum = ops::add(a, b, "sum");  // broadcast to [4,?,3]
  ops::sub(sum, c, "sub");
  ops::mul(a, c, "mul");
  ops::div(a, c, "div");
  ops::maximum(a, c, "max");
  ops::minimum(b, c, "min");
  for (auto f : {ops::neg, ops::relu, ops::exp, ops::log, ops::sqrt, ops::tanh, ops::sigmoid, ops::square}) {
    f(a, "");
  }
  Output i = ops::placeholder(g, DType::Int32, Shape::unknown(), "i");
  ops::div(i, ops::constant(g, int32_t{2}), "idiv");
  ops::cast(i, DType::Float64, "cast");
  ops::cast(ops::constant(g, true), DType::Int64, "bool_cast");
  ops::identity(ops::constant(g, int64_t{5}), "id");
  ops::group({ops::no_op(g, "n1"), ops::no_op(g, "n2")}, "grouped");
}

void matmul(Graph& g) {
  Output a = ops::placeholder(g, DType::Float64, {-1, 4}, "a");
  Output b = ops::placeholder(g, DType::Float64, {4, 5}, "b");
  Output m = ops::matmul(a, b, false, false, "ab");
  ops::matmul(b, a, true, true, "btat");
  ops::matmul(m, m, true, false, "mtm");
  ops::matmul(ops::placeholder(g, DType::Float64, Shape::unknown(), "u"), b, false, false, "ub");
}

void reductions(Graph& g) {
  Output x = ops::placeholder(g, DType::Float32, {2, -1, 4}, "x");
  ops::reduce_sum(x, {}, false, "all");
  ops::reduce_sum(x, {0, 2}, true, "keep");
  ops::reduce_mean(x, {-1}, false, "last");
  ops::reduce_max(x, {1}, false, "unknown_dim");
  ops::reduce_max(ops::placeholder(g, DType::Int64, Shape::unknown(), "u"), {0}, true, "unknown_rank");
}

void random(Graph& g) {
  ops::random_uniform(g, {3, 4}, DType::Float32, 1, "u");
  ops::random_normal(g, {2}, DType::Float64, 2, 0.5f, 2.0f, "n");
  ops::random_shuffle(ops::constant(g, Tensor::matrix<int32_t>({1, 2, 3, 4, 5, 6}, 3, 2)), 3, "shuffled");
}

void variables(Graph& g) {
  Variable v(g, Tensor::vector<double>({1, 2, 3}), "v");
  Variable s(ops::constant(g, int32_t{0}), "counter");
  v.assign(ops::constant(g, Tensor::vector<double>({4, 5, 6})));
  v.assign_add(ops::constant(g, Tensor::vector<double>({1, 1, 1})));
  v.assign_sub(v.value());
  s.assign_add(ops::constant(g, int32_t{1}));
  global_variables_initializer(g);
}

void queue(Graph& g) {
  FIFOQueue q(g, 8, {DType::Int32, DType::Float32}, {Shape{2}, Shape{}}, "", "q");
  q.enqueue({ops::constant(g, Tensor::vector<int32_t>({1, 2})), ops::constant(g, 0.5f)});
  q.enqueue_many({ops::constant(g, Tensor::matrix<int32_t>({1, 2, 3, 4, 5, 6}, 3, 2)),
                  ops::constant(g, Tensor::vector<float>({0.5f, 1.5f, 2.5f}))});
  q.dequeue();
  q.dequeue_many(2);
  q.dequeue_up_to(3);
  q.close(true);
  q.size();
  q.is_closed();
  FIFOQueue any(g, 2, {DType::Bool}, {}, "shared", "unshaped");
  any.enqueue({ops::constant(g, true)});
  any.dequeue();
}

void producer(Graph& g) {
  FIFOQueue q = train::input_producer(g, Tensor::vector<int64_t>({1, 2, 3, 4}), 2, true, 8, 5);
  q.dequeue();
}

// New nodes that use the nodes of build_base_graph (an ExtendSession): encoded with the base, which
// is then dropped from the def.
pb::GraphDef extension() {
  Graph g;
  fuzz::BaseGraph base = fuzz::build_base_graph(g);
  std::set<std::string> base_names;
  for (const Operation& op : g.operations()) base_names.insert(op.name());
  ops::add(base.c, base.c, "twice");
  Variable extra(g, Tensor::scalar<float>(0.0f), "extra");
  base.v.assign_add(ops::constant(g, Tensor::matrix<float>({1, 1, 1, 1}, 2, 2), "ones"));
  base.q.enqueue({ops::constant(g, Tensor::vector<int32_t>({1, 2})), extra.value()});
  base.q.size();
  // Drop the base's nodes: the def names them without having them.
  const pb::GraphDef def = encode(g);
  pb::GraphDef out;
  out.set_version(def.version());
  for (const auto& node : def.node()) {
    if (!base_names.contains(node.name())) *out.add_node() = node;
  }
  return out;
}

// While loops (Note [While loops on the wire]): a loop with a loop and a cond in its body, read
// from outside, and the gradient's loop (a copy of the inner loop running the same frame).
void loops(Graph& g) {
  Output x = ops::placeholder(g, DType::Float64, Shape{}, "x");
  ops::WhileOptions options;
  options.maximum_iterations = ops::constant(g, int32_t{100}, "limit");
  std::vector<Output> r = ops::while_loop(
      [&](const std::vector<Output>& v) { return ops::less(v[0], ops::constant(g, int32_t{3})); },
      [&](const std::vector<Output>& v) {
        Output inner = ops::while_loop([&](Output w) { return ops::less(w, ops::constant(g, 10.0)); },
                                       [&](Output w) { return ops::add(w, x); }, v[1]);
        Output next = ops::cond(
            ops::greater(inner, ops::constant(g, 20.0)), [&] { return ops::sqrt(inner); }, [&] { return inner; });
        return std::vector<Output>{ops::add(v[0], ops::constant(g, int32_t{1})), next};
      },
      {ops::constant(g, int32_t{0}), x}, options);
  gradients({r[1]}, {x});
}

// Tensor arrays (Note [Tensor arrays] in core/tensor_array_ops.cc) in loops: map_fn and scan, and
// their gradients (the arrays' ops and their gradients' inside loops).
void tensor_arrays(Graph& g) {
  Output x = ops::placeholder(g, DType::Float32, Shape{-1, 3}, "x");
  Output y = ops::map_fn([](Output row) { return ops::reduce_sum(ops::square(row)); }, x);
  Output s = ops::scan([](Output a, Output e) { return ops::add(ops::mul(a, e), e); }, y);
  TensorArray grown = TensorArray(g, DType::Float32, 0, {.dynamic_size = true}).write(2, ops::constant(g, 1.0f));
  gradients({ops::add(ops::reduce_sum(s), ops::reduce_sum(grown.stack()))}, {x});
}

template <class F>
void graph(const std::string& name, F&& build) {
  Graph g;
  build(g);
  write("graph_decode", name, serialize(encode(g)));
}

void graph_seeds() {
  graph("model.pb", model);
  graph("math.pb", math);
  graph("matmul.pb", matmul);
  graph("reductions.pb", reductions);
  graph("random.pb", random);
  graph("variables.pb", variables);
  graph("queue.pb", queue);
  graph("input_producer.pb", producer);
  graph("loops.pb", loops);
  graph("tensor_arrays.pb", tensor_arrays);
  write("graph_decode", "extension.pb", serialize(extension()));
  // Inputs by bare name and out of topological order (both accepted).
  pb::GraphDef def;
  def.set_version(wire::kWireVersion);
  auto* sq = def.add_node();
  sq->set_name("sq");
  sq->set_op("Square");
  sq->add_input("k");
  auto* k = def.add_node();
  k->set_name("k");
  k->set_op("Const");
  (*k->mutable_attr())["value"].mutable_tensor()->CopyFrom(
      wire::encode_tensor_proto(Tensor::scalar<float>(3.0f)).value_or_raise());
  write("graph_decode", "unordered.pb", serialize(def));
  write("graph_decode", "empty.pb", std::string());
}

// ---- wire_header ----

pb::GraphDef small_graph() {
  Graph g;
  ops::add(ops::placeholder(g, DType::Float32, {2}, "x"), ops::constant(g, Tensor::vector<float>({1, 2}), "c"),
           "y");
  return encode(g);
}

pb::NamedTensor named(const std::string& name, const Tensor& t, uint32_t frame) {
  pb::NamedTensor n;
  n.set_name(name);
  *n.mutable_meta() = wire::encode_tensor_meta(t, frame);
  return n;
}

void request(const std::string& method, google::protobuf::Message& body) {
  // Every body sets field 1, version.
  body.GetReflection()->SetUInt32(&body, body.GetDescriptor()->FindFieldByNumber(1), wire::kWireVersion);
  pb::RequestHeader h = wire::make_request_header(42, method, body, /*deadline_ms=*/5000);
  h.set_body(serialize(body));
  write("wire_header", "request_" + method + ".bin", serialize(h));
}

void response(const std::string& name, google::protobuf::Message& body) {
  body.GetReflection()->SetUInt32(&body, body.GetDescriptor()->FindFieldByNumber(1), wire::kWireVersion);
  pb::ResponseHeader h = wire::make_response_header(42, Status(), &body);
  h.set_body(serialize(body));
  write("wire_header", "response_" + name + ".bin", serialize(h));
}

void header_seeds() {
  {
    pb::CreateSessionRequest m;
    *m.mutable_graph() = small_graph();
    m.mutable_config()->set_allow_soft_placement(true);
    m.mutable_config()->set_placement_policy("cost");
    request("CreateSession", m);
  }
  {
    pb::ExtendSessionRequest m;
    m.set_session_handle("session-1");
    *m.mutable_graph() = extension();
    m.set_current_graph_version(1);
    request("ExtendSession", m);
  }
  {
    pb::RunStepRequest m;
    m.set_session_handle("session-1");
    *m.add_feed() = named("x:0", Tensor::vector<float>({1, 2}), 1);
    m.add_fetch("y:0");
    m.add_target("init");
    m.set_timeout_ms(1000);
    m.set_trace(true);
    request("RunStep", m);
  }
  {
    pb::CloseSessionRequest m;
    m.set_session_handle("session-1");
    request("CloseSession", m);
  }
  {
    pb::GetStatusRequest m;
    request("GetStatus", m);
  }
  {
    pb::RegisterGraphRequest m;
    m.set_session_handle("session-1");
    *m.mutable_graph() = small_graph();
    request("RegisterGraph", m);
  }
  {
    pb::RunGraphRequest m;
    m.set_graph_handle("graph-1");
    m.set_step_id(7);
    *m.add_send() = named("edge_1;0", Tensor::matrix<int64_t>({1, 2, 3, 4}, 2, 2), 1);
    *m.add_send() = named("edge_2;0", Tensor::scalar<bool>(true), 2);
    m.add_recv_key("edge_3;0");
    request("RunGraph", m);
  }
  {
    pb::RecvTensorRequest m;
    m.set_step_id(7);
    m.set_rendezvous_key("/job:worker/replica:0/task:1/device:CPU:0;edge_1;0");
    request("RecvTensor", m);
  }
  {
    pb::CleanupGraphRequest m;
    m.set_step_id(7);
    request("CleanupGraph", m);
  }
  {
    pb::DeregisterGraphRequest m;
    m.set_graph_handle("graph-1");
    request("DeregisterGraph", m);
  }
  {
    pb::KeepAliveRequest m;
    m.add_session_handle("/job:worker/replica:0/task:0/session/1");
    m.set_lease_ms(60000);
    request("KeepAlive", m);
  }
  {
    pb::CreateSessionResponse m;
    m.set_session_handle("session-1");
    m.set_graph_version(1);
    response("CreateSession", m);
  }
  {
    pb::RunStepResponse m;
    *m.add_tensor() = named("y:0", Tensor::vector<double>({1, 2, 3}), 1);
    m.set_trace_json("{\"traceEvents\":[]}");
    response("RunStep", m);
  }
  {
    pb::GetStatusResponse m;
    auto* d = m.add_device();
    d->set_name("/job:worker/replica:0/task:0/device:CPU:0");
    d->set_type("CPU");
    d->set_flops_per_second(1e10);
    response("GetStatus", m);
  }
  {
    pb::RunGraphResponse m;
    *m.add_recv() = named("edge_3;0", Tensor::vector<int32_t>({1, 2}), 1);
    response("RunGraph", m);
  }
  {
    pb::RunGraphResponse m;  // a traced partition
    *m.add_recv() = named("edge_3;0", Tensor::vector<int32_t>({1, 2}), 1);
    pb::TraceSpan* span = m.add_trace();
    span->set_name("y");
    span->set_category("Add");
    span->set_device("/job:worker/replica:0/task:1/device:CPU:0");
    span->set_thread(7);
    span->set_start_wall_us(1764547200000000);
    span->set_end_wall_us(1764547200000042);
    span = m.add_trace();
    span->set_name("copy/y");
    span->set_category("copy");
    span->set_device("/job:worker/replica:0/task:1/device:SIM:0");
    span->set_lane("h2d");
    span->set_start_wall_us(1764547200000050);
    span->set_end_wall_us(1764547200000040);  // ends before it starts
    response("RunGraphTraced", m);
  }
  {
    pb::RecvTensorResponse m;
    *m.mutable_tensor() = wire::encode_tensor_meta(Tensor::matrix<float>({1, 2, 3, 4}, 2, 2), 1);
    response("RecvTensor", m);
  }
  write("wire_header", "response_error.bin",
        serialize(wire::make_response_header(42, Status(ErrorCode::kNotFound, "no session 'session-9'"), nullptr)));
}

// ---- wire_tensor ----

void tensor(const std::string& name, const Tensor& t, uint8_t flags = 0) {
  const std::string meta = wire::encode_tensor_meta(t, 1).SerializeAsString();
  const std::string_view bytes(static_cast<const char*>(t.raw_data()), t.bytes());
  write("wire_tensor", name, fuzz::tensor_input(flags, meta, bytes));
}

void tensor_seeds() {
  tensor("float_scalar.bin", Tensor::scalar<float>(1.5f));
  tensor("float_matrix.bin", Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 2, 3));
  tensor("double_vector.bin", Tensor::vector<double>({1, -2, 3}));
  tensor("int32_vector.bin", Tensor::vector<int32_t>({7, 8, 9, 10}));
  tensor("int64_matrix.bin", Tensor::matrix<int64_t>({1, 2, 3, 4}, 2, 2));
  tensor("bool_vector.bin", Tensor::vector<bool>({true, false, true}));
  tensor("empty.bin", Tensor(DType::Float32, Shape{0, 3}));
  tensor("rank8.bin", Tensor(DType::Int32, Shape{1, 1, 1, 1, 1, 1, 1, 2}));
  // Past the zero-copy threshold (frame filled from a short pattern), with alignments 8 and 64.
  {
    Tensor big(DType::Float32, Shape{64, 128});
    wire::TensorMeta meta = wire::encode_tensor_meta(big, 1);
    write("wire_tensor", "fill_zero_copy_align8.bin",
          fuzz::tensor_input(fuzz::kFill | (3 << 2), meta.SerializeAsString(), "\x01\x02\x03\x04"));
    write("wire_tensor", "fill_align64.bin",
          fuzz::tensor_input(fuzz::kFill | (6 << 2), meta.SerializeAsString(), "\x05\x06"));
    write("wire_tensor", "fill_over_small_cap.bin",
          fuzz::tensor_input(fuzz::kFill | fuzz::kSmallCap, meta.SerializeAsString(), "\x07"));
  }
  {
    Tensor bools(DType::Bool, Shape{20000});
    write("wire_tensor", "fill_bool.bin",
          fuzz::tensor_input(fuzz::kFill, wire::encode_tensor_meta(bools, 1).SerializeAsString(),
                             std::string("\x00\x01", 2)));
  }
}

// ---- cluster_spec ----

void cluster_seeds() {
  const std::vector<std::pair<std::string, std::string>> texts = {
      {"dense.json", R"({"worker": ["w0:2222", "w1:2222"], "ps": ["ps0:2222"]})"},
      {"sparse.json", R"({"worker": {"1": "w1:2222", "4": "w4:2222"}})"},
      {"ipv6.json", R"({"chief": ["[::1]:2222"], "worker": ["10.0.0.2:2222", "host-b.example.com:65535"]})"},
      {"empty_job.json", R"({"evaluator": [], "worker": ["a:1"]})"},
      {"tf_config.json",
       R"({"cluster": {"chief": ["c:2222"], "worker": ["w0:2222", "w1:2222"]}, )"
       R"("task": {"type": "worker", "index": 1}})"},
      {"tf_config_string_index.json",
       R"({"cluster": {"worker": ["w0:2222"]}, "task": {"type": "worker", "index": "0"}, "environment": "cloud"})"},
      {"tf_config_no_task.json", R"({"cluster": {"ps": {"0": "ps:1"}}, "task": {}})"},
      {"tf_config_null_task.json", R"({"cluster": {"worker": ["a:1"]}, "task": null})"},
      {"escapes.json", R"({"worker": ["w\u0030:2222"], "w_2": ["x:1"]})"},
  };
  for (const auto& [name, text] : texts) write("cluster_spec", name, text);
}

// ---- slurm_hostlist ----

void slurm_seeds() {
  const std::vector<std::pair<std::string, std::string>> texts = {
      {"hostlist.txt", "n[1-2],m5,o[08-10]"},
      {"hostlist_groups.txt", "r[1-2]n[001-003,7],gpu-a[1-2]"},
      {"hostlist_padding.txt", "node[0008-0010]"},
      {"tasks.txt", "3(x2),2,1"},
      {"tasks_single.txt", "4"},
      {"slurm_env.txt", "node[1-3]\n2(x3)\n4\n6\nps:1,worker:5\n9000"},
      {"slurm_env_minimal.txt", "gpu[01-02]\n1,2\n0"},
      {"slurm_env_default_jobs.txt", "a,b[7-8]\n1(x3)\n2\n3\n\n2222"},
  };
  for (const auto& [name, text] : texts) write("slurm_hostlist", name, text);
}

// ---- frame_limit ----

// The input of frame_limit_fuzzer.cc: `frames` frames sent (1..4096), a limit of 1..frames+2,
// flags (1: DEALER -> ROUTER, 2: large frames) and the pool of frame sizes and bytes.
std::string frame_input(unsigned frames, unsigned limit, uint8_t flags, std::string_view pool) {
  if (frames < 1 || frames > 4096 || limit < 1 || limit > frames + 2) {
    throw std::runtime_error("frame_limit seed out of range");
  }
  const unsigned n = frames - 1;
  const unsigned l = limit - 1;
  std::string out;
  out.push_back(static_cast<char>(n & 0xff));
  out.push_back(static_cast<char>(n >> 8));
  out.push_back(static_cast<char>(l & 0xff));
  out.push_back(static_cast<char>(l >> 8));
  out.push_back(static_cast<char>(flags));
  out += pool;
  return out;
}

void frame_seeds() {
  constexpr uint8_t kRouter = 1;
  constexpr uint8_t kLarge = 2;
  // A call as a client sends it (header, body, a tensor frame) to a server that keeps them all.
  write("frame_limit", "router_call.bin", frame_input(3, 5, kRouter, "\x20\x40\x10request"));
  write("frame_limit", "pair_single_frame.bin", frame_input(1, 1, 0, "x"));
  // Exactly as many frames after the first as the limit, and one more than it.
  write("frame_limit", "pair_at_limit.bin", frame_input(9, 8, 0, "abcdefgh"));
  write("frame_limit", "router_one_over.bin", frame_input(9, 8, kRouter, std::string("\x00\x01\x02", 3)));
  // Most of a long message dropped; large frames, some of them dropped.
  write("frame_limit", "router_many_dropped.bin", frame_input(4096, 1, kRouter, std::string("\x00\x05", 2)));
  write("frame_limit", "pair_large_frames.bin", frame_input(40, 16, kLarge, "\xff\x01\x80"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR (e.g. fuzz/corpus)\n", argv[0]);
    return 1;
  }
  g_out = argv[1];
  try {
    graph_seeds();
    header_seeds();
    tensor_seeds();
    cluster_seeds();
    slurm_seeds();
    frame_seeds();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_gen_corpus: %s\n", e.what());
    return 1;
  }
  std::printf("wrote %d seeds under %s\n", g_written, g_out.c_str());
  return 0;
}
