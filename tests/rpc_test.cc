// transport/rpc: request/response over ZeroMQ on loopback (ports chosen by the OS; every wait is
// bounded).
#include "transport/rpc.h"

#include <malloc.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "testing/test_util.h"
#include "core/host_blocks.h"
#include "core/string_tensor.h"
#include "transport/rpc_envelope.h"
#include "transport/rpc_stream.h"

namespace tessera::internal {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using tessera::testing::wait_until;

RpcMessage message(std::initializer_list<std::string_view> frames) {
  RpcMessage m;
  for (auto f : frames) m.frames.push_back(string_frame(f));
  return m;
}

std::vector<std::string> strings(const RpcMessage& m) {
  std::vector<std::string> out;
  for (const auto& f : m.frames) out.push_back(f.to_string());
  return out;
}

std::unique_ptr<RpcServer> start_or_die(RpcServer::Handler handler, RpcServerOptions options = {},
                                        const std::string& address = "tcp://127.0.0.1:0") {
  auto server = RpcServer::start(address, std::move(handler), options);
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  return server.ok() ? std::move(server).value() : nullptr;
}

void echo(RpcMessage request, Responder respond) { respond(std::move(request)); }

// A port is free again once stop() returns; other processes may still race us for it, so retry a
// little before giving up.
std::unique_ptr<RpcServer> restart_on(const std::string& endpoint, RpcServer::Handler handler) {
  for (auto until = Clock::now() + 2s; Clock::now() < until; std::this_thread::sleep_for(20ms)) {
    auto server = RpcServer::start(endpoint, handler);
    if (server.ok()) return std::move(server).value();
  }
  ADD_FAILURE() << "could not bind " << endpoint << " again";
  return nullptr;
}

// Responders a handler kept without replying (tests of servers that never answer).
struct Stash {
  std::mutex mu;
  std::vector<Responder> responders;
  size_t size() {
    std::lock_guard<std::mutex> l(mu);
    return responders.size();
  }
  RpcServer::Handler handler() {
    return [this](RpcMessage, Responder r) {
      std::lock_guard<std::mutex> l(mu);
      responders.push_back(std::move(r));
    };
  }
};

// Requests a handler kept with their frames, without replying: handler threads take requests in
// any order, so each Responder answers the request beside it.
struct Held {
  std::mutex mu;
  std::vector<std::pair<RpcMessage, Responder>> requests;
  size_t size() {
    std::lock_guard<std::mutex> l(mu);
    return requests.size();
  }
  std::vector<std::pair<RpcMessage, Responder>> take() {
    std::lock_guard<std::mutex> l(mu);
    return std::exchange(requests, {});
  }
  RpcServer::Handler handler() {
    return [this](RpcMessage request, Responder respond) {
      std::lock_guard<std::mutex> l(mu);
      requests.emplace_back(std::move(request), std::move(respond));
    };
  }
};

// Collects async completions.
struct Results {
  std::mutex mu;
  std::vector<Status> statuses;
  std::vector<Clock::duration> elapsed;
  size_t size() {
    std::lock_guard<std::mutex> l(mu);
    return statuses.size();
  }
  RpcChannel::Done done(Clock::time_point start) {
    return [this, start](StatusOr<RpcMessage> r) {
      std::lock_guard<std::mutex> l(mu);
      statuses.push_back(r.status());
      elapsed.push_back(Clock::now() - start);
    };
  }
};

// An echo server started with `options` and a channel to it. A server that cannot start throws
// (the test fails with the start's error) before anything uses it.
struct EchoServer {
  explicit EchoServer(RpcServerOptions options, RpcChannelOptions channel_options = {})
      : server(RpcServer::start("tcp://127.0.0.1:0", echo, std::move(options)).value_or_raise()),
        channel(server->endpoint(), std::move(channel_options)) {}
  std::unique_ptr<RpcServer> server;
  RpcChannel channel;
};

// A server that keeps each request's Responder in `stash` without replying, a channel to it, and
// the completions of the channel's asynchronous calls. A server that cannot start throws (the test
// fails with the start's error) before anything uses it.
struct Unanswered {
  Stash stash;
  std::unique_ptr<RpcServer> server = RpcServer::start("tcp://127.0.0.1:0", stash.handler()).value_or_raise();
  std::string endpoint = server->endpoint();
  RpcChannel channel{endpoint};
  Results results;
};

TEST(RpcTest, EchoHeaderAndThreePayloads) {
  auto server = start_or_die(echo);
  ASSERT_TRUE(server);
  EXPECT_EQ(server->endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << server->endpoint();
  EXPECT_NE(server->endpoint(), "tcp://127.0.0.1:0");
  RpcChannel channel(server->endpoint());
  std::string big(100000, 'x');
  auto reply = channel.call_sync(message({"header", "one", "", big}), 2s);
  ASSERT_TRUE(reply.ok()) << reply.status().to_string();
  EXPECT_EQ(strings(reply.value()), (std::vector<std::string>{"header", "one", "", big}));
  EXPECT_EQ(server->stats().requests, 1u);
}

TEST(RpcTest, ConcurrentCallsAreMatched) {
  for (int threads : tessera::testing::kThreadCounts) {
    RpcServerOptions options;
    options.handler_threads = 4;
    auto server = start_or_die(
        [](RpcMessage req, Responder respond) {
          // The reply is derived from the request, so a mismatched reply cannot pass.
          RpcMessage reply;
          reply.frames.push_back(string_frame("re:" + req.frames[0].to_string()));
          reply.frames.push_back(std::move(req.frames[1]));
          respond(std::move(reply));
        },
        options);
    ASSERT_TRUE(server);
    RpcChannel channel(server->endpoint());
    constexpr int kCalls = 200;
    std::atomic<int> good{0};
    tessera::testing::run_threads(threads, [&](int t) {
      for (int i = 0; i < kCalls; ++i) {
        const std::string id = std::to_string(t) + "/" + std::to_string(i);
        auto r = channel.call_sync(message({id, "payload " + id}), 5s);
        if (r.ok() && strings(r.value()) == std::vector<std::string>{"re:" + id, "payload " + id}) ++good;
      }
    });
    EXPECT_EQ(good.load(), threads * kCalls) << threads << " threads";
  }
}

TEST(RpcTest, AsyncCallsFromManyThreadsAreMatched) {
  auto server = start_or_die(echo);
  ASSERT_TRUE(server);
  RpcChannel channel(server->endpoint());
  constexpr int kThreads = 8, kCalls = 200;
  std::atomic<int> good{0}, done{0};
  tessera::testing::run_threads(kThreads, [&](int t) {
    for (int i = 0; i < kCalls; ++i) {
      std::string id = std::to_string(t * kCalls + i);
      channel.call(message({id}), 5s, [&, id](StatusOr<RpcMessage> r) {
        if (r.ok() && strings(r.value()) == std::vector<std::string>{id}) ++good;
        ++done;
      });
    }
  });
  ASSERT_TRUE(wait_until([&] { return done.load() == kThreads * kCalls; }, 10s));
  EXPECT_EQ(good.load(), kThreads * kCalls);
}

// A call made inside a completion, on the channel's I/O thread (a chain of pulls, each sent by
// the last one's completion), goes out without an eventfd write: the I/O thread looks again
// before it sleeps. Were it left in the outbox, each call would wait for its deadline.
TEST(RpcTest, CallsMadeInsideCompletionsGoOutAtOnce) {
  auto server = start_or_die(echo);
  ASSERT_TRUE(server);
  constexpr int kCalls = 200;
  // Before the channel: destroying it completes what is pending, whose completions use these.
  std::atomic<int> good{0}, ended{0};
  RpcChannel* channel = nullptr;
  std::function<void(int)> issue = [&](int i) {
    channel->call(message({std::to_string(i)}), 2s, [&, i](StatusOr<RpcMessage> r) {
      if (!r.ok() || strings(r.value()) != std::vector<std::string>{std::to_string(i)}) return ended.store(-1);
      ++good;
      if (i + 1 < kCalls) return issue(i + 1);
      ended.store(1);
    });
  };
  RpcChannel ch(server->endpoint());
  channel = &ch;
  issue(0);
  ASSERT_TRUE(wait_until([&] { return ended.load() != 0; }, 20s));
  EXPECT_EQ(ended.load(), 1) << good.load() << " calls answered in time";
  EXPECT_EQ(good.load(), kCalls);
}

// Destroying a channel completes its calls with Cancelled, and also the calls those completions
// make while it stops (refused at once): none is left without its completion.
TEST(RpcTest, CallsMadeByCompletionsWhileTheChannelStopsAreCompletedToo) {
  auto server = start_or_die(echo);
  ASSERT_TRUE(server);
  constexpr int kCalls = 20000;  // far more than the chain makes before the channel goes
  std::atomic<int> issued{0}, completed{0}, cancelled{0};
  RpcChannel* channel = nullptr;
  std::function<void()> issue = [&] {
    if (issued.fetch_add(1) >= kCalls) return issued.fetch_sub(1), void();
    channel->call(message({"x"}), 2s, [&](StatusOr<RpcMessage> r) {
      if (r.status().code() == ErrorCode::kCancelled) ++cancelled;
      ++completed;
      issue();  // on success and failure alike
    });
  };
  {
    RpcChannel ch(server->endpoint());
    channel = &ch;
    issue();
    ASSERT_TRUE(wait_until([&] { return completed.load() >= 50; }, 10s));
  }  // destroyed mid-chain
  EXPECT_GT(cancelled.load(), 0);
  EXPECT_EQ(completed.load(), issued.load());
}

// A caller that sends its asynchronous call itself may spend the socket's ZMQ_FD signal of replies
// already waiting, which the I/O thread sleeps on (Note [RPC channel]). A pipeline that refills its
// window from a consumer thread as each reply completes (a worker pulling tensors) meets that at
// every call; a reply left unseen would stall it until the call's deadline, long past the bound.
TEST(RpcTest, AWindowOfAsyncCallsRefilledAsRepliesArriveNeverStalls) {
  // With and without busy polling (Note [Busy polling] in rpc_server.cc), on the server and on the
  // channel: a request that arrives while the server looks without sleeping is served as one that
  // wakes it, and a reply that arrives while the channel's I/O thread looks is completed as one
  // that wakes it.
  struct Case {
    int handler_threads;
    std::chrono::microseconds server_busy_poll, channel_busy_poll;
  };
  for (auto [handler_threads, busy_poll, channel_busy_poll] :
       {Case{0, 0us, 0us}, Case{2, 0us, 0us}, Case{0, 200us, 0us}, Case{0, 200us, 200us}, Case{2, 0us, 200us}}) {
    SCOPED_TRACE(::testing::Message() << "busy_poll " << busy_poll.count() << " us, the channel's "
                                      << channel_busy_poll.count() << " us, handler threads " << handler_threads);
    constexpr int kCalls = 3000, kWindow = 4;
    // Before the channel: a failed run destroys the channel first, which cancels what is pending.
    std::mutex mu;
    std::condition_variable cv;
    int in_flight = 0, good = 0, completed = 0;
    bool stalled = false;
    RpcServerOptions options;
    options.handler_threads = handler_threads;
    options.busy_poll = busy_poll;
    RpcChannelOptions channel_options;
    channel_options.busy_poll = channel_busy_poll;
    EchoServer s(options, channel_options);
    for (int i = 0; i < kCalls && !stalled; ++i) {
      {
        std::unique_lock<std::mutex> l(mu);
        stalled = !cv.wait_for(l, 30s, [&] { return in_flight < kWindow; });
        ++in_flight;
      }
      const std::string id = std::to_string(i);
      s.channel.call(message({id, "payload"}), 120s, [&, id](StatusOr<RpcMessage> r) {
        {
          std::lock_guard<std::mutex> l(mu);
          --in_flight;
          ++completed;
          if (r.ok() && strings(r.value()) == std::vector<std::string>{id, "payload"}) ++good;
        }
        cv.notify_one();
      });
    }
    std::unique_lock<std::mutex> l(mu);
    const bool all = !stalled && cv.wait_for(l, 30s, [&] { return completed == kCalls; });
    const int good_calls = good, completed_calls = completed;
    l.unlock();
    EXPECT_FALSE(stalled) << "a reply was not seen within 30 s (handler threads " << handler_threads << ")";
    EXPECT_TRUE(all) << completed_calls << " of " << kCalls << " completed";
    EXPECT_EQ(good_calls, kCalls) << "handler threads " << handler_threads;
  }
}

uint64_t checksum(const Tensor& t) {
  const auto* p = static_cast<const uint64_t*>(t.raw_data());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < t.bytes() / 8; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

TEST(RpcTest, LargeTensorCrossesIntactAndIsWrappedWithoutCopy) {
  const int64_t n = (64 << 20) / 4;  // 64 MiB of float32
  Tensor sent(DType::Float32, Shape{n});
  auto* w = static_cast<uint64_t*>(sent.raw_mutable_data());
  for (int64_t i = 0; i < n / 2; ++i) w[i] = static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
  const uint64_t sum = checksum(sent);

  std::atomic<bool> wrapped{false}, default_path_ok{false};
  std::atomic<uint64_t> server_sum{0};
  auto server = start_or_die([&](RpcMessage req, Responder respond) {
    // Natural alignment accepted: the tensor is the zmq message's own buffer.
    const void* frame_data = req.frames[1].data();
    auto t = frame_to_tensor(std::move(req.frames[1]), DType::Float32, Shape{n}, dtype_size(DType::Float32));
    if (!t.ok()) {
      respond.fail(t.status());
      return;
    }
    wrapped = t.value().raw_data() == frame_data;
    server_sum = checksum(t.value());
    // Echo it back without copying on the way out.
    RpcMessage reply;
    reply.frames.push_back(string_frame("ok"));
    reply.frames.push_back(tensor_frame(t.value()).value());
    respond(std::move(reply));
  });
  ASSERT_TRUE(server);
  RpcChannel channel(server->endpoint());

  RpcMessage req;
  req.frames.push_back(string_frame("tensor"));
  auto frame = tensor_frame(sent);
  ASSERT_TRUE(frame.ok());
  EXPECT_EQ(frame.value().data(), sent.raw_data());  // sent without a copy
  EXPECT_TRUE(sent.is_buffer_shared());              // the frame holds a reference
  req.frames.push_back(std::move(frame).value());
  auto reply = channel.call_sync(std::move(req), 10s);
  ASSERT_TRUE(reply.ok()) << reply.status().to_string();
  EXPECT_TRUE(wrapped.load());
  EXPECT_EQ(server_sum.load(), sum);

  // Both ways it was streamed (Note [Streamed frames]): received into an aligned host block,
  // so even the default alignment (Tensor::kAlignment) takes it without a copy.
  EXPECT_EQ(channel.stats().streamed_requests, 1u);
  EXPECT_EQ(channel.stats().streamed_replies, 1u);
  EXPECT_EQ(server->stats().streamed_requests, 1u);
  EXPECT_EQ(server->stats().streamed_replies, 1u);
  auto& back = reply.value().frames[1];
  const void* back_data = back.data();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(back_data) % kHostBlockAlignment, 0u);
  auto received = frame_to_tensor(std::move(back), DType::Float32, Shape{n});
  ASSERT_TRUE(received.ok()) << received.status().to_string();
  EXPECT_EQ(received.value().raw_data(), back_data);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(received.value().raw_data()) % Tensor::kAlignment, 0u);
  EXPECT_EQ(checksum(received.value()), sum);
  // libzmq dropped its reference to the sent tensor once the bytes were written.
  EXPECT_TRUE(wait_until([&] { return !sent.is_buffer_shared(); }, 5s));
}

#if TESSERA_TEST_MALLOC_TUNING
// Note [Malloc settings for transport]: making a server applies them. ctest runs this test in a
// process of its own, where glibc's default would map a 3 MiB block on its own.
TEST(RpcTest, AServerAppliesTheTransportsMallocSettings) {
  const MallocTuning wanted = decide_malloc_tuning([](const char* name) -> const char* { return std::getenv(name); });
  if (!wanted.applied) GTEST_SKIP() << "not applied here: " << wanted.reason;
  auto server = start_or_die(echo);
  ASSERT_TRUE(server);
  const struct mallinfo2 before = mallinfo2();
  void* p = std::malloc(3 << 20);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(mallinfo2().hblkhd, before.hblkhd) << "a 3 MiB block was mapped on its own";
  std::free(p);
  EXPECT_TRUE(tune_malloc_for_transport().applied);
}
#endif

// A String tensor travels as its length-prefixed encoding, never as its std::string objects (whose
// bytes are pointers): tensor_frame encodes it, frame_to_tensor decodes it, and a frame that is
// not the encoding of that many strings is refused, even one the size of that many objects.
TEST(RpcTest, StringTensorsTravelAsTheirEncoding) {
  std::vector<std::string> words = {"", "tessera", std::string(20000, 'x'), std::string("a\0b", 3)};
  const Tensor t = Tensor::vector(words);
  auto frame = tensor_frame(t);
  ASSERT_TRUE(frame.ok());
  EXPECT_EQ(frame.value().to_string(), encode_strings(t));
  auto back = frame_to_tensor(std::move(frame).value(), DType::String, Shape{4});
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back.value().to_vector<std::string>(), words);

  EXPECT_EQ(frame_to_tensor(zmq::message_t(encode_strings(t)), DType::String, Shape{5}).status().code(),
            ErrorCode::kInvalidArgument);
  const std::string objects(4 * sizeof(std::string), '\x41');  // as many bytes as four std::strings
  EXPECT_EQ(frame_to_tensor(zmq::message_t(objects), DType::String, Shape{4}).status().code(),
            ErrorCode::kInvalidArgument);
}

TEST(RpcTest, FrameToTensorChecksSizeAndAlignment) {
  auto bad = frame_to_tensor(string_frame("abc"), DType::Float32, Shape{2});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("holds 3 bytes"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(frame_to_tensor(string_frame(""), DType::Float32, Shape{-1}).ok());

  // A 64-byte aligned frame is wrapped; one 8 bytes off is copied into an aligned tensor.
  constexpr size_t kBytes = 1 << 20;
  void* mem = std::aligned_alloc(64, kBytes + 64);
  ASSERT_NE(mem, nullptr);
  std::memset(mem, 0, kBytes + 64);
  static_cast<float*>(mem)[0] = 7.f;
  static_cast<float*>(mem)[2] = 9.f;
  std::atomic<int> freed{0};
  auto free_fn = [](void*, void* hint) { ++*static_cast<std::atomic<int>*>(hint); };
  {
    zmq::message_t aligned(mem, kBytes, free_fn, &freed);
    auto t = frame_to_tensor(std::move(aligned), DType::Float32, Shape{int64_t{kBytes / 4}});
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t.value().raw_data(), mem);
    EXPECT_EQ(t.value().data<float>()[0], 7.f);
    EXPECT_EQ(freed.load(), 0);  // the tensor owns the message
  }
  EXPECT_EQ(freed.load(), 1);
  {
    zmq::message_t off(static_cast<char*>(mem) + 8, kBytes, free_fn, &freed);
    auto t = frame_to_tensor(std::move(off), DType::Float32, Shape{int64_t{kBytes / 4}});
    ASSERT_TRUE(t.ok());
    EXPECT_NE(t.value().raw_data(), static_cast<char*>(mem) + 8);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.value().raw_data()) % 64, 0u);
    EXPECT_EQ(t.value().data<float>()[0], 9.f);
    EXPECT_EQ(freed.load(), 2);  // copied: the message is gone already
  }
  std::free(mem);

  // Bool bytes are normalized.
  auto b = frame_to_tensor(string_frame(std::string("\x00\x05\x01", 3)), DType::Bool, Shape{3});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b.value().to_vector<bool>(), (std::vector<bool>{false, true, true}));

  // Small tensors travel as copies; null tensors are refused.
  auto s = Tensor::vector<int32_t>({1, 2, 3});
  auto sf = tensor_frame(s);
  ASSERT_TRUE(sf.ok());
  EXPECT_NE(sf.value().data(), s.raw_data());
  EXPECT_FALSE(s.is_buffer_shared());
  auto back = frame_to_tensor(std::move(sf).value(), DType::Int32, Shape{3});
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back.value().to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(tensor_frame(Tensor()).status().code(), ErrorCode::kFailedPrecondition);
}

TEST(RpcTest, AsyncRepliesOutOfOrderAreMatched) {
  // Each request is answered from another thread after a delay that makes later calls finish
  // first.
  constexpr int kCalls = 10;
  std::mutex mu;
  std::vector<std::thread> repliers;
  auto server = start_or_die([&](RpcMessage req, Responder respond) {
    const int i = std::stoi(req.frames[0].to_string());
    std::lock_guard<std::mutex> l(mu);
    repliers.emplace_back([i, respond, req = std::make_shared<RpcMessage>(std::move(req))] {
      std::this_thread::sleep_for(std::chrono::milliseconds(10 * (kCalls - i)));
      respond(std::move(*req));
    });
  });
  ASSERT_TRUE(server);
  RpcChannel channel(server->endpoint());
  std::mutex order_mu;
  std::vector<int> order;
  std::atomic<int> good{0};
  for (int i = 0; i < kCalls; ++i) {
    channel.call(message({std::to_string(i)}), 5s, [&, i](StatusOr<RpcMessage> r) {
      if (r.ok() && r.value().frames[0].to_string() == std::to_string(i)) ++good;
      std::lock_guard<std::mutex> l(order_mu);
      order.push_back(i);
    });
  }
  ASSERT_TRUE(wait_until(
      [&] {
        std::lock_guard<std::mutex> l(order_mu);
        return order.size() == kCalls;
      },
      5s));
  EXPECT_EQ(good.load(), kCalls);
  EXPECT_NE(order.front(), 0);  // not answered in call order
  std::lock_guard<std::mutex> l(mu);
  for (auto& t : repliers) t.join();
}

TEST(RpcTest, NothingListeningIsUnavailableWithinDeadline) {
  std::string endpoint;
  {
    auto server = start_or_die(echo);  // find a free port, then free it
    ASSERT_TRUE(server);
    endpoint = server->endpoint();
  }
  RpcChannel channel(endpoint);
  const auto start = Clock::now();
  auto r = channel.call_sync(message({"hello"}), 300ms);
  const auto elapsed = Clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(r.status().message().find("no reply from " + endpoint + " within 300 ms"), std::string::npos)
      << r.status().message();
  EXPECT_GE(elapsed, 300ms);
  EXPECT_LT(elapsed, 300ms + 1s);
  EXPECT_EQ(channel.stats().timed_out, 1u);
}

TEST(RpcTest, ServerStoppedMidCallThenRestartedOnSamePort) {
  Unanswered u;
  u.channel.call(message({"lost"}), 500ms, u.results.done(Clock::now()));
  ASSERT_TRUE(wait_until([&] { return u.stash.size() == 1; }, 2s));
  u.server->stop();
  EXPECT_FALSE(u.stash.responders[0](message({"too late"})));  // its Responder is dead
  ASSERT_TRUE(wait_until([&] { return u.results.size() == 1; }, 2s));
  EXPECT_EQ(u.results.statuses[0].code(), ErrorCode::kUnavailable) << u.results.statuses[0].to_string();
  EXPECT_LT(u.results.elapsed[0], 500ms + 1s);
  u.server.reset();

  auto again = restart_on(u.endpoint, echo);
  ASSERT_TRUE(again);
  auto r = u.channel.call_sync(message({"back"}), 3s);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(strings(r.value()), std::vector<std::string>{"back"});
}

TEST(RpcTest, LongCallOutlivesItsConnectDeadlineAndGetsItsReply) {
  Unanswered u;
  u.channel.call_until_lost(message({"slow"}), 100ms, u.results.done(Clock::now()));
  ASSERT_TRUE(wait_until([&] { return u.stash.size() == 1; }, 2s));
  std::this_thread::sleep_for(400ms);  // four times the connect deadline
  EXPECT_EQ(u.results.size(), 0u);
  std::lock_guard<std::mutex> l(u.stash.mu);
  ASSERT_TRUE(u.stash.responders[0](message({"done"})));
  ASSERT_TRUE(wait_until([&] { return u.results.size() == 1; }, 2s));
  EXPECT_TRUE(u.results.statuses[0].ok()) << u.results.statuses[0].to_string();
}

// CPU time of this whole process, all threads.
std::chrono::nanoseconds process_cpu_time() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

// A busy-polling channel (RpcChannelOptions::busy_poll, Note [Busy polling] in rpc_server.cc)
// behaves as any other: synchronous replies, deadlines, lost connections; and once its calls are
// done it sleeps (the looking is bounded).
TEST(RpcTest, ABusyPollingChannelKeepsEveryGuaranteeAndSleepsWhenIdle) {
  RpcChannelOptions busy;
  busy.busy_poll = 500us;
  {
    RpcServerOptions server_options;
    server_options.busy_poll = 200us;
    EchoServer es(server_options, busy);
    for (int i = 0; i < 300; ++i) {
      StatusOr<RpcMessage> r = es.channel.call_sync(message({"sync", std::to_string(i)}), 10s);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      ASSERT_EQ(strings(r.value()), (std::vector<std::string>{"sync", std::to_string(i)}));
    }
    std::atomic<int> right{0}, done{0};
    for (int i = 0; i < 300; ++i) {
      const std::string id = std::to_string(i);
      es.channel.call(message({id}), 10s, [&, id](StatusOr<RpcMessage> r) {
        if (r.ok() && strings(r.value()) == std::vector<std::string>{id}) right.fetch_add(1);
        done.fetch_add(1);
      });
    }
    ASSERT_TRUE(wait_until([&] { return done.load() == 300; }, 10s));
    EXPECT_EQ(right.load(), 300);
    // Idle now: the channel's I/O thread and the server's sleep. An I/O thread that kept looking
    // would use a core for the whole wait.
    std::this_thread::sleep_for(50ms);  // the last bursts' looking ends
    const auto cpu_before = process_cpu_time();
    const auto wall_before = Clock::now();
    std::this_thread::sleep_for(400ms);
    const auto cpu = process_cpu_time() - cpu_before;
    const auto wall = Clock::now() - wall_before;
    EXPECT_LT(cpu, wall / 4) << "idle for " << std::chrono::duration_cast<std::chrono::milliseconds>(wall).count()
                             << " ms, CPU time " << std::chrono::duration_cast<std::chrono::milliseconds>(cpu).count()
                             << " ms";
  }
  // Deadlines and lost connections, as Unanswered's plain channel meets them.
  Unanswered u;
  RpcChannel channel(u.endpoint, busy);
  const auto start = Clock::now();
  StatusOr<RpcMessage> r = channel.call_sync(message({"never answered"}), 300ms);
  EXPECT_EQ(r.status().code(), ErrorCode::kUnavailable) << r.status().to_string();
  EXPECT_GE(Clock::now() - start, 300ms);
  EXPECT_LT(Clock::now() - start, 300ms + 1s);
  channel.call_until_lost(message({"long"}), 100ms, u.results.done(Clock::now()));
  channel.call(message({"ordinary"}), 10s, u.results.done(Clock::now()));
  ASSERT_TRUE(wait_until([&] { return u.stash.size() == 3; }, 5s));
  const auto stopped = Clock::now();
  u.server->stop();
  ASSERT_TRUE(wait_until([&] { return u.results.size() == 2; }, 5s));
  EXPECT_LT(Clock::now() - stopped, 5s);  // not the ordinary call's 10 s deadline
  std::lock_guard<std::mutex> l(u.results.mu);
  for (const Status& st : u.results.statuses) {
    EXPECT_EQ(st.code(), ErrorCode::kUnavailable) << st.to_string();
    EXPECT_NE(st.message().find("lost the connection"), std::string::npos) << st.message();
  }
}

// A lost connection fails every call sent on it, long or ordinary, synchronous or not: the server
// addresses a reply to the connection its request came in on, so none can come any more (Note
// [Lost connections] in transport/rpc_channel.cc).
TEST(RpcTest, CallsFailUnavailableWhenTheirConnectionIsLost) {
  Unanswered u;
  u.channel.call_until_lost(message({"never answered"}), 100ms, u.results.done(Clock::now()));
  u.channel.call(message({"ordinary"}), 10s, u.results.done(Clock::now()));
  std::promise<Status> sync_result;
  std::thread sync_caller([&] { sync_result.set_value(u.channel.call_sync(message({"sync"}), 10s).status()); });
  ASSERT_TRUE(wait_until([&] { return u.stash.size() == 3; }, 5s));
  const auto stopped = Clock::now();
  u.server->stop();  // closes the connection, as a killed process would
  ASSERT_TRUE(wait_until([&] { return u.results.size() == 2; }, 5s));
  auto sync_future = sync_result.get_future();
  ASSERT_EQ(sync_future.wait_for(5s), std::future_status::ready);
  EXPECT_LT(Clock::now() - stopped, 5s);  // not the ordinary calls' 10 s deadline
  std::vector<Status> all;
  {
    std::lock_guard<std::mutex> l(u.results.mu);
    all = u.results.statuses;
  }
  all.push_back(sync_future.get());
  for (const Status& st : all) {
    EXPECT_EQ(st.code(), ErrorCode::kUnavailable) << st.to_string();
    EXPECT_NE(st.message().find("lost the connection to " + u.server->endpoint()), std::string::npos) << st.message();
  }
  sync_caller.join();
}

// The hole that once made the above unsafe: a caller failed early sends its next request at once,
// while libzmq may still hold the lost connection's pipe, which drops what is written to it. Each
// round: the server drops the connection (a frame over its size limit); the call fails well before
// its deadline; the next call, sent at once, is answered (it waited for the new connection).
TEST(RpcTest, TheRequestSentRightAfterALostConnectionIsDelivered) {
  RpcServerOptions options;
  options.max_message_bytes = 64 << 10;
  EchoServer es(options);
  ASSERT_TRUE(es.channel.call_sync(message({"first"}), 5s).ok());
  for (int round = 0; round < 20; ++round) {
    const auto sent = Clock::now();
    auto r = es.channel.call_sync(message({"h", std::string(100 << 10, 'x')}), 20s);
    ASSERT_FALSE(r.ok()) << "round " << round;
    EXPECT_EQ(r.status().code(), ErrorCode::kUnavailable) << r.status().to_string();
    EXPECT_NE(r.status().message().find("lost the connection"), std::string::npos) << r.status().to_string();
    EXPECT_LT(Clock::now() - sent, 10s) << "round " << round << ": the call waited for its deadline";
    const std::string next = "next " + std::to_string(round);
    auto again = es.channel.call_sync(message({next}), 10s);
    ASSERT_TRUE(again.ok()) << "round " << round << ": " << again.status().to_string();
    EXPECT_EQ(strings(again.value()), std::vector<std::string>{next});
  }
  EXPECT_EQ(es.server->stats().oversized, 0u);  // libzmq dropped them before the server saw them
}

// A short call in flight when its server stops fails at once, not at its deadline; the server
// restarted on the same port answers the channel's next call, sent at once and waiting for it.
TEST(RpcTest, AShortCallFailsWhenItsServerStopsAndTheNextCallReachesTheRestartedOne) {
  Unanswered u;
  std::promise<StatusOr<RpcMessage>> in_flight;
  std::thread caller([&] { in_flight.set_value(u.channel.call_sync(message({"pending"}), 20s)); });
  ASSERT_TRUE(wait_until([&] { return u.stash.size() == 1; }, 5s));
  const auto stopped = Clock::now();
  u.server->stop();
  auto failed = in_flight.get_future();
  ASSERT_EQ(failed.wait_for(10s), std::future_status::ready);
  caller.join();
  EXPECT_LT(Clock::now() - stopped, 10s);  // well before the 20 s deadline
  StatusOr<RpcMessage> r = failed.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kUnavailable) << r.status().to_string();
  EXPECT_NE(r.status().message().find("lost the connection to " + u.endpoint), std::string::npos)
      << r.status().to_string();
  u.server.reset();
  // Sent before the server is back: it waits in the channel for the new connection.
  std::promise<StatusOr<RpcMessage>> next;
  std::thread next_caller([&] { next.set_value(u.channel.call_sync(message({"next"}), 20s)); });
  auto again = restart_on(u.endpoint, echo);
  ASSERT_TRUE(again);
  auto answered = next.get_future();
  ASSERT_EQ(answered.wait_for(25s), std::future_status::ready);
  next_caller.join();
  StatusOr<RpcMessage> reply = answered.get();
  ASSERT_TRUE(reply.ok()) << reply.status().to_string();
  EXPECT_EQ(strings(reply.value()), std::vector<std::string>{"next"});
}

TEST(RpcTest, LongCallToNothingFailsAtItsConnectDeadline) {
  std::string endpoint;
  {
    auto server = start_or_die(echo);
    ASSERT_TRUE(server);
    endpoint = server->endpoint();
  }
  RpcChannel channel(endpoint);
  Results results;
  const auto start = Clock::now();
  channel.call_until_lost(message({"hello"}), 200ms, results.done(start));
  ASSERT_TRUE(wait_until([&] { return results.size() == 1; }, 3s));
  EXPECT_EQ(results.statuses[0].code(), ErrorCode::kUnavailable);
  EXPECT_NE(results.statuses[0].message().find("could not reach " + endpoint + " within 200 ms"), std::string::npos)
      << results.statuses[0].message();
  EXPECT_GE(results.elapsed[0], 200ms);
}

TEST(RpcTest, ChannelDestroyedFromItsOwnCallbackFinishesCleanly) {
  auto server = start_or_die(echo);
  ASSERT_TRUE(server);
  auto* channel = new RpcChannel(server->endpoint());
  std::atomic<bool> destroyed{false};
  channel->call(message({"last"}), 2s, [&](StatusOr<RpcMessage> r) {
    EXPECT_TRUE(r.ok());
    delete channel;  // the last owner lets go here (as a service whose last call completes)
    destroyed = true;
  });
  ASSERT_TRUE(wait_until([&] { return destroyed.load(); }, 3s));
}

// run_inline picks the requests that run on the I/O thread: while a slow inline handler runs, no
// other request is even received; a slow handler on a handler thread lets the next request's
// handler start meanwhile. (Observed on the server, in the order the handlers see: the order in
// which replies reach two different channels is not defined.)
TEST(RpcTest, RunInlineRunsChosenRequestsOnTheIoThread) {
  RpcServerOptions options;
  options.handler_threads = 2;
  options.run_inline = [](const RpcMessage& m) { return m.frames[0].to_string() == "inline"; };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> events;  // guarded by mu
  auto server = start_or_die(
      [&](RpcMessage request, Responder respond) {
        std::unique_lock<std::mutex> l(mu);
        if (request.frames.size() > 1) {  // the slow request: waits (bounded) for the fast one
          events.push_back("slow started");
          cv.notify_all();
          cv.wait_for(l, 1s, [&] { return std::find(events.begin(), events.end(), "fast") != events.end(); });
          events.push_back("slow done");
        } else {
          events.push_back("fast");
          cv.notify_all();
        }
        l.unlock();
        respond(std::move(request));
      },
      options);
  ASSERT_TRUE(server);
  RpcChannel slow_channel(server->endpoint()), fast_channel(server->endpoint());
  for (const char* kind : {"threaded", "inline"}) {
    {
      std::lock_guard<std::mutex> l(mu);
      events.clear();
    }
    Results results;
    slow_channel.call(message({kind, "slow"}), 5s, results.done(Clock::now()));
    {
      std::unique_lock<std::mutex> l(mu);
      ASSERT_TRUE(cv.wait_for(l, 3s, [&] { return !events.empty(); }));
    }
    fast_channel.call(message({"threaded"}), 5s, results.done(Clock::now()));
    ASSERT_TRUE(wait_until([&] { return results.size() == 2; }, 5s));
    std::lock_guard<std::mutex> l(mu);
    const std::vector<std::string> want =
        std::string(kind) == "inline" ? std::vector<std::string>{"slow started", "slow done", "fast"}
                                      : std::vector<std::string>{"slow started", "fast", "slow done"};
    EXPECT_EQ(events, want) << kind;
  }
}

TEST(RpcTest, GarbageIsCountedAndDoesNotStopTheServer) {
  auto server = start_or_die(echo);
  ASSERT_TRUE(server);
  zmq::context_t context;
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(server->endpoint());
  auto send_parts = [&](std::vector<std::string> parts) {
    for (size_t i = 0; i < parts.size(); ++i) {
      raw.send(zmq::buffer(parts[i]), i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  };
  int garbage = 0;
  send_parts({""}), ++garbage;                                       // empty
  send_parts({"TRP1"}), ++garbage;                                   // truncated call-id, nothing else
  send_parts({std::string("TRP1\1\0\0\0\0\0\0\0", 12)}), ++garbage;  // call-id, no header
  send_parts({"XXXX12345678", "header"}), ++garbage;                 // wrong magic
  send_parts({"TRP1", "header", "payload"}), ++garbage;              // short call-id
  send_parts({std::string("TRR1\1\0\0\0\0\0\0\0", 12), "header"}), ++garbage;  // a reply's envelope
  send_parts({std::string("TRG1\1\0\0\0\0\0\0\0", 12), "header"}), ++garbage;  // a goodbye's, with frames
  send_parts({"TRQ1\1\0\0"}), ++garbage;                                // a joined envelope, short
  send_parts({std::string("TRK1\1\0\0\0\0\0\0\0", 12) + "header"}), ++garbage;  // a joined reply's
  std::mt19937 rng(42);
  for (int i = 0; i < 100; ++i) {
    std::vector<std::string> parts = tessera::testing::random_parts(rng, 40);
    if ((parts[0].size() == 12 && parts[0].compare(0, 4, "TRP1") == 0) ||
        (parts[0].size() >= 12 && parts[0].compare(0, 4, "TRQ1") == 0)) {
      parts[0][0] = 'x';  // a request after all
    }
    send_parts(parts), ++garbage;
  }
  // Proper calls are still served, from a channel and from the same connection that sent garbage.
  RpcChannel channel(server->endpoint());
  auto r = channel.call_sync(message({"still here"}), 2s);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(strings(r.value()), std::vector<std::string>{"still here"});
  send_parts({std::string("TRP1\7\0\0\0\0\0\0\0", 12), "raw"});
  zmq::message_t id, header;
  raw.set(zmq::sockopt::rcvtimeo, 2000);
  ASSERT_TRUE(raw.recv(id));
  ASSERT_TRUE(raw.recv(header));
  // The reply's envelope, OK: the call id alone (Note [RPC envelope]).
  EXPECT_EQ(id.to_string(), std::string("TRR1\7\0\0\0\0\0\0\0", 12));
  EXPECT_EQ(header.to_string(), "raw");
  EXPECT_FALSE(header.more());
  EXPECT_EQ(server->stats().malformed, static_cast<uint64_t>(garbage));
  EXPECT_EQ(server->stats().requests, 2u);
}

TEST(RpcTest, OversizedRequestIsRefusedAndServerServesTheNextCall) {
  RpcServerOptions options;
  options.max_message_bytes = 1 << 20;
  EchoServer es(options);

  // One frame over the limit (too small to be streamed): libzmq drops the connection before
  // allocating it.
  auto r = es.channel.call_sync(message({"h", std::string(1536 << 10, 'x')}), 500ms);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kUnavailable) << r.status().to_string();
  // A streamed frame over the limit: refused from its head, before any chunk is stored.
  r = es.channel.call_sync(message({"h", std::string(kStreamMinBytes, 'x')}), 3s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kResourceExhausted) << r.status().to_string();
  EXPECT_NE(r.status().message().find("exceeds the limit of 1048576 bytes"), std::string::npos) << r.status().to_string();
  EXPECT_EQ(es.server->stats().oversized, 1u);
  EXPECT_TRUE(wait_until([&] { return es.server->stats().dropped_chunks == 2; }, 3s))
      << es.server->stats().dropped_chunks;
  // Frames each under the limit, together over it: refused with an error.
  r = es.channel.call_sync(message({"h", std::string(600 << 10, 'x'), std::string(600 << 10, 'y')}), 3s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kResourceExhausted) << r.status().to_string();
  EXPECT_EQ(es.server->stats().oversized, 2u);
  // The channel reconnected; the server is fine.
  r = es.channel.call_sync(message({"small"}), 3s);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(strings(r.value()), std::vector<std::string>{"small"});
}

// A request of very many (empty) frames: refused with an error naming the limit, the frames past
// it dropped as they arrive; the server serves the next call.
TEST(RpcTest, ARequestOfTooManyFramesIsRefusedNamingTheLimit) {
  RpcServerOptions options;
  options.max_frames = 100;
  EchoServer es(options);
  // 200,000 frames; fewer under ThreadSanitizer, where each of libzmq's frees (a suppressed race)
  // costs a suppression lookup and the full count takes minutes.
#if defined(TESSERA_TSAN)
  constexpr int kFrames = 500;
#else
  constexpr int kFrames = 200000;
#endif
  RpcMessage many;
  for (int i = 0; i < kFrames; ++i) many.frames.push_back(string_frame(""));
  auto r = es.channel.call_sync(std::move(many), 60s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kResourceExhausted) << r.status().to_string();
  EXPECT_NE(r.status().message().find("limit of 100 frames"), std::string::npos) << r.status().to_string();
  EXPECT_EQ(es.server->stats().oversized, 1u);
  EXPECT_EQ(es.server->stats().requests, 0u) << "the handler never saw it";
  RpcMessage fits;
  for (int i = 0; i < 100; ++i) fits.frames.push_back(string_frame("f"));
  r = es.channel.call_sync(std::move(fits), 60s);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().frames.size(), 100u);
}

TEST(RpcTest, HandlerErrorsReachTheCaller) {
  auto server = start_or_die([](RpcMessage req, Responder respond) {
    const std::string what = req.frames[0].to_string();
    if (what == "throw") throw NotFoundError("no such thing");
    if (what == "fail") respond.fail(errors::out_of_range("end of sequence"));
    // "drop": the Responder goes away unreplied.
  });
  ASSERT_TRUE(server);
  RpcChannel channel(server->endpoint());
  auto r = channel.call_sync(message({"throw"}), 2s);
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(r.status().message(), "no such thing");
  r = channel.call_sync(message({"fail"}), 2s);
  EXPECT_EQ(r.status().code(), ErrorCode::kOutOfRange);
  r = channel.call_sync(message({"drop"}), 2s);
  EXPECT_EQ(r.status().code(), ErrorCode::kInternal);
  EXPECT_NE(r.status().message().find("dropped its Responder"), std::string::npos);
  // An empty request is refused before it leaves.
  r = channel.call_sync(RpcMessage{}, 2s);
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
}

TEST(RpcTest, InlineHandlerAndEmptyReply) {
  RpcServerOptions options;
  options.handler_threads = 0;
  auto server = start_or_die([](RpcMessage, Responder respond) { respond(RpcMessage{}); }, options);
  ASSERT_TRUE(server);
  RpcChannel channel(server->endpoint());
  for (int i = 0; i < 20; ++i) {
    auto r = channel.call_sync(message({"x"}), 2s);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r.value().frames.empty());
  }
}

// Note [Inline replies]: a reply given on the I/O thread leaves at once, before the handler
// returns. The handler replies, then waits (bounded) until the caller has its reply; it only
// sees that if the reply left while it still ran. Handler threads and run_inline alike.
TEST(RpcTest, AReplyGivenInlineLeavesBeforeTheHandlerReturns) {
  for (const bool threads : {false, true}) {
    RpcServerOptions options;
    options.handler_threads = threads ? 2 : 0;
    if (threads) options.run_inline = [](const RpcMessage& m) { return m.frames[0].to_string() == "inline"; };
    std::mutex mu;
    std::condition_variable cv;
    bool caller_has_it = false;           // guarded by mu
    std::vector<std::string> handler_saw;  // guarded by mu
    auto server = start_or_die(
        [&](RpcMessage request, Responder respond) {
          const std::string kind = request.frames[0].to_string();
          respond(std::move(request));
          std::unique_lock<std::mutex> l(mu);
          const bool seen = cv.wait_for(l, 3s, [&] { return caller_has_it; });
          handler_saw.push_back(kind + (seen ? ": reply received before I returned" : ": not received"));
          caller_has_it = false;
          cv.notify_all();
        },
        options);
    ASSERT_TRUE(server);
    RpcChannel channel(server->endpoint());
    for (const char* kind : {"inline", "second inline"}) {
      const auto start = Clock::now();
      auto r = channel.call_sync(message({threads && std::string(kind) != "inline" ? "threaded" : kind}), 10s);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_LT(Clock::now() - start, 2s) << kind << ": the reply waited for the handler to return";
      std::unique_lock<std::mutex> l(mu);
      caller_has_it = true;
      cv.notify_all();
      ASSERT_TRUE(cv.wait_for(l, 10s, [&] { return !caller_has_it; }));  // the handler returned
    }
    std::lock_guard<std::mutex> l(mu);
    const std::string second = threads ? "threaded" : "second inline";
    EXPECT_EQ(handler_saw, (std::vector<std::string>{"inline: reply received before I returned",
                                                     second + ": reply received before I returned"}))
        << (threads ? "with handler threads and run_inline" : "handler_threads = 0");
  }
}

TEST(RpcTest, BadAddresses) {
  auto server = start_or_die(echo);
  ASSERT_TRUE(server);
  auto clash = RpcServer::start(server->endpoint(), echo);
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.status().code(), ErrorCode::kUnavailable) << clash.status().to_string();
  EXPECT_NE(clash.status().message().find(server->endpoint()), std::string::npos);
  auto nonsense = RpcServer::start("nonsense", echo);
  EXPECT_EQ(nonsense.status().code(), ErrorCode::kInvalidArgument) << nonsense.status().to_string();

  RpcChannel channel("not an endpoint");
  auto r = channel.call_sync(message({"x"}), 2s);
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << r.status().to_string();
}

TEST(RpcTest, StopWithFiftyCallsInFlightIsPrompt) {
  Unanswered u;
  constexpr int kCalls = 50;
  const auto start = Clock::now();
  for (int i = 0; i < kCalls; ++i) u.channel.call(message({"never answered"}), 800ms, u.results.done(start));
  ASSERT_TRUE(wait_until([&] { return u.stash.size() == kCalls; }, 2s));
  const auto stop_start = Clock::now();
  u.server->stop();
  EXPECT_LT(Clock::now() - stop_start, 1s);
  for (auto& r : u.stash.responders) EXPECT_FALSE(r(message({"late"})));
  ASSERT_TRUE(wait_until([&] { return u.results.size() == kCalls; }, 3s));
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_EQ(u.results.statuses[i].code(), ErrorCode::kUnavailable) << u.results.statuses[i].to_string();
    EXPECT_LT(u.results.elapsed[i], 800ms + 1s);
  }
}

// A server that stops right after its last reply (a ps whose "done" queue just filled): the
// callers still get the replies given before stop(flush). libzmq drops a message still unread
// when a ZMQ_IMMEDIATE connection closes, so stop says goodbye first (Note [Goodbye]).
TEST(RpcTest, RepliesGivenBeforeAFlushingStopReachTheirCallers) {
  constexpr int kRounds = 100;
  int lost = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::promise<void> replied;
    auto server = start_or_die([&](RpcMessage request, Responder respond) {
      respond(std::move(request));
      replied.set_value();
    });
    ASSERT_TRUE(server);
    RpcChannel channel(server->endpoint());
    std::promise<StatusOr<RpcMessage>> result;
    channel.call(message({"done", std::to_string(round)}), 5s,
                 [&](StatusOr<RpcMessage> r) { result.set_value(std::move(r)); });
    ASSERT_EQ(replied.get_future().wait_for(5s), std::future_status::ready);
    server->stop(1000ms);
    auto answer = result.get_future();
    ASSERT_EQ(answer.wait_for(10s), std::future_status::ready);
    StatusOr<RpcMessage> r = answer.get();
    if (!r.ok()) {
      ++lost;
      ADD_FAILURE() << "round " << round << ": " << r.status().to_string();
      continue;
    }
    EXPECT_EQ(strings(r.value()), (std::vector<std::string>{"done", std::to_string(round)}));
  }
  EXPECT_EQ(lost, 0);
}

// Callers that leave as the server says goodbye (their connections close while it writes to
// them) count as answered: stop() ends as soon as the callers that stay have answered, well
// before its bound. (A goodbye written to a connection already gone throws EHOSTUNREACH, which
// say_goodbye catches; this test reaches that race only now and then.)
TEST(RpcTest, AFlushingStopDoesNotWaitForCallersThatLeft) {
  for (int round = 0; round < 20; ++round) {
    auto server = start_or_die(echo);
    ASSERT_TRUE(server);
    std::vector<std::unique_ptr<RpcChannel>> channels;
    for (int i = 0; i < 4; ++i) {
      channels.push_back(std::make_unique<RpcChannel>(server->endpoint()));
      ASSERT_TRUE(channels.back()->call_sync(message({"hello"}), 5s).ok());
    }
    std::thread leaver([&] {
      for (std::size_t i = 0; i < channels.size(); i += 2) channels[i].reset();
    });
    const auto start = Clock::now();
    server->stop(5s);
    EXPECT_LT(Clock::now() - start, 2500ms) << "round " << round;
    leaver.join();
    for (auto& channel : channels) {
      if (!channel) continue;
      auto r = channel->call_sync(message({"after"}), 100ms);
      EXPECT_EQ(r.status().code(), ErrorCode::kUnavailable) << r.status().to_string();
    }
  }
}

TEST(RpcTest, StopDoesNotWaitForStuckHandlers) {
  // Handlers blocked inside the handler itself: stop() waits stop_grace, then leaves them.
  auto release = std::make_shared<std::promise<void>>();
  std::shared_future<void> released = release->get_future().share();
  auto entered = std::make_shared<std::atomic<int>>(0);
  auto late_replies_taken = std::make_shared<std::atomic<int>>(0);
  RpcServerOptions options;
  options.handler_threads = 2;
  options.stop_grace = 100ms;
  // The handlers outlive the test body (stop() leaves them behind): they share state, not refs.
  auto server = start_or_die(
      [released, entered, late_replies_taken](RpcMessage, Responder respond) {
        ++*entered;
        released.wait_for(10s);
        if (respond(RpcMessage{})) ++*late_replies_taken;
      },
      options);
  ASSERT_TRUE(server);
  RpcChannel channel(server->endpoint());
  Results results;
  for (int i = 0; i < 5; ++i) channel.call(message({"stuck"}), 500ms, results.done(Clock::now()));
  ASSERT_TRUE(wait_until([&] { return entered->load() == 2; }, 2s));
  const auto stop_start = Clock::now();
  server->stop();
  EXPECT_LT(Clock::now() - stop_start, 1s);
  EXPECT_EQ(server->stats().abandoned_handlers, 2u);
  release->set_value();
  ASSERT_TRUE(wait_until([&] { return results.size() == 5; }, 3s));
  for (auto& s : results.statuses) EXPECT_EQ(s.code(), ErrorCode::kUnavailable);
  EXPECT_EQ(late_replies_taken->load(), 0);
}

TEST(RpcTest, DestroyingChannelCancelsPendingCalls) {
  Stash stash;
  auto server = start_or_die(stash.handler());
  ASSERT_TRUE(server);
  Results results;
  const auto start = Clock::now();
  {
    RpcChannel channel(server->endpoint());
    for (int i = 0; i < 10; ++i) channel.call(message({"pending"}), 10s, results.done(start));
    ASSERT_TRUE(wait_until([&] { return stash.size() == 10; }, 2s));
  }
  ASSERT_EQ(results.size(), 10u);  // completed by the destructor
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(results.statuses[i].code(), ErrorCode::kCancelled) << results.statuses[i].to_string();
    EXPECT_LT(results.elapsed[i], 2s);
  }
  // The server drops the replies to a channel that went away.
  for (auto& r : stash.responders) EXPECT_TRUE(r(message({"nobody listens"})));
}

// Synchronous callers receive on their own threads (Note [RPC], "Channel") and find the replies to
// asynchronous calls there too: those must still complete on the channel's I/O thread, exactly
// once, each with its own reply.
TEST(RpcTest, SyncAndAsyncCallsInterleavedCompleteRightAndAsyncOnesOnTheIoThread) {
  RpcServerOptions options;
  options.handler_threads = 2;
  EchoServer es(options);
  constexpr int kThreads = 4, kCalls = 200;
  std::mutex mu;
  std::vector<std::thread::id> callers;
  std::vector<std::thread::id> async_threads;
  std::atomic<int> async_right{0}, async_done{0}, sync_right{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      {
        std::lock_guard<std::mutex> l(mu);
        callers.push_back(std::this_thread::get_id());
      }
      for (int i = 0; i < kCalls; ++i) {
        const std::string tag = std::to_string(t) + "/" + std::to_string(i);
        es.channel.call(message({"async " + tag}), 10s, [&, tag](StatusOr<RpcMessage> r) {
          if (r.ok() && strings(r.value()) == std::vector<std::string>{"async " + tag}) async_right.fetch_add(1);
          {
            std::lock_guard<std::mutex> l(mu);
            async_threads.push_back(std::this_thread::get_id());
          }
          async_done.fetch_add(1);
        });
        StatusOr<RpcMessage> r = es.channel.call_sync(message({"sync " + tag}), 10s);
        if (r.ok() && strings(r.value()) == std::vector<std::string>{"sync " + tag}) sync_right.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(wait_until([&] { return async_done.load() == kThreads * kCalls; }, 10s));
  EXPECT_EQ(sync_right.load(), kThreads * kCalls);
  EXPECT_EQ(async_right.load(), kThreads * kCalls);
  std::lock_guard<std::mutex> l(mu);
  const std::thread::id io = async_threads.front();
  for (auto id : async_threads) EXPECT_EQ(id, io);  // one thread, the I/O thread
  for (auto id : callers) EXPECT_NE(id, io);
  EXPECT_EQ(es.channel.stats().late_replies, 0u);
  EXPECT_EQ(es.channel.stats().malformed, 0u);
}

// While synchronous callers wait on the socket the I/O thread leaves it to them (Note [RPC
// channel]): a reply to an asynchronous call that comes after the last of them left still reaches
// its `done`, well before the call's deadline, in every round.
TEST(RpcTest, AnAsyncReplyComingAfterTheSyncCallersLeftStillCompletes) {
  Stash held;
  auto hold_or_echo = [&held](RpcMessage request, Responder respond) {
    if (strings(request) == std::vector<std::string>{"hold"}) {
      return held.handler()(std::move(request), std::move(respond));
    }
    respond(std::move(request));
  };
  auto server = start_or_die(hold_or_echo);
  ASSERT_TRUE(server);
  RpcChannel channel(server->endpoint());
  for (int round = 0; round < 20; ++round) {
    std::promise<std::vector<std::string>> reply;
    channel.call(message({"hold"}), 10s, [&reply](StatusOr<RpcMessage> r) {
      reply.set_value(r.ok() ? strings(r.value()) : std::vector<std::string>{r.status().to_string()});
    });
    ASSERT_TRUE(wait_until([&] { return held.size() == 1; }, 5s)) << "round " << round;
    for (int i = 0; i < 3; ++i) {
      StatusOr<RpcMessage> r = channel.call_sync(message({"ping", std::to_string(i)}), 5s);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_EQ(strings(r.value()), (std::vector<std::string>{"ping", std::to_string(i)}));
    }
    // No synchronous caller is left: the reply now has to be read by the I/O thread.
    if (round % 2 == 1) std::this_thread::sleep_for(5ms);  // it took the socket back already
    Responder respond;
    {
      std::lock_guard<std::mutex> l(held.mu);
      respond = std::move(held.responders.front());
      held.responders.clear();
    }
    ASSERT_TRUE(respond(message({"held", std::to_string(round)})));
    auto future = reply.get_future();
    ASSERT_EQ(future.wait_for(5s), std::future_status::ready) << "round " << round;
    EXPECT_EQ(future.get(), (std::vector<std::string>{"held", std::to_string(round)}));
  }
  EXPECT_EQ(channel.stats().late_replies, 0u);
}

// A synchronous caller that wakes to more replies than one look reads (kRecvBatch, 256) takes its
// own and leaves the rest to the I/O thread: every asynchronous call behind it completes, right.
TEST(RpcTest, ASyncCallerWokenByABurstLeavesNoReplyUnread) {
  Held held;
  auto server = start_or_die(held.handler());
  ASSERT_TRUE(server);
  RpcChannel channel(server->endpoint());
  constexpr int kAsync = 300;
  std::promise<StatusOr<RpcMessage>> sync_reply;
  std::thread sync_caller([&] { sync_reply.set_value(channel.call_sync(message({"sync"}), 20s)); });
  struct Join {
    std::thread& t;
    ~Join() {
      if (t.joinable()) t.join();  // on a failed assertion: the call ends by its deadline
    }
  } join{sync_caller};
  ASSERT_TRUE(wait_until([&] { return held.size() == 1; }, 5s));
  std::atomic<int> right{0}, done{0};
  for (int i = 0; i < kAsync; ++i) {
    channel.call(message({"async", std::to_string(i)}), 20s, [&, i](StatusOr<RpcMessage> r) {
      if (r.ok() && strings(r.value()) == std::vector<std::string>{"async", std::to_string(i), "done"}) ++right;
      ++done;
    });
  }
  ASSERT_TRUE(wait_until([&] { return held.size() == kAsync + 1; }, 10s));
  std::vector<std::pair<RpcMessage, Responder>> replies = held.take();
  ASSERT_EQ(strings(replies[0].first), std::vector<std::string>{"sync"});  // held before the others were made
  // The synchronous call's reply first, then the burst, back to back on one connection.
  for (auto& [request, respond] : replies) {
    std::vector<std::string> frames = strings(request);
    frames.push_back("done");
    RpcMessage reply;
    for (const std::string& f : frames) reply.frames.push_back(string_frame(f));
    ASSERT_TRUE(respond(std::move(reply)));
  }
  auto future = sync_reply.get_future();
  ASSERT_EQ(future.wait_for(10s), std::future_status::ready);
  StatusOr<RpcMessage> r = future.get();
  sync_caller.join();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(strings(r.value()), (std::vector<std::string>{"sync", "done"}));
  ASSERT_TRUE(wait_until([&] { return done.load() == kAsync; }, 10s)) << done.load() << " of " << kAsync;
  EXPECT_EQ(right.load(), kAsync);
  EXPECT_EQ(channel.stats().late_replies, 0u);
}

// A synchronous call waiting when its channel is destroyed (from another thread) returns
// Cancelled, and the destructor waits for it to leave.
TEST(RpcTest, DestroyingChannelCancelsAWaitingSyncCall) {
  Stash stash;
  auto server = start_or_die(stash.handler());
  ASSERT_TRUE(server);
  auto channel = std::make_unique<RpcChannel>(server->endpoint());
  std::promise<Status> result;
  RpcChannel* const raw = channel.get();
  std::thread caller([&] { result.set_value(raw->call_until_lost_sync(message({"pending"}), 10s).status()); });
  ASSERT_TRUE(wait_until([&] { return stash.size() == 1; }, 3s));
  const auto start = Clock::now();
  channel.reset();
  auto future = result.get_future();
  ASSERT_EQ(future.wait_for(3s), std::future_status::ready);
  EXPECT_EQ(future.get().code(), ErrorCode::kCancelled);
  EXPECT_LT(Clock::now() - start, 2s);
  caller.join();
}

// ---- RpcCompletionQueue: asynchronous calls whose results the calling thread collects ----

// The tags of `completions`, sorted, and whether each result is the echo of its tag's request.
std::vector<uint64_t> tags_of(const std::vector<RpcCompletion>& completions, int* right) {
  std::vector<uint64_t> tags;
  for (const RpcCompletion& c : completions) {
    tags.push_back(c.tag);
    if (c.result.ok() && strings(c.result.value()) == std::vector<std::string>{"q", std::to_string(c.tag)}) ++*right;
  }
  std::sort(tags.begin(), tags.end());
  return tags;
}

// A window of calls kept full as completions come: each returned once, with its own reply and tag;
// pending() counts what next() has not returned.
TEST(RpcCompletionQueueTest, AWindowOfCallsCompletesEachOnceWithItsTagAndReply) {
  RpcServerOptions options;
  options.handler_threads = 2;  // replies in any order
  EchoServer es(options);
  RpcCompletionQueue queue(es.channel);
  EXPECT_EQ(queue.pending(), 0);
  constexpr uint64_t kCalls = 2000;
  constexpr int kWindow = 8;
  uint64_t next_tag = 0;
  std::vector<RpcCompletion> completions;
  while (completions.size() < kCalls) {
    while (next_tag < kCalls && queue.pending() < kWindow) {
      queue.call(message({"q", std::to_string(next_tag)}), 10s, next_tag);
      ++next_tag;
    }
    StatusOr<RpcCompletion> c = queue.next(10s);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    completions.push_back(std::move(c).value());
  }
  EXPECT_EQ(queue.pending(), 0);
  int right = 0;
  std::vector<uint64_t> tags = tags_of(completions, &right);
  EXPECT_EQ(right, static_cast<int>(kCalls));
  for (uint64_t i = 0; i < kCalls; ++i) ASSERT_EQ(tags[i], i);
  // Nothing left to wait for: at once, not after the timeout.
  const auto start = Clock::now();
  EXPECT_EQ(queue.next(10s).status().code(), ErrorCode::kOutOfRange);
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_EQ(es.channel.stats().late_replies, 0u);
}

// Replies that come while no thread waits in next() are read by the I/O thread and kept: the next
// wait returns them at once. A wait with nothing completing ends DeadlineExceeded at its timeout.
TEST(RpcCompletionQueueTest, RepliesArrivingWhileNoThreadWaitsAreKeptAndAWaitTimesOut) {
  Held held;  // each request answered later with its own frames
  auto server = start_or_die(held.handler());
  ASSERT_TRUE(server);
  RpcChannel channel(server->endpoint());
  RpcCompletionQueue queue(channel);
  for (uint64_t i = 0; i < 3; ++i) queue.call(message({"q", std::to_string(i)}), 10s, i);
  ASSERT_TRUE(wait_until([&] { return held.size() == 3; }, 5s));
  const auto start = Clock::now();
  StatusOr<RpcCompletion> none = queue.next(100ms);
  EXPECT_EQ(none.status().code(), ErrorCode::kDeadlineExceeded) << none.status().to_string();
  EXPECT_GE(Clock::now() - start, 100ms);
  EXPECT_LT(Clock::now() - start, 3s);
  EXPECT_EQ(queue.pending(), 3);
  for (auto& [request, respond] : held.take()) ASSERT_TRUE(respond(std::move(request)));
  // Nobody waits: the I/O thread takes the socket back within kUnwatchedLook and reads them.
  std::this_thread::sleep_for(100ms);
  std::vector<RpcCompletion> completions;
  for (int i = 0; i < 3; ++i) {
    StatusOr<RpcCompletion> c = queue.next(0ms);  // already there: no wait needed
    ASSERT_TRUE(c.ok()) << "completion " << i << ": " << c.status().to_string();
    completions.push_back(std::move(c).value());
  }
  int right = 0;
  EXPECT_EQ(tags_of(completions, &right), (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(right, 3);
  EXPECT_EQ(queue.pending(), 0);
}

// Deadlines, a lost connection and a refused call complete a queue's calls as they do call()'s,
// and reach a thread waiting in next().
TEST(RpcCompletionQueueTest, DeadlinesLostConnectionsAndRefusalsCompleteTheCalls) {
  Unanswered u;
  RpcCompletionQueue queue(u.channel);
  auto start = Clock::now();
  queue.call(message({"q", "late"}), 200ms, 7);
  StatusOr<RpcCompletion> c = queue.next(10s);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c.value().tag, 7u);
  EXPECT_EQ(c.value().result.status().code(), ErrorCode::kUnavailable) << c.value().result.status().to_string();
  EXPECT_NE(c.value().result.status().message().find("within 200 ms"), std::string::npos) << c.value().result.status().to_string();
  EXPECT_GE(Clock::now() - start, 200ms);
  EXPECT_LT(Clock::now() - start, 5s);

  queue.call(message({"q", "held"}), 60s, 8);
  ASSERT_TRUE(wait_until([&] { return u.stash.size() == 2; }, 5s));
  start = Clock::now();
  std::thread stopper([&] {
    std::this_thread::sleep_for(50ms);  // the main thread is waiting in next() by then, mostly
    u.server->stop();
  });
  c = queue.next(10s);
  stopper.join();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c.value().tag, 8u);
  EXPECT_EQ(c.value().result.status().code(), ErrorCode::kUnavailable) << c.value().result.status().to_string();
  EXPECT_LT(Clock::now() - start, 5s);  // the loss, not the 60 s deadline

  queue.call(RpcMessage{}, 10s, 9);  // no header frame: refused at once
  c = queue.next(0ms);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c.value().tag, 9u);
  EXPECT_EQ(c.value().result.status().code(), ErrorCode::kInvalidArgument);
}

// One thread waits at a time; destroying a queue forgets its calls (their replies are dropped as
// late) and the channel goes on; destroying the channel while a thread waits gives it Cancelled.
TEST(RpcCompletionQueueTest, OneWaiterAtATimeAndAQueueOrChannelGoingAwayEndsItsCalls) {
  Unanswered u;
  {
    RpcCompletionQueue queue(u.channel);
    queue.call(message({"q", "0"}), 10s, 0);
    std::promise<Status> first;
    std::thread waiter([&] { first.set_value(queue.next(5s).status()); });
    ASSERT_TRUE(wait_until([&] { return u.stash.size() == 1; }, 5s));
    std::this_thread::sleep_for(50ms);  // the thread waits by now
    EXPECT_EQ(queue.next(10ms).status().code(), ErrorCode::kFailedPrecondition);
    {
      std::lock_guard<std::mutex> l(u.stash.mu);
      ASSERT_TRUE(u.stash.responders[0](message({"q", "0"})));
    }
    auto f = first.get_future();
    ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
    EXPECT_TRUE(f.get().ok());
    waiter.join();
    queue.call(message({"q", "1"}), 10s, 1);
    ASSERT_TRUE(wait_until([&] { return u.stash.size() == 2; }, 5s));
  }  // forgets call 1
  {
    std::lock_guard<std::mutex> l(u.stash.mu);
    ASSERT_TRUE(u.stash.responders[1](message({"q", "1"})));
  }
  ASSERT_TRUE(wait_until([&] { return u.channel.stats().late_replies == 1; }, 5s));
  u.server->stop();
  auto server = start_or_die(echo);
  ASSERT_TRUE(server);
  auto channel = std::make_unique<RpcChannel>(server->endpoint());
  StatusOr<RpcMessage> r = channel->call_sync(message({"still", "works"}), 5s);
  ASSERT_TRUE(r.ok()) << r.status().to_string();

  // A thread waiting in next() while the channel is destroyed.
  Unanswered v;
  auto doomed = std::make_unique<RpcChannel>(v.endpoint);
  auto queue = std::make_unique<RpcCompletionQueue>(*doomed);
  queue->call(message({"q", "2"}), 10s, 2);
  ASSERT_TRUE(wait_until([&] { return v.stash.size() == 1; }, 5s));
  std::promise<StatusOr<RpcCompletion>> got;
  std::thread waiter([&] { got.set_value(queue->next(10s)); });
  std::this_thread::sleep_for(50ms);
  const auto start = Clock::now();
  auto f = got.get_future();
  doomed.reset();  // waits for the waiting thread to leave
  ASSERT_EQ(f.wait_for(3s), std::future_status::ready);
  waiter.join();
  StatusOr<RpcCompletion> c = f.get();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c.value().tag, 2u);
  EXPECT_EQ(c.value().result.status().code(), ErrorCode::kCancelled);
  EXPECT_LT(Clock::now() - start, 2s);
  // The queue outlives its channel: nothing pending, and a new call is refused at once.
  EXPECT_EQ(queue->next(1s).status().code(), ErrorCode::kOutOfRange);
  queue->call(message({"q", "3"}), 10s, 3);
  c = queue->next(0ms);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c.value().tag, 3u);
  EXPECT_EQ(c.value().result.status().code(), ErrorCode::kCancelled) << c.value().result.status().to_string();
}

// A queue's waiting thread, synchronous callers and asynchronous calls share the socket: every
// call completes once, right, where it should (the queue's on next(), `done` on the I/O thread).
TEST(RpcCompletionQueueTest, QueuesSyncAndAsyncCallsFromManyThreadsCompleteRight) {
  RpcServerOptions options;
  options.handler_threads = 2;
  EchoServer es(options);
  constexpr int kThreads = 2, kCalls = 300;
  std::atomic<int> queue_right{0}, sync_right{0}, async_right{0}, async_done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {  // a queue, a window of 4
      RpcCompletionQueue queue(es.channel);
      std::vector<RpcCompletion> completions;
      uint64_t next_tag = 0;
      while (completions.size() < kCalls) {
        while (next_tag < kCalls && queue.pending() < 4) {
          queue.call(message({"q", std::to_string(next_tag)}), 10s, next_tag);
          ++next_tag;
        }
        StatusOr<RpcCompletion> c = queue.next(10s);
        if (!c.ok()) return;
        completions.push_back(std::move(c).value());
      }
      int right = 0;
      std::vector<uint64_t> tags = tags_of(completions, &right);
      for (uint64_t i = 0; i < kCalls; ++i) {
        if (tags[i] != i) return;
      }
      queue_right.fetch_add(right);
    });
    threads.emplace_back([&, t] {  // synchronous calls
      for (int i = 0; i < kCalls; ++i) {
        const std::string tag = std::to_string(t) + "/" + std::to_string(i);
        StatusOr<RpcMessage> r = es.channel.call_sync(message({"sync", tag}), 10s);
        if (r.ok() && strings(r.value()) == std::vector<std::string>{"sync", tag}) ++sync_right;
      }
    });
    threads.emplace_back([&, t] {  // asynchronous ones
      for (int i = 0; i < kCalls; ++i) {
        const std::string tag = std::to_string(t) + "/" + std::to_string(i);
        es.channel.call(message({"async", tag}), 10s, [&, tag](StatusOr<RpcMessage> r) {
          if (r.ok() && strings(r.value()) == std::vector<std::string>{"async", tag}) ++async_right;
          ++async_done;
        });
        if (i % 16 == 15) std::this_thread::sleep_for(1ms);
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(wait_until([&] { return async_done.load() == kThreads * kCalls; }, 10s));
  EXPECT_EQ(queue_right.load(), kThreads * kCalls);
  EXPECT_EQ(sync_right.load(), kThreads * kCalls);
  EXPECT_EQ(async_right.load(), kThreads * kCalls);
  EXPECT_EQ(es.channel.stats().late_replies, 0u);
  EXPECT_EQ(es.channel.stats().malformed, 0u);
}

}  // namespace
}  // namespace tessera::internal

namespace tessera::internal {
namespace {

// ---- Streamed frames (Note [Streamed frames] in transport/rpc_stream.cc) ----

// `bytes` bytes whose every 8-byte word depends on its index and `seed`.
std::string pattern(std::size_t bytes, uint64_t seed) {
  std::string s(bytes, '\0');
  for (std::size_t i = 0; i < bytes; ++i) s[i] = static_cast<char>(((i / 8) * 0x9e3779b97f4a7c15ull + seed) >> (8 * (i % 8)));
  return s;
}

TEST(RpcStreamTest, LargeFramesStreamAmongSmallCallsFromManyThreadsAndArriveIntact) {
  RpcServerOptions server_options;
  RpcChannelOptions channel_options;
#if defined(TESSERA_TSAN)
  // Under TSan one send() of a chunk by libzmq's I/O thread can take seconds (see below): long
  // enough for the ZMTP heartbeats to declare the peer dead and drop the connection, and, with
  // other tests running, for the server to see no chunk of a stream for its 30 s
  // stalled_stream_timeout (seen: a client handed libzmq every chunk of four calls within 64 ms,
  // and the server received the second chunk of one 32 s after its first).
  server_options.heartbeat_timeout = channel_options.heartbeat_timeout = std::chrono::milliseconds(120000);
  server_options.stalled_stream_timeout = std::chrono::milliseconds(240000);
#endif
  auto server = start_or_die(echo, server_options);
  ASSERT_TRUE(server);
  RpcChannel channel(server->endpoint(), channel_options);
#if defined(TESSERA_TSAN)
  // libzmq's I/O thread send()s our frames' bytes, which TSan's send interceptor checks against
  // our writes it cannot see ordered (libzmq is not instrumented): each partial send of a chunk
  // costs it a suppressed race report and a search of the range. One call per thread, long
  // deadlines and long heartbeat timeouts keep the run bounded.
  constexpr int kThreads = 4, kCalls = 1;
  constexpr auto kDeadline = 240s;
#else
  constexpr int kThreads = 4, kCalls = 3;
  constexpr auto kDeadline = 20s;
#endif
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kCalls; ++k) {
        // Two streamed frames (one of them not a multiple of the chunk size) around small ones.
        const std::string big1 = pattern(kStreamMinBytes + 12345 * t + k, 7 * t + k);
        const std::string big2 = pattern(3 * kStreamChunkBytes + 7, 100 + t);
        const std::string header = "call " + std::to_string(t) + "/" + std::to_string(k);
        auto r = channel.call_sync(message({header, "x", big1, "", big2}), kDeadline);
        if (!r.ok() || strings(r.value()) != std::vector<std::string>{header, "x", big1, "", big2}) ++bad;
        // A small asynchronous call in between, on the I/O thread's path.
        std::promise<StatusOr<RpcMessage>> small;
        channel.call(message({"small"}), kDeadline, [&](StatusOr<RpcMessage> m) { small.set_value(std::move(m)); });
        auto m = small.get_future().get();
        if (!m.ok() || strings(m.value()) != std::vector<std::string>{"small"}) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(server->stats().stalled_streams, 0u);
  EXPECT_EQ(server->stats().dropped_chunks, 0u);
  EXPECT_EQ(channel.stats().timed_out, 0u);
  EXPECT_EQ(server->stats().streamed_requests, uint64_t{kThreads * kCalls});
  EXPECT_EQ(server->stats().streamed_replies, uint64_t{kThreads * kCalls});
  EXPECT_EQ(channel.stats().streamed_requests, uint64_t{kThreads * kCalls});
  EXPECT_EQ(channel.stats().streamed_replies, uint64_t{kThreads * kCalls});
  EXPECT_EQ(server->stats().requests, uint64_t{2 * kThreads * kCalls});
  EXPECT_EQ(server->stats().malformed, 0u);
  EXPECT_EQ(channel.stats().dropped_chunks, 0u);
}

TEST(RpcStreamTest, OnlyFramesOfTheThresholdAndMoreAreStreamed) {
  auto server = start_or_die(echo);
  ASSERT_TRUE(server);
  RpcChannel channel(server->endpoint());
  const std::string below = pattern(kStreamMinBytes - 1, 1), at = pattern(kStreamMinBytes, 2);
  auto r = channel.call_sync(message({"h", below}), 10s);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(strings(r.value())[1], below);
  EXPECT_EQ(server->stats().streamed_requests, 0u);
  r = channel.call_sync(message({"h", at}), 10s);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(strings(r.value())[1], at);
  EXPECT_EQ(server->stats().streamed_requests, 1u);
  EXPECT_EQ(server->stats().streamed_replies, 1u);
}

// Little-endian descriptor entries (u32 index, u64 size).
std::string descriptor(std::initializer_list<std::pair<uint32_t, uint64_t>> entries) {
  std::string d;
  for (auto [index, size] : entries) {
    for (int i = 0; i < 4; ++i) d.push_back(static_cast<char>(index >> (8 * i)));
    for (int i = 0; i < 8; ++i) d.push_back(static_cast<char>(size >> (8 * i)));
  }
  return d;
}

std::string envelope(const char* magic, uint64_t id) {
  std::string e(magic, 4);
  for (int i = 0; i < 8; ++i) e.push_back(static_cast<char>(id >> (8 * i)));
  return e;
}

void send_parts(zmq::socket_t& socket, const std::vector<std::string>& parts) {
  for (size_t i = 0; i < parts.size(); ++i) {
    socket.send(zmq::buffer(parts[i]), i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

std::vector<std::string> recv_parts(zmq::socket_t& socket) {
  std::vector<std::string> parts;
  zmq::message_t m;
  do {
    if (!socket.recv(m)) return parts;  // rcvtimeo: whatever came
    parts.push_back(m.to_string());
  } while (m.more());
  return parts;
}

// A DEALER connected to `endpoint` speaking the envelope by hand (receives time out after 3 s).
zmq::socket_t raw_caller(zmq::context_t& context, const std::string& endpoint) {
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.set(zmq::sockopt::rcvtimeo, 3000);
  raw.connect(endpoint);
  return raw;
}

// A ROUTER on a free loopback port standing in for a server: its thread takes each request
// [routing id][envelope and header] (or [routing id][envelope][header]) and calls answer(*this, routing id, call id, header), which
// replies with send_to, until the object goes (on every way out of a test, a failed assertion's
// too).
class StandInServer {
 public:
  using Answer =
      std::function<void(StandInServer& server, const zmq::message_t& routing, uint64_t id, const std::string& header)>;
  explicit StandInServer(Answer answer) : router_(context_, zmq::socket_type::router) {
    router_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::rcvtimeo, 100);  // to look at done_
    router_.bind("tcp://127.0.0.1:*");
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this, answer = std::move(answer)] {
      while (!done_) {
        zmq::message_t routing, env, header;
        if (!router_.recv(routing) || !router_.recv(env)) continue;
        const auto call = parse_envelope(env);  // [kind, call id]
        if (!call) continue;
        if (call->first == internal::Envelope::kJoined) {  // the header inside (Note [Joined envelopes])
          header = internal::joined_first(env);
        } else if (!router_.recv(header)) {
          continue;
        }
        answer(*this, routing, call->second, header.to_string());
      }
    });
  }
  ~StandInServer() {
    done_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }
  // Sends `parts` to the caller of routing id `routing` (its thread only).
  void send_to(const zmq::message_t& routing, const std::vector<std::string>& parts) {
    router_.send(zmq::buffer(routing.to_string()), zmq::send_flags::sndmore);
    send_parts(router_, parts);
  }

 private:
  zmq::context_t context_;
  zmq::socket_t router_;
  std::string endpoint_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// The ErrorCode of a reply's status frame (0 for OK).
uint32_t status_code(const std::string& status) {
  uint32_t code = 0;
  for (int i = 0; i < 4 && i < static_cast<int>(status.size()); ++i) code |= uint32_t{static_cast<unsigned char>(status[i])} << (8 * i);
  return code;
}

// Note [RPC envelope]: a whole reply's envelope carries its status; anything else is no reply's.
TEST(RpcTest, ReplyEnvelopesCarryTheStatusAndRefuseWhatIsNotOne) {
  for (uint64_t id : {uint64_t{0}, uint64_t{7}, ~uint64_t{0}}) {
    for (const Status& status : {Status(), errors::not_found("no tensor 'x'"), Status(ErrorCode::kUnauthenticated, ""),
                                 Status(ErrorCode::kAborted, std::string(5000, 'm'))}) {
      const zmq::message_t m = internal::reply_envelope_frame(id, status);
      EXPECT_EQ(m.size(), status.ok() ? 12u : 16u + status.message().size());
      auto read = internal::parse_reply_envelope(m);
      ASSERT_TRUE(read.has_value()) << status.to_string();
      EXPECT_EQ(read->first, id);
      EXPECT_EQ(read->second.code(), status.code());
      EXPECT_EQ(read->second.message(), status.message());
      // A reply's envelope is not a request's, and the other way round.
      EXPECT_EQ(internal::parse_call_id(m), std::nullopt);
    }
    EXPECT_EQ(internal::parse_reply_envelope(internal::call_id_frame(id)), std::nullopt);
  }
  auto parse = [](const std::string& bytes) { return internal::parse_reply_envelope(zmq::message_t(bytes.data(), bytes.size())); };
  const std::string head = envelope("TRR1", 3);
  EXPECT_EQ(parse(head.substr(0, 11)), std::nullopt);                     // short
  EXPECT_EQ(parse("XRR1" + head.substr(4)), std::nullopt);                // another magic
  EXPECT_EQ(parse(head + std::string("\x05\x00", 2)), std::nullopt);      // a status cut short
  EXPECT_EQ(parse(head + std::string("\0\0\0\0msg", 7)), std::nullopt);  // code 0 with a message
  EXPECT_EQ(parse(head + std::string("\xff\0\0\0", 4)), std::nullopt);    // no ErrorCode
  ASSERT_TRUE(parse(head + std::string("\x05\0\0\0", 4)).has_value());     // NotFound, no message
}

// A handler's error goes back in the reply's one envelope frame.
TEST(RpcTest, AFailedCallsReplyIsItsEnvelopeAlone) {
  auto server = start_or_die([](RpcMessage, Responder respond) { respond.fail(errors::not_found("gone")); });
  ASSERT_TRUE(server);
  zmq::context_t context;
  zmq::socket_t raw = raw_caller(context, server->endpoint());
  send_parts(raw, {envelope("TRP1", 9), "header"});
  const std::vector<std::string> reply = recv_parts(raw);
  ASSERT_EQ(reply.size(), 1u);
  auto read = internal::parse_reply_envelope(zmq::message_t(reply[0].data(), reply[0].size()));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->first, 9u);
  EXPECT_EQ(read->second.code(), ErrorCode::kNotFound);
  EXPECT_EQ(read->second.message(), "gone");
  // Through a channel: the same status.
  RpcChannel channel(server->endpoint());
  const Status st = channel.call_sync(message({"x"}), 3s).status();
  EXPECT_EQ(st.code(), ErrorCode::kNotFound) << st.to_string();
  EXPECT_EQ(st.message(), "gone");
}

// Note [Joined envelopes]: a channel sends a frame 0 of up to kJoinedMaxBytes inside the envelope's
// frame ("TRQ1"), a larger one after it ("TRP1"); the server answers a joined request's OK reply
// joined ("TRK1") when its frame 0 fits, and any other reply in the separate layout.
TEST(RpcTest, FrameZeroJoinsItsEnvelopeUpToTheLimitBothWays) {
  // The channel's side, as a stand-in ROUTER receives it.
  zmq::context_t context;
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::rcvtimeo, 3000);
  router.bind("tcp://127.0.0.1:*");
  RpcChannel channel(router.get(zmq::sockopt::last_endpoint));
  const std::string small(kJoinedMaxBytes, 'h');
  const std::string large(kJoinedMaxBytes + 1, 'H');
  for (const std::string* head : {&small, &large}) {
    for (bool payload : {false, true}) {
      SCOPED_TRACE(fmt::format("frame 0 of {} bytes, payload {}", head->size(), payload));
      channel.call(payload ? message({*head, "p"}) : message({*head}), 200ms, [](StatusOr<RpcMessage>) {});
      std::vector<std::string> got = recv_parts(router);
      ASSERT_GE(got.size(), 2u);
      got.erase(got.begin());  // the routing id
      ASSERT_GE(got[0].size(), 12u);
      const std::string magic = got[0].substr(0, 4);
      if (head == &small) {
        EXPECT_EQ(magic, "TRQ1");
        EXPECT_EQ(got[0].substr(12), *head);
        EXPECT_EQ(got.size(), payload ? 2u : 1u);
      } else {
        EXPECT_EQ(magic, "TRP1");
        EXPECT_EQ(got[0].size(), 12u);
        ASSERT_GE(got.size(), 2u);
        EXPECT_EQ(got[1], *head);
        EXPECT_EQ(got.size(), payload ? 3u : 2u);
      }
      if (payload) {
        EXPECT_EQ(got.back(), "p");
      }
    }
  }

  // The server's side, to a caller speaking the envelope by hand.
  auto server = start_or_die(echo);
  ASSERT_TRUE(server);
  zmq::socket_t raw = raw_caller(context, server->endpoint());
  send_parts(raw, {envelope("TRQ1", 5) + "head", "p"});
  EXPECT_EQ(recv_parts(raw), (std::vector<std::string>{envelope("TRK1", 5) + "head", "p"}));
  send_parts(raw, {envelope("TRQ1", 6)});  // an empty frame 0
  EXPECT_EQ(recv_parts(raw), (std::vector<std::string>{envelope("TRK1", 6)}));
  // A joined request whose echoed frame 0 is too large to join: the reply comes separate.
  send_parts(raw, {envelope("TRQ1", 7) + large});
  EXPECT_EQ(recv_parts(raw), (std::vector<std::string>{envelope("TRR1", 7), large}));
  // The separate layout is answered in the separate layout.
  send_parts(raw, {envelope("TRP1", 8), "head", "p"});
  EXPECT_EQ(recv_parts(raw), (std::vector<std::string>{envelope("TRR1", 8), "head", "p"}));
  EXPECT_EQ(server->stats().requests, 4u);
  EXPECT_EQ(server->stats().malformed, 0u);

  // And between a channel and a server, every frame arrives as sent on both sides of the limit.
  RpcChannel to_server(server->endpoint());
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{33}, kJoinedMaxBytes, kJoinedMaxBytes + 1}) {
    for (bool payload : {false, true}) {
      SCOPED_TRACE(fmt::format("frame 0 of {} bytes, payload {}", size, payload));
      const std::string head(size, static_cast<char>('a' + size % 26));
      auto r = to_server.call_sync(payload ? message({head, "p", ""}) : message({head}), 3s);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_EQ(strings(r.value()), payload ? (std::vector<std::string>{head, "p", ""}) : std::vector<std::string>{head});
    }
  }
}

// A reply whose joined envelope is not a reply's ("TRQ1", a request's) is malformed: the call meets
// its deadline and the channel goes on.
TEST(RpcTest, ARequestsJoinedEnvelopeAsAReplyIsMalformed) {
  StandInServer server([](StandInServer& s, const zmq::message_t& routing, uint64_t id, const std::string& header) {
    s.send_to(routing, {envelope(header == "wrong" ? "TRQ1" : "TRK1", id) + "answer"});
  });
  RpcChannel channel(server.endpoint());
  auto r = channel.call_sync(message({"wrong"}), 300ms);
  EXPECT_EQ(r.status().code(), ErrorCode::kUnavailable) << r.status().to_string();
  EXPECT_EQ(channel.stats().malformed, 1u);
  r = channel.call_sync(message({"right"}), 3s);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(strings(r.value()), std::vector<std::string>{"answer"});
}

// Note [Older replies]: a reply in the layout of builds before the reply envelope fails its call
// at once, a long call too, and the channel goes on.
TEST(RpcTest, AReplyInAnOlderBuildsEnvelopeFailsItsCallAtOnce) {
  StandInServer server([](StandInServer& s, const zmq::message_t& routing, uint64_t id, const std::string& header) {
    if (header == "old") {
      s.send_to(routing, {envelope("TRP1", id), "", "sent"});  // [call-id][status][frame]
    } else {
      s.send_to(routing, {envelope("TRR1", id), "sent"});
    }
  });
  RpcChannel channel(server.endpoint());
  // A long call: only the reply can end it (the channel's destruction would cancel it).
  auto old = std::make_shared<std::promise<Status>>();
  std::future<Status> old_done = old->get_future();
  channel.call_until_lost(message({"old"}), 10s, [old](StatusOr<RpcMessage> r) { old->set_value(r.status()); });
  ASSERT_EQ(old_done.wait_for(10s), std::future_status::ready);
  const Status st = old_done.get();
  EXPECT_EQ(st.code(), ErrorCode::kUnimplemented) << st.to_string();
  EXPECT_NE(st.message().find("older tessera build"), std::string::npos) << st.to_string();
  auto r = channel.call_sync(message({"new"}), 3s);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(strings(r.value()), std::vector<std::string>{"sent"});
  EXPECT_EQ(channel.stats().malformed, 1u);
}

TEST(RpcStreamTest, MalformedStreamedRequestsAreRefusedAndTheServerKeepsServing) {
  RpcServerOptions options;
  // Long enough that the good stream below is never taken for a stalled one on a loaded machine
  // (its chunks follow each other at once), short enough that stream 7's stall is seen quickly.
  options.stalled_stream_timeout = 1000ms;
  auto server = start_or_die(echo, options);
  ASSERT_TRUE(server);
  zmq::context_t context;
  zmq::socket_t raw = raw_caller(context, server->endpoint());
  const auto invalid = static_cast<uint32_t>(ErrorCode::kInvalidArgument);
  auto refused_with = [&](uint64_t id, const std::string& what) {
    std::vector<std::string> reply = recv_parts(raw);
    ASSERT_EQ(reply.size(), 1u) << what;  // the envelope, its status inside
    EXPECT_EQ(reply[0].substr(0, 12), envelope("TRR1", id)) << what;
    const std::string status = reply[0].substr(std::min<size_t>(12, reply[0].size()));
    EXPECT_EQ(status_code(status), invalid) << what << ": " << status.substr(std::min<size_t>(4, status.size()));
  };
  // A descriptor that is not whole entries; one naming a frame that is not there; one whose
  // placeholder is not empty.
  send_parts(raw, {envelope("TRS1", 1), "12345", "header", ""});
  refused_with(1, "short descriptor");
  send_parts(raw, {envelope("TRS1", 2), descriptor({{5, 100}}), "header", ""});
  refused_with(2, "frame out of range");
  send_parts(raw, {envelope("TRS1", 3), descriptor({{1, 100}}), "header", "not empty"});
  refused_with(3, "placeholder not empty");
  // A chunk longer than its frame lacks ends the stream; its later chunks are dropped.
  send_parts(raw, {envelope("TRS1", 4), descriptor({{1, 100}}), "header", ""});
  send_parts(raw, {envelope("TRC1", 4), std::string(150, 'c')});
  refused_with(4, "chunk too long");
  send_parts(raw, {envelope("TRC1", 4), std::string(10, 'c')});
  // A good stream, two frames in uneven chunks, interleaved with a whole call: echoed intact.
  send_parts(raw, {envelope("TRS1", 5), descriptor({{1, 100}, {3, 5}}), "header", "", "mid", ""});
  send_parts(raw, {envelope("TRC1", 5), std::string(60, 'a')});
  send_parts(raw, {envelope("TRP1", 6), "whole"});
  send_parts(raw, {envelope("TRC1", 5), std::string(40, 'b')});
  send_parts(raw, {envelope("TRC1", 5), "tail!"});
  // (Handler threads may answer the two in either order.)
  std::vector<std::vector<std::string>> replies = {recv_parts(raw), recv_parts(raw)};
  std::sort(replies.begin(), replies.end());
  EXPECT_EQ(replies[0], (std::vector<std::string>{envelope("TRR1", 5), "header",
                                                  std::string(60, 'a') + std::string(40, 'b'), "mid", "tail!"}));
  EXPECT_EQ(replies[1], (std::vector<std::string>{envelope("TRR1", 6), "whole"}));
  // A stream whose sender stops is dropped after stalled_stream_timeout; its late chunk is dropped.
  send_parts(raw, {envelope("TRS1", 7), descriptor({{1, 100}}), "header", ""});
  send_parts(raw, {envelope("TRC1", 7), std::string(50, 'a')});
  EXPECT_TRUE(wait_until([&] { return server->stats().stalled_streams == 1; }, 5s));
  send_parts(raw, {envelope("TRC1", 7), std::string(50, 'a')});
  // A chunk of no stream at all.
  send_parts(raw, {envelope("TRC1", 99), "stray"});
  EXPECT_TRUE(wait_until([&] { return server->stats().dropped_chunks == 3; }, 3s)) << server->stats().dropped_chunks;

  RpcChannel channel(server->endpoint());
  auto r = channel.call_sync(message({"still here"}), 3s);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(server->stats().malformed, 4u);  // the three bad heads and the overlong chunk
  EXPECT_EQ(server->stats().streamed_requests, 1u);
}

TEST(RpcStreamTest, MalformedStreamedRepliesFailTheirCallsAndTheChannelGoesOn) {
  zmq::message_t stalled_routing;
  uint64_t stalled_id = 0;
  std::mutex stalled_mu;
  // Answers each request by its header: a stream over the channel's limit, a chunk that overflows
  // its frame, a head whose chunks never come, and a good stream.
  StandInServer server([&](StandInServer& s, const zmq::message_t& routing, uint64_t id, const std::string& what) {
    auto reply = [&](const std::vector<std::string>& parts) { s.send_to(routing, parts); };
    if (what == "too big") {
      reply({envelope("TRS1", id), descriptor({{1, 8u << 20}}), "", ""});
    } else if (what == "overflow") {
      reply({envelope("TRS1", id), descriptor({{1, 100}}), "", ""});
      reply({envelope("TRC1", id), std::string(200, 'x')});
    } else if (what == "stall") {
      reply({envelope("TRS1", id), descriptor({{1, 100}}), "", ""});
      std::lock_guard<std::mutex> l(stalled_mu);
      stalled_routing = zmq::message_t(routing.data(), routing.size());
      stalled_id = id;
    } else if (what == "late chunk") {
      std::lock_guard<std::mutex> l(stalled_mu);
      s.send_to(stalled_routing, {envelope("TRC1", stalled_id), std::string(100, 'l')});
      reply({envelope("TRR1", id), "sent"});
    } else {
      reply({envelope("TRS1", id), descriptor({{1, 7}}), "", ""});
      reply({envelope("TRC1", id), "pay"});
      reply({envelope("TRC1", id), "load"});
    }
  });
  const std::string endpoint = server.endpoint();
  RpcChannelOptions options;
  options.max_message_bytes = 4 << 20;
  RpcChannel channel(endpoint, options);
  auto r = channel.call_sync(message({"too big"}), 3s);
  EXPECT_EQ(r.status().code(), ErrorCode::kResourceExhausted) << r.status().to_string();
  r = channel.call_sync(message({"overflow"}), 3s);
  EXPECT_EQ(r.status().code(), ErrorCode::kInternal) << r.status().to_string();
  EXPECT_NE(r.status().message().find("malformed streamed reply"), std::string::npos) << r.status().to_string();
  r = channel.call_sync(message({"stall"}), 300ms);
  EXPECT_EQ(r.status().code(), ErrorCode::kUnavailable) << r.status().to_string();
  r = channel.call_sync(message({"late chunk"}), 3s);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(channel.stats().dropped_chunks, 1u);  // the stalled call's chunk, after its deadline
  r = channel.call_sync(message({"good"}), 3s);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(strings(r.value()), std::vector<std::string>{"payload"});
  EXPECT_EQ(channel.stats().streamed_replies, 1u);
  EXPECT_EQ(channel.stats().malformed, 1u);  // the overflowing chunk
}

}  // namespace

// Responder::on_lost (Note [Lost callers]): a call left unanswered when its caller's connection
// closes runs its on_lost function; an answered call's does not run; a call from a caller that
// stays connected is untouched. Callers come and go on one server, so descriptors are reused.
TEST(RpcTest, OnLostRunsForTheUnansweredCallsOfAClosedConnectionOnly) {
  std::mutex mu;
  std::vector<Responder> held;  // the unanswered calls, kept so their slots live
  std::atomic<int> lost_unanswered{0}, lost_answered{0}, lost_staying{0};
  auto server = start_or_die([&](RpcMessage req, Responder respond) {
    const std::string kind = req.frames[0].to_string();
    if (kind == "answer") {
      respond.on_lost([&] { lost_answered++; });
      respond(RpcMessage{});
      return;
    }
    respond.on_lost([&, kind] { (kind == "stay" ? lost_staying : lost_unanswered)++; });
    std::lock_guard<std::mutex> l(mu);
    held.push_back(respond);
  });
  ASSERT_TRUE(server);
  RpcChannel staying(server->endpoint());
  std::atomic<bool> staying_done{false};
  staying.call_until_lost(message({"stay"}), 5s, [&](StatusOr<RpcMessage>) { staying_done = true; });
  constexpr int kLeaving = 20;
  for (int round = 0; round < kLeaving; ++round) {
    auto leaving = std::make_unique<RpcChannel>(server->endpoint());
    ASSERT_TRUE(leaving->call_sync(message({"answer"}), 5s).ok());
    leaving->call_until_lost(message({"wait"}), 5s, [](StatusOr<RpcMessage>) {});
    ASSERT_TRUE(tessera::testing::wait_until(
        [&] {
          std::lock_guard<std::mutex> l(mu);
          return static_cast<int>(held.size()) == round + 2;  // the staying call, and this one
        },
        10s));
    leaving.reset();  // closes the connection
    ASSERT_TRUE(tessera::testing::wait_until([&] { return lost_unanswered.load() == round + 1; }, 10s))
        << "round " << round << ": " << lost_unanswered.load();
  }
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(lost_unanswered.load(), kLeaving);
  EXPECT_EQ(lost_answered.load(), 0);
  EXPECT_EQ(lost_staying.load(), 0);
  EXPECT_FALSE(staying_done.load());
  EXPECT_EQ(server->stats().calls_of_lost_peers, static_cast<uint64_t>(kLeaving));
  EXPECT_GE(server->stats().lost_peers, static_cast<uint64_t>(kLeaving));
}

// A closed connection's descriptor goes to the next connection at once, while the ROUTER may still
// hand out what the closed one had queued: read after the new connection's first message, such a
// late message must not make the new connection lost (Note [Lost callers]). The server's I/O
// thread is held up (an inline handler that sleeps) while a caller queues requests and leaves and
// the next caller sends a call that waits, so that all of them are read in one go afterwards.
// Whether the next connection gets the closed one's descriptor here (client and server share one
// process's descriptors) and is read between its late messages is up to the kernel and libzmq:
// without the fix in track_peer it failed in 2 of 3 runs of these 10 rounds (and in 2 of 6 of 6).
TEST(RpcTest, LateMessagesOfAClosedConnectionDoNotLoseTheNextCallerOnItsDescriptor) {
  std::mutex mu;
  std::vector<Responder> held;
  std::atomic<int> lost_waiting{0};
  RpcServerOptions options;
  options.handler_threads = 0;  // handlers run on the I/O thread: one that sleeps holds it up
  auto server = start_or_die(
      [&](RpcMessage req, Responder respond) {
        const std::string kind = req.frames[0].to_string();
        if (kind == "stall") std::this_thread::sleep_for(600ms);
        if (kind != "wait") {
          respond(RpcMessage{});
          return;
        }
        respond.on_lost([&] { lost_waiting++; });
        std::lock_guard<std::mutex> l(mu);
        held.push_back(respond);
      },
      options);
  ASSERT_TRUE(server);
  std::vector<std::unique_ptr<RpcChannel>> staying;  // each round's next caller, kept connected
  std::atomic<int> staying_done{0};
  constexpr int kRounds = 10;
  for (int round = 0; round < kRounds; ++round) {
    {
      RpcChannel leaving(server->endpoint());
      ASSERT_TRUE(leaving.call_sync(message({"hello"}), 5s).ok());  // tracked on its descriptor
      leaving.call(message({"stall"}), 5s, [](StatusOr<RpcMessage>) {});
      for (int i = 0; i < 200; ++i) leaving.call(message({"late"}), 5s, [](StatusOr<RpcMessage>) {});
      std::this_thread::sleep_for(100ms);  // queued at the server, behind the stalled handler
    }  // closes the connection
    staying.push_back(std::make_unique<RpcChannel>(server->endpoint()));
    staying.back()->call_until_lost(message({"wait"}), 10s, [&](StatusOr<RpcMessage>) { staying_done++; });
    ASSERT_TRUE(tessera::testing::wait_until(
        [&] {
          std::lock_guard<std::mutex> l(mu);
          return static_cast<int>(held.size()) == round + 1;
        },
        10s));
    std::this_thread::sleep_for(100ms);  // the late messages read after it
    EXPECT_EQ(lost_waiting.load(), 0) << "round " << round;
  }
  EXPECT_EQ(staying_done.load(), 0);
}

}  // namespace tessera::internal
