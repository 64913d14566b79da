// Fuzz target: the files a user, an operator or an attacker with write access to a directory hands
// tessera. The input is written to a file and read as a checkpoint index (get_checkpoint_state), a
// checkpoint (read_checkpoint), a key file, a cluster keys file and a cluster file
// (ClusterSpec::from_file). Each answers with its documented typed error or a value; properties: a
// loaded key pair is two 40-character keys, a read checkpoint state names a latest path that it
// also lists.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz/fuzz_util.h"
#include "transport/security.h"

namespace {

using namespace tessera;
namespace fs = std::filesystem;

// This process's scratch directory (one fuzzing process runs one input at a time).
const fs::path& scratch() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("tessera_input_files_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

std::string write(const std::string& name, const std::string& text) {
  const fs::path p = scratch() / name;
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  return p.string();
}

void check_index(const std::string& text) {
  write("checkpoint", text);
  try {
    const auto state = train::get_checkpoint_state(scratch().string());
    FUZZ_CHECK(state.has_value());
    FUZZ_CHECK(!state->model_checkpoint_path.empty());
  } catch (const DataLossError&) {
    // Not an index: malformed JSON, too deep, wrong types.
  }
}

void check_checkpoint(const std::string& text) {
  const std::string path = write("model", text);
  try {
    for (const auto& [name, tensor] : train::read_checkpoint(path)) {
      FUZZ_CHECK(!name.empty());
      FUZZ_CHECK(tensor.shape().fully_defined());
    }
  } catch (const DataLossError&) {
    // Corrupt, truncated or foreign.
  }
}

void check_keys(const std::string& text) {
  const std::string key_file = write("task.key", text);
  fs::permissions(key_file, fs::perms::owner_read | fs::perms::owner_write);  // as keygen writes it
  auto pair = internal::load_key_pair(key_file);
  if (pair.ok()) {
    FUZZ_CHECK(pair.value().public_key.size() == 40 && pair.value().secret_key.size() == 40);
  } else {
    // Unimplemented: a libzmq without CURVE cannot check the pair.
    FUZZ_CHECK(pair.status().code() == ErrorCode::kInvalidArgument ||
               pair.status().code() == ErrorCode::kUnimplemented);
  }
  auto cluster_keys = internal::load_cluster_keys(write("cluster.keys", text));
  if (!cluster_keys.ok()) FUZZ_CHECK(cluster_keys.status().code() == ErrorCode::kInvalidArgument);
}

void check_cluster_file(const std::string& text) {
  try {
    const train::ClusterSpec spec = train::ClusterSpec::from_file(write("cluster.json", text));
    FUZZ_CHECK(train::ClusterSpec::from_json(spec.to_json()) == spec);
  } catch (const InvalidArgumentError&) {
    // Malformed, too large, too deep, invalid names or addresses.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_index(text);
  check_checkpoint(text);
  check_keys(text);
  check_cluster_file(text);
  return 0;
}
