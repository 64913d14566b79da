// Kinds of session plug in through SessionFactory (core/session_factory.h): the public Session
// goes to the factory registered for its target's prefix, a test's own included.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "core/session_factory.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using internal::SessionBackend;
using internal::SessionFactory;

// A session kind that only this file knows: it answers every fetch with the target it was made
// for, so a test sees which factory made the session and with what.
class EchoSession final : public SessionBackend {
 public:
  EchoSession(Graph& g, std::string target) : graph_(g), target_(std::move(target)) {}
  std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap&, const std::vector<Operation>&,
                          const RunOptions&, RunMetadata*) override {
    if (closed_) throw CancelledError("attempted to use a closed session");
    return std::vector<Tensor>(fetches.size(), Tensor::scalar<int32_t>(static_cast<int32_t>(target_.size())));
  }
  void close() override { closed_ = true; }
  Graph& graph() const override { return graph_; }

 private:
  Graph& graph_;
  const std::string target_;
  std::atomic<bool> closed_{false};
};

std::atomic<int> echo_sessions_made{0};

class EchoSessionFactory final : public SessionFactory {
 public:
  std::unique_ptr<SessionBackend> create(Graph& graph, const std::string& target, const SessionOptions&) override {
    ++echo_sessions_made;
    return std::make_unique<EchoSession>(graph, target);
  }
};
TESSERA_REGISTER_SESSION_FACTORY(EchoSessionFactory, "echo://");

// An exact target (no "://"): serves that string only.
class ExactSessionFactory final : public SessionFactory {
 public:
  std::unique_ptr<SessionBackend> create(Graph& graph, const std::string& target, const SessionOptions&) override {
    return std::make_unique<EchoSession>(graph, target + "!");
  }
};
TESSERA_REGISTER_SESSION_FACTORY(ExactSessionFactory, "exact-target");

TEST(SessionFactoryTest, ATestsSessionKindServesItsPrefix) {
  Graph g;
  auto c = ops::constant(g, 1.0f);
  const int before = echo_sessions_made.load();
  Session s(g, "echo://abc");
  EXPECT_EQ(echo_sessions_made.load(), before + 1);
  EXPECT_EQ(s.run(c).scalar<int32_t>(), static_cast<int32_t>(std::string("echo://abc").size()));
  EXPECT_EQ(&s.graph(), &g);
  s.close();
  EXPECT_THROW(s.run(c), CancelledError);
}

TEST(SessionFactoryTest, TheBuiltInKindsKeepTheirTargets) {
  Graph g;
  auto c = ops::add(ops::constant(g, 2.0f), ops::constant(g, 3.0f));
  Session plain(g);
  Session local(g, "local");
  Session empty(g, "");
  EXPECT_EQ(plain.run(c).scalar<float>(), 5.0f);
  EXPECT_EQ(local.run(c).scalar<float>(), 5.0f);
  EXPECT_EQ(empty.run(c).scalar<float>(), 5.0f);
}

TEST(SessionFactoryTest, AnUnknownTargetListsTheKnownOnes) {
  Graph g;
  EXPECT_THROW_MSG(Session(g, "nope://host:1"), InvalidArgumentError, "tessera://host:port");
  EXPECT_THROW_MSG(Session(g, "localhost"), InvalidArgumentError, "\"local\"");
  // An exact prefix such as "local" does not serve a longer target.
  EXPECT_THROW(Session(g, "local2"), InvalidArgumentError);
}

TEST(SessionFactoryTest, RegistrationRefusesATakenPrefixAndNull) {
  EXPECT_EQ(SessionFactory::register_factory("echo://", std::make_shared<EchoSessionFactory>()).code(),
            ErrorCode::kAlreadyExists);
  EXPECT_EQ(SessionFactory::register_factory("other://", nullptr).code(), ErrorCode::kInvalidArgument);
}

TEST(SessionFactoryTest, AnExactTargetServesOnlyItself) {
  auto exact = SessionFactory::for_target("exact-target");
  ASSERT_TRUE(exact.ok()) << exact.status().to_string();
  EXPECT_NE(dynamic_cast<ExactSessionFactory*>(exact.value().get()), nullptr);
  EXPECT_FALSE(SessionFactory::for_target("exact-target/x").ok());
  auto scheme = SessionFactory::for_target("echo://anything/at/all");
  ASSERT_TRUE(scheme.ok()) << scheme.status().to_string();
  EXPECT_NE(dynamic_cast<EchoSessionFactory*>(scheme.value().get()), nullptr);
  Graph g;
  Session s(g, "exact-target");
  EXPECT_EQ(s.run(ops::constant(g, 1.0f)).scalar<int32_t>(), static_cast<int32_t>(std::string("exact-target!").size()));
}

}  // namespace
}  // namespace tessera
