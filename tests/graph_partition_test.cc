// The one partitioner (core/graph_partition.h, Note [Graph partition]): by device with a client
// partition (an in-process session) and by task without one (a cluster master). Black-box over the
// partitions it returns: which nodes land where, one transfer per tensor per destination, how
// feeds and fetches are carried, the names and attrs a _Send/_Recv pair shares.
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "core/graph_partition.h"
#include "core/node.h"
#include "core/status.h"
#include "tests/testing/test_util.h"
#include "distributed/wire.h"

namespace tessera::internal {
namespace {

constexpr const char* kHost = "/job:localhost/replica:0/task:0/device:CPU:0";
constexpr const char* kSimA = "/job:localhost/replica:0/task:0/device:SIM:0";
constexpr const char* kSimB = "/job:localhost/replica:0/task:0/device:SIM:1";

std::vector<const Node*> all_nodes(Graph& g) {
  std::vector<Node*> nodes = g.impl().nodes();
  return {nodes.begin(), nodes.end()};
}

// Partition by device, nodes placed by name (unnamed ones on the host).
PartitionOptions by_device(const std::map<std::string, std::string>& placed) {
  PartitionOptions o;
  o.device_of = [placed](const Node& n) {
    auto it = placed.find(n.name);
    return it == placed.end() ? std::string(kHost) : it->second;
  };
  o.partition_of = [](const std::string& d) { return d; };
  o.client_partition = kHost;
  return o;
}

const GraphPartition& partition_named(const PartitionedStep& s, const std::string& name) {
  for (const GraphPartition& p : s.partitions) {
    if (p.name == name) return p;
  }
  ADD_FAILURE() << "no partition " << name;
  return s.partitions.front();
}

std::vector<const Node*> of_type(const GraphPartition& p, const std::string& type) {
  std::vector<const Node*> out;
  for (const Node* n : p.nodes) {
    if (n->type == type) out.push_back(n);
  }
  return out;
}

const Node* copy_named(const GraphPartition& p, const std::string& name) {
  for (const Node* n : p.nodes) {
    if (n->origin != nullptr && n->name == name) return n;
  }
  return nullptr;
}

TEST(GraphPartitionTest, ByDeviceOneTransferPerTensorPerDestinationAndTheHostHoldsFeedsAndFetches) {
  Graph g;
  auto p = ops::placeholder(g, DType::Float32, Shape{}, "p");
  auto a = ops::add(p, ops::constant(g, 1.0f, "one"), "a");   // SIM:0
  auto b = ops::mul(a, a, "b");                               // SIM:1: reads a twice
  auto c = ops::add(b, a, "c");                               // SIM:1: reads a again
  auto d = ops::add(a, ops::constant(g, 2.0f, "two"), "d");   // host
  auto opts = by_device({{"a", kSimA}, {"one", kSimA}, {"b", kSimB}, {"c", kSimB}});
  std::vector<Endpoint> feeds{{p.node(), 0}}, fetches{{c.node(), 0}, {d.node(), 0}, {p.node(), 0}};
  auto step = partition_step(g.impl(), all_nodes(g), feeds, fetches, {}, opts);
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  const PartitionedStep& s = step.value();
  ASSERT_EQ(s.partitions.size(), 3u);
  EXPECT_EQ(s.partitions[0].name, kHost);  // the client first

  // p: host -> SIM:0; a: SIM:0 -> SIM:1 once (three reads there) and SIM:0 -> host; c: SIM:1 -> host.
  EXPECT_EQ(s.num_transfers, 4);
  EXPECT_EQ(s.num_slots, 4);
  const GraphPartition& sim_b = partition_named(s, kSimB);
  auto recvs_b = of_type(sim_b, kRecvOp);
  ASSERT_EQ(recvs_b.size(), 1u);
  const Node* cb = copy_named(sim_b, "c");
  const Node* bb = copy_named(sim_b, "b");
  ASSERT_NE(cb, nullptr);
  ASSERT_NE(bb, nullptr);
  EXPECT_EQ(bb->inputs[0].node, recvs_b[0]);
  EXPECT_EQ(bb->inputs[1].node, recvs_b[0]);
  EXPECT_EQ(cb->inputs[1].node, recvs_b[0]);
  EXPECT_EQ(cb->inputs[0].node, bb);

  // The pair shares a slot and names both devices and the tensor.
  const Node* recv = recvs_b[0];
  EXPECT_EQ(recv->attr<std::string>("tensor_name"), "a:0");
  EXPECT_EQ(recv->attr<std::string>("send_device"), kSimA);
  EXPECT_EQ(recv->attr<std::string>("recv_device"), kSimB);
  EXPECT_EQ(recv->attr<DType>("dtype"), DType::Float32);
  const GraphPartition& sim_a = partition_named(s, kSimA);
  const Node* send_to_b = nullptr;
  for (const Node* n : of_type(sim_a, kSendOp)) {
    if (n->attr<std::string>("recv_device") == kSimB) send_to_b = n;
  }
  ASSERT_NE(send_to_b, nullptr);
  EXPECT_EQ(s.slot_of.at(send_to_b), s.slot_of.at(recv));
  EXPECT_NE(std::find(sim_a.targets.begin(), sim_a.targets.end(), send_to_b), sim_a.targets.end());

  // The host: the feed's Placeholder (fed in step order), the fetches in order, p fetched as fed.
  const GraphPartition& host = s.partitions[0];
  ASSERT_EQ(host.feeds.size(), 1u);
  EXPECT_EQ(host.feeds[0].node->type, "Placeholder");
  EXPECT_EQ(host.feed_index, std::vector<int>{0});
  ASSERT_EQ(host.fetches.size(), 3u);
  EXPECT_EQ(host.fetches[0].node->type, kRecvOp);
  EXPECT_EQ(host.fetches[0].node->attr<std::string>("tensor_name"), "c:0");
  EXPECT_EQ(host.fetches[1].node, copy_named(host, "d"));
  EXPECT_EQ(host.fetches[2].node, host.feeds[0].node);
  EXPECT_EQ(s.fetch_from, (std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {0, 2}}));
  // Every copy points at its original.
  for (const GraphPartition& part : s.partitions) {
    for (const Node* n : part.nodes) {
      if (n->origin != nullptr) {
        EXPECT_EQ(n->origin->name, n->name);
      }
    }
  }
}

TEST(GraphPartitionTest, AControlEdgeAcrossDevicesIsATokenPair) {
  Graph g;
  auto x = ops::constant(g, 1.0f, "x");
  auto y = ops::add(x, x, "y");  // SIM:0
  Output z;
  {
    auto scope = g.control_dependencies({y.op()});
    z = ops::add(x, ops::constant(g, 3.0f, "three"), "z");  // host, after y
  }
  auto step = partition_step(g.impl(), all_nodes(g), {}, {{z.node(), 0}}, {}, by_device({{"y", kSimA}}));
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  const PartitionedStep& s = step.value();
  EXPECT_EQ(s.num_transfers, 1);  // x to SIM:0
  EXPECT_EQ(s.num_slots, 2);      // and the token
  const GraphPartition& host = s.partitions[0];
  auto recvs = of_type(host, kRecvOp);
  ASSERT_EQ(recvs.size(), 1u);
  EXPECT_EQ(recvs[0]->attr<std::string>("tensor_name"), "^y");
  EXPECT_EQ(recvs[0]->output_dtypes, std::vector<DType>{DType::Bool});
  EXPECT_EQ(recvs[0]->name.rfind("_crecv/", 0), 0u);
  const Node* zc = copy_named(host, "z");
  ASSERT_NE(zc, nullptr);
  ASSERT_EQ(zc->control_inputs.size(), 1u);
  EXPECT_EQ(zc->control_inputs[0], recvs[0]);
  auto sends = of_type(partition_named(s, kSimA), kSendOp);
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_TRUE(sends[0]->inputs.empty());
  EXPECT_EQ(sends[0]->control_inputs.size(), 1u);
}

TEST(GraphPartitionTest, ByTaskEachTaskIsFedDirectlyAndYieldsItsOwnFetches) {
  const std::string ps = "/job:ps/replica:0/task:0", worker = "/job:worker/replica:0/task:0";
  Graph g;
  auto p = ops::placeholder(g, DType::Int32, Shape{}, "p");
  auto w = ops::add(p, ops::constant(g, 1, "one"), "w");  // worker GPU
  auto v = ops::mul(p, w, "v");                           // ps: reads p and w
  std::map<std::string, std::string> placed{{"w", worker + "/device:GPU:0"}, {"one", worker + "/device:GPU:0"},
                                            {"v", ps + "/device:CPU:0"}};
  PartitionOptions opts;
  opts.device_of = [&](const Node& n) { return placed.at(n.name); };
  opts.partition_of = [](const std::string& d) { return d.substr(0, d.find("/device:")); };
  opts.transfer_device = [](const std::string& task) { return task + "/device:CPU:0"; };
  std::vector<const Node*> needed{w.node(), v.node(), g.impl().find("one")};
  auto step = partition_step(g.impl(), needed, {{p.node(), 0}}, {{v.node(), 0}, {p.node(), 0}, {v.node(), 0}}, {},
                             opts);
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  const PartitionedStep& s = step.value();
  ASSERT_EQ(s.partitions.size(), 2u);
  const GraphPartition& wp = partition_named(s, worker);
  const GraphPartition& pp = partition_named(s, ps);
  // Both tasks consume p: each has its own Placeholder for feed 0.
  ASSERT_EQ(wp.feeds.size(), 1u);
  ASSERT_EQ(pp.feeds.size(), 1u);
  EXPECT_EQ(wp.feed_index, std::vector<int>{0});
  EXPECT_EQ(pp.feed_index, std::vector<int>{0});
  EXPECT_EQ(s.num_transfers, 1);  // w: worker -> ps
  auto recvs = of_type(pp, kRecvOp);
  ASSERT_EQ(recvs.size(), 1u);
  EXPECT_EQ(recvs[0]->attr<std::string>("send_device"), worker + "/device:CPU:0");
  EXPECT_EQ(recvs[0]->attr<std::string>("recv_device"), ps + "/device:CPU:0");
  EXPECT_EQ(recvs[0]->requested_device, ps + "/device:CPU:0");
  // A fetch of a fed tensor comes from the feed; a fetch asked twice is yielded once.
  const int pi = static_cast<int>(&pp - s.partitions.data());
  EXPECT_EQ(s.fetch_from, (std::vector<std::pair<int, int>>{{pi, 0}, {-1, 0}, {pi, 0}}));
  ASSERT_EQ(pp.fetches.size(), 1u);
  EXPECT_EQ(pp.fetches[0].node, copy_named(pp, "v"));
  EXPECT_TRUE(wp.fetches.empty());

  // A partition encodes (no ':' in the names it made) and decodes into a graph of its own.
  for (const GraphPartition& part : s.partitions) {
    auto def = wire::encode_graph(g.impl(), std::vector<const Node*>(part.nodes.begin(), part.nodes.end()));
    ASSERT_TRUE(def.ok()) << def.status().to_string();
    Graph other;
    Status st = wire::decode_graph(def.value(), &other.impl());
    EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(other.impl().num_nodes(), static_cast<int>(part.nodes.size()));
  }
}

TEST(GraphPartitionTest, AnInputMissingFromTheStepIsAnInternalErrorNamingTheOp) {
  Graph g;
  auto x = ops::constant(g, 1.0f, "x");
  auto y = ops::add(x, x, "y");
  auto step = partition_step(g.impl(), {y.node()}, {}, {{y.node(), 0}}, {}, by_device({}));
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), ErrorCode::kInternal);
  EXPECT_NE(step.status().message().find("x:0"), std::string::npos) << step.status().to_string();
  EXPECT_NE(step.status().message().find("y (Add)"), std::string::npos) << step.status().to_string();
}

}  // namespace
}  // namespace tessera::internal
