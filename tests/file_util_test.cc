// Input files read without trust (core/file_util.h): bounded in size, never blocking on a FIFO or
// a device, JSON bounded in depth; and the readers that use them (cluster JSON, checkpoint index,
// key files) refuse such input quickly with a typed error.
#include "core/file_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tessera/tessera.h"
#include "transport/security.h"
#include "tests/testing/test_util.h"

namespace tessera::internal {
namespace {

namespace fs = std::filesystem;

class FileUtilTest : public tessera::testing::TempDirTest {
 protected:
  FileUtilTest() : TempDirTest("tessera_file_util") {}
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  std::string fifo(const std::string& name) {
    const fs::path p = dir_ / name;
    EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0);
    return p.string();
  }
};

TEST_F(FileUtilTest, ReadsRegularFilesWithinTheLimitAndRefusesTheRest) {
  EXPECT_EQ(read_small_file(write("ok", "hello"), "test file", 5).value(), "hello");
  auto big = read_small_file(write("big", std::string(6, 'x')), "test file", 5);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("too large"), std::string::npos);
  EXPECT_EQ(read_small_file((dir_ / "missing").string(), "test file", 5).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(read_small_file(dir_.string(), "test file", 5).status().code(), ErrorCode::kInvalidArgument);
  // A device and a FIFO with no writer: refused at once, never read or waited on.
  auto zero = read_small_file("/dev/zero", "test file", 1 << 20);
  EXPECT_EQ(zero.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("not a regular file"), std::string::npos) << zero.status().message();
  EXPECT_EQ(read_small_file(fifo("pipe"), "test file", 1 << 20).status().code(), ErrorCode::kInvalidArgument);
}

TEST_F(FileUtilTest, JsonDeeperThanTheBoundIsRefused) {
  EXPECT_TRUE(parse_json_bounded(R"({"a": [1, {"b": 2}]})", "test JSON").ok());
  auto deep = parse_json_bounded(std::string(1 << 20, '['), "test JSON");
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("nests deeper than 64"), std::string::npos) << deep.status().message();
  EXPECT_FALSE(parse_json_bounded("{not json", "test JSON").ok());
  const std::string long_name(3 << 20, 'h');
  EXPECT_LT(quoted_prefix(long_name).size(), 260u);
}

TEST_F(FileUtilTest, ReadersRefuseHostileFilesQuickly) {
  // Cluster JSON nested a million levels deep: refused, not parsed into gigabytes.
  EXPECT_THROW(train::ClusterSpec::from_json(std::string(1 << 20, '[')), InvalidArgumentError);
  // A checkpoint index that is deep JSON, or a FIFO: DataLoss naming the index, at once.
  write("checkpoint", std::string(1 << 20, '['));
  try {
    train::get_checkpoint_state(dir_.string());
    ADD_FAILURE() << "a deep index was accepted";
  } catch (const DataLossError& e) {
    EXPECT_NE(std::string(e.what()).find("nests deeper"), std::string::npos) << e.what();
  }
  fs::remove(dir_ / "checkpoint");
  fifo("checkpoint");
  EXPECT_THROW(train::get_checkpoint_state(dir_.string()), DataLossError);
  // Cluster files: a FIFO refused at once, a missing file says what it should hold.
  EXPECT_THROW(train::ClusterSpec::from_file(fifo("cluster")), InvalidArgumentError);
  try {
    train::ClusterSpec::from_file((dir_ / "missing.json").string());
    ADD_FAILURE() << "a missing cluster file was accepted";
  } catch (const NotFoundError& e) {
    EXPECT_NE(std::string(e.what()).find("holds JSON such as"), std::string::npos) << e.what();
  }
  EXPECT_EQ(train::ClusterSpec::from_file(write("c.json", R"({"worker": ["localhost:2222"]})")).num_tasks("worker"), 1);
  // A FIFO as a key file.
  auto keys = load_key_pair(fifo("keys"));
  EXPECT_EQ(keys.status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::internal
