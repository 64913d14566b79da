#include "core/session_factory.h"

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "core/node.h"
#include "tessera/errors.h"

namespace tessera::internal {

namespace {

struct SessionFactories {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<SessionFactory>> by_prefix;  // guarded by mu
};

// Leaked on purpose: registrations happen during static initialization.
SessionFactories& session_factories() {
  static SessionFactories* f = new SessionFactories();
  return *f;
}

bool serves(const std::string& prefix, const std::string& target) {
  if (target == prefix) return true;
  return prefix.size() > 3 && prefix.compare(prefix.size() - 3, 3, "://") == 0 && target.rfind(prefix, 0) == 0;
}

}  // namespace

Status SessionFactory::register_factory(const std::string& prefix, std::shared_ptr<SessionFactory> factory) {
  if (factory == nullptr) return errors::invalid_argument("session factory for '{}' is null", prefix);
  SessionFactories& f = session_factories();
  std::lock_guard<std::mutex> l(f.mu);
  if (!f.by_prefix.emplace(prefix, std::move(factory)).second) {
    return errors::already_exists("a session factory for target prefix '{}' is already registered", prefix);
  }
  return Status::ok_status();
}

StatusOr<std::shared_ptr<SessionFactory>> SessionFactory::for_target(const std::string& target) {
  SessionFactories& f = session_factories();
  std::lock_guard<std::mutex> l(f.mu);
  const std::pair<const std::string, std::shared_ptr<SessionFactory>>* best = nullptr;
  for (const auto& entry : f.by_prefix) {
    if (serves(entry.first, target) && (best == nullptr || entry.first.size() > best->first.size())) best = &entry;
  }
  if (best != nullptr) return best->second;
  std::string known;
  for (const auto& entry : f.by_prefix) {
    const bool scheme = entry.first.size() > 3 && entry.first.compare(entry.first.size() - 3, 3, "://") == 0;
    known += fmt::format("{}\"{}{}\"", known.empty() ? "" : ", ", entry.first, scheme ? "host:port" : "");
  }
  return errors::invalid_argument("session target '{}': expected one of {}", target, known);
}

SessionFactoryRegistrar::SessionFactoryRegistrar(std::initializer_list<const char*> prefixes,
                                                 std::shared_ptr<SessionFactory> factory) {
  for (const char* prefix : prefixes) {
    Status st = SessionFactory::register_factory(prefix, factory);
    TESSERA_CHECK(st.ok());
  }
}

StatusOr<Node*> checked_output(const Output& o, const GraphImpl& g, const char* what) {
  if (o.is_null()) return errors::invalid_argument("{}: null Output", what);
  Node* n = o.node();
  if (n->graph != &g) return errors::invalid_argument("{} '{}' is not an element of this session's graph", what, o.name());
  if (o.index() < 0 || o.index() >= static_cast<int>(n->output_dtypes.size())) {
    return errors::invalid_argument("{} '{}': op has no output {}", what, o.name(), o.index());
  }
  return n;
}

StatusOr<Node*> checked_target(const Operation& op, const GraphImpl& g) {
  if (op.is_null()) return errors::invalid_argument("target: null Operation");
  Node* n = op.node();
  if (n->graph != &g) return errors::invalid_argument("target '{}' is not an element of this session's graph", n->name);
  return n;
}

Status check_callable_signature(const GraphImpl& g, const std::vector<Output>& fetches,
                                const std::vector<Output>& feeds, const std::vector<Operation>& targets) {
  for (const Output& o : fetches) TESSERA_RETURN_IF_ERROR(checked_output(o, g, "fetch").status());
  for (std::size_t i = 0; i < feeds.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(checked_output(feeds[i], g, "feed").status());
    for (std::size_t j = 0; j < i; ++j) {
      if (feeds[j] == feeds[i]) return errors::invalid_argument("feed '{}' is listed twice", feeds[i].name());
    }
  }
  for (const Operation& op : targets) TESSERA_RETURN_IF_ERROR(checked_target(op, g).status());
  return Status();
}

Status check_feed_count(std::size_t feeds, const std::vector<Tensor>& values) {
  if (values.size() != feeds) {
    return errors::invalid_argument("the callable has {} feeds, it was called with {} values", feeds, values.size());
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i].is_null()) return errors::invalid_argument("the callable's feed {} is a null tensor", i);
  }
  return Status();
}

namespace {

// The default callable: run() with the values in a FeedMap.
class RunCallable final : public CallableBackend {
 public:
  RunCallable(SessionBackend& session, std::vector<Output> fetches, std::vector<Output> feeds,
              std::vector<Operation> targets)
      : session_(session), fetches_(std::move(fetches)), feeds_(std::move(feeds)), targets_(std::move(targets)) {}
  std::vector<Tensor> call(const std::vector<Tensor>& values) override {
    check_feed_count(feeds_.size(), values).raise();
    FeedMap feeds;
    for (std::size_t i = 0; i < values.size(); ++i) feeds.emplace(feeds_[i], values[i]);
    return session_.run(fetches_, feeds, targets_, RunOptions{}, nullptr);
  }

 private:
  SessionBackend& session_;
  const std::vector<Output> fetches_;
  const std::vector<Output> feeds_;
  const std::vector<Operation> targets_;
};

}  // namespace

std::shared_ptr<CallableBackend> SessionBackend::make_callable(const std::vector<Output>& fetches,
                                                               const std::vector<Output>& feeds,
                                                               const std::vector<Operation>& targets) {
  check_callable_signature(graph().impl(), fetches, feeds, targets).raise();
  return std::make_shared<RunCallable>(*this, fetches, feeds, targets);
}

}  // namespace tessera::internal

// ---- Session: the public edge ----

namespace tessera {

namespace {

std::unique_ptr<internal::SessionBackend> make_session(Graph& g, const std::string& target,
                                                       const SessionOptions& options) {
  auto factory = internal::SessionFactory::for_target(target);
  factory.status().raise();
  return factory.value()->create(g, target, options);
}

}  // namespace

Session::Session(Graph& g, SessionOptions options) : impl_(make_session(g, "", options)) {}

Session::Session(Graph& g, const std::string& target, SessionOptions options)
    : impl_(make_session(g, target, options)) {}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

std::vector<Tensor> Session::run(const std::vector<Output>& fetches, const FeedMap& feeds,
                                 const std::vector<Operation>& targets, const RunOptions& options) {
  return run(fetches, feeds, targets, options, nullptr);
}

std::vector<Tensor> Session::run(std::initializer_list<Output> fetches, const FeedMap& feeds,
                                 const std::vector<Operation>& targets, const RunOptions& options) {
  return run(std::vector<Output>(fetches), feeds, targets, options, nullptr);
}

Tensor Session::run(Output fetch, const FeedMap& feeds) {
  return run(std::vector<Output>{fetch}, feeds, {}, RunOptions{}, nullptr).front();
}

std::vector<Tensor> Session::run(const std::vector<Output>& fetches, const FeedMap& feeds,
                                 const std::vector<Operation>& targets, const RunOptions& options,
                                 RunMetadata* metadata) {
  if (!impl_) throw FailedPreconditionError("use of a moved-from Session");
  return impl_->run(fetches, feeds, targets, options, metadata);
}

void Session::run(Operation target, const FeedMap& feeds) { run({}, feeds, {target}, RunOptions{}, nullptr); }

Callable Session::make_callable(const std::vector<Output>& fetches, const std::vector<Output>& feeds,
                               const std::vector<Operation>& targets) {
  if (!impl_) throw FailedPreconditionError("use of a moved-from Session");
  return Callable(impl_->make_callable(fetches, feeds, targets));
}

std::vector<Tensor> Callable::operator()(const std::vector<Tensor>& feed_values) const {
  if (!impl_) throw FailedPreconditionError("use of a default-constructed Callable");
  return impl_->call(feed_values);
}

void Session::close() {
  if (!impl_) throw FailedPreconditionError("use of a moved-from Session");
  impl_->close();
}

Graph& Session::graph() const {
  if (!impl_) throw FailedPreconditionError("use of a moved-from Session");
  return impl_->graph();
}

}  // namespace tessera
