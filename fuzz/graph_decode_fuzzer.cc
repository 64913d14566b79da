// Fuzz target: a GraphDef as a peer may send it (CreateSession, ExtendSession, RegisterGraph). The
// input is a serialized GraphDef, decoded with decode_graph into a fresh graph: names, op types,
// attrs, devices, input syntax, references, cycles, then every op's shape inference as the nodes are
// added. A def that refers to nodes outside itself is decoded again into a graph that has the nodes
// of build_base_graph (fuzz_util.h), as ExtendSession does. Properties: a def that decodes adds
// exactly its nodes under their names, and the decoded graph encodes and decodes again (into a
// fresh graph) to the same number of nodes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

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

void decode(const wire::GraphDef& def) {
  {
    Graph g;
    std::vector<internal::Node*> added;
    Status st = wire::decode_graph(def, &g.impl(), &added);
    if (st.ok()) {
      check_added(def, added);
      // What decodes, encodes; and its encoding decodes again.
      auto again = wire::encode_graph(g.impl());
      FUZZ_CHECK(again.ok());
      FUZZ_CHECK(again.value().node_size() == def.node_size());
      Graph g2;
      Status st2 = wire::decode_graph(again.value(), &g2.impl());
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
  std::vector<internal::Node*> added;
  Status st = wire::decode_graph(def, &base.impl(), &added);
  if (st.ok()) {
    check_added(def, added);
    FUZZ_CHECK(base.impl().num_nodes() == before + def.node_size());
  }
}

void run(const uint8_t* data, size_t size) {
  if (size > static_cast<size_t>(INT32_MAX)) return;
  wire::GraphDef def;
  if (!def.ParseFromArray(data, static_cast<int>(size))) return;
  try {
    decode(def);
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
