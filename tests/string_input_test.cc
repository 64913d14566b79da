// DType::String and the file input pipeline: string tensors (made, read, copied, compared), through
// feeds and fetches, the shape ops, the queues and batching, the wire, checkpoints and placement;
// decode_csv (TensorFlow's decode_csv_op_test.py), TextLineReader (reader_ops_test.py's
// TextLineReaderTest) and string_input_producer, alone and as one pipeline over files the tests
// write (plain and gzipped). Session tests run with their ops requested on the CPU and on SIM:
// string ops then run on the CPU (strings live in host memory), numbers computed from them on SIM.
// Every wait is bounded by a run timeout.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/string_tensor.h"
#include "distributed/wire.h"
#include "tests/testing/queue_runners.h"
#include "tests/testing/sim_device.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;
using tessera::testing::ScopedQueueRunners;
using Strings = std::vector<std::string>;

const auto* const kSimEnvironment = ::testing::AddGlobalTestEnvironment(new testing::SimEnvironment);

RunOptions bounded(std::chrono::milliseconds timeout = 10s) {
  RunOptions o;
  o.timeout = timeout;
  return o;
}

// ---- String tensors ----

TEST(StringTensorTest, MakeReadAndCompare) {
  EXPECT_EQ(static_cast<int>(DType::String), 7);  // TensorFlow's DT_STRING
  EXPECT_EQ(dtype_name(DType::String), "string");
  EXPECT_TRUE(dtype_is_valid(DType::String));
  EXPECT_FALSE(dtype_is_floating(DType::String));

  Tensor s = Tensor::scalar("hello");  // a literal picks the string overload
  EXPECT_EQ(s.dtype(), DType::String);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.scalar<std::string>(), "hello");
  EXPECT_EQ(Tensor::scalar(std::string("x")).scalar<std::string>(), "x");

  const std::string big(1000, 'z');  // past any small-string buffer
  const std::string nul("a\0b", 3);
  Tensor v = Tensor::vector({"a", "", big, nul});
  EXPECT_EQ(v.shape(), Shape{4});
  EXPECT_EQ(v.to_vector<std::string>(), (Strings{"a", "", big, nul}));
  Tensor m = Tensor::from_vector<std::string>({"a", "b", "c", "d", "e", "f"}, Shape{2, 3});
  EXPECT_EQ(m.shape(), (Shape{2, 3}));
  EXPECT_EQ(m.data<std::string>()[4], "e");
  EXPECT_THROW(v.to_vector<float>(), InvalidArgumentError);
  EXPECT_THROW(Tensor::scalar(1.0f).scalar<std::string>(), InvalidArgumentError);
  EXPECT_THROW(Tensor::from_vector<std::string>({"a"}, Shape{2}), InvalidArgumentError);

  // Zeros are empty strings.
  EXPECT_EQ(Tensor::zeros(DType::String, Shape{3}).to_vector<std::string>(), (Strings{"", "", ""}));
  EXPECT_EQ(Tensor(DType::String, Shape{2}).to_vector<std::string>(), (Strings{"", ""}));

  // Copies: a handle shares, deep_copy does not; equality is by value.
  Tensor handle = v;
  EXPECT_TRUE(v.is_buffer_shared());
  Tensor copy = v.deep_copy();
  EXPECT_TRUE(copy.equals(v));
  copy.mutable_data<std::string>()[2] = "changed";
  EXPECT_FALSE(copy.equals(v));
  EXPECT_EQ(v.data<std::string>()[2], big);
  EXPECT_FALSE(Tensor::vector({"a"}).equals(Tensor::vector({"b"})));
  EXPECT_TRUE(Tensor::vector({"a"}).equals(Tensor::vector({"a"})));
  EXPECT_THAT(v.debug_string(), HasSubstr("string [4]"));
  EXPECT_THAT(v.debug_string(), HasSubstr("\"a\""));
  EXPECT_EQ(v.reshaped(Shape{2, 2}).data<std::string>()[3], nul);
}

TEST(StringTensorTest, StringConstantOfALiteral) {
  Graph g;
  auto a = ops::constant(g, "abc");
  auto b = ops::constant(g, std::string("de"));
  EXPECT_EQ(a.dtype(), DType::String);
  EXPECT_EQ(b.dtype(), DType::String);
  Session s(g);
  auto got = s.run({a, b});
  EXPECT_EQ(got[0].scalar<std::string>(), "abc");
  EXPECT_EQ(got[1].scalar<std::string>(), "de");
}

TEST(StringTensorTest, ArithmeticRefusesStringsAtBuildTime) {
  Graph g;
  auto a = ops::constant(g, Tensor::vector({"a", "b"}));
  EXPECT_THROW_MSG(ops::add(a, a), InvalidArgumentError, "(Add): string tensors are not supported");
  EXPECT_THROW_MSG(ops::neg(a), InvalidArgumentError, "string tensors are not supported");
  EXPECT_THROW_MSG(ops::reduce_sum(a), InvalidArgumentError, "string tensors are not supported");
  EXPECT_THROW_MSG(ops::matmul(a, a), InvalidArgumentError, "string tensors are not supported");
  EXPECT_THROW_MSG(ops::cast(a, DType::Float32), InvalidArgumentError, "(Cast): cannot cast string to float32");
  EXPECT_THROW_MSG(ops::cast(ops::constant(g, 1.0f), DType::String), InvalidArgumentError, "cannot cast");
  EXPECT_THROW_MSG(ops::less(a, a), InvalidArgumentError, "(Less): string tensors are not supported");
  EXPECT_THROW_MSG(ops::argmax(a, 0), InvalidArgumentError, "string tensors are not supported");
  EXPECT_THROW_MSG(ops::add_n({a, a}), InvalidArgumentError, "string tensors are not supported");
  EXPECT_THROW_MSG(ops::ones_like(a), InvalidArgumentError, "(OnesLike): string tensors have no ones");
  Variable v(g, Tensor::vector({"x", "y"}), "names");
  EXPECT_THROW_MSG(v.assign_add(a), InvalidArgumentError, "is string: arithmetic updates need a number type");
}

// TensorFlow's Equal, NotEqual and SelectV2 take strings: byte-wise comparisons, broadcast.
TEST(StringTensorTest, EqualNotEqualAndWhereTakeStrings) {
  Graph g;
  auto a = ops::constant(g, Tensor::vector({"a", "b", std::string("\0b", 2)}));
  auto b = ops::constant(g, Tensor::vector({"a", "c", std::string("\0c", 2)}));
  auto eq = ops::equal(a, b);
  auto ne = ops::not_equal(a, ops::constant(g, "b"));
  auto picked = ops::where(eq, a, ops::constant(g, "-"));
  EXPECT_EQ(eq.dtype(), DType::Bool);
  EXPECT_EQ(picked.dtype(), DType::String);
  Session s(g);
  auto got = s.run({eq, ne, picked});
  EXPECT_EQ(got[0].to_vector<bool>(), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(got[1].to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(got[2].to_vector<std::string>(), (Strings{"a", "-", "-"}));
  EXPECT_THROW_MSG(ops::equal(a, ops::constant(g, 1)), InvalidArgumentError, "(Equal): inputs must have the same dtype");
}

// ---- The wire and checkpoints ----

namespace wire = internal::wire;

Tensor odd_strings() {
  return Tensor::from_vector<std::string>({"", "a", std::string("\0b", 2), std::string(1000, 'z')}, Shape{2, 2});
}

// A little-endian length prefix, as core/string_tensor.h encodes.
std::string length(uint64_t n) { return std::string(reinterpret_cast<const char*>(&n), sizeof n); }

TEST(StringWireTest, RoundTrips) {
  const Tensor t = odd_strings();
  auto proto = wire::encode_tensor_proto(t);
  ASSERT_TRUE(proto.ok()) << proto.status().message();
  auto back = wire::decode_tensor_proto(proto.value());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back.value().equals(t));

  // As a frame: the metadata's byte_size is the encoding's.
  const std::string bytes = internal::encode_strings(t);
  EXPECT_EQ(bytes.size(), 4 * 8 + 0 + 1 + 2 + 1000);
  const wire::TensorMeta meta = wire::encode_tensor_meta(t, 1);
  EXPECT_EQ(meta.byte_size(), bytes.size());
  auto decoded = wire::decode_tensor(meta, bytes.data(), bytes.size());
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_TRUE(decoded.value().equals(t));

  const Tensor empty(DType::String, Shape{0, 3});
  auto empty_back = wire::decode_tensor_proto(wire::encode_tensor_proto(empty).value());
  ASSERT_TRUE(empty_back.ok()) << empty_back.status().message();
  EXPECT_EQ(empty_back.value().shape(), (Shape{0, 3}));
}

TEST(StringWireTest, MalformedEncodingsAreInvalidArgument) {
  auto decode = [](const std::vector<int64_t>& dims, const std::string& bytes) {
    wire::TensorMeta meta;
    meta.set_dtype(::tessera::wire::DT_STRING);
    for (int64_t d : dims) meta.add_dims(d);
    meta.set_byte_size(bytes.size());
    return wire::decode_tensor(meta, bytes.data(), bytes.size()).status();
  };
  const std::string ok = length(2) + "ab" + length(0);
  EXPECT_TRUE(decode({2}, ok).ok());
  struct Case {
    std::vector<int64_t> dims;
    std::string bytes;
    const char* message;
  };
  const Case cases[] = {
      {{2}, ok.substr(0, ok.size() - 1), "the bytes end inside its length"},
      {{1}, length(3) + "ab", "has length 3, only 2 bytes are left"},
      {{1}, length(std::numeric_limits<uint64_t>::max()) + "ab", "only 2 bytes are left"},
      {{1}, length(1) + "ab", "1 bytes left over"},
      {{1}, std::string(3, '\0'), "cannot hold the 1 strings"},
      {{1000000000, 1000}, ok, "cannot hold the 1000000000000 strings"},  // refused before allocating
  };
  for (const Case& c : cases) {
    const Status s = decode(c.dims, c.bytes);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
  // A byte_size that is not the frame's.
  wire::TensorMeta meta;
  meta.set_dtype(::tessera::wire::DT_STRING);
  meta.add_dims(2);
  meta.set_byte_size(ok.size() + 1);
  EXPECT_EQ(wire::decode_tensor(meta, ok.data(), ok.size()).status().code(), ErrorCode::kInvalidArgument);
}

TEST(StringWireTest, FeedAndFetchThroughALocalServer) {
  auto server = train::Server::create_local_server();
  Graph g;
  auto p = ops::placeholder(g, DType::String, Shape{2, 2});
  auto out = ops::transpose(p);
  Session s(g, server.target());
  const Tensor t = odd_strings();
  auto got = s.run({out, p}, {{p, t}}, {}, bounded());
  EXPECT_EQ(got[0].to_vector<std::string>(),
            (Strings{"", std::string("\0b", 2), "a", std::string(1000, 'z')}));
  EXPECT_TRUE(got[1].equals(t));
}

class StringCheckpointTest : public testing::TempDirTest {
 protected:
  StringCheckpointTest() : TempDirTest("tessera_string_ckpt") {}
};

TEST_F(StringCheckpointTest, SaveAndRestoreStringVariables) {
  Graph g;
  Variable names(g, odd_strings(), "names");
  Variable x(g, Tensor::scalar(1.5f), "x");
  auto overwrite = names.assign(ops::constant(g, Tensor::from_vector<std::string>({"p", "q", "r", "s"}, Shape{2, 2})));
  train::Saver saver(g);
  Session s(g);
  s.run(global_variables_initializer(g));
  const std::string path = saver.save(s, (dir_ / "model").string());
  s.run(overwrite);
  EXPECT_EQ(s.run(names.value()).to_vector<std::string>(), (Strings{"p", "q", "r", "s"}));
  saver.restore(s, path);
  EXPECT_TRUE(s.run(names.value()).equals(odd_strings()));
  EXPECT_EQ(s.run(x.value()).scalar<float>(), 1.5f);

  // Restored into a fresh session of a graph built the same way.
  Graph g2;
  Variable names2(g2, Tensor::from_vector<std::string>({"", "", "", ""}, Shape{2, 2}), "names");
  Variable x2(g2, Tensor::scalar(0.0f), "x");
  train::Saver saver2(g2);
  Session s2(g2);
  saver2.restore(s2, path);
  EXPECT_TRUE(s2.run(names2.value()).equals(odd_strings()));
}

TEST_F(StringCheckpointTest, CorruptStringDataIsDataLoss) {
  Graph g;
  Variable names(g, Tensor::vector({"abc", "de"}), "names");
  train::Saver saver(g);
  Session s(g);
  s.run(global_variables_initializer(g));
  const std::string path = saver.save(s, (dir_ / "model").string());
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-2, std::ios::end);
    f.put('X');  // inside the last string
  }
  EXPECT_THROW_MSG(saver.restore(s, path), DataLossError, "checksum mismatch");
}

// ---- Placement ----

TEST(StringPlacementTest, StringOpsRequestedOnSimRunOnTheCpu) {
  Graph g;
  Output p, id, n;
  {
    auto scope = g.device("/device:SIM:0");
    p = ops::placeholder(g, DType::String, Shape{2});
    id = ops::identity(p);
    n = ops::mul(ops::constant(g, 2.0f), ops::constant(g, 3.0f));
  }
  Session s(g);
  auto got = s.run({id, n}, {{p, Tensor::vector({"a", "b"})}}, {}, bounded());
  EXPECT_EQ(got[0].to_vector<std::string>(), (Strings{"a", "b"}));
  EXPECT_EQ(got[1].scalar<float>(), 6.0f);
  EXPECT_THAT(id.op().assigned_device(), HasSubstr("/device:CPU:0"));
  EXPECT_THAT(p.op().assigned_device(), HasSubstr("/device:CPU:0"));
  EXPECT_THAT(n.op().assigned_device(), HasSubstr("/device:SIM:0"));

  SessionOptions hard;
  hard.allow_soft_placement = false;
  Session strict(g, hard);
  const std::string message = testing::error_of<InvalidArgumentError>(
      [&] { strict.run({id}, {{p, Tensor::vector({"a", "b"})}}, {}, bounded()); });
  EXPECT_THAT(message, HasSubstr("requested '/device:SIM:0'"));
  EXPECT_THAT(message, HasSubstr("has a string input or output"));
}

// ---- Sessions, on the CPU and on SIM ----

class StringSessionTest : public ::testing::TestWithParam<std::string> {
 protected:
  GraphScope on_device(Graph& g) { return g.device(GetParam() == "CPU" ? "/device:CPU:0" : "/device:SIM:0"); }
  // `x` (numbers) consumed on the device under test.
  Output consumed(const Output& x) {
    auto scope = on_device(x.op().graph());
    return ops::identity(x);
  }
};

TEST_P(StringSessionTest, FeedsAndFetches) {
  Graph g;
  Output p, id, len;
  {
    auto scope = on_device(g);
    p = ops::placeholder(g, DType::String);
    id = ops::identity(ops::identity(p));
    len = ops::size(p);
  }
  Session s(g);
  const Tensor t = odd_strings();
  auto got = s.run({id, len, p}, {{p, t}}, {}, bounded());
  EXPECT_TRUE(got[0].equals(t));
  EXPECT_EQ(got[1].scalar<int32_t>(), 4);
  EXPECT_TRUE(got[2].equals(t));
  // From several threads at once, each its own feed.
  testing::run_threads(4, [&](int i) {
    const Tensor mine = Tensor::vector({std::to_string(i), std::string(100, static_cast<char>('a' + i))});
    for (int k = 0; k < 20; ++k) EXPECT_TRUE(s.run({id}, {{p, mine}}, {}, bounded())[0].equals(mine));
  });
}

// The element of `x` (row-major, dims `dims`) at index `idx`.
std::string at(const Strings& x, const std::vector<int64_t>& dims, const std::vector<int64_t>& idx) {
  int64_t flat = 0;
  for (std::size_t d = 0; d < dims.size(); ++d) flat = flat * dims[d] + idx[d];
  return x[static_cast<std::size_t>(flat)];
}

TEST_P(StringSessionTest, ShapeOpsMoveStrings) {
  // x[r][c] = "r<r>c<c>" (long enough for some not to fit a small-string buffer).
  const std::vector<int64_t> dims{2, 3};
  Strings x;
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 3; ++c) x.push_back(fmt::format("r{}c{}{}", r, c, std::string(static_cast<std::size_t>(10 * c), '.')));
  }
  Graph g;
  std::vector<Output> outs;
  {
    auto scope = on_device(g);
    auto t = ops::constant(g, Tensor::from_vector<std::string>(x, Shape{2, 3}));
    outs = {ops::reshape(t, {3, 2}),
            ops::transpose(t),
            ops::concat({t, t}, 1),
            ops::slice(t, {0, 1}, {2, 2}),
            ops::tile(t, {2, 1}),
            ops::pad(t, {{1, 0}, {0, 1}}),
            ops::gather(t, ops::constant(g, Tensor::vector<int32_t>({1, 0, 1}))),
            ops::expand_dims(t, 0),
            ops::split(t, 3, 1)[2],
            ops::zeros_like(t),
            ops::fill(g, Shape{2}, Tensor::scalar("f")),
            ops::random_shuffle(t, 5)};
  }
  Session s(g);
  auto got = s.run(outs, {}, {}, bounded());
  std::vector<Strings> v;
  for (const Tensor& t : got) v.push_back(t.to_vector<std::string>());
  EXPECT_EQ(v[0], x);  // reshape keeps the order
  Strings want;
  for (int c = 0; c < 3; ++c) {
    for (int r = 0; r < 2; ++r) want.push_back(at(x, dims, {r, c}));
  }
  EXPECT_EQ(v[1], want);
  want.clear();
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 6; ++c) want.push_back(at(x, dims, {r, c % 3}));
  }
  EXPECT_EQ(v[2], want);
  EXPECT_EQ(v[3], (Strings{x[1], x[2], x[4], x[5]}));
  want = x;
  want.insert(want.end(), x.begin(), x.end());
  EXPECT_EQ(v[4], want);
  EXPECT_EQ(got[5].shape(), (Shape{3, 4}));
  want = {"", "", "", "", x[0], x[1], x[2], "", x[3], x[4], x[5], ""};
  EXPECT_EQ(v[5], want);
  EXPECT_EQ(v[6], (Strings{x[3], x[4], x[5], x[0], x[1], x[2], x[3], x[4], x[5]}));
  EXPECT_EQ(got[7].shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(v[7], x);
  EXPECT_EQ(v[8], (Strings{x[2], x[5]}));
  EXPECT_EQ(v[9], (Strings(6, "")));
  EXPECT_EQ(v[10], (Strings{"f", "f"}));
  // Rows shuffled whole.
  ASSERT_EQ(v[11].size(), 6u);
  const Strings row0(x.begin(), x.begin() + 3), row1(x.begin() + 3, x.end());
  const Strings first(v[11].begin(), v[11].begin() + 3), second(v[11].begin() + 3, v[11].end());
  EXPECT_TRUE((first == row0 && second == row1) || (first == row1 && second == row0));
}

TEST_P(StringSessionTest, FifoQueueOfStringsAndFloats) {
  Graph g;
  FIFOQueue q(g, 10, {DType::String, DType::Float32}, {Shape{}, Shape{}});
  Output names, values;
  {
    auto scope = on_device(g);
    names = ops::constant(g, Tensor::vector({"zero", "one", std::string(200, '2'), "three", "four"}));
    values = ops::identity(ops::constant(g, Tensor::vector<float>({0, 1, 2, 3, 4})));
  }
  auto enqueue_many = q.enqueue_many({names, values});
  auto enqueue_one = q.enqueue({ops::constant(g, "five"), ops::constant(g, 5.0f)});
  auto one = q.dequeue();
  auto many = q.dequeue_many(2);
  auto up_to = q.dequeue_up_to(10);
  auto close = q.close();
  Session s(g);
  s.run(enqueue_many, {});
  s.run(enqueue_one, {});
  auto first = s.run({one[0], consumed(one[1])}, {}, {}, bounded());
  EXPECT_EQ(first[0].scalar<std::string>(), "zero");
  EXPECT_EQ(first[1].scalar<float>(), 0.0f);
  auto two = s.run({many[0], consumed(many[1])}, {}, {}, bounded());
  EXPECT_EQ(two[0].to_vector<std::string>(), (Strings{"one", std::string(200, '2')}));
  EXPECT_EQ(two[1].to_vector<float>(), (std::vector<float>{1, 2}));
  s.run(close, {});
  auto rest = s.run({up_to[0], up_to[1]}, {}, {}, bounded());
  EXPECT_EQ(rest[0].to_vector<std::string>(), (Strings{"three", "four", "five"}));
  EXPECT_EQ(rest[1].to_vector<float>(), (std::vector<float>{3, 4, 5}));
  EXPECT_THROW(s.run({one[0]}, {}, {}, bounded()), OutOfRangeError);
}

TEST_P(StringSessionTest, RandomShuffleQueueOfStrings) {
  Graph g;
  RandomShuffleQueue q(g, 20, 0, {DType::String}, {Shape{}}, /*seed=*/11);
  Strings all;
  for (int i = 0; i < 12; ++i) all.push_back("element " + std::to_string(i) + std::string(static_cast<std::size_t>(i * 3), '*'));
  Output values;
  {
    auto scope = on_device(g);
    values = ops::constant(g, Tensor::vector(all));
  }
  auto enqueue = q.enqueue_many({values});
  auto five = q.dequeue_many(5)[0];
  auto rest = q.dequeue_up_to(20)[0];
  auto close = q.close();
  Session s(g);
  s.run(enqueue, {});
  s.run(close, {});
  auto a = s.run({five}, {}, {}, bounded())[0].to_vector<std::string>();
  auto b = s.run({rest}, {}, {}, bounded())[0].to_vector<std::string>();
  EXPECT_EQ(a.size(), 5u);
  a.insert(a.end(), b.begin(), b.end());
  EXPECT_THAT(a, UnorderedElementsAreArray(all));
}

TEST_P(StringSessionTest, ShuffleBatchKeepsStringsWithTheirNumbers) {
  Graph g;
  Strings names;
  std::vector<float> xs;
  for (int i = 0; i < 30; ++i) {
    names.push_back("example-" + std::to_string(i));
    xs.push_back(static_cast<float>(i));
  }
  auto row = train::slice_input_producer({ops::constant(g, Tensor::vector(names)), ops::constant(g, Tensor::vector(xs))},
                                         /*num_epochs=*/1, /*shuffle=*/true, /*seed=*/3);
  auto batch = train::shuffle_batch(row, /*batch_size=*/4, /*capacity=*/16, /*min_after_dequeue=*/4,
                                    /*num_threads=*/2, /*seed=*/5, false, /*allow_smaller_final_batch=*/true);
  auto twice = consumed(ops::mul(batch[1], ops::constant(g, 2.0f)));
  Session s(g);
  ScopedQueueRunners runners(s);
  std::multiset<int> seen;
  for (;;) {
    std::vector<Tensor> got;
    try {
      got = s.run({batch[0], batch[1], twice}, {}, {}, bounded());
    } catch (const OutOfRangeError&) {
      break;
    }
    auto n = got[0].to_vector<std::string>();
    auto x = got[1].to_vector<float>();
    auto x2 = got[2].to_vector<float>();
    ASSERT_EQ(n.size(), x.size());
    for (std::size_t i = 0; i < n.size(); ++i) {
      EXPECT_EQ(n[i], "example-" + std::to_string(static_cast<int>(x[i])));
      EXPECT_EQ(x2[i], 2 * x[i]);
      seen.insert(static_cast<int>(x[i]));
    }
  }
  std::multiset<int> want;
  for (int i = 0; i < 30; ++i) want.insert(i);
  EXPECT_EQ(seen, want);
}

// ---- decode_csv: TensorFlow's decode_csv_op_test.py ----

class DecodeCSVTest : public StringSessionTest {
 protected:
  // decode_csv of `records` (fed) with the op requested on the device under test; number columns
  // consumed there.
  std::vector<Tensor> decode(const Tensor& records, std::vector<Tensor> defaults, std::string delim = ",",
                             bool quotes = true) {
    Graph g;
    auto r = ops::placeholder(g, DType::String);
    std::vector<Output> cols;
    {
      auto scope = on_device(g);
      cols = train::decode_csv(r, std::move(defaults), std::move(delim), "", quotes);
    }
    std::vector<Output> fetches;
    for (const Output& c : cols) fetches.push_back(c.dtype() == DType::String ? c : consumed(c));
    Session s(g);
    auto got = s.run(fetches, {{r, records}}, {}, bounded());
    EXPECT_THAT(cols[0].op().assigned_device(), HasSubstr("/device:CPU:0"));
    return got;
  }
  std::string decode_error(const Tensor& records, std::vector<Tensor> defaults) {
    return testing::error_of<InvalidArgumentError>([&] { decode(records, std::move(defaults)); });
  }
  static Tensor none(DType d) { return Tensor(d, Shape{0}); }  // a required column
};

TEST_P(DecodeCSVTest, Simple) {
  auto got = decode(Tensor::vector({"1", "2", "\"3\""}), {Tensor::vector<int32_t>({1})});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].dtype(), DType::Int32);
  EXPECT_EQ(got[0].to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
}

TEST_P(DecodeCSVTest, SimpleNoQuoteDelimiter) {
  auto got = decode(Tensor::vector({"1", "2", "\"3\""}), {Tensor::vector({""})}, ",", /*quotes=*/false);
  EXPECT_EQ(got[0].to_vector<std::string>(), (Strings{"1", "2", "\"3\""}));
}

TEST_P(DecodeCSVTest, Scalar) {
  auto got = decode(Tensor::scalar("1,\"\""), {Tensor::vector<int32_t>({3}), Tensor::vector<int32_t>({4})});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].shape(), Shape{});
  EXPECT_EQ(got[0].scalar<int32_t>(), 1);
  EXPECT_EQ(got[1].scalar<int32_t>(), 4);
}

TEST_P(DecodeCSVTest, TwoDimensional) {
  auto got = decode(Tensor::from_vector<std::string>({"1", "2", "\"\"", "4"}, Shape{2, 2}), {Tensor::scalar<int32_t>(5)});
  EXPECT_EQ(got[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(got[0].to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 5, 4}));
}

TEST_P(DecodeCSVTest, EmptyFieldsTakeTheDefaults) {
  auto got = decode(Tensor::vector({"1,", "\"\",3"}), {Tensor::vector<int32_t>({4}), Tensor::vector<int32_t>({5})});
  EXPECT_EQ(got[0].to_vector<int32_t>(), (std::vector<int32_t>{1, 4}));
  EXPECT_EQ(got[1].to_vector<int32_t>(), (std::vector<int32_t>{5, 3}));
}

TEST_P(DecodeCSVTest, Int64) {
  auto got = decode(Tensor::vector({"1", "2", "\"2147483648\""}), {none(DType::Int64)});
  EXPECT_EQ(got[0].dtype(), DType::Int64);
  EXPECT_EQ(got[0].to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 2147483648LL}));
}

TEST_P(DecodeCSVTest, Float32AndFloat64) {
  auto got = decode(Tensor::vector({"1.0,1.5", "-1.79e+308,\" -2.5e3 \"", "\"-inf\",nan"}),
                    {none(DType::Float64), Tensor::scalar(0.0f)});
  EXPECT_EQ(got[0].dtype(), DType::Float64);
  auto d = got[0].to_vector<double>();
  EXPECT_EQ(d[0], 1.0);
  EXPECT_EQ(d[1], -1.79e308);
  EXPECT_EQ(d[2], -std::numeric_limits<double>::infinity());
  auto f = got[1].to_vector<float>();
  EXPECT_EQ(f[0], 1.5f);
  EXPECT_EQ(f[1], -2500.0f);
  EXPECT_TRUE(std::isnan(f[2]));
}

TEST_P(DecodeCSVTest, String) {
  auto got = decode(Tensor::vector({"1.0", "-1.79e+308", "\"-inf\""}), {Tensor::vector({""})});
  EXPECT_EQ(got[0].to_vector<std::string>(), (Strings{"1.0", "-1.79e+308", "-inf"}));
}

TEST_P(DecodeCSVTest, QuotedFields) {
  auto got = decode(Tensor::vector({"\"a,b\",1", "\"with \"\"quotes\"\"\",2", "\"\",3", "plain,4"}),
                    {Tensor::vector({"default"}), Tensor::scalar<int32_t>(0)});
  EXPECT_EQ(got[0].to_vector<std::string>(), (Strings{"a,b", "with \"quotes\"", "default", "plain"}));
  EXPECT_EQ(got[1].to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4}));
}

TEST_P(DecodeCSVTest, OtherDelimiter) {
  auto got = decode(Tensor::vector({"a|1.5", "\"b|c\"|2"}), {Tensor::scalar(""), Tensor::scalar(0.0)}, "|");
  EXPECT_EQ(got[0].to_vector<std::string>(), (Strings{"a", "b|c"}));
  EXPECT_EQ(got[1].to_vector<double>(), (std::vector<double>{1.5, 2}));
}

TEST_P(DecodeCSVTest, WithoutDefaultsError) {
  const std::string m = decode_error(Tensor::vector({",1", "0.2,3", "3.0,"}), {Tensor::vector<float>({1.0f}), none(DType::Int32)});
  EXPECT_THAT(m, HasSubstr("(DecodeCSV): Field 1 is required but missing in record 2! ('3.0,')"));
}

TEST_P(DecodeCSVTest, WrongFieldIntError) {
  const std::string m =
      decode_error(Tensor::vector({",1", "0.2,234a", "3.0,2"}), {Tensor::vector<float>({1.0f}), none(DType::Int32)});
  EXPECT_THAT(m, HasSubstr("Field 1 in record 1 is not a valid int32: 234a ('0.2,234a')"));
  EXPECT_THAT(decode_error(Tensor::vector({"2147483648"}), {none(DType::Int32)}),
              HasSubstr("is not a valid int32: 2147483648"));
  EXPECT_THAT(decode_error(Tensor::vector({"1.5x"}), {none(DType::Float32)}), HasSubstr("is not a valid float32: 1.5x"));
}

TEST_P(DecodeCSVTest, WrongDefaults) {
  // One default for records of two fields.
  EXPECT_THAT(decode_error(Tensor::vector({",1", "0.2,2", "3.0adf,3"}), {Tensor::vector<float>({1.0f})}),
              HasSubstr("Expect 1 fields but have 2 in record 0"));
  Graph g;
  auto r = ops::placeholder(g, DType::String);
  EXPECT_THROW_MSG(train::decode_csv(r, {Tensor::vector<int32_t>({1, 2})}), InvalidArgumentError,
                   "(DecodeCSV): record default 0 must be a scalar or have at most one element, got shape [2]");
  EXPECT_THROW_MSG(train::decode_csv(r, {Tensor::scalar(true)}), InvalidArgumentError, "record default 0 has dtype bool");
  EXPECT_THROW_MSG(train::decode_csv(r, {Tensor::scalar(1.0f)}, ";;"), InvalidArgumentError,
                   "field_delim must be one character, got ';;'");
  EXPECT_THROW_MSG(train::decode_csv(ops::constant(g, 1.0f), {Tensor::scalar(1.0f)}), InvalidArgumentError,
                   "records must be string");
  EXPECT_THROW(train::decode_csv(r, {}), InvalidArgumentError);
}

TEST_P(DecodeCSVTest, NumColsMismatch) {
  EXPECT_THAT(decode_error(Tensor::vector({"1,2,3"}), {Tensor::scalar<int32_t>(1), Tensor::scalar<int32_t>(1)}),
              HasSubstr("Expect 2 fields but have 3 in record 0 ('1,2,3')"));
}

TEST_P(DecodeCSVTest, MalformedQuotes) {
  EXPECT_THAT(decode_error(Tensor::vector({"a\"b,1"}), {Tensor::scalar(""), Tensor::scalar(1)}),
              HasSubstr("Unquoted fields cannot have quotes/CRLFs inside in record 0"));
  EXPECT_THAT(decode_error(Tensor::vector({"\"ab\"c,1"}), {Tensor::scalar(""), Tensor::scalar(1)}),
              HasSubstr("Quote inside a string has to be escaped by another quote"));
  EXPECT_THAT(decode_error(Tensor::vector({"\"ab"}), {Tensor::scalar("")}),
              HasSubstr("Quoted field has to end with quote followed by delim or end"));
}

// ---- TextLineReader (reader_ops_test.py's TextLineReaderTest) and the file pipeline ----

class ReaderTest : public testing::TempDirTest, public ::testing::WithParamInterface<std::string> {
 protected:
  ReaderTest() : TempDirTest("tessera_reader") {}
  GraphScope on_device(Graph& g) { return g.device(GetParam() == "CPU" ? "/device:CPU:0" : "/device:SIM:0"); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string write_gz(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
    EXPECT_EQ(gzclose(f), Z_OK);
    return path;
  }
  // TF's _CreateFiles: file i has lines "<i>: <j>" for j < num_lines, ending in `eol`.
  Strings create_files(int num_files, int num_lines, const std::string& eol = "\n") {
    Strings paths;
    for (int i = 0; i < num_files; ++i) {
      std::string text;
      for (int j = 0; j < num_lines; ++j) text += fmt::format("{}: {}{}", i, j, eol);
      paths.push_back(write(fmt::format("text_line.{}.txt", i), text));
    }
    return paths;
  }

  // A reader of the files in `paths` (a closed FIFOQueue holding them), requested on the device.
  struct Reading {
    Graph g;
    std::unique_ptr<FIFOQueue> queue;
    Output key, value;
    Operation fill;
  };
  std::unique_ptr<Reading> reading(const Strings& paths, int skip_header_lines = 0) {
    auto r = std::make_unique<Reading>();
    r->queue = std::make_unique<FIFOQueue>(r->g, 99, std::vector<DType>{DType::String}, std::vector<Shape>{Shape{}});
    auto scope = on_device(r->g);
    train::TextLineReader reader(r->g, skip_header_lines);
    std::tie(r->key, r->value) = reader.read(*r->queue);
    r->fill = ops::group({r->queue->enqueue_many({ops::constant(r->g, Tensor::vector(paths))})});
    return r;
  }
  void fill_and_close(Session& s, Reading& r) {
    s.run(r.fill, {});
    s.run(r.queue->close(), {});
  }
  std::pair<std::string, std::string> read(Session& s, const Reading& r) {
    auto got = s.run({r.key, r.value}, {}, {}, bounded());
    return {got[0].scalar<std::string>(), got[1].scalar<std::string>()};
  }
};

TEST_P(ReaderTest, OneEpoch) {
  for (const std::string eol : {"\n", "\r\n"}) {
    SCOPED_TRACE(eol == "\n" ? "LF" : "CRLF");
    const Strings files = create_files(2, 5, eol);
    auto r = reading(files);
    Session s(r->g);
    fill_and_close(s, *r);
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 5; ++j) {
        auto [k, v] = read(s, *r);
        EXPECT_EQ(k, fmt::format("{}:{}", files[static_cast<std::size_t>(i)], j + 1));
        EXPECT_EQ(v, fmt::format("{}: {}", i, j));
      }
    }
    EXPECT_THAT(r->key.op().assigned_device(), HasSubstr("/device:CPU:0"));
    EXPECT_THROW_MSG(read(s, *r), OutOfRangeError, "is closed");
    EXPECT_THROW(read(s, *r), OutOfRangeError);  // and stays so
  }
}

TEST_P(ReaderTest, SkipHeaderLines) {
  const Strings files = create_files(2, 5);
  auto r = reading(files, /*skip_header_lines=*/1);
  Session s(r->g);
  fill_and_close(s, *r);
  for (int i = 0; i < 2; ++i) {
    for (int j = 1; j < 5; ++j) {  // line 1 skipped; the keys still count it
      auto [k, v] = read(s, *r);
      EXPECT_EQ(k, fmt::format("{}:{}", files[static_cast<std::size_t>(i)], j + 1));
      EXPECT_EQ(v, fmt::format("{}: {}", i, j));
    }
  }
  EXPECT_THROW(read(s, *r), OutOfRangeError);
}

TEST_P(ReaderTest, EmptyFilesShortFilesAndNoFinalNewline) {
  const Strings files = {write("empty.txt", ""), write("header_only.txt", "h\n"), write("last.txt", "a\n\nb"),
                         write("blank.txt", "\n")};
  auto r = reading(files, /*skip_header_lines=*/0);
  Session s(r->g);
  fill_and_close(s, *r);
  EXPECT_EQ(read(s, *r), std::make_pair(files[1] + ":1", std::string("h")));
  EXPECT_EQ(read(s, *r), std::make_pair(files[2] + ":1", std::string("a")));
  EXPECT_EQ(read(s, *r), std::make_pair(files[2] + ":2", std::string("")));
  EXPECT_EQ(read(s, *r), std::make_pair(files[2] + ":3", std::string("b")));
  EXPECT_EQ(read(s, *r), std::make_pair(files[3] + ":1", std::string("")));
  EXPECT_THROW(read(s, *r), OutOfRangeError);

  // Skipping more lines than a file has leaves nothing of it.
  auto skipping = reading(files, /*skip_header_lines=*/2);
  Session s2(skipping->g);
  fill_and_close(s2, *skipping);
  EXPECT_EQ(read(s2, *skipping), std::make_pair(files[2] + ":3", std::string("b")));
  EXPECT_THROW(read(s2, *skipping), OutOfRangeError);
}

TEST_P(ReaderTest, MissingFileIsNotFoundAndTheNextFileIsRead) {
  const std::string missing = (dir_ / "no_such_file.txt").string();
  const Strings files = {missing, write("there.txt", "x\n")};
  auto r = reading(files);
  Session s(r->g);
  fill_and_close(s, *r);
  EXPECT_THROW_MSG(read(s, *r), NotFoundError, "(ReaderReadV2): file '" + missing + "' not found");
  EXPECT_EQ(read(s, *r), std::make_pair(files[1] + ":1", std::string("x")));
  EXPECT_THROW(read(s, *r), OutOfRangeError);
}

TEST_P(ReaderTest, GzipFilesAreReadDecompressed) {
  std::string text;
  for (int j = 0; j < 300; ++j) text += fmt::format("line {} {}\r\n", j, std::string(static_cast<std::size_t>(j % 50), 'x'));
  const Strings files = {write_gz("lines.txt.gz", text), write("plain.txt", "p\n")};
  auto r = reading(files, 1);
  Session s(r->g);
  fill_and_close(s, *r);
  for (int j = 1; j < 300; ++j) {
    auto [k, v] = read(s, *r);
    EXPECT_EQ(k, fmt::format("{}:{}", files[0], j + 1));
    EXPECT_EQ(v, fmt::format("line {} {}", j, std::string(static_cast<std::size_t>(j % 50), 'x')));
  }
  EXPECT_THROW(read(s, *r), OutOfRangeError);  // plain.txt has only its header
}

TEST_P(ReaderTest, ManyThreadsReadEachLineOnce) {
  const Strings files = create_files(4, 50);
  auto r = reading(files);
  Session s(r->g);
  fill_and_close(s, *r);
  std::mutex mu;
  std::multiset<std::string> keys;
  int mismatched = 0;
  testing::run_threads(8, [&](int) {
    for (;;) {
      std::pair<std::string, std::string> kv;
      try {
        kv = read(s, *r);
      } catch (const OutOfRangeError&) {
        return;
      }
      // The key "<file>:<line>" names the line the value is.
      const std::size_t colon = kv.first.rfind(':');
      const int line = std::stoi(kv.first.substr(colon + 1));
      const std::string file = kv.first.substr(0, colon);
      const auto index = std::find(files.begin(), files.end(), file) - files.begin();
      std::lock_guard<std::mutex> l(mu);
      if (kv.second != fmt::format("{}: {}", index, line - 1)) ++mismatched;
      keys.insert(kv.first);
    }
  });
  EXPECT_EQ(mismatched, 0);
  EXPECT_EQ(keys.size(), 200u);
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 200u);
}

TEST_P(ReaderTest, AWaitingReadHoldsNoPoolThread) {
  const Strings files = create_files(1, 2);
  auto r = reading(files);
  SessionOptions one_thread;
  one_thread.inter_op_threads = 1;
  Session s(r->g, one_thread);
  // Nothing queued: the read waits, and a short timeout ends it; the session stays usable.
  EXPECT_THROW(s.run({r->value}, {}, {}, bounded(50ms)), DeadlineExceededError);
  auto waiting = std::async(std::launch::async, [&] { return read(s, *r); });
  // The one pool thread is free to fill the queue while the read waits (given time to start).
  std::this_thread::sleep_for(100ms);
  s.run({}, {}, {r->fill}, bounded());
  EXPECT_EQ(waiting.get(), std::make_pair(files[0] + ":1", std::string("0: 0")));
  EXPECT_EQ(read(s, *r), std::make_pair(files[0] + ":2", std::string("0: 1")));
}

TEST_P(ReaderTest, StringInputProducerToShuffleBatch) {
  // name,x,y rows; a header line; the same rows in a gzipped copy.
  std::string text = "name,x,y\n";
  for (int i = 0; i < 20; ++i) text += fmt::format("\"n,{}\",{},{}\n", i, i, i * 0.5);
  const Strings files = {write("data.csv", text), write_gz("data.csv.gz", text)};
  Graph g;
  auto producer = train::string_input_producer(g, files, /*num_epochs=*/1, /*shuffle=*/true, /*seed=*/3);
  EXPECT_EQ(producer.dtypes(), std::vector<DType>{DType::String});
  std::vector<Output> batch;
  Output y_twice;
  {
    auto scope = on_device(g);
    train::TextLineReader reader(g, /*skip_header_lines=*/1);
    auto [key, line] = reader.read(producer);
    auto cols = train::decode_csv(line, {Tensor::scalar(""), Tensor::scalar<int32_t>(0), Tensor::scalar(0.0f)});
    batch = train::shuffle_batch({cols[0], cols[1], cols[2], key}, /*batch_size=*/6, /*capacity=*/30,
                                 /*min_after_dequeue=*/5, /*num_threads=*/2, /*seed=*/7, false,
                                 /*allow_smaller_final_batch=*/true);
    y_twice = ops::mul(batch[2], ops::constant(g, 2.0f));
  }
  Session s(g);
  ScopedQueueRunners runners(s);
  std::map<int, int> count;
  std::set<std::string> keys;
  for (;;) {
    std::vector<Tensor> got;
    try {
      got = s.run({batch[0], batch[1], batch[2], batch[3], y_twice}, {}, {}, bounded());
    } catch (const OutOfRangeError&) {
      break;
    }
    auto names = got[0].to_vector<std::string>();
    auto x = got[1].to_vector<int32_t>();
    auto y = got[2].to_vector<float>();
    auto k = got[3].to_vector<std::string>();
    auto y2 = got[4].to_vector<float>();
    for (std::size_t i = 0; i < names.size(); ++i) {
      EXPECT_EQ(names[i], fmt::format("n,{}", x[i]));
      EXPECT_EQ(y[i], x[i] * 0.5f);
      EXPECT_EQ(y2[i], x[i] * 1.0f);
      // The key names the file and the line (the header is line 1).
      const bool from_file = k[i] == fmt::format("{}:{}", files[0], x[i] + 2) || k[i] == fmt::format("{}:{}", files[1], x[i] + 2);
      EXPECT_TRUE(from_file) << k[i];
      keys.insert(k[i]);
      ++count[x[i]];
    }
  }
  EXPECT_EQ(keys.size(), 40u);  // every line of both files once
  ASSERT_EQ(count.size(), 20u);
  for (const auto& [x, n] : count) EXPECT_EQ(n, 2) << x;
}

TEST(StringInputProducerTest, BuildsAQueueOfTheNames) {
  Graph g;
  EXPECT_THROW_MSG(train::string_input_producer(g, {}), InvalidArgumentError, "must not be empty");
  auto q = train::string_input_producer(g, {"a", "b", "c"}, /*num_epochs=*/2, /*shuffle=*/false);
  EXPECT_EQ(q.shapes(), std::vector<Shape>{Shape{}});
  auto all = q.dequeue_many(6)[0];
  auto one = q.dequeue()[0];
  Session s(g);
  ScopedQueueRunners runners(s);
  EXPECT_EQ(s.run({all}, {}, {}, bounded())[0].to_vector<std::string>(), (Strings{"a", "b", "c", "a", "b", "c"}));
  EXPECT_THROW(s.run({one}, {}, {}, bounded()), OutOfRangeError);
}

INSTANTIATE_TEST_SUITE_P(Devices, StringSessionTest, ::testing::Values("CPU", "SIM"));
INSTANTIATE_TEST_SUITE_P(Devices, DecodeCSVTest, ::testing::Values("CPU", "SIM"));
INSTANTIATE_TEST_SUITE_P(Devices, ReaderTest, ::testing::Values("CPU", "SIM"));

}  // namespace
}  // namespace tessera
