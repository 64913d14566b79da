// Kinds of session plug in here: the public tessera::Session forwards to a SessionBackend that the
// factory registered for its target makes (TensorFlow's SessionFactory is the model). The
// in-process session registers "" and "local" (core/direct_session.cc); the cluster session
// registers "tessera://" and "grpc://" (transport/remote_session.cc). Core names neither.
//
//   class MySessionFactory final : public SessionFactory { ... };
//   TESSERA_REGISTER_SESSION_FACTORY(MySessionFactory, "my://");
//   Session s(graph, "my://somewhere");   // MySessionFactory::create(graph, "my://somewhere", options)
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "tessera/session.h"

namespace tessera::internal {

// What a tessera::Callable runs. Thread-safe. The public edge: call() throws.
class CallableBackend {
 public:
  virtual ~CallableBackend() = default;
  virtual std::vector<Tensor> call(const std::vector<Tensor>& feed_values) = 0;
};

// One session of some kind. The public edge: methods throw tessera's typed errors. Thread-safe:
// run() from any number of threads, close() from any thread.
class SessionBackend {
 public:
  virtual ~SessionBackend() = default;
  virtual std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds,
                                  const std::vector<Operation>& targets, const RunOptions& options,
                                  RunMetadata* metadata) = 0;
  // A callable of one signature. This default checks the signature once and then calls run() with
  // a FeedMap; a session kind with a faster path overrides it.
  virtual std::shared_ptr<CallableBackend> make_callable(const std::vector<Output>& fetches,
                                                         const std::vector<Output>& feeds,
                                                         const std::vector<Operation>& targets);
  virtual void close() = 0;
  virtual Graph& graph() const = 0;
};

// make_callable's checks of a signature, which every kind shares: each output and target of the
// session's graph, no feed listed twice. InvalidArgument otherwise.
Status check_callable_signature(const GraphImpl& g, const std::vector<Output>& fetches,
                                const std::vector<Output>& feeds, const std::vector<Operation>& targets);
// The values fed to a callable: as many as its feeds, each not null (InvalidArgument otherwise;
// dtypes and shapes are the run's to check).
Status check_feed_count(std::size_t feeds, const std::vector<Tensor>& values);

// The checks every kind of session makes on a run's arguments. The node of `o`, which must name an
// output of an op of `g`; InvalidArgument ("feed 'x:3': op has no output 3") otherwise. `what`:
// "feed" or "fetch".
StatusOr<Node*> checked_output(const Output& o, const GraphImpl& g, const char* what);
// The node of target `op`, an op of `g`; InvalidArgument otherwise.
StatusOr<Node*> checked_target(const Operation& op, const GraphImpl& g);

// Makes the sessions of the targets it was registered for. Thread-safe.
class SessionFactory {
 public:
  virtual ~SessionFactory() = default;
  // A session on `target` (the whole string, prefix included); throws the typed error of a target
  // it cannot serve or a session it cannot make.
  virtual std::unique_ptr<SessionBackend> create(Graph& graph, const std::string& target,
                                                 const SessionOptions& options) = 0;

  // Registers `factory` for `prefix`: a prefix ending in "://" serves every target that starts
  // with it, any other serves that exact target ("" and "local"). AlreadyExists for a prefix taken.
  [[nodiscard]] static Status register_factory(const std::string& prefix, std::shared_ptr<SessionFactory> factory);
  // The factory for `target`; InvalidArgument listing the registered prefixes when none serves it.
  static StatusOr<std::shared_ptr<SessionFactory>> for_target(const std::string& target);
};

struct SessionFactoryRegistrar {
  SessionFactoryRegistrar(std::initializer_list<const char*> prefixes, std::shared_ptr<SessionFactory> factory);
};

// At static initialization: one default-constructed `Class` serving every prefix given.
#define TESSERA_REGISTER_SESSION_FACTORY(Class, ...)                                                              \
  static ::tessera::internal::SessionFactoryRegistrar TESSERA_SESSION_FACTORY_CONCAT(tessera_session_factory_, \
                                                                                     __COUNTER__)(            \
      {__VA_ARGS__}, std::make_shared<Class>())
#define TESSERA_SESSION_FACTORY_CONCAT_INNER(a, b) a##b
#define TESSERA_SESSION_FACTORY_CONCAT(a, b) TESSERA_SESSION_FACTORY_CONCAT_INNER(a, b)

}  // namespace tessera::internal
