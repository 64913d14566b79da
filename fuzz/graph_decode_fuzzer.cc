// Fuzz target: a GraphDef as a peer may send it (CreateSession, ExtendSession, RegisterGraph). The
// input is a serialized GraphDef, decoded with decode_graph into a fresh graph: names, op types,
// attrs, devices, input syntax, references, cycles, then every op's shape inference as the nodes are
// added. A def that refers to nodes outside itself is decoded again into a graph that has the nodes
// of build_base_graph (fuzz_util.h), as ExtendSession does. Properties: a def that decodes adds
// exactly its nodes under their names, and the decoded graph encodes and decodes again (into a
// fresh graph) to the same number of nodes.
//
// The graph-size limit (decode_graph's max_nodes, ServerOptions::max_graph_nodes) is fuzzed too:
// the input's last byte gives a limit L of 1..64 (the input stays a plain GraphDef, so the seeds are
// what a peer sends). Every decode runs under a limit (see decode_limited): L where the graph fits
// in it, else the tightest one it fits (exactly its size), and each graph that would pass L, and
// every graph at one node over its size, is decoded once more under that limit, which must refuse
// it with ResourceExhausted naming the limit before adding a node.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fuzz/fuzz_util.h"
#include "distributed/wire.h"

namespace {

using namespace tessera;
namespace wire = tessera::internal::wire;

void check_added(const wire::GraphDef& def, const std::vector<internal::Node*>& added) {
  FUZZ_CHECK(static_cast<int>(added.size()) == def.node_size());
  for (const internal::Node* node : added) FUZZ_CHECK(node != nullptr);
  for (int i = 0; i < def.node_size(); ++i) {
    bool found = false;
    for (const internal::Node* node : added) found = found || node->name == def.node(i).name();
    FUZZ_CHECK(found);
  }
}

// decode_graph(def, into, added, limit) and what it guarantees about the limit, whatever the def:
//   * into + def over the limit: an error, and nothing added (the check comes before any node is
//     built); with the right wire version (the first thing checked) that error is ResourceExhausted
//     and its message names the limit and the size the graph would have had.
//   * within the limit: the graph never passes the limit (it may keep the nodes added before a
//     shape inference error, never more than the def's), `added` lists exactly the nodes the graph
//     gained, and a refusal is never the graph-size one (ServerOptions::max_graph_nodes).
Status decode_limited(const wire::GraphDef& def, internal::GraphImpl* into, std::vector<internal::Node*>* added,
                      int64_t limit) {
  const int64_t before = into->num_nodes();
  const int64_t want = before + def.node_size();
  added->clear();
  Status st = wire::decode_graph(def, into, added, limit);
  const int64_t after = into->num_nodes();
  FUZZ_CHECK(after == before + static_cast<int64_t>(added->size()));
  if (want > limit) {
    FUZZ_CHECK(!st.ok());
    FUZZ_CHECK(added->empty());
    FUZZ_CHECK(after == before);
    if (def.version() == wire::kWireVersion) {
      if (st.code() != ErrorCode::kResourceExhausted) {
        std::fprintf(stderr, "graph of %lld nodes over a limit of %lld: %s\n", static_cast<long long>(want),
                     static_cast<long long>(limit), st.to_string().c_str());
      }
      FUZZ_CHECK(st.code() == ErrorCode::kResourceExhausted);
      FUZZ_CHECK(st.message().find(fmt::format("limit of {} nodes", limit)) != std::string::npos);
      FUZZ_CHECK(st.message().find(fmt::format("a graph of {} nodes", want)) != std::string::npos);
    }
    return st;
  }
  FUZZ_CHECK(after <= limit);
  FUZZ_CHECK(static_cast<int64_t>(added->size()) <= def.node_size());
  if (st.ok()) FUZZ_CHECK(after == want);
  if (!st.ok() && st.code() == ErrorCode::kResourceExhausted) {
    FUZZ_CHECK(st.message().find("max_graph_nodes") == std::string::npos);
  }
  return st;
}

// The refusals, which cost nothing: under the fuzzed limit when the graph would pass it, and one
// node short of the graph's size.
void check_refusals(const wire::GraphDef& def, internal::GraphImpl* into, int64_t limit) {
  const int64_t want = static_cast<int64_t>(into->num_nodes()) + def.node_size();
  std::vector<internal::Node*> added;
  // An error whatever the def; decode_limited checks which.
  if (want > limit) (void)decode_limited(def, into, &added, limit);
  if (want >= 1 && want - 1 != limit) (void)decode_limited(def, into, &added, want - 1);
}

void decode(const wire::GraphDef& def, int64_t limit) {
  {
    Graph g;
    check_refusals(def, &g.impl(), limit);
    std::vector<internal::Node*> added;
    Status st = decode_limited(def, &g.impl(), &added, std::max<int64_t>(limit, def.node_size()));
    if (st.ok()) {
      check_added(def, added);
      // What decodes, encodes; and its encoding decodes again, under the tightest limit.
      auto again = wire::encode_graph(g.impl());
      FUZZ_CHECK(again.ok());
      FUZZ_CHECK(again.value().node_size() == def.node_size());
      Graph g2;
      std::vector<internal::Node*> added2;
      Status st2 = decode_limited(again.value(), &g2.impl(), &added2, def.node_size());
      if (!st2.ok()) std::fprintf(stderr, "re-decoding failed: %s\n", st2.to_string().c_str());
      FUZZ_CHECK(st2.ok());
      FUZZ_CHECK(g2.impl().num_nodes() == def.node_size());
      return;
    }
    if (st.message().find("dangling input") == std::string::npos) return;
  }
  // References to nodes the def does not have: an extension of a graph that may have them.
  Graph base;
  fuzz::build_base_graph(base);
  const int before = base.impl().num_nodes();
  check_refusals(def, &base.impl(), limit);
  std::vector<internal::Node*> added;
  Status st = decode_limited(def, &base.impl(), &added, std::max<int64_t>(limit, before + def.node_size()));
  if (st.ok()) {
    check_added(def, added);
    FUZZ_CHECK(base.impl().num_nodes() == before + def.node_size());
  }
}

void run(const uint8_t* data, size_t size) {
  if (size > static_cast<size_t>(INT32_MAX)) return;
  wire::GraphDef def;
  if (!def.ParseFromArray(data, static_cast<int>(size))) return;
  const int64_t limit = size == 0 ? 1 : 1 + data[size - 1] % 64;
  try {
    decode(def, limit);
  } catch (const tessera::Error&) {
    // A typed error is an acceptable answer to bad input.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::quiet_protobuf();
  run(data, size);
  return 0;
}
