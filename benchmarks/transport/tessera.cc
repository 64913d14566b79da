// Workload transport, impl tessera: tensors between two processes through tessera's own path, as a
// worker serves a cross-task tensor and as a caller receives it.
//
// Peer: an RpcServer (transport/rpc.h, default options: an I/O thread and 4 handler threads, as
// train::Server runs it) whose handler reads the wire RequestHeader in place (read_request_header,
// as train::Server's dispatch does) and dispatches on its method:
//   RecvTensor  body RecvTensorRequest; the tensor named by rendezvous_key (one per size, built at
//               start-up) goes back as a ResponseHeader whose body is a RecvTensorResponse with the
//               TensorMeta of tensor_to_frames, written by recv_tensor_reply as train::Server
//               answers: up to 1 KiB the bytes inside it, above that frame 1 (the tensor's own
//               buffer from 16 KiB up, no copy).
//   RunGraph    the echo of the rtt benchmarks, shaped as the call a master makes to run a
//               partition: the request's `send` names a tensor (tensor_to_frames, as a master
//               sends feeds), which the handler validates and takes (tensor_from_frames: a frame is
//               adopted without a copy from 16 KiB up), and returns in a RunGraphResponse `recv`
//               entry, written by named_tensors_reply as train::Server answers RunGraph.
// Client: one RpcChannel (a channel per remote task, as a worker keeps). Every reply is parsed
// (ResponseHeader read in place as parse_reply does, status, body) and its tensor taken with
// tensor_from_frames, which validates the metadata against the bytes (inline or a frame): from
// 16 KiB up the tensor is the received zmq message, not a copy.
//   transfer: RpcChannel::call with kWindow calls in flight (a counter and a condition variable);
//             the reply is turned into a Tensor in the completion (the channel's I/O thread), where
//             a worker's rendezvous takes it, and dropped; the pulling thread sleeps on the
//             condition variable between replies.
//   transfer, impl tessera_pool: the runtime's path to the end. The reply becomes a Tensor on the
//             I/O thread as above, the completion is handed to the session's thread pool (as
//             RunState::hand_off hands a step's continuation), and the pool thread sends the next
//             pull (as the Recv node the continuation makes ready does); see PoolPull.
//   transfer, impl tessera_io_thread: not a path the runtime takes: the ceiling of one that runs a
//             pull's continuation on the channel's I/O thread. As tessera_pool, but the completion
//             goes on itself there and sends the next pull (stop 58 built that path into the
//             executor and did not keep it: benchmarks/README.md).
//   transfer, impl tessera_queue: the same pulls through an RpcCompletionQueue on the channel: the
//             pulling thread waits in next(), receiving the replies itself, turns each into a Tensor
//             and drops it (no hand-off to the I/O thread and back).
//   transfer, impl tessera_owned: not a path RpcChannel has. The ceiling of one whose socket
//             belongs to the thread that waits on it (RpcChannel's is shared: Note [RPC channel]):
//             the pulling thread owns a DEALER to the same RpcServer, sends the same requests in
//             the joined envelope RpcChannel sends, and waits inside libzmq's recv(), where one
//             poll(2) is both the look and the sleep; each reply is taken as the channel's caller
//             takes it (joined_first, then the parse above). No per-call deadline (the socket's
//             ZMQ_RCVTIMEO bounds every wait), no lost-connection tracking.
//   rtt:      RpcChannel::call_sync, one echo at a time, the request carrying the tensor.
// Impl tessera_busy_poll: the same calls to a second RpcServer of the peer, with busy_poll =
// kBusyPoll (train::ServerOptions::busy_poll; Note [Busy polling] in transport/rpc_server.cc),
// through a channel with RpcChannelOptions::busy_poll = kBusyPoll (as a task's channels have with
// that ServerOptions::busy_poll); impl tessera_pool_busy_poll: tessera_pool's pulls that way.
// Before timing, each benchmark checks every byte of kWindow received tensors (the pattern of
// transfer_bench.h), their dtype and shape, and that from 16 KiB up they were received without a copy.
#include <tessera/tessera.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/bench_common.h"
#include "core/thread_pool.h"
#include "transport/rpc.h"
#include "transport/rpc_envelope.h"
#include "transport/service_messages.h"
#include "transport/socket_io.h"
#include "transport/transfer_bench.h"
#include "distributed/wire.h"

namespace transport_bench {
namespace {

using tessera::DType;
using tessera::Shape;
using tessera::Status;
using tessera::StatusOr;
using tessera::Tensor;
using tessera::internal::kZeroCopyMinBytes;
using tessera::internal::Responder;
using tessera::internal::RpcChannel;
using tessera::internal::RpcCompletion;
using tessera::internal::RpcCompletionQueue;
using tessera::internal::RpcMessage;
using tessera::internal::RpcServer;
using tessera::internal::named_tensors_reply;
using tessera::internal::recv_tensor_reply;
using tessera::internal::request_frame;
using tessera::internal::response_frame;
using tessera::internal::tensor_from_frames;
using tessera::internal::tensor_to_frames;
namespace errors = tessera::errors;
namespace wire = tessera::internal::wire;
namespace pb = tessera::wire;  // the generated messages

constexpr const char* kRecvTensor = "RecvTensor";
constexpr const char* kRunGraph = "RunGraph";

Tensor pattern_tensor(const Size& size) {
  Tensor t(DType::Int32, Shape{static_cast<int64_t>(size.bytes / 4)});
  fill_pattern(t.raw_mutable_data(), size.bytes);
  return t;
}

// ---- Peer ----

using Tensors = std::unordered_map<std::string, Tensor>;

// `frames` (a framed tensor) follow the header, whose frame index 1 is the first of them.
void reply(const Responder& respond, uint64_t request_id, const Status& status,
           const google::protobuf::Message* body, std::vector<zmq::message_t> frames = {}) {
  RpcMessage out;
  out.frames.reserve(1 + frames.size());
  out.frames.push_back(response_frame(request_id, status, body));  // as train::Server writes it
  for (zmq::message_t& f : frames) out.frames.push_back(std::move(f));
  respond(std::move(out));
}

void serve_recv_tensor(const Tensors& tensors, const wire::RequestHeaderView& h, const Responder& respond) {
  pb::RecvTensorRequest body;
  if (Status st = wire::parse_body(h.body(), &body); !st.ok()) return reply(respond, h.request_id(), st, nullptr);
  auto it = tensors.find(body.rendezvous_key());
  if (it == tensors.end()) {
    return reply(respond, h.request_id(), errors::not_found("no tensor '{}'", body.rendezvous_key()), nullptr);
  }
  StatusOr<RpcMessage> out = recv_tensor_reply(h.request_id(), it->second);  // as train::Server answers
  if (!out.ok()) return reply(respond, h.request_id(), out.status(), nullptr);
  respond(std::move(out).value());
}

void serve_echo(RpcMessage& request, const wire::RequestHeaderView& h, const Responder& respond) {
  pb::RunGraphRequest body;
  if (Status st = wire::parse_body(h.body(), &body); !st.ok()) return reply(respond, h.request_id(), st, nullptr);
  if (body.send_size() != 1 || body.recv_key_size() != 1) {
    return reply(respond, h.request_id(), errors::invalid_argument("the echo takes one tensor"), nullptr);
  }
  StatusOr<Tensor> t = tensor_from_frames(body.send(0).meta(), request.frames);  // as train::Server takes feeds
  if (!t.ok()) return reply(respond, h.request_id(), t.status(), nullptr);
  pb::RunGraphResponse response;
  response.set_version(wire::kWireVersion);
  response.add_recv()->set_name(body.recv_key(0));
  // As train::Server answers RunGraph (reply_with_tensors).
  StatusOr<RpcMessage> out = named_tensors_reply(h.request_id(), &response, response.mutable_recv(),
                                                 pb::RunGraphResponse::kRecvFieldNumber, {t.value()});
  if (!out.ok()) return reply(respond, h.request_id(), out.status(), nullptr);
  respond(std::move(out).value());
}

void serve(const Tensors& tensors, RpcMessage request, const Responder& respond) {
  if (request.frames.empty()) {
    respond.fail(errors::invalid_argument("a request needs a header frame"));
    return;
  }
  StatusOr<wire::RequestHeaderView> header = wire::read_request_header(request.frames[0].data(), request.frames[0].size());
  if (!header.ok()) {
    respond.fail(header.status());
    return;
  }
  const wire::RequestHeaderView& h = header.value();
  if (h.method() == kRecvTensor) return serve_recv_tensor(tensors, h, respond);
  if (h.method() == kRunGraph) return serve_echo(request, h, respond);
  reply(respond, h.request_id(), errors::unimplemented("method {}", h.method()), nullptr);
}

// ---- Client ----

// The tensor a reply carries: frame 0 a ResponseHeader answering `request_id` whose body is a
// `Body`, `meta_of(body)` the tensor's metadata. *zero_copy (when given) tells whether the tensor is
// the received frame itself.
template <class Body, class MetaOf>
StatusOr<Tensor> receive_tensor(StatusOr<RpcMessage> reply, uint64_t request_id, MetaOf meta_of,
                                bool* zero_copy = nullptr) {
  if (!reply.ok()) return reply.status();
  std::vector<zmq::message_t>& frames = reply.value().frames;
  if (frames.empty()) return errors::internal("an empty reply");
  StatusOr<wire::ResponseHeaderView> header = wire::read_response_header(frames[0].data(), frames[0].size());
  if (!header.ok()) return header.status();
  const wire::ResponseHeaderView& h = header.value();
  if (!h.status().ok()) return h.status();
  if (h.request_id() != request_id) {
    return errors::internal("reply to request {} received for request {}", h.request_id(), request_id);
  }
  Body body;
  TESSERA_RETURN_IF_ERROR(wire::parse_body(h.body(), &body));
  const pb::TensorMeta* meta = meta_of(body);
  if (meta == nullptr) return errors::internal("the reply names no tensor");
  // A framed tensor's bytes, to tell whether the tensor is the frame itself.
  const void* data = meta->frame() > 0 && meta->frame() < frames.size() ? frames[meta->frame()].data() : nullptr;
  StatusOr<Tensor> t = tensor_from_frames(*meta, frames);  // as the runtime's callers take a reply's tensor
  if (zero_copy != nullptr && t.ok()) *zero_copy = data != nullptr && t.value().raw_data() == data;
  return t;
}

const pb::TensorMeta* recv_tensor_meta(const pb::RecvTensorResponse& r) {
  return r.has_tensor() ? &r.tensor() : nullptr;
}
const pb::TensorMeta* run_graph_meta(const pb::RunGraphResponse& r) {
  return r.recv_size() == 1 ? &r.recv(0).meta() : nullptr;
}

// The channel to the peer's RpcServer, shared by every tessera benchmark; nullptr (and the
// benchmark skipped) when the peer is not running.
RpcChannel* channel(benchmark::State& state, bool busy_poll) {
  const PeerEndpoints* p = peer();
  if (p == nullptr) {
    state.SkipWithError(("no peer process: " + peer_error()).c_str());
    return nullptr;
  }
  // Leaked: no teardown at static exit.
  static RpcChannel* const ch = new RpcChannel(p->tessera);
  static RpcChannel* const busy = [&] {
    tessera::internal::RpcChannelOptions options;
    options.busy_poll = kBusyPoll;
    return new RpcChannel(p->tessera_busy_poll, options);
  }();
  return busy_poll ? busy : ch;
}

// Checks a received tensor: int32, [bytes / 4], every byte the pattern, and (from kZeroCopyMinBytes)
// no copy on receipt. "" when right.
std::string check_received(const Tensor& t, const Size& size, bool zero_copy) {
  if (t.dtype() != DType::Int32 || t.shape() != Shape{static_cast<int64_t>(size.bytes / 4)}) {
    return "wrong dtype or shape: " + t.debug_string(0);
  }
  if (!has_pattern(t.raw_data(), t.bytes(), size.bytes)) return "the bytes differ from what was sent";
  if (size.bytes >= kZeroCopyMinBytes && !zero_copy) return "the tensor was copied on receipt";
  return "";
}

// Calls in flight and what completed. Shared with the completions, which may outlive a benchmark
// that gave up waiting.
struct Window {
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  Status error;                 // the first failure
  bool keep = false;            // keep what arrives in `received` (the check), else drop it
  std::vector<std::pair<Tensor, bool>> received;  // tensor, zero_copy
};

}  // namespace

namespace {

// A RecvTensor request for the tensor of `key`, as call `id`.
RpcMessage recv_request(uint64_t id, const std::string& key) {
  pb::RecvTensorRequest body;
  body.set_version(wire::kWireVersion);
  body.set_step_id(static_cast<int64_t>(id));
  body.set_rendezvous_key(key);
  RpcMessage request;
  request.frames.push_back(request_frame(id, kRecvTensor, body, kDeadline.count()));  // as make_call writes it
  return request;
}

// Received tensors and whether each came without a copy.
using Received = std::vector<std::pair<Tensor, bool>>;

// Pulls `n` tensors of `key` through `queue`, kWindow calls in flight, turning each reply into a
// Tensor on this thread; keeps them in `keep` when given. The first error, if any.
Status pull_through_queue(RpcCompletionQueue& queue, const std::string& key, int n, uint64_t* next_id,
                          Received* keep) {
  int sent = 0;
  for (int received = 0; received < n; ++received) {
    for (; sent < n && sent - received < kWindow; ++sent) {
      const uint64_t id = (*next_id)++;
      queue.call(recv_request(id, key), kDeadline, id);
    }
    StatusOr<RpcCompletion> c = queue.next(2 * kDeadline);  // the channel completes every call by kDeadline
    if (!c.ok()) return c.status();
    bool zero_copy = false;
    StatusOr<Tensor> t =
        receive_tensor<pb::RecvTensorResponse>(std::move(c.value().result), c.value().tag, recv_tensor_meta, &zero_copy);
    if (!t.ok()) return t.status();
    if (keep != nullptr) keep->emplace_back(std::move(t).value(), zero_copy);
  }
  return Status();
}

// Pulls `n` tensors of `key` on `socket`, a DEALER this thread owns (impl tessera_owned), kWindow
// requests in flight, each reply received inside libzmq and turned into a Tensor here.
Status pull_on_owned_socket(zmq::socket_t& socket, const std::string& key, int n, uint64_t* next_id,
                            Received* keep) {
  using tessera::internal::Envelope;
  int sent = 0;
  for (int received = 0; received < n; ++received) {
    for (; sent < n && sent - received < kWindow; ++sent) {
      const uint64_t id = (*next_id)++;
      RpcMessage request = recv_request(id, key);
      zmq::message_t envelope = tessera::internal::joined_frame(tessera::internal::kJoinedMagic, id, request.frames[0]);
      if (!socket.send(envelope, zmq::send_flags::none)) {
        return errors::deadline_exceeded("no send within {} ms", kDeadline.count());
      }
    }
    zmq::message_t first;
    if (!socket.recv(first)) return errors::deadline_exceeded("no reply within {} ms", kDeadline.count());
    std::vector<zmq::message_t> parts;
    tessera::internal::recv_rest(socket, first, &parts);
    uint64_t id = 0;
    if (auto e = tessera::internal::parse_envelope(first); e && e->first == Envelope::kJoinedReply) {
      id = e->second;
      parts.insert(parts.begin(), tessera::internal::joined_first(first));
    } else if (auto r = tessera::internal::parse_reply_envelope(first)) {
      id = r->first;
      if (!r->second.ok()) return r->second;
    } else {
      return errors::internal("a reply not in the RPC envelope");
    }
    bool zero_copy = false;
    StatusOr<Tensor> t =
        receive_tensor<pb::RecvTensorResponse>(RpcMessage{std::move(parts)}, id, recv_tensor_meta, &zero_copy);
    if (!t.ok()) return t.status();
    if (keep != nullptr) keep->emplace_back(std::move(t).value(), zero_copy);
  }
  return Status();
}

// Pulls `n` tensors of `key` with RpcChannel::call, kWindow in flight: each reply becomes a Tensor
// in its `done` (the channel's I/O thread), which counts it down in `w`; this thread waits on w->cv.
Status pull_with_callbacks(RpcChannel* ch, const std::shared_ptr<Window>& w, const std::string& key, int n,
                           uint64_t* next_id) {
  const auto wait_limit = 2 * kDeadline;  // the channel completes every call by kDeadline
  for (int i = 0; i < n; ++i) {
    {
      std::unique_lock<std::mutex> l(w->mu);
      if (!w->cv.wait_for(l, wait_limit, [&] { return w->in_flight < kWindow; })) {
        return errors::deadline_exceeded("no call completed within {} ms", wait_limit.count());
      }
      if (!w->error.ok()) break;
      ++w->in_flight;
    }
    const uint64_t id = (*next_id)++;
    ch->call(recv_request(id, key), kDeadline, [w, id](StatusOr<RpcMessage> reply) {
      bool zero_copy = false;
      StatusOr<Tensor> t = receive_tensor<pb::RecvTensorResponse>(std::move(reply), id, recv_tensor_meta, &zero_copy);
      {
        std::lock_guard<std::mutex> l(w->mu);
        --w->in_flight;
        if (!t.ok()) {
          if (w->error.ok()) w->error = t.status();
        } else if (w->keep) {
          w->received.emplace_back(std::move(t).value(), zero_copy);
        }
      }
      w->cv.notify_one();
      // A dropped tensor is freed here, after the lock (the zmq message it wraps).
    });
  }
  std::unique_lock<std::mutex> l(w->mu);
  if (!w->cv.wait_for(l, wait_limit, [&] { return w->in_flight == 0; })) {
    return errors::deadline_exceeded("calls still pending after {} ms", wait_limit.count());
  }
  return w->error;
}

// The runtime's own hand-off (Note [Async kernels] in core/executor.cc): a worker's pull completes
// on the channel's I/O thread, where the reply becomes a Tensor (RemoteWorker) that the rendezvous
// takes; the step's continuation then goes to the session's pool (RunState::hand_off ->
// ThreadPool::schedule), whose threads look for work for a while before they sleep (Note
// [Spinning before sleeping] in core/thread_pool.cc), and the Recv nodes it makes ready send the
// next pulls from there. With `io_thread` the completion goes on itself, on the I/O thread
// (tessera_io_thread). Shared with the completions, which may outlive a benchmark that gave up.
struct PoolPull {
  RpcChannel* ch = nullptr;
  tessera::internal::ThreadPool* pool = nullptr;
  std::string key;
  std::atomic<uint64_t>* next_id = nullptr;
  int n = 0;
  std::mutex mu;
  std::condition_variable cv;
  int issued = 0;     // guarded by mu
  int completed = 0;  // guarded by mu
  Status error;       // the first failure
  Received* keep = nullptr;  // set while the caller waits (the warm-up's check)
  bool io_thread = false;    // tessera_io_thread: no hand-off, the completion goes on itself

  // Sends one more pull (a pool thread, the caller, or, io_thread, the channel's I/O thread).
  static void issue(const std::shared_ptr<PoolPull>& s) {
    const uint64_t id = s->next_id->fetch_add(1, std::memory_order_relaxed);
    s->ch->call(recv_request(id, s->key), kDeadline, [s, id](StatusOr<RpcMessage> reply) {
      bool zero_copy = false;
      StatusOr<Tensor> t = receive_tensor<pb::RecvTensorResponse>(std::move(reply), id, recv_tensor_meta, &zero_copy);
      if (s->io_thread) return received(s, std::move(t), zero_copy);
      auto got = std::make_shared<std::pair<StatusOr<Tensor>, bool>>(std::move(t), zero_copy);
      s->pool->schedule([s, got] { received(s, std::move(got->first), got->second); });
    });
  }

  // On a pool thread: counts the tensor (a dropped one is freed here) and sends the next pull.
  static void received(const std::shared_ptr<PoolPull>& s, StatusOr<Tensor> t, bool zero_copy) {
    bool more = false;
    {
      std::lock_guard<std::mutex> l(s->mu);
      ++s->completed;
      if (!t.ok()) {
        if (s->error.ok()) s->error = t.status();
      } else if (s->keep != nullptr) {
        s->keep->emplace_back(std::move(t).value(), zero_copy);
      }
      if (s->error.ok() && s->issued < s->n) {
        ++s->issued;
        more = true;
      } else if (s->completed == s->issued) {
        s->cv.notify_one();  // under mu: the waiter may return and drop its reference at once
      }
    }
    if (more) issue(s);
  }
};

// Pulls `n` tensors of `key` through the runtime's hand-off (PoolPull): kWindow calls in flight,
// each completion handed to `pool` (or, `io_thread`, going on on the I/O thread), which sends the
// next call. The first error, if any.
Status pull_through_pool(RpcChannel* ch, tessera::internal::ThreadPool* pool, bool io_thread, const std::string& key,
                         int n, std::atomic<uint64_t>* next_id, Received* keep) {
  auto s = std::make_shared<PoolPull>();
  s->ch = ch;
  s->pool = pool;
  s->io_thread = io_thread;
  s->key = key;
  s->next_id = next_id;
  s->n = n;
  s->keep = keep;
  const int first = std::min(n, kWindow);
  {
    std::lock_guard<std::mutex> l(s->mu);
    s->issued = first;
  }
  for (int i = 0; i < first; ++i) PoolPull::issue(s);
  const auto wait_limit = 2 * kDeadline;  // the channel completes every call by kDeadline
  std::unique_lock<std::mutex> l(s->mu);
  if (!s->cv.wait_for(l, wait_limit, [&] { return s->completed == s->issued && (s->issued == n || !s->error.ok()); })) {
    s->keep = nullptr;  // completions still to come must not touch the caller's vector
    return errors::deadline_exceeded("calls still pending after {} ms", wait_limit.count());
  }
  return s->error;
}

enum class Pull { kQueue, kCallbacks, kPool, kOwned, kIoThread };

void transfer(benchmark::State& state, const Size& size, bool busy_poll, Pull how) {
  tessera_bench::set_impl(state, busy_poll && how == Pull::kPool ? "tessera_pool_busy_poll"
                                 : busy_poll                     ? "tessera_busy_poll"
                                 : how == Pull::kQueue           ? "tessera_queue"
                                 : how == Pull::kPool            ? "tessera_pool"
                                 : how == Pull::kOwned           ? "tessera_owned"
                                 : how == Pull::kIoThread        ? "tessera_io_thread"
                                                                 : "tessera");
  RpcChannel* ch = channel(state, busy_poll);
  if (ch == nullptr) return;
  const std::string key = size.name;
  auto w = std::make_shared<Window>();
  RpcCompletionQueue queue(*ch);
  // tessera_owned's socket: this thread's alone, to the channel's endpoint.
  static zmq::context_t* const owned_context = new zmq::context_t(1);  // leaked, as the channel's
  zmq::socket_t owned;
  if (how == Pull::kOwned) {
    owned = zmq::socket_t(*owned_context, zmq::socket_type::dealer);
    owned.set(zmq::sockopt::linger, 0);
    owned.set(zmq::sockopt::immediate, 1);
    owned.set(zmq::sockopt::rcvtimeo, static_cast<int>(kDeadline.count()));
    owned.set(zmq::sockopt::sndtimeo, static_cast<int>(kDeadline.count()));
    owned.connect(ch->endpoint());
  }
  uint64_t next_id = 1;
  std::atomic<uint64_t> next_pool_id{1};
  // Pulls `n` tensors; keeps them in `keep` when given.
  auto pull = [&](int n, Received* keep) -> Status {
    if (how == Pull::kQueue) return pull_through_queue(queue, key, n, &next_id, keep);
    if (how == Pull::kOwned) return pull_on_owned_socket(owned, key, n, &next_id, keep);
    if (how == Pull::kPool || how == Pull::kIoThread) {
      return pull_through_pool(ch, &tessera::internal::ThreadPool::shared(), how == Pull::kIoThread, key, n,
                               &next_pool_id, keep);
    }
    {
      std::lock_guard<std::mutex> l(w->mu);
      w->keep = keep != nullptr;
    }
    Status st = pull_with_callbacks(ch, w, key, n, &next_id);
    std::lock_guard<std::mutex> l(w->mu);
    if (keep != nullptr) keep->swap(w->received);
    w->received.clear();
    return st;
  };

  // Warm-up and check, untimed: kWindow tensors, every byte.
  Received received;
  Status st = pull(kWindow, &received);
  std::string wrong = st.ok() ? "" : st.to_string();
  if (wrong.empty() && received.size() != static_cast<std::size_t>(kWindow)) wrong = "tensors missing";
  for (const auto& [t, zero_copy] : received) {
    if (wrong.empty()) wrong = check_received(t, size, zero_copy);
  }
  received.clear();
  if (!tessera_bench::check(state, wrong.empty(), "transfer_" + key + ": " + wrong)) return;
  if (!(st = pull(size.transfers, nullptr)).ok()) return state.SkipWithError(st.to_string().c_str());  // warm

  for (auto _ : state) {
    st = pull(size.transfers, nullptr);
    if (!st.ok()) {
      state.SkipWithError(st.to_string().c_str());
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * size.transfers * static_cast<int64_t>(size.bytes));
  state.SetItemsProcessed(state.iterations() * size.transfers);
}

void rtt(benchmark::State& state, const Size& size, bool busy_poll) {
  tessera_bench::set_impl(state, busy_poll ? "tessera_busy_poll" : "tessera");
  RpcChannel* ch = channel(state, busy_poll);
  if (ch == nullptr) return;
  const std::string key = size.name;
  const Tensor payload = pattern_tensor(size);
  uint64_t id = 0;

  // One echo: the payload to the peer and back, as a Tensor.
  auto echo = [&](bool* zero_copy) -> StatusOr<Tensor> {
    ++id;
    pb::RunGraphRequest body;
    body.set_version(wire::kWireVersion);
    body.set_graph_handle("echo");
    body.set_step_id(static_cast<int64_t>(id));
    pb::NamedTensor* send = body.add_send();
    send->set_name(key);
    std::vector<zmq::message_t> frames;  // as a master sends a feed: inline up to 1 KiB, else frame 1
    StatusOr<pb::TensorMeta> meta = tensor_to_frames(payload, &frames, 1);
    if (!meta.ok()) return meta.status();
    *send->mutable_meta() = std::move(meta).value();
    body.add_recv_key(key);
    RpcMessage request;
    request.frames.reserve(1 + frames.size());
    request.frames.push_back(request_frame(id, kRunGraph, body, kDeadline.count()));
    for (zmq::message_t& f : frames) request.frames.push_back(std::move(f));
    return receive_tensor<pb::RunGraphResponse>(ch->call_sync(std::move(request), kDeadline), id, run_graph_meta,
                                                zero_copy);
  };

  // Warm-up and check, untimed: kWindow echoes, every byte.
  std::string wrong;
  for (int i = 0; i < kWindow && wrong.empty(); ++i) {
    bool zero_copy = false;
    StatusOr<Tensor> t = echo(&zero_copy);
    wrong = t.ok() ? check_received(t.value(), size, zero_copy) : t.status().to_string();
  }
  if (!tessera_bench::check(state, wrong.empty(), "rtt_" + key + ": " + wrong)) return;

  for (auto _ : state) {
    StatusOr<Tensor> t = echo(nullptr);
    if (!t.ok()) {
      state.SkipWithError(t.status().to_string().c_str());
      break;
    }
  }
}

}  // namespace

void tessera_transfer(benchmark::State& state, const Size& size) { transfer(state, size, false, Pull::kCallbacks); }
void tessera_queue_transfer(benchmark::State& state, const Size& size) { transfer(state, size, false, Pull::kQueue); }
void tessera_pool_transfer(benchmark::State& state, const Size& size) { transfer(state, size, false, Pull::kPool); }
void tessera_owned_transfer(benchmark::State& state, const Size& size) { transfer(state, size, false, Pull::kOwned); }
void tessera_io_thread_transfer(benchmark::State& state, const Size& size) {
  transfer(state, size, false, Pull::kIoThread);
}
void tessera_rtt(benchmark::State& state, const Size& size) { rtt(state, size, false); }
void tessera_busy_poll_transfer(benchmark::State& state, const Size& size) {
  transfer(state, size, true, Pull::kCallbacks);
}
void tessera_busy_poll_rtt(benchmark::State& state, const Size& size) { rtt(state, size, true); }
void tessera_pool_busy_poll_transfer(benchmark::State& state, const Size& size) {
  transfer(state, size, true, Pull::kPool);
}

std::string start_tessera_peer(bool busy_poll) {
  auto tensors = std::make_shared<Tensors>();
  for (const Size& s : kSizes) tensors->emplace(s.name, pattern_tensor(s));
  // Handlers run on the I/O thread, as a train::Server runs RecvTensor and RunGraph (their handlers
  // never block: never_blocks() in transport/server.cc).
  tessera::internal::RpcServerOptions options;
  options.run_inline = [](const RpcMessage&) { return true; };
  if (busy_poll) options.busy_poll = kBusyPoll;
  auto server = RpcServer::start(
      "tcp://" + peer_host() + ":0",
      [tensors](RpcMessage request, Responder respond) { serve(*tensors, std::move(request), respond); }, options);
  if (!server.ok()) {
    std::fprintf(stderr, "bench_transport peer: %s\n", server.status().to_string().c_str());
    return "";
  }
  RpcServer* running = std::move(server).value().release();  // until the peer exits
  return running->endpoint();
}

}  // namespace transport_bench
