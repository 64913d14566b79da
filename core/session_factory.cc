#include "core/session_factory.h"

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "core/node.h"
#include "tessera/errors.h"

namespace tessera::internal {

namespace {

struct Factories {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<SessionFactory>> by_prefix;  // guarded by mu
};

// Leaked on purpose: registrations happen during static initialization.
Factories& factories() {
  static Factories* f = new Factories();
  return *f;
}

bool serves(const std::string& prefix, const std::string& target) {
  if (target == prefix) return true;
  return prefix.size() > 3 && prefix.compare(prefix.size() - 3, 3, "://") == 0 && target.rfind(prefix, 0) == 0;
}

}  // namespace

Status SessionFactory::register_factory(const std::string& prefix, std::shared_ptr<SessionFactory> factory) {
  if (factory == nullptr) return errors::invalid_argument("session factory for '{}' is null", prefix);
  Factories& f = factories();
  std::lock_guard<std::mutex> l(f.mu);
  if (!f.by_prefix.emplace(prefix, std::move(factory)).second) {
    return errors::already_exists("a session factory for target prefix '{}' is already registered", prefix);
  }
  return Status::ok_status();
}

StatusOr<std::shared_ptr<SessionFactory>> SessionFactory::for_target(const std::string& target) {
  Factories& f = factories();
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

void Session::close() {
  if (!impl_) throw FailedPreconditionError("use of a moved-from Session");
  impl_->close();
}

Graph& Session::graph() const {
  if (!impl_) throw FailedPreconditionError("use of a moved-from Session");
  return impl_->graph();
}

}  // namespace tessera
