// The public API contract (API.md), black-box: every name and signature it lists, called exactly
// as it spells them, against the umbrella header alone. Where a return type is stated there it is checked with a static_assert; where a
// behaviour is stated (in italics: TensorFlow's) it is checked against TensorFlow's result,
// computed by hand. Each section of API.md is one group of tests, in its order.
//
// The last group checks TensorFlow's behaviour in cases API.md points to without spelling out.
#include <tessera/tessera.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <unistd.h>

namespace {

using namespace tessera;  // NOLINT: as a user of the contract writes it
using namespace std::chrono_literals;
namespace fs = std::filesystem;

// ------------------------------------------------------------------------------------- helpers

// A bound for every run that may block, so a library that hangs fails the test instead.
RunOptions bounded(std::chrono::milliseconds limit = 20s) {
  RunOptions o;
  o.timeout = limit;
  return o;
}

// Runs `blocked_run` (a run that must block) on another thread, then `unblock`, and expects the
// run to end with CancelledError within a bound.
void expect_unblocked_by_cancelling(const std::function<void()>& blocked_run, const std::function<void()>& unblock) {
  std::promise<std::string> result;
  auto got = result.get_future();
  std::thread pending([&] {
    try {
      blocked_run();
      result.set_value("returned");
    } catch (const CancelledError&) {
      result.set_value("cancelled");
    } catch (const std::exception& e) {
      result.set_value(std::string("other: ") + e.what());
    }
  });
  std::this_thread::sleep_for(200ms);
  unblock();
  const bool ready = got.wait_for(15s) == std::future_status::ready;
  pending.join();  // the run is bounded whether or not `unblock` ended it
  ASSERT_TRUE(ready);
  EXPECT_EQ(got.get(), "cancelled");
}

// Session::close() cancels a pending run (`blocked` must block).
void expect_close_cancels_pending_run(Session& s, const Output& blocked) {
  expect_unblocked_by_cancelling([&] { s.run({blocked}, {}, {}, bounded(20s)); }, [&] { s.close(); });
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// Runs `body`, expecting an E whose message contains `needle`.
template <class E, class F>
void expect_error_naming(F&& body, const std::string& needle) {
  try {
    body();
    ADD_FAILURE() << "expected an error naming '" << needle << "'";
  } catch (const E& e) {
    EXPECT_TRUE(contains(e.what(), needle)) << "message: " << e.what() << "\nwanted: " << needle;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// A fresh directory, removed with its contents at the end of the scope.
struct TempDir {
  explicit TempDir(const std::string& tag) {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("tessera_api_contract_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::vector<std::string> files_starting_with(const std::string& prefix) const {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(path)) {
      if (e.is_regular_file() && e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().string());
    }
    return out;
  }
  fs::path path;
};

// =================================================================================== ## Errors

// TensorFlow's numeric status codes, which ErrorCode lists.
template <class E>
void check_error_class(int tf_code) {
  static_assert(std::is_base_of_v<Error, E>);
  static_assert(std::is_base_of_v<std::runtime_error, E>);
  static_assert(std::is_constructible_v<E, const std::string&>);
  static_assert(!std::is_convertible_v<const std::string&, E>, "the string constructor is explicit");
  static_assert(std::is_same_v<decltype(std::declval<const E&>().code()), ErrorCode>);
  const std::string message = "message of the error";
  E e(message);
  EXPECT_EQ(static_cast<int>(e.code()), tf_code);
  EXPECT_TRUE(contains(e.what(), message)) << e.what();
  try {
    throw E(message);
  } catch (const Error& caught) {
    EXPECT_EQ(caught.code(), e.code());
  }
  try {
    throw E(message);
  } catch (const std::runtime_error& caught) {
    EXPECT_TRUE(contains(caught.what(), message));
  }
  // The base's constructor with the subclass's code.
  Error base(e.code(), message);
  EXPECT_EQ(base.code(), e.code());
  EXPECT_TRUE(contains(base.what(), message));
}

TEST(ApiErrors, EverySubclassHasItsTensorFlowCode) {
  check_error_class<CancelledError>(1);
  check_error_class<InvalidArgumentError>(3);
  check_error_class<DeadlineExceededError>(4);
  check_error_class<NotFoundError>(5);
  check_error_class<AlreadyExistsError>(6);
  check_error_class<PermissionDeniedError>(7);
  check_error_class<ResourceExhaustedError>(8);
  check_error_class<FailedPreconditionError>(9);
  check_error_class<AbortedError>(10);
  check_error_class<OutOfRangeError>(11);
  check_error_class<UnimplementedError>(12);
  check_error_class<InternalError>(13);
  check_error_class<UnavailableError>(14);
  check_error_class<DataLossError>(15);
}

TEST(ApiErrors, ErrorsCrossThreadsWithCodeAndMessage) {
  std::exception_ptr ex;
  std::thread t([&] {
    try {
      throw NotFoundError("node 'abc' not found");
    } catch (...) {
      ex = std::current_exception();
    }
  });
  t.join();
  try {
    std::rethrow_exception(ex);
  } catch (const NotFoundError& e) {
    EXPECT_EQ(static_cast<int>(e.code()), 5);
    EXPECT_TRUE(contains(e.what(), "node 'abc' not found"));
  }
}

TEST(ApiErrors, MessagesNameTheOp) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{2}, "the_unfed_placeholder");
  auto y = ops::neg(x);
  Session s(g);
  expect_error_naming<InvalidArgumentError>([&] { s.run(y); }, "the_unfed_placeholder");
}

// ================================================================================== ## Tensors

TEST(ApiTensors, ShapeQueries) {
  Shape scalar{};
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.num_elements(), 1);
  Shape s{2, 3};
  static_assert(std::is_same_v<decltype(s.rank()), int>);
  static_assert(std::is_same_v<decltype(s.dim(0)), int64_t>);
  static_assert(std::is_same_v<decltype(s.num_elements()), int64_t>);
  EXPECT_EQ(s.rank(), 2);
  EXPECT_EQ(s.dim(0), 2);
  EXPECT_EQ(s.dim(1), 3);
  EXPECT_EQ(s.num_elements(), 6);
  Shape partial{-1, 3};
  EXPECT_EQ(partial.rank(), 2);
  EXPECT_EQ(partial.dim(0), -1);
  Shape unknown = Shape::unknown();
  EXPECT_NE(unknown.rank(), 0);  // unknown rank is not a scalar
  EXPECT_NE(unknown.rank(), 2);
}

TEST(ApiTensors, EveryFactoryAndAccessor) {
  Tensor a = Tensor::scalar(2.5f);
  static_assert(std::is_same_v<decltype(Tensor::scalar(2.5f)), Tensor>);
  static_assert(std::is_same_v<decltype(a.dtype()), DType>);
  static_assert(std::is_same_v<decltype(a.shape()), const Shape&>);
  static_assert(std::is_same_v<decltype(a.device()), std::string>);
  static_assert(std::is_same_v<decltype(a.scalar<float>()), float>);
  static_assert(std::is_same_v<decltype(a.to_vector<float>()), std::vector<float>>);
  EXPECT_EQ(a.dtype(), DType::Float32);
  EXPECT_EQ(a.shape().rank(), 0);
  EXPECT_EQ(a.scalar<float>(), 2.5f);
  EXPECT_FALSE(a.device().empty());

  EXPECT_EQ(Tensor::scalar(7.0).dtype(), DType::Float64);
  EXPECT_EQ(Tensor::scalar<int32_t>(7).scalar<int32_t>(), 7);
  EXPECT_EQ(Tensor::scalar<int64_t>(1LL << 40).scalar<int64_t>(), 1LL << 40);
  EXPECT_EQ(Tensor::scalar(true).dtype(), DType::Bool);
  EXPECT_TRUE(Tensor::scalar(true).scalar<bool>());

  Tensor v = Tensor::vector<float>({1, 2, 3});
  static_assert(std::is_same_v<decltype(Tensor::vector<float>({1, 2, 3})), Tensor>);
  EXPECT_EQ(v.shape().rank(), 1);
  EXPECT_EQ(v.shape().dim(0), 3);
  EXPECT_EQ(v.to_vector<float>(), (std::vector<float>{1, 2, 3}));

  Tensor m = Tensor::matrix<int32_t>({1, 2, 3, 4, 5, 6}, 2, 3);
  static_assert(std::is_same_v<decltype(Tensor::matrix<int32_t>({1}, 1, 1)), Tensor>);
  EXPECT_EQ(m.dtype(), DType::Int32);
  EXPECT_EQ(m.shape().dim(0), 2);
  EXPECT_EQ(m.shape().dim(1), 3);
  EXPECT_EQ(m.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));

  Tensor f = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8}, Shape{2, 2, 2});
  static_assert(std::is_same_v<decltype(Tensor::from_vector<int64_t>({1}, Shape{1})), Tensor>);
  EXPECT_EQ(f.dtype(), DType::Int64);
  EXPECT_EQ(f.shape().rank(), 3);
  EXPECT_EQ(f.shape().num_elements(), 8);
  EXPECT_EQ(f.to_vector<int64_t>().back(), 8);

  Tensor b = Tensor::vector<bool>({true, false});
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, false}));

  // The element type deduced from the std::vector argument.
  EXPECT_EQ(Tensor::vector(std::vector<double>{1, 2}).dtype(), DType::Float64);
  EXPECT_EQ(Tensor::matrix(std::vector<int64_t>{1, 2, 3, 4}, 2, 2).dtype(), DType::Int64);
  EXPECT_EQ(Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{4}).shape().dim(0), 4);
  EXPECT_EQ(Tensor::scalar(int64_t{5}).dtype(), DType::Int64);
}

TEST(ApiTensors, StringTensors) {
  Tensor lit = Tensor::scalar("a literal");  // the non-template overload
  EXPECT_EQ(lit.dtype(), DType::String);
  EXPECT_EQ(lit.scalar<std::string>(), "a literal");
  Tensor str = Tensor::scalar(std::string("a string"));
  EXPECT_EQ(str.dtype(), DType::String);
  EXPECT_EQ(str.scalar<std::string>(), "a string");
  Tensor vec = Tensor::vector(std::vector<std::string>{"x", "yy", ""});
  EXPECT_EQ(vec.dtype(), DType::String);
  EXPECT_EQ(vec.shape().dim(0), 3);
  EXPECT_EQ(vec.to_vector<std::string>(), (std::vector<std::string>{"x", "yy", ""}));

  // Through a session (host memory).
  Graph g;
  auto c = ops::identity(ops::constant(g, Tensor::vector(std::vector<std::string>{"p", "q"})));
  Session s(g);
  EXPECT_EQ(s.run(c).to_vector<std::string>(), (std::vector<std::string>{"p", "q"}));
}

TEST(ApiTensors, Float16AndBFloat16ThroughCast) {
  Graph g;
  auto x = ops::constant(g, Tensor::vector<float>({1.5f, -2.0f, 0.25f}));
  auto h = ops::cast(x, DType::Float16);
  auto bf = ops::cast(x, DType::BFloat16);
  EXPECT_EQ(h.dtype(), DType::Float16);
  EXPECT_EQ(bf.dtype(), DType::BFloat16);
  auto h_sum = ops::cast(ops::add(h, h), DType::Float32);           // elementwise math
  auto bf_mul = ops::cast(ops::mul(bf, bf), DType::Float32);
  auto h_red = ops::cast(ops::reduce_sum(h), DType::Float32);       // reductions
  auto bf_red = ops::cast(ops::reduce_max(bf), DType::Float32);
  auto hm = ops::cast(ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2)), DType::Float16);
  auto h_mm = ops::cast(ops::matmul(hm, hm), DType::Float32);      // matmul
  auto bm = ops::cast(ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2)), DType::BFloat16);
  auto bf_mm = ops::cast(ops::matmul(bm, bm, false, true), DType::Float32);
  Session s(g);
  EXPECT_EQ(s.run(h).dtype(), DType::Float16);
  EXPECT_EQ(s.run(bf).dtype(), DType::BFloat16);
  auto out = s.run({ops::cast(h, DType::Float32), ops::cast(bf, DType::Float32), h_sum, bf_mul, h_red, bf_red,
                    h_mm, bf_mm});
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 0.25f}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 0.25f}));
  EXPECT_EQ(out[2].to_vector<float>(), (std::vector<float>{3.0f, -4.0f, 0.5f}));
  EXPECT_EQ(out[3].to_vector<float>(), (std::vector<float>{2.25f, 4.0f, 0.0625f}));
  EXPECT_EQ(out[4].scalar<float>(), -0.25f);
  EXPECT_EQ(out[5].scalar<float>(), 1.5f);
  EXPECT_EQ(out[6].to_vector<float>(), (std::vector<float>{7, 10, 15, 22}));
  EXPECT_EQ(out[7].to_vector<float>(), (std::vector<float>{5, 11, 11, 25}));  // a * a^T
}

// =========================================================================== ## Graphs and ops

TEST(ApiGraph, HandlesAreCopyableComparableAndKeyAMap) {
  Graph g;
  Output a = ops::constant(g, 1.0f, "a");
  Output b = ops::constant(g, 2.0f, "b");
  Output a2 = a;  // copy
  Output c;
  EXPECT_TRUE(c.is_null());
  c = b;  // assign
  EXPECT_FALSE(c.is_null());
  EXPECT_TRUE(a2 == a);
  EXPECT_TRUE(a != b);
  EXPECT_TRUE((a < b) != (b < a));
  std::map<Output, int> by_output{{a, 1}, {b, 2}};
  EXPECT_EQ(by_output[a2], 1);
  EXPECT_EQ(by_output[c], 2);

  Operation op_a = a.op();
  Operation op_a2 = op_a;
  Operation op_null;
  EXPECT_TRUE(op_null.is_null());
  EXPECT_FALSE(op_a.is_null());
  EXPECT_TRUE(op_a == op_a2);
  EXPECT_TRUE(op_a != b.op());
  std::map<Operation, std::string> by_op{{op_a, "a"}, {b.op(), "b"}};
  EXPECT_EQ(by_op[op_a2], "a");

  static_assert(std::is_same_v<decltype(std::declval<const Output&>().is_null()), bool>);
  static_assert(std::is_same_v<decltype(std::declval<const Operation&>().is_null()), bool>);
}

TEST(ApiGraph, QueriesAreConstAndReturnStrings) {
  Graph g;
  const Output out = ops::add(ops::constant(g, 1.0f), ops::constant(g, 2.0f));
  const Output named = ops::constant(g, 3.0f, "my_const");
  static_assert(std::is_same_v<decltype(out.name()), std::string>);
  static_assert(std::is_same_v<decltype(out.dtype()), DType>);
  static_assert(std::is_same_v<decltype(out.op()), Operation>);
  const Operation op = named.op();
  static_assert(std::is_same_v<decltype(op.name()), std::string>);
  static_assert(std::is_same_v<decltype(op.type()), std::string>);
  static_assert(std::is_same_v<decltype(op.device()), std::string>);
  static_assert(std::is_same_v<decltype(op.assigned_device()), std::string>);
  EXPECT_EQ(named.name(), "my_const:0");
  EXPECT_EQ(op.name(), "my_const");
  EXPECT_EQ(op.type(), "Const");
  EXPECT_EQ(op.device(), "");
  EXPECT_EQ(op.assigned_device(), "");  // not placed yet
  EXPECT_EQ(out.dtype(), DType::Float32);
  EXPECT_EQ(out.shape().rank(), 0);
  EXPECT_EQ(out.name(), out.op().name() + ":0");
}

TEST(ApiGraph, NullHandlesRaiseInvalidArgument) {
  Graph g;
  Output null_out;
  Operation null_op;
  EXPECT_THROW(null_out.name(), InvalidArgumentError);
  EXPECT_THROW(null_out.dtype(), InvalidArgumentError);
  EXPECT_THROW(null_out.op(), InvalidArgumentError);
  EXPECT_THROW(null_op.name(), InvalidArgumentError);
  EXPECT_THROW(null_op.type(), InvalidArgumentError);
  EXPECT_THROW(null_op.device(), InvalidArgumentError);
  EXPECT_THROW(ops::add(null_out, ops::constant(g, 1.0f)), InvalidArgumentError);
  EXPECT_THROW(ops::neg(null_out), InvalidArgumentError);
  EXPECT_THROW(ops::group({null_op}), InvalidArgumentError);
  Session s(g);
  EXPECT_THROW(s.run(null_out), InvalidArgumentError);
  EXPECT_THROW(s.run(null_op), InvalidArgumentError);
}

TEST(ApiGraph, CoreOps) {
  Graph g;
  static_assert(std::is_same_v<decltype(ops::constant(g, Tensor::scalar(1.0f))), Output>);
  // Scalar overloads.
  auto cf = ops::constant(g, 1.5f);
  auto cd = ops::constant(g, 1.5);
  auto ci = ops::constant(g, int32_t{3});
  auto cl = ops::constant(g, int64_t{4});
  auto cb = ops::constant(g, true);
  EXPECT_EQ(cf.dtype(), DType::Float32);
  EXPECT_EQ(cd.dtype(), DType::Float64);
  EXPECT_EQ(ci.dtype(), DType::Int32);
  EXPECT_EQ(cl.dtype(), DType::Int64);
  EXPECT_EQ(cb.dtype(), DType::Bool);
  auto ct = ops::constant(g, Tensor::scalar(2.0f), "ct");
  EXPECT_EQ(ct.op().name(), "ct");

  // placeholder: default shape unknown; explicit partial shape.
  auto p_any = ops::placeholder(g, DType::Float32);
  EXPECT_NE(p_any.shape().rank(), 0);
  EXPECT_NE(p_any.shape().rank(), 2);
  auto p = ops::placeholder(g, DType::Float32, {-1, 2}, "p");
  EXPECT_EQ(p.shape().rank(), 2);
  EXPECT_EQ(p.shape().dim(0), -1);

  auto m = ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2));
  auto row = ops::constant(g, Tensor::vector<float>({10, 20}));
  auto add = ops::add(m, row);  // broadcasting [2,2] + [2]
  auto sub = ops::sub(m, row);
  auto mul = ops::mul(m, row);
  auto div = ops::div(m, ops::constant(g, 2.0f));
  auto mx = ops::maximum(m, ops::constant(g, 2.5f));
  auto mn = ops::minimum(m, ops::constant(g, 2.5f));
  auto u = ops::constant(g, Tensor::vector<float>({-1.0f, 0.5f, 4.0f}));
  auto pos = ops::constant(g, Tensor::vector<float>({1.0f, 4.0f}));
  auto mm = ops::matmul(m, m);
  auto mm_ta = ops::matmul(m, m, true);
  auto mm_tb = ops::matmul(m, m, false, true);
  auto rs = ops::reduce_sum(m);
  auto rs0 = ops::reduce_sum(m, {0});
  auto rs1k = ops::reduce_sum(m, {1}, true);
  auto rmean = ops::reduce_mean(m, {1});
  auto rmax = ops::reduce_max(m, {0});
  auto id = ops::identity(m);
  auto cast = ops::cast(m, DType::Int32);
  auto ru = ops::random_uniform(g, Shape{50});
  auto ru2 = ops::random_uniform(g, Shape{50}, DType::Float64, 7);
  auto rn = ops::random_normal(g, Shape{50}, DType::Float32, 7);
  Operation noop = ops::no_op(g);
  Operation grp = ops::group({noop, add.op()});
  static_assert(std::is_same_v<decltype(ops::no_op(g)), Operation>);
  static_assert(std::is_same_v<decltype(ops::group({noop})), Operation>);
  EXPECT_EQ(rs1k.shape().rank(), 2);

  Session s(g);
  auto out = s.run({add, sub, mul, div, mx, mn, ops::neg(u), ops::relu(u), ops::square(u), ops::exp(pos),
                    ops::log(pos), ops::sqrt(pos), ops::tanh(pos), ops::sigmoid(pos), mm, mm_ta, mm_tb, rs, rs0,
                    rs1k, rmean, rmax, id, cast, ru, ru2, rn, p},
                   {{p, Tensor::matrix<float>({9, 8}, 1, 2)}}, {noop, grp});
  expect_near(out[0].to_vector<float>(), {11, 22, 13, 24});
  expect_near(out[1].to_vector<float>(), {-9, -18, -7, -16});
  expect_near(out[2].to_vector<float>(), {10, 40, 30, 80});
  expect_near(out[3].to_vector<float>(), {0.5f, 1, 1.5f, 2});
  expect_near(out[4].to_vector<float>(), {2.5f, 2.5f, 3, 4});
  expect_near(out[5].to_vector<float>(), {1, 2, 2.5f, 2.5f});
  expect_near(out[6].to_vector<float>(), {1, -0.5f, -4});
  expect_near(out[7].to_vector<float>(), {0, 0.5f, 4});
  expect_near(out[8].to_vector<float>(), {1, 0.25f, 16});
  expect_near(out[9].to_vector<float>(), {2.7182817f, 54.59815f}, 1e-4f);
  expect_near(out[10].to_vector<float>(), {0, 1.3862944f});
  expect_near(out[11].to_vector<float>(), {1, 2});
  expect_near(out[12].to_vector<float>(), {0.7615942f, 0.9993292f});
  expect_near(out[13].to_vector<float>(), {0.7310586f, 0.98201376f});
  expect_near(out[14].to_vector<float>(), {7, 10, 15, 22});
  expect_near(out[15].to_vector<float>(), {10, 14, 14, 20});
  expect_near(out[16].to_vector<float>(), {5, 11, 11, 25});
  EXPECT_EQ(out[17].scalar<float>(), 10);
  expect_near(out[18].to_vector<float>(), {4, 6});
  EXPECT_EQ(out[19].shape().dim(0), 2);
  EXPECT_EQ(out[19].shape().dim(1), 1);
  expect_near(out[19].to_vector<float>(), {3, 7});
  expect_near(out[20].to_vector<float>(), {1.5f, 3.5f});
  expect_near(out[21].to_vector<float>(), {3, 4});
  expect_near(out[22].to_vector<float>(), {1, 2, 3, 4});
  EXPECT_EQ(out[23].to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4}));
  for (float x : out[24].to_vector<float>()) {
    EXPECT_GE(x, 0.0f);
    EXPECT_LT(x, 1.0f);
  }
  EXPECT_EQ(out[25].dtype(), DType::Float64);
  EXPECT_EQ(out[26].shape().dim(0), 50);
  expect_near(out[27].to_vector<float>(), {9, 8});
}

TEST(ApiGraph, DeviceScopes) {
  Graph g;
  Output on_ps, on_gpu, on_cpu, lower_gpu, nested, after;
  {
    auto scope = g.device("/job:ps/task:0");
    on_ps = ops::constant(g, 1.0f, "on_ps");
    {
      auto inner = g.device("/device:CPU:0");  // partial: merges with the outer job/task
      nested = ops::constant(g, 1.0f, "nested");
    }
  }
  {
    auto scope = g.device("/device:GPU:0");
    on_gpu = ops::constant(g, 2.0f, "on_gpu");
  }
  {
    auto scope = g.device("/cpu:0");  // lowercase accepted
    on_cpu = ops::add(ops::constant(g, 3.0f), ops::constant(g, 4.0f), "on_cpu");
  }
  {
    auto scope = g.device("/gpu:0");
    lower_gpu = ops::constant(g, 5.0f, "lower_gpu");
  }
  after = ops::constant(g, 6.0f, "after");
  const std::string ps = on_ps.op().device();
  EXPECT_TRUE(contains(ps, "/job:ps")) << ps;
  EXPECT_TRUE(contains(ps, "task:0")) << ps;
  const std::string n = nested.op().device();
  EXPECT_TRUE(contains(n, "/job:ps") && contains(n, "task:0") && contains(n, "CPU:0")) << n;
  EXPECT_TRUE(contains(on_gpu.op().device(), "GPU:0")) << on_gpu.op().device();
  EXPECT_TRUE(contains(on_cpu.op().device(), "CPU:0")) << on_cpu.op().device();
  EXPECT_TRUE(contains(lower_gpu.op().device(), "GPU:0")) << lower_gpu.op().device();
  EXPECT_EQ(after.op().device(), "");  // the scopes ended

  // Full names with every part; a malformed spec raises.
  {
    auto scope = g.device("/job:worker/replica:0/task:1/device:CPU:0");
    auto full = ops::constant(g, 1.0f);
    EXPECT_TRUE(contains(full.op().device(), "task:1"));
  }
  EXPECT_THROW({ auto bad = g.device("not a device"); }, InvalidArgumentError);
  // Any part may be omitted.
  for (const char* spec : {"/job:ps", "/replica:0", "/task:1", "/job:ps/replica:0", "/replica:0/device:CPU:0",
                           "/job:worker/task:2/cpu:0", "/device:GPU:1"}) {
    EXPECT_NO_THROW({
      auto partial = g.device(spec);
      ops::no_op(g);
    }) << spec;
  }

  // In-process: /cpu:0 runs there; /device:GPU:0 is soft-placed (allow_soft_placement = true).
  Session s(g);
  auto out = s.run({on_cpu, on_gpu});
  EXPECT_EQ(out[0].scalar<float>(), 7.0f);
  EXPECT_EQ(out[1].scalar<float>(), 2.0f);
  EXPECT_TRUE(contains(on_cpu.op().assigned_device(), "device:CPU:0")) << on_cpu.op().assigned_device();
  EXPECT_FALSE(on_gpu.op().assigned_device().empty());
}

TEST(ApiGraph, WithoutSoftPlacementAMissingDeviceIsAnError) {
  Graph g;
  Output c;
  {
    auto scope = g.device("/device:GPU:7");
    c = ops::constant(g, 1.0f, "on_a_missing_gpu");
  }
  SessionOptions options;
  options.allow_soft_placement = false;
  Session s(g, options);
  expect_error_naming<InvalidArgumentError>([&] { s.run(c); }, "on_a_missing_gpu");
}

TEST(ApiGraph, DeviceFunctionScope) {
  Graph g;
  Output a, b;
  {
    auto scope = g.device([](const Operation& op) { return op.type() == "Add" ? "/job:worker/task:1" : "/cpu:0"; });
    a = ops::constant(g, 1.0f);
    b = ops::add(a, a);
  }
  EXPECT_TRUE(contains(a.op().device(), "CPU:0")) << a.op().device();
  EXPECT_TRUE(contains(b.op().device(), "/job:worker") && contains(b.op().device(), "task:1")) << b.op().device();
}

TEST(ApiGraph, ColocateWith) {
  Graph g;
  Output anchor, follower;
  {
    auto scope = g.device("/cpu:0");
    anchor = ops::constant(g, 1.0f, "anchor");
  }
  Operation op = anchor.op();
  {
    auto cscope = g.colocate_with(op);
    follower = ops::neg(anchor);
  }
  Session s(g);
  EXPECT_EQ(s.run(follower).scalar<float>(), -1.0f);
  EXPECT_FALSE(anchor.op().assigned_device().empty());
  EXPECT_EQ(follower.op().assigned_device(), anchor.op().assigned_device());
}

TEST(ApiGraph, OpsMayBeAddedWhileSessionsRunTheGraph) {
  Graph g;
  auto a = ops::constant(g, 1.0f);
  Session s(g);
  EXPECT_EQ(s.run(a).scalar<float>(), 1.0f);
  auto b = ops::add(a, ops::constant(g, 2.0f));  // added after the session's first run
  EXPECT_EQ(s.run(b).scalar<float>(), 3.0f);
}

// ================================================================================ ## More ops

TEST(ApiMoreOps, ShapeOps) {
  Graph g;
  auto x = ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 2, 3));
  auto reshaped = ops::reshape(x, {3, -1});
  EXPECT_EQ(reshaped.shape().dim(0), 3);
  EXPECT_EQ(reshaped.shape().dim(1), 2);
  auto t = ops::transpose(x);  // {} = reverse
  auto t2 = ops::transpose(x, {1, 0});
  auto cat0 = ops::concat({x, x}, 0);
  auto cat1 = ops::concat({x, x}, 1);
  std::vector<Output> parts = ops::split(ops::concat({x, x}, 1), 2, 1);
  static_assert(std::is_same_v<decltype(ops::split(x, 1, 0)), std::vector<Output>>);
  ASSERT_EQ(parts.size(), 2u);
  auto sl = ops::slice(x, {0, 1}, {2, -1});
  auto ed = ops::expand_dims(x, 0);
  auto sq = ops::squeeze(ed);
  auto sq_axes = ops::squeeze(ops::expand_dims(x, 2), {2});
  auto tl = ops::tile(ops::constant(g, Tensor::matrix<float>({1, 2}, 1, 2)), {2, 2});
  auto pd = ops::pad(ops::constant(g, Tensor::matrix<float>({1, 2}, 1, 2)), {{1, 0}, {0, 1}});
  auto sh = ops::shape(x);
  auto sz = ops::size(x);
  EXPECT_EQ(sh.dtype(), DType::Int32);
  EXPECT_EQ(sz.dtype(), DType::Int32);
  auto fl = ops::fill(g, Shape{2, 2}, Tensor::scalar(7.0f));
  auto zl = ops::zeros_like(x);
  auto ol = ops::ones_like(x);
  Session s(g);
  auto out = s.run({reshaped, t, t2, cat0, cat1, parts[0], parts[1], sl, ed, sq, sq_axes, tl, pd, sh, sz, fl, zl, ol});
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(out[1].shape().dim(0), 3);
  EXPECT_EQ(out[2].to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(out[3].shape().dim(0), 4);
  EXPECT_EQ(out[3].to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(out[4].shape().dim(1), 6);
  EXPECT_EQ(out[4].to_vector<float>(), (std::vector<float>{1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}));
  EXPECT_EQ(out[5].to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(out[6].to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(out[7].to_vector<float>(), (std::vector<float>{2, 3, 5, 6}));
  EXPECT_EQ(out[8].shape().rank(), 3);
  EXPECT_EQ(out[8].shape().dim(0), 1);
  EXPECT_EQ(out[9].shape().rank(), 2);
  EXPECT_EQ(out[10].shape().rank(), 2);
  EXPECT_EQ(out[11].to_vector<float>(), (std::vector<float>{1, 2, 1, 2, 1, 2, 1, 2}));
  EXPECT_EQ(out[11].shape().dim(1), 4);
  EXPECT_EQ(out[12].to_vector<float>(), (std::vector<float>{0, 0, 0, 1, 2, 0}));
  EXPECT_EQ(out[12].shape().dim(0), 2);
  EXPECT_EQ(out[12].shape().dim(1), 3);
  EXPECT_EQ(out[13].to_vector<int32_t>(), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(out[14].scalar<int32_t>(), 6);
  EXPECT_EQ(out[15].to_vector<float>(), (std::vector<float>{7, 7, 7, 7}));
  EXPECT_EQ(out[16].to_vector<float>(), (std::vector<float>(6, 0.0f)));
  EXPECT_EQ(out[17].to_vector<float>(), (std::vector<float>(6, 1.0f)));
}

TEST(ApiMoreOps, IncompatibleReshapeRaisesNamingTheOp) {
  Graph g;
  auto x = ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 2, 3));
  try {
    auto bad = ops::reshape(x, {4});  // at build time (static shape known)
    Session s(g);
    s.run(bad);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_TRUE(contains(e.what(), "Reshape")) << e.what();
  }
  // At run time (unknown static shape).
  Graph g2;
  auto p = ops::placeholder(g2, DType::Float32);
  auto r = ops::reshape(p, {4});
  Session s2(g2);
  expect_error_naming<InvalidArgumentError>([&] { s2.run(r, {{p, Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 2, 3)}}); },
                                            r.op().name());
}

TEST(ApiMoreOps, GatherOneHotArgMaxComparisonsLogicalWhere) {
  Graph g;
  auto params = ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 3, 2));
  auto idx = ops::constant(g, Tensor::vector<int32_t>({2, 0}));
  auto g0 = ops::gather(params, idx);
  auto g1 = ops::gather(params, ops::constant(g, Tensor::vector<int32_t>({1})), 1);
  auto oh = ops::one_hot(ops::constant(g, Tensor::vector<int32_t>({0, 2})), 3);
  auto oh2 = ops::one_hot(ops::constant(g, Tensor::vector<int32_t>({1})), 3, 5.0f, -1.0f);
  auto x = ops::constant(g, Tensor::matrix<float>({1, 9, 3, 7, 2, 8}, 2, 3));
  auto amax = ops::argmax(x, 1);
  auto amin = ops::argmin(x, 0);
  EXPECT_EQ(amax.dtype(), DType::Int64);
  EXPECT_EQ(amin.dtype(), DType::Int64);
  auto a = ops::constant(g, Tensor::vector<float>({1, 2, 3}));
  auto b = ops::constant(g, Tensor::vector<float>({3, 2, 1}));
  auto eq = ops::equal(a, b);
  auto lt = ops::less(a, b);
  auto gt = ops::greater(a, b);
  auto le = ops::less_equal(a, b);
  auto ge = ops::greater_equal(a, b);
  auto ne = ops::not_equal(a, b);
  EXPECT_EQ(eq.dtype(), DType::Bool);
  auto land = ops::logical_and(le, ge);
  auto lor = ops::logical_or(lt, gt);
  auto lnot = ops::logical_not(eq);
  auto cond = ops::constant(g, Tensor::vector<bool>({true, false}));
  auto wx = ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2));
  auto wh = ops::where(cond, wx, ops::constant(g, 0.0f));  // broadcasting cond [2], y scalar
  Session s(g);
  auto out = s.run({g0, g1, oh, oh2, amax, amin, eq, lt, gt, le, ge, ne, land, lor, lnot, wh});
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{5, 6, 1, 2}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(out[1].shape().dim(0), 3);
  EXPECT_EQ(out[2].to_vector<float>(), (std::vector<float>{1, 0, 0, 0, 0, 1}));
  EXPECT_EQ(out[3].to_vector<float>(), (std::vector<float>{-1, 5, -1}));
  EXPECT_EQ(out[4].to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(out[5].to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(out[6].to_vector<bool>(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(out[7].to_vector<bool>(), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(out[8].to_vector<bool>(), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(out[9].to_vector<bool>(), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(out[10].to_vector<bool>(), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(out[11].to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(out[12].to_vector<bool>(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(out[13].to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(out[14].to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(out[15].to_vector<float>(), (std::vector<float>{1, 0, 3, 0}));

  // An index out of range raises InvalidArgumentError naming the op.
  auto bad = ops::gather(params, ops::constant(g, Tensor::vector<int32_t>({3})));
  expect_error_naming<InvalidArgumentError>([&] { s.run(bad); }, bad.op().name());
}

TEST(ApiMoreOps, ReductionsAddNStopGradient) {
  Graph g;
  auto x = ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4, 5, 6}, 2, 3));
  auto rmin = ops::reduce_min(x);
  auto rmin1 = ops::reduce_min(x, {1}, true);
  auto rprod = ops::reduce_prod(x, {0});
  auto an = ops::add_n({x, x, x});
  auto sg = ops::stop_gradient(x);
  Session s(g);
  auto out = s.run({rmin, rmin1, rprod, an, sg});
  EXPECT_EQ(out[0].scalar<float>(), 1);
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{1, 4}));
  EXPECT_EQ(out[1].shape().rank(), 2);
  EXPECT_EQ(out[2].to_vector<float>(), (std::vector<float>{4, 10, 18}));
  EXPECT_EQ(out[3].to_vector<float>(), (std::vector<float>{3, 6, 9, 12, 15, 18}));
  EXPECT_EQ(out[4].to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(ApiMoreOps, NeuralNetworkOps) {
  Graph g;
  auto logits = ops::constant(g, Tensor::matrix<float>({1, 2, 3, 1, 2, 3}, 2, 3));
  auto sm = ops::softmax(logits);
  auto lsm = ops::log_softmax(logits);
  auto sparse = ops::sparse_softmax_cross_entropy_with_logits(ops::constant(g, Tensor::vector<int32_t>({2, 0})), logits);
  auto dense = ops::softmax_cross_entropy_with_logits(
      ops::constant(g, Tensor::matrix<float>({0, 0, 1, 0.5f, 0.5f, 0}, 2, 3)), logits);
  auto ba = ops::bias_add(ops::constant(g, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2)),
                          ops::constant(g, Tensor::vector<float>({10, 20})));
  auto img = ops::constant(g, Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, Shape{1, 3, 3, 1}));
  auto filt = ops::constant(g, Tensor::from_vector<float>({1, 1, 1, 1}, Shape{2, 2, 1, 1}));
  auto cv_valid = ops::conv2d(img, filt, {1, 1, 1, 1}, "VALID");
  auto cv_same = ops::conv2d(img, filt, {1, 1, 1, 1}, "SAME");
  std::vector<float> sixteen(16);
  for (int i = 0; i < 16; ++i) sixteen[i] = static_cast<float>(i + 1);
  auto img4 = ops::constant(g, Tensor::from_vector<float>(sixteen, Shape{1, 4, 4, 1}));
  auto mp = ops::max_pool(img4, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  auto ap = ops::avg_pool(img4, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  auto ap_same = ops::avg_pool(img, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME");
  auto ones = ops::constant(g, Tensor::vector<float>(std::vector<float>(1000, 1.0f)));
  auto drop_all_kept = ops::dropout(ones, 1.0f);
  auto drop_half = ops::dropout(ones, 0.5f, 7);
  auto l2 = ops::l2_loss(ops::constant(g, Tensor::vector<float>({1, 2, 3})));
  auto tn = ops::truncated_normal(g, Shape{1000});
  auto tn2 = ops::truncated_normal(g, Shape{10}, DType::Float64, 5);
  Session s(g);
  auto out = s.run({sm, lsm, sparse, dense, ba, cv_valid, cv_same, mp, ap, ap_same, drop_all_kept, drop_half, l2, tn, tn2});
  expect_near(out[0].to_vector<float>(), {0.09003057f, 0.24472847f, 0.66524096f, 0.09003057f, 0.24472847f, 0.66524096f});
  expect_near(out[1].to_vector<float>(), {-2.40760596f, -1.40760596f, -0.40760596f, -2.40760596f, -1.40760596f,
                                          -0.40760596f});
  expect_near(out[2].to_vector<float>(), {0.40760596f, 2.40760596f});
  EXPECT_EQ(out[2].shape().rank(), 1);  // per example
  expect_near(out[3].to_vector<float>(), {0.40760596f, 0.5f * 2.40760596f + 0.5f * 1.40760596f});
  EXPECT_EQ(out[4].to_vector<float>(), (std::vector<float>{11, 22, 13, 24}));
  EXPECT_EQ(out[5].to_vector<float>(), (std::vector<float>{12, 16, 24, 28}));
  EXPECT_EQ(out[5].shape().dim(1), 2);
  EXPECT_EQ(out[6].to_vector<float>(), (std::vector<float>{12, 16, 9, 24, 28, 15, 15, 17, 9}));
  EXPECT_EQ(out[7].to_vector<float>(), (std::vector<float>{6, 8, 14, 16}));
  expect_near(out[8].to_vector<float>(), {3.5f, 5.5f, 11.5f, 13.5f});
  // SAME avg_pool of 3x3 with 2x2/2: windows [1,2,4,5], [3,6], [7,8], [9] (padding not counted).
  expect_near(out[9].to_vector<float>(), {3, 4.5f, 7.5f, 9});
  EXPECT_EQ(out[10].to_vector<float>(), std::vector<float>(1000, 1.0f));
  int zeros = 0;
  for (float v : out[11].to_vector<float>()) {
    EXPECT_TRUE(v == 0.0f || v == 2.0f) << v;
    zeros += v == 0.0f;
  }
  EXPECT_GT(zeros, 350);
  EXPECT_LT(zeros, 650);
  EXPECT_FLOAT_EQ(out[12].scalar<float>(), 7.0f);
  for (float v : out[13].to_vector<float>()) EXPECT_LE(std::fabs(v), 2.0f);
  EXPECT_EQ(out[14].dtype(), DType::Float64);
}

TEST(ApiMoreOps, TensorFlowCornerCases) {
  Graph g;
  // one_hot: an index outside [0, depth) gives a row of `off`.
  auto oh = ops::one_hot(ops::constant(g, Tensor::vector<int32_t>({5, -1})), 3);
  // argmax: ties pick the first.
  auto am = ops::argmax(ops::constant(g, Tensor::vector<float>({1, 3, 3})), 0);
  // max_pool SAME pads with -inf, not 0.
  auto mp = ops::max_pool(ops::constant(g, Tensor::from_vector<float>(std::vector<float>(9, -1.0f), Shape{1, 3, 3, 1})),
                          {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME");
  // conv2d SAME with stride 2 on 4x4: TF pads 0 before, 1 after.
  std::vector<float> sixteen(16);
  for (int i = 0; i < 16; ++i) sixteen[i] = static_cast<float>(i + 1);
  auto cv = ops::conv2d(ops::constant(g, Tensor::from_vector<float>(sixteen, Shape{1, 4, 4, 1})),
                        ops::constant(g, Tensor::from_vector<float>(std::vector<float>(9, 1.0f), Shape{3, 3, 1, 1})),
                        {1, 2, 2, 1}, "SAME");
  // where: cond [2,1], x [1,2], y [1,2] broadcast to [2,2].
  auto wh = ops::where(ops::constant(g, Tensor::matrix<bool>({true, false}, 2, 1)),
                       ops::constant(g, Tensor::matrix<float>({1, 2}, 1, 2)),
                       ops::constant(g, Tensor::matrix<float>({10, 20}, 1, 2)));
  // softmax is stable for large logits.
  auto sm = ops::softmax(ops::constant(g, Tensor::vector<float>({1000, 1000})));
  // Integer mean truncates; cast float -> int truncates toward zero; negative axes count from the end.
  auto imean = ops::reduce_mean(ops::constant(g, Tensor::vector<int32_t>({1, 2})));
  auto icast = ops::cast(ops::constant(g, Tensor::vector<float>({-1.7f, 1.7f})), DType::Int32);
  auto cat = ops::concat({ops::constant(g, Tensor::matrix<float>({1, 2}, 1, 2)),
                          ops::constant(g, Tensor::matrix<float>({3}, 1, 1))}, -1);
  auto ed = ops::expand_dims(ops::constant(g, Tensor::vector<float>({1, 2})), -1);
  // Shape ops on strings (any dtype).
  auto strs = ops::constant(g, Tensor::vector(std::vector<std::string>{"a", "b"}));
  auto str_ops = ops::concat({ops::tile(strs, {2}), ops::gather(strs, ops::constant(g, Tensor::vector<int32_t>({1}))),
                              ops::reshape(ops::slice(ops::pad(strs, {{1, 0}}), {0}, {1}), {1})}, 0);
  Session s(g);
  auto out = s.run({oh, am, mp, cv, wh, sm, imean, icast, cat, ed, str_ops});
  EXPECT_EQ(out[0].to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(out[1].scalar<int64_t>(), 1);
  EXPECT_EQ(out[2].to_vector<float>(), std::vector<float>(4, -1.0f));
  EXPECT_EQ(out[3].to_vector<float>(), (std::vector<float>{54, 45, 72, 54}));
  EXPECT_EQ(out[4].to_vector<float>(), (std::vector<float>{1, 2, 10, 20}));
  expect_near(out[5].to_vector<float>(), {0.5f, 0.5f});
  EXPECT_EQ(out[6].scalar<int32_t>(), 1);
  EXPECT_EQ(out[7].to_vector<int32_t>(), (std::vector<int32_t>{-1, 1}));
  EXPECT_EQ(out[8].to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(out[9].shape().dim(0), 2);
  EXPECT_EQ(out[9].shape().dim(1), 1);
  EXPECT_EQ(out[10].to_vector<std::string>(), (std::vector<std::string>{"a", "b", "a", "b", "b", ""}));

  // Error conditions as TF's: InvalidArgumentError naming the op.
  auto label = ops::sparse_softmax_cross_entropy_with_logits(ops::constant(g, Tensor::vector<int32_t>({3})),
                                                            ops::constant(g, Tensor::matrix<float>({1, 2, 3}, 1, 3)));
  expect_error_naming<InvalidArgumentError>([&] { s.run(label); }, label.op().name());
  auto idiv = ops::div(ops::constant(g, Tensor::vector<int32_t>({1, 2})), ops::constant(g, Tensor::vector<int32_t>({1, 0})));
  expect_error_naming<InvalidArgumentError>([&] { s.run(idiv); }, idiv.op().name());
  EXPECT_THROW(ops::split(ops::constant(g, Tensor::vector<float>({1, 2, 3})), 2, 0), InvalidArgumentError);
  EXPECT_THROW(ops::squeeze(ops::constant(g, Tensor::vector<float>({1, 2, 3})), {0}), InvalidArgumentError);
  EXPECT_THROW(ops::matmul(ops::constant(g, Tensor::matrix<float>({1, 2}, 1, 2)),
                           ops::constant(g, Tensor::matrix<float>({1, 2}, 1, 2))),
               InvalidArgumentError);
  EXPECT_THROW(ops::add(ops::constant(g, 1.0f), ops::constant(g, 1)), InvalidArgumentError);  // dtypes differ
}

TEST(ApiMoreOps, CountUpTo) {
  Graph g;
  Variable counter(g, Tensor::scalar<int64_t>(0), "counter", false);
  Output next = ops::count_up_to(counter, 2);
  static_assert(std::is_same_v<decltype(ops::count_up_to(counter, 2)), Output>);
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(next).scalar<int64_t>(), 0);
  EXPECT_EQ(s.run(next).scalar<int64_t>(), 1);
  EXPECT_THROW(s.run(next), OutOfRangeError);
  EXPECT_EQ(s.run(counter.value()).scalar<int64_t>(), 2);
}

// ================================================================================ ## Variables

TEST(ApiVariables, ConstructorsAndAccessors) {
  Graph g;
  Variable v(g, Tensor::scalar(1.0f), "v");
  Variable w(ops::constant(g, 2.0f), "w", false);
  Variable unnamed(g, Tensor::scalar(0.0f));
  static_assert(std::is_same_v<decltype(v.value()), Output>);
  static_assert(std::is_same_v<decltype(v.assign(Output())), Output>);
  static_assert(std::is_same_v<decltype(v.assign_add(Output())), Output>);
  static_assert(std::is_same_v<decltype(v.assign_sub(Output())), Output>);
  static_assert(std::is_same_v<decltype(v.initializer()), Operation>);
  static_assert(std::is_same_v<decltype(v.name()), const std::string&>);
  static_assert(std::is_same_v<decltype(v.trainable()), bool>);
  static_assert(std::is_same_v<decltype(global_variables_initializer(g)), Operation>);
  EXPECT_EQ(v.name(), "v");
  EXPECT_EQ(w.name(), "w");
  EXPECT_FALSE(unnamed.name().empty());
  EXPECT_TRUE(v.trainable());
  EXPECT_FALSE(w.trainable());
  EXPECT_TRUE(v.value() == v.value());  // the same Output on every call
  const Variable& cv = v;
  EXPECT_TRUE(cv.value() == v.value());

  auto set = v.assign(ops::constant(g, 10.0f));
  auto inc = v.assign_add(ops::constant(g, 5.0f));
  auto dec = v.assign_sub(ops::constant(g, 3.0f));
  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(w.value()).scalar<float>(), 2.0f);
  EXPECT_EQ(s.run(v.value()).scalar<float>(), 1.0f);
  EXPECT_EQ(s.run(set).scalar<float>(), 10.0f);  // each returns the new value
  EXPECT_EQ(s.run(inc).scalar<float>(), 15.0f);
  EXPECT_EQ(s.run(dec).scalar<float>(), 12.0f);
  EXPECT_EQ(s.run(v.value()).scalar<float>(), 12.0f);
  s.run(v.initializer());  // back to the initial value
  EXPECT_EQ(s.run(v.value()).scalar<float>(), 1.0f);
}

TEST(ApiVariables, UninitializedReadNamesTheVariable) {
  Graph g;
  Variable v(g, Tensor::scalar(1.0f), "never_initialized_var");
  Session s(g);
  expect_error_naming<FailedPreconditionError>([&] { s.run(v.value()); }, "never_initialized_var");
}

TEST(ApiVariables, ConcurrentAssignAddsAreAtomic) {
  Graph g;
  Variable v(g, Tensor::scalar(0.0f), "counter");
  Output inc = v.assign_add(ops::constant(g, 1.0f));
  Session s(g);
  s.run(global_variables_initializer(g));
  constexpr int kThreads = 4, kIncrements = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int k = 0; k < kIncrements; ++k) s.run(inc);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(s.run(v.value()).scalar<float>(), static_cast<float>(kThreads * kIncrements));
}

TEST(ApiVariables, SharedByNameOnATaskAndOutliveSessions) {
  train::Server server = train::Server::create_local_server();
  {
    Graph g;
    Variable v(g, Tensor::scalar(1.0f), "shared_by_name");
    Session s(g, server.target());
    s.run(global_variables_initializer(g));
    s.run(v.assign(ops::constant(g, 42.0f)));
    s.close();
  }
  Graph other;  // another graph, another session: the same variable by name, already initialized
  Variable same(other, Tensor::scalar(0.0f), "shared_by_name");
  Session s2(other, server.target());
  EXPECT_EQ(s2.run(same.value()).scalar<float>(), 42.0f);
}

// ================================================================================= ## Sessions

TEST(ApiSessions, OptionStructsAndDefaults) {
  RunOptions ro;
  static_assert(std::is_same_v<decltype(ro.timeout), std::chrono::milliseconds>);
  static_assert(std::is_same_v<decltype(ro.trace), bool>);
  EXPECT_EQ(ro.timeout.count(), 0);
  EXPECT_FALSE(ro.trace);
  RunMetadata md;
  static_assert(std::is_same_v<decltype(md.trace_json), std::string>);
  SessionOptions so;
  EXPECT_FALSE(so.log_device_placement);
  EXPECT_TRUE(so.allow_soft_placement);
  EXPECT_EQ(so.inter_op_threads, 0);
  EXPECT_FALSE(so.allow_tf32);
  EXPECT_TRUE(so.cuda_graphs);
  static_assert(std::is_same_v<FeedMap, std::map<Output, Tensor>>);
  // The aggregate spellings.
  RunOptions timed{std::chrono::milliseconds(5)};
  EXPECT_EQ(timed.timeout.count(), 5);
  RunOptions traced{.trace = true};
  EXPECT_TRUE(traced.trace);
}

TEST(ApiSessions, EveryRunOverload) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{}, "x");
  auto y = ops::mul(x, ops::constant(g, 2.0f), "y");
  auto c = ops::constant(g, 5.0f, "c");
  Variable v(g, Tensor::scalar(0.0f), "v");
  Output bump = v.assign_add(ops::constant(g, 1.0f));
  static_assert(!std::is_convertible_v<Graph&, Session>, "explicit Session(Graph&, SessionOptions = {})");
  Session s(g);
  Session with_options(g, SessionOptions{});
  s.run(global_variables_initializer(g));

  const std::vector<Output> fetches{c};
  static_assert(std::is_same_v<decltype(s.run(fetches)), std::vector<Tensor>>);
  static_assert(std::is_same_v<decltype(s.run({c, y})), std::vector<Tensor>>);
  static_assert(std::is_same_v<decltype(s.run({c})), std::vector<Tensor>>);  // a braced list picks the vector
  static_assert(std::is_same_v<decltype(s.run(c)), Tensor>);                 // only a bare Output picks this
  static_assert(std::is_same_v<decltype(s.run(bump.op())), void>);
  static_assert(std::is_same_v<decltype(s.run(fetches, FeedMap{}, {}, RunOptions{}, nullptr)), std::vector<Tensor>>);
  static_assert(std::is_same_v<decltype(s.make_callable(fetches)), Callable>);

  // const std::vector<Output>&, with each defaulted argument given in turn.
  EXPECT_EQ(s.run(fetches)[0].scalar<float>(), 5.0f);
  EXPECT_EQ(s.run(std::vector<Output>{y}, {{x, Tensor::scalar(3.0f)}})[0].scalar<float>(), 6.0f);
  EXPECT_EQ(s.run(fetches, {}, {bump.op()})[0].scalar<float>(), 5.0f);
  EXPECT_EQ(s.run(fetches, FeedMap{}, std::vector<Operation>{}, RunOptions{})[0].scalar<float>(), 5.0f);
  // initializer_list.
  auto two = s.run({c, y}, {{x, Tensor::scalar(4.0f)}});
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].scalar<float>(), 5.0f);
  EXPECT_EQ(two[1].scalar<float>(), 8.0f);
  EXPECT_EQ(s.run({c}).size(), 1u);
  EXPECT_EQ(s.run({y}, {{x, Tensor::scalar(1.0f)}}, {bump.op()}, RunOptions{})[0].scalar<float>(), 2.0f);
  EXPECT_TRUE(s.run({}, {}, {bump.op()}).empty());
  // Tensor run(Output), with and without feeds.
  EXPECT_EQ(s.run(c).scalar<float>(), 5.0f);
  EXPECT_EQ(s.run(y, {{x, Tensor::scalar(10.0f)}}).scalar<float>(), 20.0f);
  // void run(Operation), with and without feeds.
  s.run(bump.op());
  s.run(ops::identity(y).op(), {{x, Tensor::scalar(1.0f)}});
  // The metadata overload.
  RunMetadata md;
  auto out = s.run(fetches, {}, {}, RunOptions{}, &md);
  EXPECT_EQ(out[0].scalar<float>(), 5.0f);
  EXPECT_EQ(s.run(v.value()).scalar<float>(), 4.0f);  // bump ran 4 times
  EXPECT_EQ(with_options.run(c).scalar<float>(), 5.0f);
}

TEST(ApiSessions, TimeoutRaisesDeadlineExceededAndLeavesTheSessionUsable) {
  Graph g;
  FIFOQueue q(g, 4, {DType::Float32}, {Shape{}});
  auto deq = q.dequeue()[0];
  auto enq = q.enqueue({ops::constant(g, 5.0f)});
  auto c = ops::constant(g, 1.0f);
  Session s(g);
  RunOptions options;
  options.timeout = std::chrono::milliseconds(100);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(s.run({deq}, {}, {}, options), DeadlineExceededError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  // Usable afterwards, and the timed-out dequeue took nothing.
  EXPECT_EQ(s.run(c).scalar<float>(), 1.0f);
  s.run(enq);
  EXPECT_EQ(s.run({deq}, {}, {}, bounded())[0].scalar<float>(), 5.0f);
}

TEST(ApiSessions, TracedRunFillsTraceJson) {
  Graph g;
  auto y = ops::add(ops::constant(g, 1.0f), ops::constant(g, 2.0f), "traced_add");
  Session s(g);
  RunOptions options;
  options.trace = true;
  RunMetadata md;
  auto out = s.run({y}, {}, {}, options, &md);
  EXPECT_EQ(out[0].scalar<float>(), 3.0f);
  EXPECT_FALSE(md.trace_json.empty());
  EXPECT_TRUE(contains(md.trace_json, "traced_add")) << md.trace_json.substr(0, 500);
  // Chrome trace events: device, thread, start and duration.
  for (const char* field : {"\"traceEvents\"", "\"ts\"", "\"dur\"", "\"tid\"", "device:CPU:0"}) {
    EXPECT_TRUE(contains(md.trace_json, field)) << field << " in " << md.trace_json.substr(0, 500);
  }
  // Untraced: nothing asked for.
  RunMetadata untraced;
  s.run({y}, {}, {}, RunOptions{}, &untraced);
  EXPECT_TRUE(untraced.trace_json.empty());
}

TEST(ApiSessions, AFetchOrTargetListedTwiceIsComputedOnce) {
  Graph g;
  Variable v(g, Tensor::scalar(0.0f), "v");
  Output bump = v.assign_add(ops::constant(g, 1.0f));
  Session s(g);
  s.run(global_variables_initializer(g));
  auto out = s.run({bump, bump});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].scalar<float>(), 1.0f);
  EXPECT_EQ(out[1].scalar<float>(), 1.0f);
  EXPECT_EQ(s.run(v.value()).scalar<float>(), 1.0f);
  s.run({}, {}, {bump.op(), bump.op()});
  EXPECT_EQ(s.run(v.value()).scalar<float>(), 2.0f);
}

TEST(ApiSessions, CallableFromManyThreads) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{}, "x");
  auto y = ops::square(x);
  Operation target = ops::no_op(g);
  Session s(g);
  Callable call = s.make_callable({y}, {x}, {target});
  Callable no_feeds = s.make_callable({ops::constant(g, 3.0f)});
  static_assert(std::is_same_v<decltype(std::declval<const Callable&>()({})), std::vector<Tensor>>);
  EXPECT_EQ(no_feeds()[0].scalar<float>(), 3.0f);
  Callable copy = call;  // copies share the signature
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        const float in = static_cast<float>(t * 100 + i);
        auto out = (t % 2 ? copy : call)({Tensor::scalar(in)});
        if (out.size() != 1 || out[0].scalar<float>() != in * in) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ApiSessions, CloseCancelsAPendingRun) {
  Graph g;
  FIFOQueue q(g, 4, {DType::Float32}, {Shape{}});
  auto deq = q.dequeue()[0];
  Session s(g);
  expect_close_cancels_pending_run(s, deq);
}

TEST(ApiSessions, RunFromManyThreadsAtOnce) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{2}, "x");
  auto y = ops::reduce_sum(ops::mul(x, x));
  Session s(g);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        const float a = static_cast<float>(t), b = static_cast<float>(i);
        if (s.run(y, {{x, Tensor::vector<float>({a, b})}}).scalar<float>() != a * a + b * b) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ApiSessions, OnAServerTargetTheSameContractHolds) {
  train::Server server = train::Server::create_local_server();
  Graph g;
  FIFOQueue q(g, 4, {DType::Float32}, {Shape{}});
  auto deq = q.dequeue()[0];
  auto enq = q.enqueue({ops::constant(g, 5.0f)});
  Variable v(g, Tensor::scalar(0.0f), "remote_v");
  Output bump = v.assign_add(ops::constant(g, 1.0f));
  auto x = ops::placeholder(g, DType::Float32, Shape{}, "x");
  auto y = ops::square(x, "remote_square");
  Session s(g, server.target());
  // Timeout, then usable; the timed-out dequeue took nothing.
  RunOptions short_wait;
  short_wait.timeout = 100ms;
  EXPECT_THROW(s.run({deq}, {}, {}, short_wait), DeadlineExceededError);
  s.run(enq);
  EXPECT_EQ(s.run({deq}, {}, {}, bounded())[0].scalar<float>(), 5.0f);
  // Fetch and target listed twice: computed once.
  s.run(global_variables_initializer(g));
  auto twice = s.run({bump, bump});
  EXPECT_EQ(twice[0].scalar<float>(), 1.0f);
  EXPECT_EQ(twice[1].scalar<float>(), 1.0f);
  s.run({}, {}, {bump.op(), bump.op()});
  EXPECT_EQ(s.run(v.value()).scalar<float>(), 2.0f);
  // Traced.
  RunOptions traced;
  traced.trace = true;
  RunMetadata md;
  s.run({y}, {{x, Tensor::scalar(2.0f)}}, {}, traced, &md);
  EXPECT_TRUE(contains(md.trace_json, "remote_square"));
  // A callable from many threads.
  Callable call = s.make_callable({y}, {x});
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        const float in = static_cast<float>(t * 10 + i);
        if (call({Tensor::scalar(in)})[0].scalar<float>() != in * in) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  // Errors cross: OutOfRangeError with the queue's op named.
  Graph g2;
  FIFOQueue q2(g2, 2, {DType::Float32}, {Shape{}}, "api_closed_queue");  // (see the queue-sharing gap below)
  auto deq2 = q2.dequeue()[0];
  Session s2(g2, server.target());
  s2.run(q2.close());
  expect_error_naming<OutOfRangeError>([&] { s2.run({deq2}, {}, {}, bounded()); }, deq2.op().name());
  // close() cancels a pending run.
  expect_close_cancels_pending_run(s, deq);
}

// ================================================================================== ## Devices

TEST(ApiDevices, ListDevicesHasACpuAndItsMemoryStats) {
  static_assert(std::is_same_v<decltype(list_devices()), std::vector<DeviceInfo>>);
  static_assert(std::is_same_v<decltype(memory_stats("")), MemoryStats>);
  DeviceInfo info;
  static_assert(std::is_same_v<decltype(info.name), std::string>);
  static_assert(std::is_same_v<decltype(info.type), std::string>);
  static_assert(std::is_same_v<decltype(info.memory_bytes), int64_t>);
  static_assert(std::is_same_v<decltype(info.description), std::string>);
  MemoryStats ms;
  static_assert(std::is_same_v<decltype(ms.in_use_bytes), int64_t>);
  static_assert(std::is_same_v<decltype(ms.peak_bytes), int64_t>);
  static_assert(std::is_same_v<decltype(ms.reserved_bytes), int64_t>);
  static_assert(std::is_same_v<decltype(ms.limit_bytes), int64_t>);
  auto devices = list_devices();
  auto cpu = std::find_if(devices.begin(), devices.end(), [](const DeviceInfo& d) { return d.type == "CPU"; });
  ASSERT_NE(cpu, devices.end());
  EXPECT_TRUE(contains(cpu->name, "CPU")) << cpu->name;
  MemoryStats stats = memory_stats(cpu->name);
  EXPECT_GE(stats.in_use_bytes, 0);
  EXPECT_GE(stats.peak_bytes, stats.in_use_bytes);
  EXPECT_GE(stats.reserved_bytes, 0);
  EXPECT_GE(stats.limit_bytes, 0);
}

// =================================================================================== ## Queues

TEST(ApiQueues, MembersAndFifoOrder) {
  static_assert(std::is_base_of_v<QueueBase, FIFOQueue>);
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32, DType::Int32}, {Shape{}, Shape{}});
  FIFOQueue unshaped(g, 10, {DType::Float32});
  FIFOQueue shared(g, 10, {DType::Float32}, {}, "shared_q");
  auto x = ops::placeholder(g, DType::Float32, Shape{}, "x");
  auto i = ops::placeholder(g, DType::Int32, Shape{}, "i");
  Operation enq = q.enqueue({x, i});
  Operation enq_many = q.enqueue_many({ops::constant(g, Tensor::vector<float>({7, 8})),
                                       ops::constant(g, Tensor::vector<int32_t>({70, 80}))});
  std::vector<Output> deq = q.dequeue();
  std::vector<Output> deq2 = q.dequeue_many(2);
  std::vector<Output> upto = q.dequeue_up_to(5);
  Output size = q.size();
  Output closed = q.is_closed();
  Operation close = q.close();
  static_assert(std::is_same_v<decltype(q.enqueue({x, i})), Operation>);
  static_assert(std::is_same_v<decltype(q.enqueue_many({x, i})), Operation>);
  static_assert(std::is_same_v<decltype(q.dequeue()), std::vector<Output>>);
  static_assert(std::is_same_v<decltype(q.dequeue_many(2)), std::vector<Output>>);
  static_assert(std::is_same_v<decltype(q.dequeue_up_to(2)), std::vector<Output>>);
  static_assert(std::is_same_v<decltype(q.close()), Operation>);
  static_assert(std::is_same_v<decltype(q.close(true)), Operation>);
  static_assert(std::is_same_v<decltype(q.size()), Output>);
  static_assert(std::is_same_v<decltype(q.is_closed()), Output>);
  EXPECT_EQ(size.dtype(), DType::Int32);
  EXPECT_EQ(closed.dtype(), DType::Bool);
  ASSERT_EQ(deq.size(), 2u);
  EXPECT_EQ(deq2[0].shape().dim(0), 2);
  // Through the base.
  QueueBase& base = unshaped;
  Operation base_enq = base.enqueue({ops::constant(g, 1.0f)});
  Output base_size = base.size();
  Session s(g);
  for (int k = 0; k < 3; ++k) s.run(enq, {{x, Tensor::scalar(static_cast<float>(k))}, {i, Tensor::scalar<int32_t>(k)}});
  s.run(enq_many);
  EXPECT_EQ(s.run(size).scalar<int32_t>(), 5);
  auto first = s.run({deq[0], deq[1]}, {}, {}, bounded());
  EXPECT_EQ(first[0].scalar<float>(), 0.0f);
  EXPECT_EQ(first[1].scalar<int32_t>(), 0);
  auto many = s.run({deq2[0], deq2[1]}, {}, {}, bounded());
  EXPECT_EQ(many[0].to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(many[1].to_vector<int32_t>(), (std::vector<int32_t>{1, 2}));
  EXPECT_FALSE(s.run(closed).scalar<bool>());
  s.run(close);
  EXPECT_TRUE(s.run(closed).scalar<bool>());
  auto rest = s.run({upto[0], upto[1]}, {}, {}, bounded());
  EXPECT_EQ(rest[0].to_vector<float>(), (std::vector<float>{7, 8}));
  EXPECT_EQ(rest[1].to_vector<int32_t>(), (std::vector<int32_t>{70, 80}));
  s.run(base_enq);
  EXPECT_EQ(s.run(base_size).scalar<int32_t>(), 1);
}

TEST(ApiQueues, EnqueueBlocksWhileFullDequeueWhileEmpty) {
  Graph g;
  FIFOQueue q(g, 2, {DType::Float32}, {Shape{}});
  auto enq = q.enqueue({ops::constant(g, 1.0f)});
  auto deq = q.dequeue()[0];
  Session s(g);
  RunOptions short_wait;
  short_wait.timeout = 100ms;
  EXPECT_THROW(s.run({deq}, {}, {}, short_wait), DeadlineExceededError);  // empty: blocks
  s.run(enq);
  s.run(enq);
  EXPECT_THROW(s.run({}, {}, {enq}, short_wait), DeadlineExceededError);  // full: blocks
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 2);
  // A blocked enqueue completes when room frees.
  std::promise<void> done;
  auto finished = done.get_future();
  std::thread producer([&] {
    try {
      s.run({}, {}, {enq}, bounded());
    } catch (...) {
    }
    done.set_value();
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(s.run({deq}, {}, {}, bounded())[0].scalar<float>(), 1.0f);
  EXPECT_EQ(finished.wait_for(15s), std::future_status::ready);
  producer.join();
  EXPECT_EQ(s.run(q.size()).scalar<int32_t>(), 2);
}

TEST(ApiQueues, AfterClose) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32}, {Shape{}});
  auto enq_many = q.enqueue_many({ops::constant(g, Tensor::vector<float>({1, 2, 3, 4}))});
  auto enq = q.enqueue({ops::constant(g, 9.0f)});
  auto deq = q.dequeue()[0];
  auto deq_many = q.dequeue_many(5)[0];
  auto deq_up_to = q.dequeue_up_to(5)[0];
  Session s(g);
  s.run(enq_many);
  s.run(q.close());
  EXPECT_THROW(s.run({}, {}, {enq}, bounded()), CancelledError);
  EXPECT_EQ(s.run({deq}, {}, {}, bounded())[0].scalar<float>(), 1.0f);   // drains
  EXPECT_THROW(s.run({deq_many}, {}, {}, bounded()), OutOfRangeError);   // fewer than 5 remain
  auto rest = s.run({deq_up_to}, {}, {}, bounded())[0];                   // what is left
  EXPECT_EQ(rest.to_vector<float>(), (std::vector<float>{2, 3, 4}));
  EXPECT_THROW(s.run({deq}, {}, {}, bounded()), OutOfRangeError);
  EXPECT_THROW(s.run({deq_up_to}, {}, {}, bounded()), OutOfRangeError);  // at least 1
}

TEST(ApiQueues, CancelPendingEnqueues) {
  Graph g;
  FIFOQueue q(g, 1, {DType::Float32}, {Shape{}});
  auto enq = q.enqueue({ops::constant(g, 1.0f)});
  Session s(g);
  s.run(enq);  // full
  expect_unblocked_by_cancelling([&] { s.run({}, {}, {enq}, bounded()); }, [&] { s.run(q.close(true)); });
}

TEST(ApiQueues, SharedName) {
  Graph g;
  FIFOQueue a(g, 4, {DType::Float32}, {Shape{}}, "one_queue");
  FIFOQueue b(g, 4, {DType::Float32}, {Shape{}}, "one_queue");
  auto enq = a.enqueue({ops::constant(g, 3.0f)});
  auto deq = b.dequeue()[0];
  Session s(g);
  s.run(enq);
  EXPECT_EQ(s.run({deq}, {}, {}, bounded())[0].scalar<float>(), 3.0f);
}

TEST(ApiQueues, BlockedDequeuesDoNotBlockTheThreadPool) {
  Graph g;
  FIFOQueue q(g, 10, {DType::Float32}, {Shape{}});
  auto deq = q.dequeue()[0];
  auto sum = ops::add(ops::constant(g, 1.0f), ops::constant(g, 2.0f));
  SessionOptions options;
  options.inter_op_threads = 1;
  Session s(g, options);
  std::vector<std::thread> waiters;
  std::atomic<int> ended{0};
  for (int t = 0; t < 3; ++t) {
    waiters.emplace_back([&] {
      try {
        s.run({deq}, {}, {}, bounded());
      } catch (const Error&) {
      }
      ++ended;
    });
  }
  std::this_thread::sleep_for(100ms);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(s.run({sum}, {}, {}, bounded(5s))[0].scalar<float>(), 3.0f);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  s.run(q.close());  // the waiters see OutOfRangeError
  for (auto& t : waiters) t.join();
  EXPECT_EQ(ended.load(), 3);
}

// ============================================================================= ## Coordination

TEST(ApiCoordination, CoordinatorBasics) {
  train::Coordinator coord;
  static_assert(std::is_same_v<decltype(coord.should_stop()), bool>);
  static_assert(std::is_same_v<decltype(coord.wait_for_stop(1ms)), bool>);
  EXPECT_FALSE(coord.should_stop());
  EXPECT_FALSE(coord.wait_for_stop(10ms));
  coord.request_stop();
  EXPECT_TRUE(coord.should_stop());
  EXPECT_TRUE(coord.wait_for_stop());  // default: forever, but stopped already
  coord.clear_stop();
  EXPECT_FALSE(coord.should_stop());

  // OutOfRangeError inside stop_on_exception only requests a stop.
  coord.stop_on_exception([] { throw OutOfRangeError("end of input"); });
  EXPECT_TRUE(coord.should_stop());
  std::vector<std::thread> none;
  EXPECT_NO_THROW(coord.join(none));
  coord.clear_stop();

  // The first reported exception is re-raised by join.
  std::vector<std::thread> threads;
  threads.emplace_back([&] { coord.stop_on_exception([] { throw InvalidArgumentError("first"); }); });
  threads.emplace_back([&] {
    coord.wait_for_stop(5000ms);
    coord.request_stop(std::make_exception_ptr(InternalError("second")));
  });
  try {
    coord.join(threads);
    ADD_FAILURE() << "join did not re-raise";
  } catch (const InvalidArgumentError& e) {
    EXPECT_TRUE(contains(e.what(), "first"));
  }
}

TEST(ApiCoordination, JoinRaisesForThreadsAliveAfterTheGracePeriod) {
  train::Coordinator coord;
  std::vector<std::thread> threads;
  threads.emplace_back([] { std::this_thread::sleep_for(600ms); });
  coord.request_stop();
  EXPECT_THROW(coord.join(threads, 50ms), Error);
}

TEST(ApiCoordination, QueueRunnerAndStartQueueRunners) {
  Graph g;
  FIFOQueue q(g, 4, {DType::Float32}, {Shape{}});
  Operation enq = q.enqueue({ops::constant(g, 3.0f)});
  train::QueueRunner runner(q, {enq});
  FIFOQueue q2(g, 4, {DType::Int32}, {Shape{}});
  train::QueueRunner runner2(q2, {q2.enqueue({ops::constant(g, int32_t{4})})});
  train::add_queue_runner(g, runner2);
  auto deq = q.dequeue()[0];
  auto deq2 = q2.dequeue()[0];
  Session s(g);
  train::Coordinator coord;
  std::vector<std::thread> threads = runner.create_threads(s, &coord, true);
  static_assert(std::is_same_v<decltype(runner.create_threads(s)), std::vector<std::thread>>);
  std::vector<std::thread> more = train::start_queue_runners(s, coord);
  static_assert(std::is_same_v<decltype(train::start_queue_runners(s, coord)), std::vector<std::thread>>);
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(s.run({deq}, {}, {}, bounded())[0].scalar<float>(), 3.0f);
    EXPECT_EQ(s.run({deq2}, {}, {}, bounded())[0].scalar<int32_t>(), 4);
  }
  coord.request_stop();
  for (auto& t : more) threads.push_back(std::move(t));
  EXPECT_NO_THROW(coord.join(threads, 10s));
}

TEST(ApiCoordination, ARunnerErrorClosesTheQueueAndReachesTheCoordinator) {
  Graph g;
  FIFOQueue q(g, 4, {DType::Float32}, {Shape{}});
  auto never_fed = ops::placeholder(g, DType::Float32, Shape{}, "never_fed");
  train::QueueRunner runner(q, {q.enqueue({never_fed})});
  auto deq = q.dequeue()[0];
  Session s(g);
  train::Coordinator coord;
  auto threads = runner.create_threads(s, &coord);
  EXPECT_THROW(s.run({deq}, {}, {}, bounded()), OutOfRangeError);  // closed, empty
  EXPECT_TRUE(coord.wait_for_stop(10000ms));
  coord.request_stop();
  expect_error_naming<InvalidArgumentError>([&] { coord.join(threads, 10s); }, "never_fed");
}

TEST(ApiCoordination, InputProducerForever) {
  Graph g;
  FIFOQueue q = train::input_producer(g, Tensor::vector<int32_t>({1, 2}), 0, false);
  auto deq = q.dequeue()[0];
  Session s(g);
  train::Coordinator coord;
  auto threads = train::start_queue_runners(s, coord);
  std::vector<int32_t> got;
  for (int k = 0; k < 7; ++k) got.push_back(s.run({deq}, {}, {}, bounded())[0].scalar<int32_t>());
  EXPECT_EQ(got, (std::vector<int32_t>{1, 2, 1, 2, 1, 2, 1}));
  coord.request_stop();
  coord.join(threads, 10s);
}

TEST(ApiCoordination, InputProducer) {
  Graph g;
  FIFOQueue q = train::input_producer(g, Tensor::vector<int32_t>({1, 2, 3}), 1, false);
  static_assert(std::is_same_v<decltype(train::input_producer(g, Tensor())), FIFOQueue>);
  auto deq = q.dequeue()[0];
  Session s(g);
  train::Coordinator coord;
  auto threads = train::start_queue_runners(s, coord);
  std::vector<int32_t> got;
  for (int k = 0; k < 3; ++k) got.push_back(s.run({deq}, {}, {}, bounded())[0].scalar<int32_t>());
  EXPECT_EQ(got, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_THROW(s.run({deq}, {}, {}, bounded()), OutOfRangeError);
  coord.request_stop();
  coord.join(threads, 10s);

  // Shuffled, two epochs: each epoch a permutation.
  Graph g2;
  FIFOQueue q2 = train::input_producer(g2, Tensor::vector<int32_t>({1, 2, 3}), 2, true, 32, 7);
  auto deq2 = q2.dequeue()[0];
  Session s2(g2);
  train::Coordinator coord2;
  auto threads2 = train::start_queue_runners(s2, coord2);
  std::multiset<int32_t> all;
  for (int k = 0; k < 6; ++k) all.insert(s2.run({deq2}, {}, {}, bounded())[0].scalar<int32_t>());
  EXPECT_EQ(all, (std::multiset<int32_t>{1, 1, 2, 2, 3, 3}));
  EXPECT_THROW(s2.run({deq2}, {}, {}, bounded()), OutOfRangeError);
  coord2.request_stop();
  coord2.join(threads2, 10s);
}

// ================================================================================= ## Clusters

TEST(ApiClusters, DenseSparseJsonAndQueries) {
  train::ClusterSpec dense({{"ps", {"ps0:2222"}}, {"worker", {"w0:2222", "w1:2223"}}});
  train::ClusterSpec one({{"job", {"a:1"}}});  // a one-address job selects the dense form
  EXPECT_EQ(one.num_tasks("job"), 1);
  EXPECT_EQ(one.task_address("job", 0), "a:1");
  static_assert(std::is_same_v<decltype(dense.jobs()), std::vector<std::string>>);
  static_assert(std::is_same_v<decltype(dense.num_tasks("ps")), int>);
  static_assert(std::is_same_v<decltype(dense.task_indices("ps")), std::vector<int>>);
  static_assert(std::is_same_v<decltype(dense.task_address("ps", 0)), std::string>);
  static_assert(std::is_same_v<decltype(dense.job_tasks("ps")), std::vector<std::string>>);
  static_assert(std::is_same_v<decltype(dense.to_json()), std::string>);
  static_assert(std::is_same_v<decltype(train::ClusterSpec::from_json("")), train::ClusterSpec>);
  auto jobs = dense.jobs();
  std::sort(jobs.begin(), jobs.end());
  EXPECT_EQ(jobs, (std::vector<std::string>{"ps", "worker"}));
  EXPECT_EQ(dense.num_tasks("worker"), 2);
  EXPECT_EQ(dense.task_indices("worker"), (std::vector<int>{0, 1}));
  EXPECT_EQ(dense.task_address("worker", 1), "w1:2223");
  EXPECT_EQ(dense.job_tasks("worker"), (std::vector<std::string>{"w0:2222", "w1:2223"}));

  // Named maps of either type, and copy-initialization from the dense one.
  std::map<std::string, std::vector<std::string>> dense_map{{"worker", {"a:1", "b:2"}}};
  std::map<std::string, std::map<int, std::string>> sparse_map{{"worker", {{2, "c:3"}}}};
  train::ClusterSpec from_dense_map(dense_map);
  train::ClusterSpec from_sparse_map(sparse_map);
  train::ClusterSpec copy_initialized = dense_map;
  EXPECT_EQ(from_dense_map.num_tasks("worker"), 2);
  EXPECT_EQ(from_sparse_map.task_indices("worker"), (std::vector<int>{2}));
  EXPECT_EQ(copy_initialized.task_address("worker", 1), "b:2");

  train::ClusterSpec sparse(std::map<std::string, std::map<int, std::string>>{{"worker", {{1, "h1:1"}, {3, "h3:3"}}}});
  EXPECT_EQ(sparse.num_tasks("worker"), 2);
  EXPECT_EQ(sparse.task_indices("worker"), (std::vector<int>{1, 3}));
  EXPECT_EQ(sparse.task_address("worker", 3), "h3:3");

  auto parsed = train::ClusterSpec::from_json(R"({"worker": ["h:1", "h:2"], "ps": ["p:1"]})");
  EXPECT_EQ(parsed.num_tasks("worker"), 2);
  EXPECT_EQ(parsed.task_address("ps", 0), "p:1");
  auto round_trip = train::ClusterSpec::from_json(dense.to_json());
  EXPECT_EQ(round_trip.task_address("worker", 1), "w1:2223");
  EXPECT_EQ(round_trip.num_tasks("ps"), 1);
  auto sparse_round_trip = train::ClusterSpec::from_json(sparse.to_json());
  EXPECT_EQ(sparse_round_trip.task_indices("worker"), (std::vector<int>{1, 3}));

  // Unknown job or task.
  EXPECT_THROW(dense.num_tasks("nope"), InvalidArgumentError);
  EXPECT_THROW(dense.task_address("nope", 0), InvalidArgumentError);
  EXPECT_THROW(dense.task_address("worker", 7), InvalidArgumentError);
}

TEST(ApiClusters, FromEnvReadsTfConfig) {
  const char* saved = std::getenv("TF_CONFIG");
  std::optional<std::string> old = saved ? std::optional<std::string>(saved) : std::nullopt;
  ::setenv("TF_CONFIG", R"({"cluster": {"worker": ["h0:1", "h1:2"]}, "task": {"type": "worker", "index": 1}})", 1);
  auto spec = train::ClusterSpec::from_env();
  if (old) {
    ::setenv("TF_CONFIG", old->c_str(), 1);
  } else {
    ::unsetenv("TF_CONFIG");
  }
  EXPECT_EQ(spec.num_tasks("worker"), 2);
  EXPECT_EQ(spec.task_address("worker", 1), "h1:2");
}

TEST(ApiClusters, ServerOnPortZeroRunsAGraph) {
  train::ClusterSpec cluster({{"worker", {"localhost:0"}}});
  train::Server server(cluster, "worker", 0);
  static_assert(std::is_same_v<decltype(server.target()), std::string>);
  const std::string target = server.target();
  EXPECT_EQ(target.rfind("tessera://", 0), 0u) << target;
  EXPECT_NE(target.substr(target.size() - 2), ":0") << target;  // the bound port, not 0
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{}, "remote_x");
  auto y = ops::add(ops::mul(x, ops::constant(g, 2.0f)), ops::constant(g, 1.0f));
  Session s(g, server.target());
  EXPECT_EQ(s.run(y, {{x, Tensor::scalar(4.0f)}}).scalar<float>(), 9.0f);
  Session with_options(g, server.target(), SessionOptions{});
  EXPECT_EQ(with_options.run({y}, {{x, Tensor::scalar(1.0f)}})[0].scalar<float>(), 3.0f);
  // Errors cross processes with their code and the op's name.
  expect_error_naming<InvalidArgumentError>([&] { s.run(y); }, "remote_x");
  s.close();
  with_options.close();
  server.stop();
  server.join();  // returns at once: stopped
}

TEST(ApiClusters, JoinBlocksUntilStop) {
  const train::Server server = train::Server::create_local_server();
  EXPECT_EQ(server.target().rfind("tessera://", 0), 0u);  // target() is const
  train::Server other = train::Server::create_local_server();
  std::promise<void> joined;
  auto done = joined.get_future();
  std::thread t([&] {
    other.join();
    joined.set_value();
  });
  EXPECT_EQ(done.wait_for(100ms), std::future_status::timeout);
  other.stop();
  EXPECT_EQ(done.wait_for(10s), std::future_status::ready);
  t.join();
}

TEST(ApiClusters, CreateLocalServerAndUnknownJob) {
  static_assert(std::is_same_v<decltype(train::Server::create_local_server()), train::Server>);
  train::Server local = train::Server::create_local_server();
  EXPECT_EQ(local.target().rfind("tessera://", 0), 0u) << local.target();
  Graph g;
  auto c = ops::add(ops::constant(g, 2), ops::constant(g, 3));
  {
    Session s(g, local.target());
    EXPECT_EQ(s.run(c).scalar<int32_t>(), 5);
  }
  train::ClusterSpec cluster({{"worker", {"localhost:0"}}});
  EXPECT_THROW(train::Server(cluster, "nope", 0), InvalidArgumentError);
  EXPECT_THROW(train::Server(cluster, "worker", 3), InvalidArgumentError);
  train::ServerOptions options;
  train::Server not_started(cluster, "worker", 0, options, false);
  not_started.start();
  EXPECT_EQ(not_started.target().rfind("tessera://", 0), 0u);
  not_started.stop();
}

// ================================================================ ## Gradients and optimizers

TEST(ApiGradients, GradientsWithNullWhereNoPath) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{}, "x");
  auto unrelated = ops::placeholder(g, DType::Float32, Shape{}, "unrelated");
  auto y = ops::square(x);
  std::vector<Output> grads = gradients({y}, {x, unrelated});
  static_assert(std::is_same_v<decltype(gradients({y}, {x})), std::vector<Output>>);
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_FALSE(grads[0].is_null());
  EXPECT_TRUE(grads[1].is_null());
  auto weighted = gradients({y}, {x}, {ops::constant(g, 10.0f)});
  auto through_stop = gradients({ops::stop_gradient(y)}, {x});
  EXPECT_TRUE(through_stop[0].is_null());
  Session s(g);
  EXPECT_EQ(s.run(grads[0], {{x, Tensor::scalar(3.0f)}}).scalar<float>(), 6.0f);
  EXPECT_EQ(s.run(weighted[0], {{x, Tensor::scalar(3.0f)}}).scalar<float>(), 60.0f);
}

// w = 1, loss = w^2 (gradient 2w): w after `steps` applications of `opt`.
float train_w(const train::Optimizer& opt, int steps) {
  Graph g;
  Variable w(g, Tensor::scalar(1.0f), "w");
  Output loss = ops::square(w.value());
  Operation train_op = opt.minimize(loss);
  Session s(g);
  s.run(global_variables_initializer(g));
  for (int i = 0; i < steps; ++i) s.run(train_op);
  return s.run(w.value()).scalar<float>();
}

TEST(ApiOptimizers, ConstructorsDefaultsAndTensorFlowsFirstSteps) {
  static_assert(std::is_base_of_v<train::Optimizer, train::GradientDescentOptimizer>);
  static_assert(std::is_base_of_v<train::Optimizer, train::MomentumOptimizer>);
  static_assert(std::is_base_of_v<train::Optimizer, train::AdamOptimizer>);
  static_assert(std::is_base_of_v<train::Optimizer, train::AdagradOptimizer>);
  static_assert(std::is_base_of_v<train::Optimizer, train::RMSPropOptimizer>);
  // GradientDescent: w - 0.1 * 2.
  EXPECT_NEAR(train_w(train::GradientDescentOptimizer(0.1f), 1), 0.8f, 1e-6f);
  EXPECT_NEAR(train_w(train::GradientDescentOptimizer(0.1f, true), 1), 0.8f, 1e-6f);
  // Momentum 0.9: accum 2 then 3.4; w 0.8 then 0.46. Nesterov: w - lr * (g + m * accum) = 0.62.
  EXPECT_NEAR(train_w(train::MomentumOptimizer(0.1f, 0.9f), 2), 0.46f, 1e-6f);
  EXPECT_NEAR(train_w(train::MomentumOptimizer(0.1f, 0.9f, false), 2), 0.46f, 1e-6f);
  EXPECT_NEAR(train_w(train::MomentumOptimizer(0.1f, 0.9f, false, true), 1), 0.62f, 1e-6f);
  // Adam's first step moves by learning_rate (0.001 by default).
  EXPECT_NEAR(train_w(train::AdamOptimizer(), 1), 0.999f, 1e-6f);
  EXPECT_NEAR(train_w(train::AdamOptimizer(0.001f, 0.9f, 0.999f, 1e-8f), 1), 0.999f, 1e-6f);
  EXPECT_NEAR(train_w(train::AdamOptimizer(0.01f), 1), 0.99f, 1e-6f);
  // Adagrad: accum 0.1 + 4; w - 0.1 * 2 / sqrt(4.1).
  EXPECT_NEAR(train_w(train::AdagradOptimizer(0.1f), 1), 0.9012270f, 1e-6f);
  EXPECT_NEAR(train_w(train::AdagradOptimizer(0.1f, 0.1f), 1), 0.9012270f, 1e-6f);
  // RMSProp (TF1: rms starts at ones): ms 0.9 + 0.1 * 4; w - 0.1 * 2 / sqrt(1.3).
  EXPECT_NEAR(train_w(train::RMSPropOptimizer(0.1f), 1), 0.8245884f, 1e-6f);
  EXPECT_NEAR(train_w(train::RMSPropOptimizer(0.1f, 0.9f, 0.0f, 1e-10f), 1), 0.8245884f, 1e-6f);
  // Two steps each (TF1's update rules, computed by hand in float64).
  EXPECT_NEAR(train_w(train::AdamOptimizer(0.1f), 2), 0.8004123f, 2e-6f);
  EXPECT_NEAR(train_w(train::AdagradOptimizer(0.1f), 2), 0.8347373f, 1e-6f);
  EXPECT_NEAR(train_w(train::RMSPropOptimizer(0.1f), 2), 0.6872513f, 1e-6f);
  EXPECT_NEAR(train_w(train::RMSPropOptimizer(0.1f, 0.9f, 0.5f), 2), 0.5995455f, 1e-6f);
}

TEST(ApiOptimizers, ACopyKeepsTheDerivedRule) {
  train::Optimizer copy = train::MomentumOptimizer(0.1f, 0.9f);  // a copy made as the base
  EXPECT_NEAR(train_w(copy, 2), 0.46f, 1e-6f);                  // gradient descent would give 0.64
  train::AdamOptimizer adam;
  train::Optimizer adam_copy = adam;
  EXPECT_NEAR(train_w(adam_copy, 1), 0.999f, 1e-6f);
}

TEST(ApiOptimizers, MinimizeComputeApplyGlobalStepAndTrainableVariables) {
  Graph g;
  Variable w(g, Tensor::scalar(1.0f), "w");
  Variable frozen(g, Tensor::scalar(5.0f), "frozen", false);
  Variable step = train::get_or_create_global_step(g);
  static_assert(std::is_same_v<decltype(train::get_or_create_global_step(g)), Variable>);
  EXPECT_EQ(step.name(), "global_step");
  EXPECT_FALSE(step.trainable());
  Output loss = ops::add(ops::square(w.value()), frozen.value());
  train::AdamOptimizer adam;
  Operation train_op = adam.minimize(loss, step);
  static_assert(std::is_same_v<decltype(adam.minimize(loss)), Operation>);
  static_assert(std::is_same_v<decltype(adam.compute_gradients(loss)),
                               std::vector<std::pair<Output, Variable>>>);
  static_assert(std::is_same_v<decltype(adam.apply_gradients({})), Operation>);
  // Slots (Adam's m and v) and global_step are not trainable.
  std::vector<Variable> trainable = trainable_variables(g);
  static_assert(std::is_same_v<decltype(trainable_variables(g)), std::vector<Variable>>);
  ASSERT_EQ(trainable.size(), 1u);
  EXPECT_EQ(trainable[0].name(), "w");

  // compute_gradients then apply_gradients, by hand, with a name.
  train::GradientDescentOptimizer sgd(0.1f);
  auto grads_and_vars = sgd.compute_gradients(loss, {w});
  ASSERT_EQ(grads_and_vars.size(), 1u);
  EXPECT_EQ(grads_and_vars[0].second.name(), "w");
  Operation apply = sgd.apply_gradients(grads_and_vars, step, "my_apply");
  Operation apply_no_step = sgd.apply_gradients(grads_and_vars);
  Operation sgd_minimize = sgd.minimize(loss, std::nullopt, {w});

  Session s(g);
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(grads_and_vars[0].first).scalar<float>(), 2.0f);
  for (int i = 0; i < 3; ++i) s.run(train_op);
  EXPECT_EQ(s.run(step.value()).scalar<int64_t>(), 3);  // once per minimize run
  EXPECT_EQ(step.value().dtype(), DType::Int64);
  s.run(w.assign(ops::constant(g, 1.0f)).op());
  s.run(apply);
  EXPECT_NEAR(s.run(w.value()).scalar<float>(), 0.8f, 1e-6f);
  EXPECT_EQ(s.run(step.value()).scalar<int64_t>(), 4);
  s.run(apply_no_step);
  s.run(sgd_minimize);
  EXPECT_EQ(s.run(step.value()).scalar<int64_t>(), 4);
  EXPECT_EQ(s.run(frozen.value()).scalar<float>(), 5.0f);
}

// ========================================================================== ## Input pipelines

TEST(ApiInput, RandomShuffleQueue) {
  static_assert(std::is_base_of_v<QueueBase, RandomShuffleQueue>);
  Graph g;
  RandomShuffleQueue q(g, 10, 2, {DType::Int32}, {Shape{}}, 7);
  RandomShuffleQueue defaults(g, 10, 0, {DType::Int32});
  RandomShuffleQueue named(g, 10, 0, {DType::Int32}, {}, 0, "shared_rsq");
  auto x = ops::placeholder(g, DType::Int32, Shape{}, "x");
  auto enq = q.enqueue({x});
  auto deq = q.dequeue()[0];
  Session s(g);
  for (int k = 0; k < 2; ++k) s.run(enq, {{x, Tensor::scalar<int32_t>(k)}});
  RunOptions short_wait;
  short_wait.timeout = 100ms;
  // Waits until more than min_after_dequeue (2) are queued.
  EXPECT_THROW(s.run({deq}, {}, {}, short_wait), DeadlineExceededError);
  s.run(enq, {{x, Tensor::scalar<int32_t>(2)}});
  std::multiset<int32_t> got;
  got.insert(s.run({deq}, {}, {}, bounded())[0].scalar<int32_t>());
  EXPECT_THROW(s.run({deq}, {}, {}, short_wait), DeadlineExceededError);  // 2 left: waits again
  s.run(q.close());  // closed: drains
  got.insert(s.run({deq}, {}, {}, bounded())[0].scalar<int32_t>());
  got.insert(s.run({deq}, {}, {}, bounded())[0].scalar<int32_t>());
  EXPECT_EQ(got, (std::multiset<int32_t>{0, 1, 2}));
  EXPECT_THROW(s.run({deq}, {}, {}, bounded()), OutOfRangeError);
}

// Runs `fetch` until OutOfRangeError (at most 100 times), collecting each value.
std::vector<std::vector<int32_t>> drain(Session& s, Output fetch) {
  std::vector<std::vector<int32_t>> out;
  for (int k = 0; k < 100; ++k) {
    try {
      out.push_back(s.run({fetch}, {}, {}, bounded())[0].to_vector<int32_t>());
    } catch (const OutOfRangeError&) {
      return out;
    }
  }
  ADD_FAILURE() << "no OutOfRangeError";
  return out;
}

TEST(ApiInput, BatchAndSliceInputProducer) {
  Graph g;
  auto data = ops::constant(g, Tensor::vector<int32_t>({0, 1, 2, 3, 4, 5}));
  std::vector<Output> example = train::slice_input_producer({data}, 1, false);
  static_assert(std::is_same_v<decltype(train::slice_input_producer({data})), std::vector<Output>>);
  ASSERT_EQ(example.size(), 1u);
  std::vector<Output> batch = train::batch(example, 2);
  static_assert(std::is_same_v<decltype(train::batch(example, 2)), std::vector<Output>>);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].shape().dim(0), 2);
  Session s(g);
  train::Coordinator coord;
  auto threads = train::start_queue_runners(s, coord);
  auto batches = drain(s, batch[0]);
  EXPECT_EQ(batches, (std::vector<std::vector<int32_t>>{{0, 1}, {2, 3}, {4, 5}}));
  coord.request_stop();
  coord.join(threads, 10s);
}

TEST(ApiInput, BatchAllowSmallerFinalBatchAndEnqueueMany) {
  Graph g;
  auto data = ops::constant(g, Tensor::vector<int32_t>({0, 1, 2, 3, 4}));
  auto example = train::slice_input_producer({data}, 1, false, 0, 32);
  auto batch = train::batch(example, 2, 1, 32, false, true);
  Graph g2;
  auto rows = ops::constant(g2, Tensor::vector<int32_t>({0, 1, 2, 3, 4, 5}));
  auto many = train::batch({rows}, 4, 1, 32, true);  // each run of the input is a batch of rows
  {
    Session s(g);
    train::Coordinator coord;
    auto threads = train::start_queue_runners(s, coord);
    auto batches = drain(s, batch[0]);
    EXPECT_EQ(batches, (std::vector<std::vector<int32_t>>{{0, 1}, {2, 3}, {4}}));
    coord.request_stop();
    coord.join(threads, 10s);
  }
  {
    Session s(g2);
    train::Coordinator coord;
    auto threads = train::start_queue_runners(s, coord);
    EXPECT_EQ(s.run({many[0]}, {}, {}, bounded())[0].to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(s.run({many[0]}, {}, {}, bounded())[0].to_vector<int32_t>(), (std::vector<int32_t>{4, 5, 0, 1}));
    coord.request_stop();
    coord.join(threads, 10s);
  }
}

TEST(ApiInput, ShuffleBatch) {
  Graph g;
  auto data = ops::constant(g, Tensor::vector<int32_t>({0, 1, 2, 3, 4, 5}));
  auto example = train::slice_input_producer({data}, 1, true, 3);
  std::vector<Output> batch = train::shuffle_batch(example, 2, 10, 2, 1, 7);
  static_assert(std::is_same_v<decltype(train::shuffle_batch(example, 2, 10, 2)), std::vector<Output>>);
  Session s(g);
  train::Coordinator coord;
  auto threads = train::start_queue_runners(s, coord);
  auto batches = drain(s, batch[0]);
  std::multiset<int32_t> all;
  for (const auto& b : batches) {
    EXPECT_EQ(b.size(), 2u);
    all.insert(b.begin(), b.end());
  }
  EXPECT_EQ(all, (std::multiset<int32_t>{0, 1, 2, 3, 4, 5}));
  coord.request_stop();
  coord.join(threads, 10s);
}

TEST(ApiInput, RangeAndStringInputProducers) {
  Graph g;
  FIFOQueue range = train::range_input_producer(g, 5, 1, false);
  static_assert(std::is_same_v<decltype(train::range_input_producer(g, 5)), FIFOQueue>);
  FIFOQueue names = train::string_input_producer(g, {"a", "b"}, 1, false);
  static_assert(std::is_same_v<decltype(train::string_input_producer(g, {"a"})), FIFOQueue>);
  FIFOQueue shuffled = train::string_input_producer(g, {"x", "y", "z"}, 1, true, 11, 8);
  auto r = range.dequeue()[0];
  auto n = names.dequeue()[0];
  auto sh = shuffled.dequeue()[0];
  EXPECT_EQ(r.dtype(), DType::Int32);
  EXPECT_EQ(n.dtype(), DType::String);
  Session s(g);
  train::Coordinator coord;
  auto threads = train::start_queue_runners(s, coord);
  std::vector<int32_t> ints;
  for (int k = 0; k < 5; ++k) ints.push_back(s.run({r}, {}, {}, bounded())[0].scalar<int32_t>());
  EXPECT_EQ(ints, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_THROW(s.run({r}, {}, {}, bounded()), OutOfRangeError);
  EXPECT_EQ(s.run({n}, {}, {}, bounded())[0].scalar<std::string>(), "a");
  EXPECT_EQ(s.run({n}, {}, {}, bounded())[0].scalar<std::string>(), "b");
  EXPECT_THROW(s.run({n}, {}, {}, bounded()), OutOfRangeError);
  std::multiset<std::string> xyz;
  for (int k = 0; k < 3; ++k) xyz.insert(s.run({sh}, {}, {}, bounded())[0].scalar<std::string>());
  EXPECT_EQ(xyz, (std::multiset<std::string>{"x", "y", "z"}));
  coord.request_stop();
  coord.join(threads, 10s);
}

TEST(ApiInput, TextLineReaderAndDecodeCsv) {
  TempDir dir("csv");
  const std::string path = (dir.path / "data.csv").string();
  {
    std::ofstream f(path);
    f << "a,b,c\n1,2.5,x\n,,\"q,r\"\n";
  }
  Graph g;
  FIFOQueue files = train::string_input_producer(g, {path}, 1, false);
  train::TextLineReader reader(g, 1);
  train::TextLineReader no_skip(g);
  std::pair<Output, Output> kv = reader.read(files);
  static_assert(std::is_same_v<decltype(reader.read(files)), std::pair<Output, Output>>);
  auto [key, line] = kv;
  std::vector<Output> cols =
      train::decode_csv(line, {Tensor::scalar<int32_t>(7), Tensor::vector<float>({0.5f}), Tensor::scalar("dflt")});
  static_assert(std::is_same_v<decltype(train::decode_csv(line, {})), std::vector<Output>>);
  ASSERT_EQ(cols.size(), 3u);
  EXPECT_EQ(cols[0].dtype(), DType::Int32);
  EXPECT_EQ(cols[1].dtype(), DType::Float32);
  EXPECT_EQ(cols[2].dtype(), DType::String);
  // A required column (an empty default), and another delimiter.
  auto required = train::decode_csv(ops::constant(g, Tensor::scalar("1;")),
                                    {Tensor::scalar<int32_t>(0), Tensor::vector<float>({})}, ";");
  auto semicolon = train::decode_csv(ops::constant(g, Tensor::scalar("4;5")),
                                     {Tensor::scalar<int32_t>(0), Tensor::vector<float>({})}, ";");
  Session s(g);
  train::Coordinator coord;
  auto threads = train::start_queue_runners(s, coord);
  auto first = s.run({key, line, cols[0], cols[1], cols[2]}, {}, {}, bounded());
  EXPECT_EQ(first[0].scalar<std::string>(), path + ":2");  // 1-based, the skipped header counted
  EXPECT_EQ(first[1].scalar<std::string>(), "1,2.5,x");
  EXPECT_EQ(first[2].scalar<int32_t>(), 1);
  EXPECT_EQ(first[3].scalar<float>(), 2.5f);
  EXPECT_EQ(first[4].scalar<std::string>(), "x");
  auto second = s.run({key, cols[0], cols[1], cols[2]}, {}, {}, bounded());
  EXPECT_EQ(second[0].scalar<std::string>(), path + ":3");
  EXPECT_EQ(second[1].scalar<int32_t>(), 7);      // defaults for empty fields
  EXPECT_EQ(second[2].scalar<float>(), 0.5f);
  EXPECT_EQ(second[3].scalar<std::string>(), "q,r");  // quoted as TF
  EXPECT_THROW(s.run({key}, {}, {}, bounded()), OutOfRangeError);
  EXPECT_THROW(s.run(required[1]), InvalidArgumentError);
  auto too_many = train::decode_csv(ops::constant(g, Tensor::scalar("1,2,3")), {Tensor::scalar<int32_t>(0)});
  auto not_a_number = train::decode_csv(ops::constant(g, Tensor::scalar("x")), {Tensor::scalar<int32_t>(0)});
  expect_error_naming<InvalidArgumentError>([&] { s.run(too_many[0]); }, too_many[0].op().name());
  expect_error_naming<InvalidArgumentError>([&] { s.run(not_a_number[0]); }, not_a_number[0].op().name());
  auto parsed = s.run({semicolon[0], semicolon[1]});
  EXPECT_EQ(parsed[0].scalar<int32_t>(), 4);
  EXPECT_EQ(parsed[1].scalar<float>(), 5.0f);
  coord.request_stop();
  coord.join(threads, 10s);
}

// ====================================================================== ## Distributed training

bool on_ps_task(const Operation& op, int task) {
  const std::string d = op.device();
  return contains(d, "/job:ps") && contains(d, "task:" + std::to_string(task));
}

TEST(ApiDistributed, ReplicaDeviceSetterRoundRobin) {
  static_assert(std::is_same_v<train::DeviceFunction, std::function<std::string(const Operation&)>>);
  train::ClusterSpec cluster({{"ps", {"ps0:2222", "ps1:2222"}}, {"worker", {"w0:2222"}}});
  static_assert(std::is_same_v<decltype(train::replica_device_setter(cluster)), train::DeviceFunction>);
  Graph g;
  Variable v0, v1, v2;
  Output y;
  {
    auto scope = g.device(train::replica_device_setter(cluster));
    v0 = Variable(g, Tensor::scalar(0.0f), "v0");
    v1 = Variable(g, Tensor::scalar(1.0f), "v1");
    v2 = Variable(g, Tensor::scalar(2.0f), "v2");
    y = ops::add(v0.value(), v1.value());
  }
  EXPECT_TRUE(on_ps_task(v0.initializer(), 0)) << v0.initializer().device();
  EXPECT_TRUE(on_ps_task(v1.initializer(), 1)) << v1.initializer().device();
  EXPECT_TRUE(on_ps_task(v2.initializer(), 0)) << v2.initializer().device();
  EXPECT_TRUE(on_ps_task(v1.value().op(), 1)) << v1.value().op().device();
  EXPECT_TRUE(contains(y.op().device(), "/job:worker")) << y.op().device();
  Graph g2;
  Output z;
  {
    auto scope = g2.device(train::replica_device_setter(cluster, "/job:worker/task:0", "round_robin"));
    z = ops::constant(g2, 1.0f);
  }
  EXPECT_TRUE(contains(z.op().device(), "/job:worker") && contains(z.op().device(), "task:0")) << z.op().device();
}

TEST(ApiDistributed, ReplicaDeviceSetterGreedyBytes) {
  train::ClusterSpec cluster({{"ps", {"ps0:2222", "ps1:2222"}}, {"worker", {"w0:2222"}}});
  Graph g;
  std::vector<Variable> vars;
  {
    auto scope = g.device(train::replica_device_setter(cluster, "/job:worker", "greedy_bytes"));
    for (int n : {100, 10, 10, 100, 1000}) {
      vars.emplace_back(g, Tensor::vector<float>(std::vector<float>(n, 0.0f)));
    }
  }
  // Bytes so far: ps0 400 | ps1 40, 80, 480 | then ps0 (ties: lowest index).
  const std::vector<int> expected{0, 1, 1, 1, 0};
  for (std::size_t i = 0; i < vars.size(); ++i) {
    EXPECT_TRUE(on_ps_task(vars[i].initializer(), expected[i])) << i << ": " << vars[i].initializer().device();
  }
  EXPECT_THROW(train::replica_device_setter(cluster, "/job:worker", "no_such_strategy"), InvalidArgumentError);
}

TEST(ApiDistributed, AssignedDeviceAfterPlacementOnAServer) {
  train::ClusterSpec cluster({{"ps", {"localhost:0"}}});
  train::Server server(cluster, "ps", 0);
  Graph g;
  Variable v;
  Output y;
  {
    auto scope = g.device(train::replica_device_setter(cluster, "/job:ps/task:0"));
    v = Variable(g, Tensor::scalar(1.0f), "v");
    y = ops::add(v.value(), ops::constant(g, 1.0f));
  }
  Session s(g, server.target());
  s.run(global_variables_initializer(g));
  EXPECT_EQ(s.run(y).scalar<float>(), 2.0f);
  const std::string assigned = v.initializer().assigned_device();
  EXPECT_TRUE(contains(assigned, "/job:ps") && contains(assigned, "task:0") && contains(assigned, "CPU:0"))
      << assigned;
  EXPECT_TRUE(contains(y.op().assigned_device(), "/job:ps")) << y.op().assigned_device();
  s.close();
}

// Runs `op` until the session says stop, at most 50 times; how many runs there were.
int run_until_stop(train::MonitoredTrainingSession& sess, const Operation& op) {
  int runs = 0;
  while (!sess.should_stop() && runs < 50) {
    sess.run(op);
    ++runs;
  }
  return runs;
}

// A user hook: counts its calls, fetches the global step, stops once it reaches `stop_at`.
struct RecordingHook : train::SessionRunHook::Impl {
  RecordingHook(Output step, int64_t stop_at) : step(step), stop_at(stop_at) {}
  void begin() override { ++begins; }
  void after_create_session(Session&) override { ++creates; }
  std::vector<Output> before_run() override {
    ++befores;
    return {step};
  }
  void after_run(const std::vector<Tensor>& values, bool& request_stop) override {
    ++afters;
    if (values.size() == 1) last_step = values[0].scalar<int64_t>();
    if (last_step >= stop_at) request_stop = true;
  }
  void end(Session&) override { ++ends; }
  Output step;
  int64_t stop_at;
  int begins = 0, creates = 0, befores = 0, afters = 0, ends = 0;
  int64_t last_step = -1;
};

// w = 1, loss = w^2, the global step, a gradient descent train op.
struct Model {
  Model() : w(g, Tensor::scalar(1.0f), "w"), step(train::get_or_create_global_step(g)) {
    loss = ops::square(w.value());
    train_op = train::GradientDescentOptimizer(0.1f).minimize(loss, step);
  }
  Graph g;
  Variable w;
  Variable step;
  Output loss;
  Operation train_op;
};

TEST(ApiDistributed, UserSessionRunHookInAMonitoredSession) {
  Model m;
  auto impl = std::make_shared<RecordingHook>(m.step.value(), 3);
  static_assert(!std::is_convertible_v<std::shared_ptr<train::SessionRunHook::Impl>, train::SessionRunHook>,
                "explicit SessionRunHook(std::shared_ptr<Impl>)");
  train::SessionRunHook hook(impl);
  train::SessionRunHook copy = hook;  // copies refer to the same hook
  train::MonitoredTrainingSessionOptions o;
  o.hooks = {copy};
  int runs = 0;
  {
    train::MonitoredTrainingSession sess(m.g, o);
    runs = run_until_stop(sess, m.train_op);
    sess.close();
  }
  EXPECT_EQ(impl->begins, 1);
  EXPECT_EQ(impl->creates, 1);
  EXPECT_EQ(impl->befores, runs);
  EXPECT_EQ(impl->afters, runs);
  EXPECT_EQ(impl->ends, 1);
  EXPECT_GE(impl->last_step, 3);
  EXPECT_LE(runs, 4);
}

TEST(ApiDistributed, MonitoredTrainingSessionOptionsFields) {
  train::MonitoredTrainingSessionOptions o;
  static_assert(std::is_same_v<decltype(o.master), std::string>);
  static_assert(std::is_same_v<decltype(o.is_chief), bool>);
  static_assert(std::is_same_v<decltype(o.checkpoint_dir), std::string>);
  static_assert(std::is_same_v<decltype(o.hooks), std::vector<train::SessionRunHook>>);
  static_assert(std::is_same_v<decltype(o.save_checkpoint_secs), int>);
  static_assert(std::is_same_v<decltype(o.save_checkpoint_steps), int>);
  static_assert(std::is_same_v<decltype(o.recovery_wait), std::chrono::milliseconds>);
  static_assert(std::is_same_v<decltype(o.max_wait_for_ready), std::chrono::milliseconds>);
  static_assert(std::is_same_v<decltype(o.config), SessionOptions>);
  EXPECT_EQ(o.master, "");
  EXPECT_TRUE(o.is_chief);
  EXPECT_EQ(o.checkpoint_dir, "");
  EXPECT_TRUE(o.hooks.empty());
  EXPECT_EQ(o.save_checkpoint_secs, 600);
  EXPECT_EQ(o.save_checkpoint_steps, 0);
  EXPECT_EQ(o.recovery_wait, std::chrono::milliseconds(30000));
  EXPECT_EQ(o.max_wait_for_ready, std::chrono::milliseconds(7200000));
  // The aggregate, in API.md's field order.
  train::MonitoredTrainingSessionOptions designated{.master = "", .is_chief = true, .checkpoint_dir = "",
                                                    .hooks = {}, .save_checkpoint_secs = 0,
                                                    .save_checkpoint_steps = 5,
                                                    .recovery_wait = std::chrono::milliseconds(1000),
                                                    .max_wait_for_ready = std::chrono::milliseconds(1000),
                                                    .config = SessionOptions{}};
  EXPECT_EQ(designated.save_checkpoint_steps, 5);
}

TEST(ApiDistributed, MonitoredTrainingSessionWithStopAtStepHookOnALocalServer) {
  train::Server server = train::Server::create_local_server();
  Model m;
  train::MonitoredTrainingSessionOptions o;
  o.master = server.target();
  o.is_chief = true;
  o.hooks = {train::StopAtStepHook(5)};
  int runs = 0;
  {
    train::MonitoredTrainingSession sess(m.g, o);
    static_assert(std::is_same_v<decltype(sess.should_stop()), bool>);
    static_assert(std::is_same_v<decltype(sess.run(m.train_op)), void>);
    static_assert(std::is_same_v<decltype(sess.run(std::vector<Output>{})), std::vector<Tensor>>);
    auto first = sess.run({m.w.value()});
    EXPECT_EQ(first[0].scalar<float>(), 1.0f);
    auto x = ops::placeholder(m.g, DType::Float32, Shape{}, "mts_x");  // (API.md: ops may be added to a running graph)
    auto fed = sess.run({ops::add(x, m.w.value())}, {{x, Tensor::scalar(2.0f)}}, {});
    EXPECT_EQ(fed[0].scalar<float>(), 3.0f);
    runs = run_until_stop(sess, m.train_op);
    EXPECT_TRUE(sess.should_stop());
    sess.close();
  }
  EXPECT_EQ(runs, 5);  // one global step per run; stops at 5
}

TEST(ApiDistributed, AWorkerWaitsForTheChief) {
  train::Server server = train::Server::create_local_server();
  Model worker_model, chief_model;  // two graphs: the same variables by name on the one task
  train::MonitoredTrainingSessionOptions worker;
  worker.master = server.target();
  worker.is_chief = false;
  worker.max_wait_for_ready = 300ms;
  EXPECT_THROW(train::MonitoredTrainingSession(worker_model.g, worker), DeadlineExceededError);
  train::MonitoredTrainingSessionOptions chief;
  chief.master = server.target();
  train::MonitoredTrainingSession chief_session(chief_model.g, chief);
  chief_session.run(chief_model.train_op);
  worker.max_wait_for_ready = 20000ms;
  train::MonitoredTrainingSession worker_session(worker_model.g, worker);
  EXPECT_NEAR(worker_session.run({worker_model.w.value()})[0].scalar<float>(), 0.8f, 1e-6f);
  worker_session.close();
  chief_session.close();
}

TEST(ApiDistributed, ARestartedTaskIsRecoveredFromTheLatestCheckpoint) {
  TempDir dir("recovery");
  train::Server server(train::ClusterSpec({{"worker", {"localhost:0"}}}), "worker", 0);
  Model m;
  train::MonitoredTrainingSessionOptions o;
  o.master = server.target();
  o.checkpoint_dir = dir.path.string();
  o.save_checkpoint_steps = 1;
  o.recovery_wait = 20000ms;
  train::MonitoredTrainingSession sess(m.g, o);
  for (int i = 0; i < 3; ++i) sess.run(m.train_op);
  server.stop();  // the task dies (its variables with it) and returns
  server.start();
  auto values = sess.run({m.step.value(), m.w.value()});
  EXPECT_EQ(values[0].scalar<int64_t>(), 3);
  EXPECT_NEAR(values[1].scalar<float>(), 0.512f, 1e-6f);
  sess.close();
}

TEST(ApiDistributed, SyncReplicasOptimizerAndItsHook) {
  Graph g;
  Variable w(g, Tensor::scalar(1.0f), "w");
  Variable step = train::get_or_create_global_step(g);
  train::GradientDescentOptimizer sgd(0.25f);
  train::Optimizer& base = sgd;
  train::SyncReplicasOptimizer sync(base, 1, 1);
  train::SyncReplicasOptimizer sync_default_total(sgd, 1);
  static_assert(std::is_base_of_v<train::Optimizer, train::SyncReplicasOptimizer>);
  Operation train_op = sync.minimize(ops::square(w.value()), step);
  train::SessionRunHook hook = sync.make_session_run_hook(true);
  static_assert(std::is_same_v<decltype(sync.make_session_run_hook(true)), train::SessionRunHook>);
  train::MonitoredTrainingSessionOptions o;
  o.hooks = {hook, train::StopAtStepHook(3)};
  int runs = 0;
  {
    train::MonitoredTrainingSession sess(g, o);
    while (!sess.should_stop() && runs < 30) {
      sess.run(train_op);
      ++runs;
    }
    EXPECT_TRUE(sess.should_stop());
    EXPECT_NO_THROW(sess.close());
  }
  EXPECT_LT(runs, 30);
}

TEST(ApiDistributed, HookFactories) {
  TempDir ckpt("hooks_ckpt"), summaries("hooks_summaries"), ckpt_at_close("ckpt_at_close");
  Model m;
  Output summary_op = summary::scalar("loss", m.loss);
  static_assert(std::is_same_v<decltype(train::StopAtStepHook(1)), train::SessionRunHook>);
  static_assert(std::is_same_v<decltype(train::CheckpointSaverHook("d", 0, 1)), train::SessionRunHook>);
  static_assert(std::is_same_v<decltype(train::NanTensorHook(m.loss)), train::SessionRunHook>);
  static_assert(std::is_same_v<decltype(train::LoggingTensorHook({m.loss}, 1)), train::SessionRunHook>);
  static_assert(std::is_same_v<decltype(train::StepCounterHook()), train::SessionRunHook>);
  static_assert(std::is_same_v<decltype(train::SummarySaverHook("d")), train::SessionRunHook>);
  train::MonitoredTrainingSessionOptions o;
  o.hooks = {train::CheckpointSaverHook(ckpt.path.string(), 0, 1),
             train::NanTensorHook(m.loss),
             train::NanTensorHook(m.loss, true),
             train::LoggingTensorHook({m.loss}, 1),
             train::StepCounterHook(),
             train::StepCounterHook(1),
             train::SummarySaverHook(summaries.path.string(), 1, summary_op),
             train::SummarySaverHook((summaries.path / "default").string()),
             train::StopAtStepHook(3)};
  int runs = 0;
  {
    train::MonitoredTrainingSession sess(m.g, o);
    runs = run_until_stop(sess, m.train_op);
    sess.close();
  }
  EXPECT_EQ(runs, 3);
  EXPECT_FALSE(ckpt.files_starting_with("model.ckpt-3").empty());
  auto latest = train::latest_checkpoint(ckpt.path.string());
  ASSERT_TRUE(latest.has_value());
  EXPECT_TRUE(contains(*latest, "model.ckpt-3")) << *latest;
  EXPECT_FALSE(summaries.files_starting_with("events.out.tfevents.").empty());

  // A checkpoint is also written at close (checkpoint_dir, the default schedule of 600 s).
  Model m2;
  train::MonitoredTrainingSessionOptions o2;
  o2.checkpoint_dir = ckpt_at_close.path.string();
  o2.hooks = {train::StopAtStepHook(2)};
  {
    train::MonitoredTrainingSession sess(m2.g, o2);
    while (!sess.should_stop()) sess.run(m2.train_op);
    sess.close();
  }
  EXPECT_FALSE(ckpt_at_close.files_starting_with("model.ckpt-2").empty());
}

TEST(ApiDistributed, NanTensorHook) {
  for (bool fail : {true, false}) {
    Graph g;
    Variable w(g, Tensor::scalar(1.0f), "w");
    Variable step = train::get_or_create_global_step(g);
    Output loss = ops::mul(w.value(), ops::constant(g, std::nanf("")));
    Operation train_op = train::GradientDescentOptimizer(0.1f).minimize(loss, step);
    train::MonitoredTrainingSessionOptions o;
    o.hooks = {train::NanTensorHook(loss, fail)};
    train::MonitoredTrainingSession sess(g, o);
    if (fail) {
      expect_error_naming<InvalidArgumentError>([&] { sess.run(train_op); }, "NaN loss during training");
    } else {
      sess.run(train_op);
      EXPECT_TRUE(sess.should_stop());
    }
  }
}

// ================================================================================ ## Summaries

// TFRecord framing: uint64 length, masked CRC-32C of it, the data, masked CRC-32C of the data.
uint32_t crc32c(const char* data, std::size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) c = table[(c ^ static_cast<uint8_t>(data[i])) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}
uint32_t masked_crc(const char* data, std::size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
template <class T>
T little_endian(const std::string& bytes, std::size_t at) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
  return v;
}
// The records of a TFRecord file; a framing or checksum error fails the test.
std::vector<std::string> read_tfrecords(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  std::size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) {
      ADD_FAILURE() << path << ": truncated header at " << at;
      break;
    }
    const auto length = little_endian<uint64_t>(bytes, at);
    EXPECT_EQ(little_endian<uint32_t>(bytes, at + 8), masked_crc(bytes.data() + at, 8)) << "length crc at " << at;
    if (bytes.size() - at - 12 < length + 4) {
      ADD_FAILURE() << path << ": truncated record at " << at;
      break;
    }
    records.push_back(bytes.substr(at + 12, length));
    EXPECT_EQ(little_endian<uint32_t>(bytes, at + 12 + length), masked_crc(bytes.data() + at + 12, length))
        << "data crc at " << at;
    at += 12 + length + 4;
  }
  return records;
}

TEST(ApiSummaries, OpsAndFileWriter) {
  TempDir dir("summaries");
  Graph g;
  auto x = ops::constant(g, 1.5f);
  auto values = ops::constant(g, Tensor::vector<float>({1, 2, 3, 4}));
  Output s1 = summary::scalar("loss", x);
  Output h = summary::histogram("weights", values);
  Output merged = summary::merge({s1, h});
  Output all = summary::merge_all(g);
  static_assert(std::is_same_v<decltype(summary::scalar("a", x)), Output>);
  static_assert(std::is_same_v<decltype(summary::histogram("a", x)), Output>);
  static_assert(std::is_same_v<decltype(summary::merge({s1})), Output>);
  static_assert(std::is_same_v<decltype(summary::merge_all(g)), Output>);
  EXPECT_EQ(s1.dtype(), DType::String);
  EXPECT_EQ(s1.shape().rank(), 0);
  EXPECT_EQ(merged.dtype(), DType::String);
  ASSERT_FALSE(all.is_null());
  Session s(g);
  auto out = s.run({s1, h, merged, all});
  for (const Tensor& t : out) {
    EXPECT_EQ(t.dtype(), DType::String);
    EXPECT_FALSE(t.scalar<std::string>().empty());
  }
  EXPECT_TRUE(contains(out[0].scalar<std::string>(), "loss"));
  {
    summary::FileWriter writer(dir.path.string());
    writer.add_summary(out[2], 1);
    writer.add_summary(out[3], 2);
    writer.add_graph(g);
    writer.flush();
    writer.close();
  }
  summary::FileWriter other((dir.path / "other").string(), 10, std::chrono::seconds{1});
  other.add_summary(out[0], 0);
  other.close();
  auto files = dir.files_starting_with("events.out.tfevents.");
  ASSERT_EQ(files.size(), 2u);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::regex name(std::string("events\\.out\\.tfevents\\.[0-9]+\\.") + host + ".*");
  for (const auto& f : files) {
    EXPECT_TRUE(std::regex_match(fs::path(f).filename().string(), name)) << f;
    auto records = read_tfrecords(f);
    ASSERT_FALSE(records.empty()) << f;
    EXPECT_TRUE(contains(records[0], "brain.Event:2")) << "the first event is the file version";
  }
  const std::string main_file = fs::path(files[0]).parent_path() == dir.path ? files[0] : files[1];
  auto records = read_tfrecords(main_file);
  EXPECT_EQ(records.size(), 4u);  // version, two summaries, the graph
  bool loss = false, weights = false, graph = false;
  for (const auto& r : records) {
    loss |= contains(r, "loss");
    weights |= contains(r, "weights");
    graph |= contains(r, "HistogramSummary") || contains(r, "ScalarSummary") || contains(r, "Const");
  }
  EXPECT_TRUE(loss && weights && graph);
}

// =========================================================================== ## Value semantics

template <class T>
constexpr bool copyable_handle = std::is_copy_constructible_v<T> && std::is_copy_assignable_v<T>;
template <class T>
constexpr bool move_only = !std::is_copy_constructible_v<T> && !std::is_copy_assignable_v<T> &&
                           std::is_move_constructible_v<T> && std::is_move_assignable_v<T>;

static_assert(copyable_handle<Output>);
static_assert(copyable_handle<Operation>);
static_assert(copyable_handle<Tensor>);
static_assert(copyable_handle<Variable>);
static_assert(copyable_handle<FIFOQueue>);
static_assert(copyable_handle<RandomShuffleQueue>);
static_assert(copyable_handle<train::QueueRunner>);
static_assert(copyable_handle<train::Optimizer>);
static_assert(copyable_handle<train::GradientDescentOptimizer>);
static_assert(copyable_handle<train::MomentumOptimizer>);
static_assert(copyable_handle<train::AdamOptimizer>);
static_assert(copyable_handle<train::AdagradOptimizer>);
static_assert(copyable_handle<train::RMSPropOptimizer>);
static_assert(copyable_handle<train::SyncReplicasOptimizer>);
static_assert(copyable_handle<train::SessionRunHook>);
static_assert(copyable_handle<Callable>);
static_assert(move_only<Graph>);
static_assert(move_only<Session>);
static_assert(move_only<train::Server>);

// "Every query method in this file is const": called through const references.
[[maybe_unused]] void const_queries(const Tensor& t, const Shape& sh, const Output& o, const Operation& op,
                                    const Variable& v, const train::ClusterSpec& c, const train::Server& server,
                                    const train::Coordinator& coord, const train::MonitoredTrainingSession& mts,
                                    const Callable& call) {
  (void)t.dtype(), (void)t.shape(), (void)t.device(), (void)t.scalar<float>(), (void)t.to_vector<float>();
  (void)sh.rank(), (void)sh.dim(0), (void)sh.num_elements();
  (void)o.name(), (void)o.dtype(), (void)o.shape(), (void)o.op(), (void)o.is_null();
  (void)op.name(), (void)op.type(), (void)op.device(), (void)op.assigned_device(), (void)op.is_null();
  (void)v.value(), (void)v.assign(o), (void)v.assign_add(o), (void)v.assign_sub(o), (void)v.initializer();
  (void)v.name(), (void)v.trainable();
  (void)c.jobs(), (void)c.num_tasks("a"), (void)c.task_indices("a"), (void)c.task_address("a", 0);
  (void)c.job_tasks("a"), (void)c.to_json();
  (void)server.target();
  (void)coord.should_stop();
  (void)mts.should_stop();
  (void)call();
}

TEST(ApiValueSemantics, AggregateSpellings) {
  // The structs' fields in API.md's order.
  RunOptions ro{.timeout = std::chrono::milliseconds(5), .trace = true};
  EXPECT_TRUE(ro.trace);
  SessionOptions so{.log_device_placement = false, .allow_soft_placement = true, .inter_op_threads = 2,
                    .allow_tf32 = false, .cuda_graphs = false};
  EXPECT_EQ(so.inter_op_threads, 2);
  DeviceInfo info{"/device:CPU:0", "CPU", 1024, "a CPU"};
  EXPECT_EQ(info.memory_bytes, 1024);
  MemoryStats ms{1, 2, 3, 4};
  EXPECT_EQ(ms.limit_bytes, 4);
  train::ServerOptions server_options{};
  (void)server_options;
  // SessionOptions as the monitored session's config.
  Model m;
  train::MonitoredTrainingSessionOptions o;
  o.config = so;
  o.hooks = {train::StopAtStepHook(1)};
  train::MonitoredTrainingSession sess(m.g, o);
  while (!sess.should_stop()) sess.run(m.train_op);
  sess.close();
}

TEST(ApiValueSemantics, CopiesReferToTheSameThing) {
  Graph g;
  Variable v(g, Tensor::scalar(1.0f), "v");
  Variable v_copy = v;
  FIFOQueue q(g, 4, {DType::Float32}, {Shape{}});
  FIFOQueue q_copy = q;
  auto enq_through_copy = q_copy.enqueue({ops::constant(g, 2.0f)});
  auto deq_through_original = q.dequeue()[0];
  auto set_through_copy = v_copy.assign(ops::constant(g, 9.0f));
  Session s(g);
  s.run(global_variables_initializer(g));
  s.run(set_through_copy);
  EXPECT_EQ(s.run(v.value()).scalar<float>(), 9.0f);
  s.run(enq_through_copy);
  EXPECT_EQ(s.run({deq_through_original}, {}, {}, bounded())[0].scalar<float>(), 2.0f);

  // Graph, Session and Server move.
  Graph moved_graph = std::move(g);
  Session moved_session = std::move(s);
  EXPECT_EQ(moved_session.run(v.value()).scalar<float>(), 9.0f);
  train::Server server = train::Server::create_local_server();
  train::Server moved_server = std::move(server);
  EXPECT_EQ(moved_server.target().rfind("tessera://", 0), 0u);
}

// =================================================================== TENSORFLOW'S BEHAVIOUR
// Where API.md says "as TensorFlow" without spelling the case out: dtypes TensorFlow's ops take
// (strings, half precision, integer pools), tf.div's integer quotient, gradients of integer ys,
// the name apply_gradients gives its op, and queues without a shared name on a server. Each case
// failed against the library before it was mended (2026-12-07).

TEST(ApiTensorFlowBehaviour, EqualAndNotEqualOnStrings) {
  Graph g;
  auto a = ops::constant(g, Tensor::vector(std::vector<std::string>{"a", "b"}));
  auto b = ops::constant(g, Tensor::vector(std::vector<std::string>{"a", "c"}));
  auto eq = ops::equal(a, b);
  auto ne = ops::not_equal(a, b);
  Session s(g);
  auto out = s.run({eq, ne});
  EXPECT_EQ(out[0].to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_EQ(out[1].to_vector<bool>(), (std::vector<bool>{false, true}));
}

TEST(ApiTensorFlowBehaviour, WhereOnStrings) {
  Graph g;
  auto cond = ops::constant(g, Tensor::vector<bool>({true, false}));
  auto x = ops::constant(g, Tensor::vector(std::vector<std::string>{"x0", "x1"}));
  auto y = ops::constant(g, Tensor::vector(std::vector<std::string>{"y0", "y1"}));
  Session s(g);
  EXPECT_EQ(s.run(ops::where(cond, x, y)).to_vector<std::string>(), (std::vector<std::string>{"x0", "y1"}));
}

TEST(ApiTensorFlowBehaviour, TruncatedNormalInHalfPrecision) {
  Graph g;
  auto h = ops::cast(ops::truncated_normal(g, Shape{100}, DType::Float16, 3), DType::Float32);
  auto bf = ops::cast(ops::truncated_normal(g, Shape{100}, DType::BFloat16, 3), DType::Float32);
  Session s(g);
  for (const Tensor& t : s.run({h, bf})) {
    for (float v : t.to_vector<float>()) EXPECT_LE(std::fabs(v), 2.0f);
  }
}

TEST(ApiTensorFlowBehaviour, ConvAndPoolingInHalfPrecision) {
  Graph g;
  auto img = ops::cast(ops::constant(g, Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, Shape{1, 3, 3, 1})),
                       DType::Float16);
  auto filt = ops::cast(ops::constant(g, Tensor::from_vector<float>({1, 1, 1, 1}, Shape{2, 2, 1, 1})), DType::Float16);
  auto cv = ops::cast(ops::conv2d(img, filt, {1, 1, 1, 1}, "VALID"), DType::Float32);
  auto mp = ops::cast(ops::max_pool(img, {1, 2, 2, 1}, {1, 1, 1, 1}, "VALID"), DType::Float32);
  auto ap = ops::cast(ops::avg_pool(img, {1, 2, 2, 1}, {1, 1, 1, 1}, "VALID"), DType::Float32);
  Session s(g);
  auto out = s.run({cv, mp, ap});
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{12, 16, 24, 28}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{5, 6, 8, 9}));
  EXPECT_EQ(out[2].to_vector<float>(), (std::vector<float>{3, 4, 6, 7}));
}

TEST(ApiTensorFlowBehaviour, MaxPoolOnIntegers) {
  Graph g;
  auto img = ops::constant(g, Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6, 7, 8, 9}, Shape{1, 3, 3, 1}));
  Session s(g);
  EXPECT_EQ(s.run(ops::max_pool(img, {1, 2, 2, 1}, {1, 1, 1, 1}, "VALID")).to_vector<int32_t>(),
            (std::vector<int32_t>{5, 6, 8, 9}));
}

TEST(ApiTensorFlowBehaviour, RandomOpsInHalfPrecision) {
  Graph g;
  auto u = ops::cast(ops::random_uniform(g, Shape{10}, DType::Float16), DType::Float32);
  auto n = ops::cast(ops::random_normal(g, Shape{10}, DType::BFloat16), DType::Float32);
  Session s(g);
  for (float v : s.run(u).to_vector<float>()) EXPECT_TRUE(v >= 0.0f && v < 1.0f);
  EXPECT_EQ(s.run(n).shape().dim(0), 10);
}

TEST(ApiTensorFlowBehaviour, IntegerDivFloorsAsTf1Div) {
  Graph g;
  auto q = ops::div(ops::constant(g, Tensor::vector<int32_t>({-7, 7})), ops::constant(g, Tensor::vector<int32_t>({2, -2})));
  Session s(g);
  EXPECT_EQ(s.run(q).to_vector<int32_t>(), (std::vector<int32_t>{-4, -4}));  // C++ truncates: {-3, -3}
}

// A queue without a shared_name is private (TF's ResourceOpKernel), also on a server that two
// sessions share: another capacity under the same op name is no conflict, and nothing crosses.
TEST(ApiTensorFlowBehaviour, UnnamedQueuesOfTwoGraphsOnOneServerAreDistinct) {
  train::Server server = train::Server::create_local_server();
  Graph g1, g2;
  FIFOQueue q1(g1, 4, {DType::Float32}, {Shape{}});
  FIFOQueue q2(g2, 2, {DType::Float32}, {Shape{}});
  auto enq1 = q1.enqueue({ops::constant(g1, 1.0f)});
  auto size2 = q2.size();
  Session s1(g1, server.target());
  Session s2(g2, server.target());
  s1.run(enq1);
  EXPECT_EQ(s2.run(size2).scalar<int32_t>(), 0);
}

TEST(ApiTensorFlowBehaviour, AnIntegerYHasNoGradientPathInsteadOfAnError) {
  Graph g;
  auto xf = ops::placeholder(g, DType::Float32, Shape{}, "xf");
  auto xi = ops::placeholder(g, DType::Int32, Shape{}, "xi");
  auto int_of_float = gradients({ops::cast(xf, DType::Int32)}, {xf});   // TF: [None]
  ASSERT_EQ(int_of_float.size(), 1u);
  EXPECT_TRUE(int_of_float[0].is_null());
  auto mixed = gradients({ops::square(xf), ops::square(xi)}, {xf});     // TF: d(xf^2)/dxf
  ASSERT_EQ(mixed.size(), 1u);
  Session s(g);
  EXPECT_EQ(s.run(mixed[0], {{xf, Tensor::scalar(3.0f)}}).scalar<float>(), 6.0f);
}

TEST(ApiTensorFlowBehaviour, ApplyGradientsNamesItsOp) {
  Graph g;
  Variable w(g, Tensor::scalar(1.0f), "w");
  Variable step = train::get_or_create_global_step(g);
  train::GradientDescentOptimizer sgd(0.1f);
  Operation apply = sgd.apply_gradients(sgd.compute_gradients(ops::square(w.value())), step, "my_apply");
  EXPECT_EQ(apply.name(), "my_apply");  // TF1: assign_add(global_step, 1, name=name)
}

}  // namespace
