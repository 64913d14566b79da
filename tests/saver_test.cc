// train::Saver: checkpoints round-trip every dtype and shape (under the variables' names or those
// a map gives), restore into fresh graphs and sessions, keep max_to_keep files and the index file,
// and refuse corrupted files before assigning anything (Note [Checkpoint format] in host/saver.cc).
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/half.h"
#include "core/crc32c.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using train::Saver;
using train::SaverOptions;

// ---- Helpers ----

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << p;
}

std::set<std::string> files_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// Values of every dtype, including a scalar, a rank-3 shape and two empty tensors; `seed` varies
// them so that a restore is visible.
std::vector<Tensor> sample_values(int seed) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {
      Tensor::matrix<float>({1.5f + static_cast<float>(seed), -2, 3, 4, 5, 6}, 2, 3),
      Tensor::vector<double>({0.25 + seed, 1e300, -0.0, nan}),
      Tensor::scalar<int32_t>(7 + seed),
      Tensor::from_vector<int64_t>({int64_t{1} << 40, -1, seed, std::numeric_limits<int64_t>::min()}, Shape{2, 2, 1}),
      Tensor::vector<bool>({true, false, seed % 2 == 1, true, seed % 3 == 0}),
      Tensor::from_vector<float>({}, Shape{0}),
      Tensor::from_vector<int64_t>({}, Shape{2, 0}),
      Tensor::scalar<bool>(seed % 2 == 0),
      Tensor::vector<internal::float16_t>({internal::float16_t(0.5f + static_cast<float>(seed)),
                                           internal::float16_t(-65504.0f)}),
      Tensor::vector<internal::bfloat16_t>({internal::bfloat16_t(1e30f), internal::bfloat16_t(-3.0f * static_cast<float>(seed))}),
  };
}
const std::vector<std::string> kNames = {"f32", "layer/f64", "i32", "i64", "flags", "empty", "empty2d", "flag",
                                         "f16", "bf16"};

// A graph of one variable per sample value (initialized to sample_values(0)) and an op per
// variable that sets it to sample_values(seed).
struct Model {
  explicit Model(int seed) {
    const auto initial = sample_values(0);
    const auto updated = sample_values(seed);
    for (std::size_t i = 0; i < initial.size(); ++i) {
      vars.emplace_back(g, initial[i], kNames[i]);
      updates.push_back(vars[i].assign(ops::constant(g, updated[i])).op());
    }
  }
  std::vector<Tensor> values(Session& s) const {
    std::vector<Output> outs;
    for (const auto& v : vars) outs.push_back(v.value());
    return s.run(outs);
  }
  Graph g;
  std::vector<Variable> vars;
  std::vector<Operation> updates;
};

void expect_tensors_eq(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i].equals(want[i])) << kNames[i] << ": got " << got[i].debug_string() << ", want "
                                        << want[i].debug_string();
  }
}

// The layout of a checkpoint file, parsed independently of the library from the documented format.
struct Layout {
  struct Entry {
    std::string name;
    std::size_t data_begin = 0, data_size = 0;
    std::size_t crc_offset = 0;  // of the entry's data checksum, in the index
  };
  std::size_t index_begin = 36, index_size = 0, index_crc_offset = 0, data_begin = 0;
  std::vector<Entry> entries;
};

uint64_t le(const std::string& b, std::size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}
void put_le32(std::string& b, std::size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}

Layout parse_layout(const std::string& b) {
  Layout l;
  const auto count = le(b, 12, 4);
  l.index_size = le(b, 16, 8);
  l.index_crc_offset = l.index_begin + l.index_size;
  l.data_begin = l.index_crc_offset + 4;
  std::size_t at = l.index_begin, data = l.data_begin;
  for (uint64_t i = 0; i < count; ++i) {
    Layout::Entry e;
    const auto name_size = le(b, at, 4);
    e.name = b.substr(at + 4, name_size);
    at += 4 + name_size + 4;  // name, dtype
    const auto rank = le(b, at, 4);
    at += 4 + 8 * rank;
    e.data_size = le(b, at, 8);
    e.crc_offset = at + 8;
    at += 12;
    e.data_begin = data;
    data += e.data_size;
    l.entries.push_back(e);
  }
  EXPECT_EQ(at, l.index_crc_offset);
  EXPECT_EQ(data, b.size());
  return l;
}

// Recomputes the index checksum after an edit of the index (to build files that pass the
// checksums but break another rule).
void reseal_index(std::string& b, const Layout& l) {
  put_le32(b, l.index_crc_offset, internal::crc32c::value(b.data() + l.index_begin, l.index_size));
}
void reseal_header(std::string& b) { put_le32(b, 32, internal::crc32c::value(b.data(), 32)); }

// Each test gets its own folder (ctest runs tests in parallel processes), removed at the end.
class SaverTest : public tessera::testing::TempDirTest {
 protected:
  SaverTest() : TempDirTest("tessera_saver") {}
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Initializes m's variables in `s` and saves them with `saver` as model-1, ..., model-<last>:
  // what the max_to_keep cases rotate through.
  void save_steps(Saver& saver, Session& s, Model& m, int last) const {
    s.run(global_variables_initializer(m.g));
    for (int step = 1; step <= last; ++step) saver.save(s, path("model"), step);
  }
};

// ---- CRC-32C ----

TEST(Crc32cTest, KnownAnswers) {
  using internal::crc32c::extend;
  using internal::crc32c::value;
  EXPECT_EQ(value("123456789", 9), 0xE3069283u);  // the standard check value
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(value(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(value(ones.data(), ones.size()), 0x62A8AB43u);
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(value(ascending.data(), ascending.size()), 0x46DD794Eu);
  EXPECT_EQ(value(nullptr, 0), 0u);
  // Extending piecewise, at every split (the 8-byte and the byte paths), equals one pass.
  const std::string text = "The quick brown fox jumps over the lazy dog, twice over the lazy dog.";
  for (std::size_t split = 0; split <= text.size(); ++split) {
    EXPECT_EQ(extend(value(text.data(), split), text.data() + split, text.size() - split),
              value(text.data(), text.size()))
        << split;
  }
}

// ---- Round trips ----

TEST_F(SaverTest, RoundTripOfEveryDtypeAndShape) {
  Model m(1);
  Saver saver(m.g);  // every variable of the graph
  EXPECT_EQ(saver.var_list().size(), kNames.size());
  Session s(m.g);
  s.run(global_variables_initializer(m.g));
  s.run(ops::group(m.updates));
  const std::string saved = saver.save(s, path("model"));
  EXPECT_EQ(saved, path("model"));
  EXPECT_TRUE(fs::is_regular_file(saved));

  // The file holds exactly the variables, by name.
  const auto contents = train::read_checkpoint(saved);
  ASSERT_EQ(contents.size(), kNames.size());
  const auto want = sample_values(1);
  for (std::size_t i = 0; i < kNames.size(); ++i) {
    ASSERT_TRUE(contents.count(kNames[i])) << kNames[i];
    EXPECT_TRUE(contents.at(kNames[i]).equals(want[i])) << kNames[i];
  }

  // Back to the initial values, then restore.
  s.run(global_variables_initializer(m.g));
  expect_tensors_eq(m.values(s), sample_values(0));
  saver.restore(s, saved);
  expect_tensors_eq(m.values(s), want);
}

TEST_F(SaverTest, RestoreIntoAFreshSessionOfAFreshGraphBuiltTheSameWay) {
  std::string saved;
  {
    Model m(3);
    Saver saver(m.g);
    Session s(m.g);
    s.run(global_variables_initializer(m.g));
    s.run(ops::group(m.updates));
    saved = saver.save(s, path("model"), 7);
  }
  Model fresh(5);
  Saver saver(fresh.g);
  {
    // Restoring initializes: no initializer needed.
    Session s(fresh.g);
    EXPECT_THROW(fresh.values(s), FailedPreconditionError);
    saver.restore(s, saved);
    expect_tensors_eq(fresh.values(s), sample_values(3));
  }
  {
    Session s(fresh.g);
    s.run(global_variables_initializer(fresh.g));
    s.run(ops::group(fresh.updates));
    saver.restore(s, saved);
    expect_tensors_eq(fresh.values(s), sample_values(3));
  }
}

TEST_F(SaverTest, SaverOfAVariableListSavesAndRestoresOnlyThose) {
  Model m(1);
  Saver subset({m.vars[0], m.vars[2]});  // the graph is the variables'
  EXPECT_EQ(subset.var_list().size(), 2u);
  Session s(m.g);
  s.run(global_variables_initializer(m.g));
  s.run(ops::group(m.updates));
  const std::string saved = subset.save(s, path("subset"));
  const auto contents = train::read_checkpoint(saved);
  EXPECT_EQ(contents.size(), 2u);
  EXPECT_TRUE(contents.count("f32"));
  EXPECT_TRUE(contents.count("i32"));

  // Restoring the subset changes those two only.
  s.run(global_variables_initializer(m.g));
  subset.restore(s, saved);
  auto expected = sample_values(0);
  expected[0] = sample_values(1)[0];
  expected[2] = sample_values(1)[2];
  expect_tensors_eq(m.values(s), expected);

  // A saver of every variable finds the others missing.
  Saver all(m.g);
  EXPECT_THROW_MSG(all.restore(s, saved), NotFoundError, "'layer/f64'");

  // A subset restores from a file that holds more.
  const std::string full = all.save(s, path("full"));
  s.run(ops::group(m.updates));
  Saver one({m.vars[1]});
  one.restore(s, full);
  expected = sample_values(1);
  expected[1] = sample_values(0)[1];
  expect_tensors_eq(m.values(s), expected);
}

// TF's Saver(var_list=dict): each variable under the name the map gives it, written and read
// under that name (what ExponentialMovingAverage::variables_to_restore's map is for).
TEST_F(SaverTest, SaverOfAMapUsesItsNames) {
  Graph g;
  Variable a(g, Tensor::scalar(1.0f), "a");
  Variable b(g, Tensor::vector<double>({2, 3}), "b");
  Saver saver(g, {{"renamed_a", a}, {"b", b}});
  EXPECT_EQ(saver.var_list().size(), 2u);
  Session s(g);
  s.run(global_variables_initializer(g));
  const std::string saved = saver.save(s, path("renamed"));
  const auto contents = train::read_checkpoint(saved);
  std::vector<std::string> keys;
  for (const auto& [k, t] : contents) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"b", "renamed_a"}));
  EXPECT_EQ(contents.at("renamed_a").scalar<float>(), 1.0f);

  s.run(a.assign(ops::constant(g, 5.0f)).op());
  saver.restore(s, saved);
  EXPECT_EQ(s.run(a.value()).scalar<float>(), 1.0f);
  // A Saver of the variables' own names looks for "a", which the file lacks.
  EXPECT_THROW_MSG(Saver(g).restore(s, saved), NotFoundError, "variable 'a' not found");
  // A name the file lacks: the error names it and the variable.
  Saver missing(g, {{"nope", a}});
  EXPECT_THROW_MSG(missing.restore(s, saved), NotFoundError, "variable 'nope' (restored into 'a') not found");
  // A file written under the variables' own names restores into other variables by name.
  Variable c(g, Tensor::scalar(0.0f), "c");
  s.run(c.initializer());
  const std::string own = Saver(g, std::vector<Variable>{a}).save(s, path("own"));
  Saver(g, {{"a", c}}).restore(s, own);
  EXPECT_EQ(s.run(c.value()).scalar<float>(), 1.0f);
}

TEST_F(SaverTest, PartialShapeVariableRestoresAnyCompatibleShape) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{-1}, "x");
  Variable v(x, "dynamic");
  Saver saver(g);
  Session s(g);
  s.run(v.initializer(), {{x, Tensor::vector<float>({1, 2, 3})}});
  const std::string saved = saver.save(s, path("dyn"));
  s.run(v.initializer(), {{x, Tensor::vector<float>({9})}});
  saver.restore(s, saved);
  EXPECT_EQ(s.run(v.value()).to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

// ---- Naming, the index file, max_to_keep ----

TEST_F(SaverTest, GlobalStepNamesTheFile) {
  Model m(1);
  Saver saver(m.g);
  Session s(m.g);
  s.run(global_variables_initializer(m.g));
  EXPECT_EQ(saver.save(s, path("model.ckpt"), 42), path("model.ckpt-42"));
  EXPECT_EQ(saver.save(s, path("model.ckpt"), 0), path("model.ckpt-0"));
  EXPECT_EQ(saver.save(s, path("model.ckpt"), int64_t{1} << 40), path("model.ckpt-1099511627776"));
  EXPECT_EQ(saver.save(s, path("model.ckpt")), path("model.ckpt"));
  EXPECT_EQ(files_in(dir_), (std::set<std::string>{"checkpoint", "model.ckpt-42", "model.ckpt-0",
                                                   "model.ckpt-1099511627776", "model.ckpt"}));
}

TEST_F(SaverTest, MaxToKeepDeletesTheOldestAndTheIndexListsTheRest) {
  Model m(1);
  Saver saver(m.g, {}, {.max_to_keep = 2});
  Session s(m.g);
  save_steps(saver, s, m, 4);
  EXPECT_EQ(files_in(dir_), (std::set<std::string>{"checkpoint", "model-3", "model-4"}));
  EXPECT_EQ(saver.last_checkpoints(), (std::vector<std::string>{path("model-3"), path("model-4")}));

  // The index file: JSON, file names relative to the directory.
  const auto index = nlohmann::json::parse(read_bytes(dir_ / "checkpoint"));
  EXPECT_EQ(index["model_checkpoint_path"], "model-4");
  EXPECT_EQ(index["all_model_checkpoint_paths"], (nlohmann::json{"model-3", "model-4"}));
  auto state = train::get_checkpoint_state(dir_.string());
  ASSERT_TRUE(state);
  EXPECT_EQ(state->model_checkpoint_path, path("model-4"));
  EXPECT_EQ(state->all_model_checkpoint_paths, (std::vector<std::string>{path("model-3"), path("model-4")}));

  // Saving to a kept path again makes it the newest instead of a second entry.
  saver.save(s, path("model"), 3);
  EXPECT_EQ(saver.last_checkpoints(), (std::vector<std::string>{path("model-4"), path("model-3")}));
  EXPECT_EQ(files_in(dir_), (std::set<std::string>{"checkpoint", "model-3", "model-4"}));
  EXPECT_EQ(*train::latest_checkpoint(dir_.string()), path("model-3"));
  saver.save(s, path("model"), 5);
  EXPECT_EQ(files_in(dir_), (std::set<std::string>{"checkpoint", "model-3", "model-5"}));
}

TEST_F(SaverTest, MaxToKeepZeroKeepsEveryFileAndIndexesTheLatest) {
  Model m(1);
  Saver saver(m.g, {}, {.max_to_keep = 0});
  Session s(m.g);
  save_steps(saver, s, m, 7);
  EXPECT_EQ(files_in(dir_).size(), 8u);
  EXPECT_TRUE(saver.last_checkpoints().empty());
  auto state = train::get_checkpoint_state(dir_.string());
  ASSERT_TRUE(state);
  EXPECT_EQ(state->all_model_checkpoint_paths, (std::vector<std::string>{path("model-7")}));
}

TEST_F(SaverTest, KeepCheckpointEveryNHoursKeepsTheFilesMaxToKeepWouldDelete) {
  Model m(1);
  // keep_checkpoint_every_n_hours of a few nanoseconds: every one qualifies.
  Saver saver(m.g, {}, {.max_to_keep = 1, .keep_checkpoint_every_n_hours = 1e-12});
  Session s(m.g);
  save_steps(saver, s, m, 3);
  EXPECT_EQ(files_in(dir_), (std::set<std::string>{"checkpoint", "model-1", "model-2", "model-3"}));
  EXPECT_EQ(saver.last_checkpoints(), (std::vector<std::string>{path("model-3")}));
}

TEST_F(SaverTest, RecoverLastCheckpointsLetsANewSaverDeleteTheOldOnes) {
  Model m(1);
  const SaverOptions options{.max_to_keep = 3};
  {
    Saver first(m.g, {}, options);
    Session s(m.g);
    save_steps(first, s, m, 3);
  }
  Saver second(m.g, {}, options);
  auto state = train::get_checkpoint_state(dir_.string());
  ASSERT_TRUE(state);
  auto paths = state->all_model_checkpoint_paths;
  paths.push_back(path("never-written"));  // skipped: no such file
  second.recover_last_checkpoints(paths);
  EXPECT_EQ(second.last_checkpoints(), (std::vector<std::string>{path("model-1"), path("model-2"), path("model-3")}));
  Session s(m.g);
  s.run(global_variables_initializer(m.g));
  second.save(s, path("model"), 4);
  EXPECT_EQ(files_in(dir_), (std::set<std::string>{"checkpoint", "model-2", "model-3", "model-4"}));
}

TEST_F(SaverTest, LatestCheckpoint) {
  EXPECT_EQ(train::latest_checkpoint(dir_.string()), std::nullopt);          // no index file
  EXPECT_EQ(train::latest_checkpoint(path("no-such-dir")), std::nullopt);
  EXPECT_EQ(train::get_checkpoint_state(dir_.string()), std::nullopt);
  Model m(1);
  Saver saver(m.g);
  Session s(m.g);
  s.run(global_variables_initializer(m.g));
  saver.save(s, path("model"), 10);
  EXPECT_EQ(train::latest_checkpoint(dir_.string()), path("model-10"));
  saver.save(s, path("model"), 20);
  EXPECT_EQ(train::latest_checkpoint(dir_.string()), path("model-20"));

  // The directory moves with its checkpoints (the index holds file names).
  const fs::path moved = dir_ / "moved";
  fs::create_directories(moved);
  for (const char* f : {"checkpoint", "model-10", "model-20"}) fs::rename(dir_ / f, moved / f);
  EXPECT_EQ(train::latest_checkpoint(moved.string()), (moved / "model-20").string());
  saver.restore(s, *train::latest_checkpoint(moved.string()));

  // The index names a file that is gone: none.
  fs::remove(moved / "model-20");
  EXPECT_EQ(train::latest_checkpoint(moved.string()), std::nullopt);

  // A malformed index is data loss, not "no checkpoint".
  write_bytes(moved / "checkpoint", "{\"model_checkpoint_path\": ");
  EXPECT_THROW_MSG(train::latest_checkpoint(moved.string()), DataLossError, "checkpoint");
  write_bytes(moved / "checkpoint", "{\"all_model_checkpoint_paths\": []}");
  EXPECT_THROW_MSG(train::latest_checkpoint(moved.string()), DataLossError, "model_checkpoint_path");
}

// ---- Atomic writes ----

TEST_F(SaverTest, SaveLeavesNoTemporaryFile) {
  Model m(1);
  Saver saver(m.g);
  Session s(m.g);
  s.run(global_variables_initializer(m.g));
  saver.save(s, path("model"), 1);
  saver.save(s, path("model"), 1);  // replaces the file
  EXPECT_EQ(files_in(dir_), (std::set<std::string>{"checkpoint", "model-1"}));

  // A write that fails (the target is a non-empty directory: the rename fails) removes its
  // temporary file and leaves the index as it was.
  fs::create_directories(dir_ / "model-2" / "inside");
  EXPECT_THROW(saver.save(s, path("model"), 2), Error);
  EXPECT_EQ(files_in(dir_), (std::set<std::string>{"checkpoint", "model-1", "model-2"}));
  EXPECT_TRUE(fs::is_directory(dir_ / "model-2" / "inside"));
  EXPECT_EQ(train::latest_checkpoint(dir_.string()), path("model-1"));
}

TEST_F(SaverTest, ConcurrentSavesEachWriteAWholeFile) {
  Graph g;
  Variable counter(g, Tensor::scalar<int64_t>(0), "counter");
  Variable big(g, Tensor::zeros(DType::Float64, {256, 64}), "big");
  auto bump = counter.assign_add(ops::constant(g, int64_t{1}));
  SaverOptions options;
  options.max_to_keep = 0;
  Saver saver(g, {}, options);
  Session s(g);
  s.run(global_variables_initializer(g));
  std::atomic<bool> done{false};
  std::thread trainer([&] {
    while (!done) s.run(bump);
  });
  testing::run_threads(4, [&](int t) {
    for (int i = 0; i < 5; ++i) saver.save(s, path("model"), t * 100 + i);
  });
  done = true;
  trainer.join();
  EXPECT_EQ(files_in(dir_).size(), 21u);
  for (const auto& f : files_in(dir_)) {
    if (f == "checkpoint") continue;
    const auto contents = train::read_checkpoint(path(f));
    EXPECT_EQ(contents.size(), 2u) << f;
    saver.restore(s, path(f));
  }
}

// ---- Refused checkpoints ----

// A saved model whose variables then hold other values, to check that failed restores change
// nothing.
class SaverCorruptionTest : public SaverTest {
 protected:
  void SetUp() override {
    SaverTest::SetUp();
    model_ = std::make_unique<Model>(1);
    saver_ = Saver(model_->g);
    session_ = std::make_unique<Session>(model_->g);
    session_->run(global_variables_initializer(model_->g));
    session_->run(ops::group(model_->updates));
    saved_ = saver_.save(*session_, path("model"));
    good_ = read_bytes(saved_);
    session_->run(global_variables_initializer(model_->g));  // back to sample_values(0)
  }
  void TearDown() override {
    session_.reset();
    model_.reset();
    SaverTest::TearDown();
  }
  // Restores `bytes` written as a checkpoint: must raise DataLossError mentioning `what` (and the
  // file) and leave the variables as they were.
  void expect_refused(const std::string& bytes, const std::string& what, const std::string& context) {
    const std::string bad = path("bad");
    write_bytes(bad, bytes);
    try {
      saver_.restore(*session_, bad);
      ADD_FAILURE() << context << ": restored";
    } catch (const DataLossError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(what), std::string::npos) << context << ": '" << msg << "' lacks '" << what << "'";
      EXPECT_NE(msg.find(bad), std::string::npos) << context << ": '" << msg << "' does not name the file";
    } catch (const std::exception& e) {
      ADD_FAILURE() << context << ": expected DataLossError, got " << e.what();
    }
  }
  void expect_unchanged() { expect_tensors_eq(model_->values(*session_), sample_values(0)); }

  std::unique_ptr<Model> model_;
  Saver saver_;
  std::unique_ptr<Session> session_;
  std::string saved_, good_;
};

TEST_F(SaverCorruptionTest, EveryFlippedByteIsRefusedNamingTheRegion) {
  const Layout l = parse_layout(good_);
  ASSERT_EQ(l.entries.size(), kNames.size());
  // What the message names for a change at byte i.
  auto region = [&](std::size_t i) -> std::string {
    if (i < 8) return "magic";
    if (i < 36) return "header checksum";
    if (i < l.data_begin) return "index checksum";  // the index and its own checksum
    for (const auto& e : l.entries) {
      if (i >= e.data_begin && i < e.data_begin + e.data_size) return "tensor '" + e.name + "'";
    }
    return "?";
  };
  for (std::size_t i = 0; i < good_.size(); ++i) {
    for (unsigned char mask : {0x01, 0x80, 0xFF}) {
      std::string bad = good_;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      expect_refused(bad, region(i), fmt::format("byte {} ^ {:#x}", i, mask));
    }
  }
  expect_unchanged();
  // The last tensor's data in particular: with a streaming restore, the others would be assigned.
  EXPECT_EQ(l.entries.back().name, kNames.back());
  saver_.restore(*session_, saved_);  // the good file still restores
  expect_tensors_eq(model_->values(*session_), sample_values(1));
}

TEST_F(SaverCorruptionTest, EveryTruncationIsRefused) {
  for (std::size_t size = 0; size < good_.size(); ++size) {
    expect_refused(good_.substr(0, size), "truncated", fmt::format("truncated to {} bytes", size));
  }
  expect_refused(good_ + '\0', "trailing bytes", "one byte appended");
  expect_unchanged();
}

TEST_F(SaverCorruptionTest, ForeignFilesAreRefused) {
  expect_refused(std::string(100, 'x'), "magic", "text");
  expect_refused("", "truncated", "empty");
  std::string other = good_;
  other[1] = 'X';  // another format's magic
  expect_refused(other, "magic", "other magic");
  EXPECT_THROW_MSG(saver_.restore(*session_, path("missing")), NotFoundError, "missing");
  EXPECT_THROW(saver_.restore(*session_, dir_.string()), InvalidArgumentError);  // a directory
  expect_unchanged();
}

TEST_F(SaverCorruptionTest, ResealedButInconsistentFilesAreRefused) {
  const Layout l = parse_layout(good_);
  // A bool byte other than 0 or 1, with its checksums recomputed.
  {
    std::string bad = good_;
    const auto& flags = l.entries[4];
    ASSERT_EQ(flags.name, "flags");
    bad[flags.data_begin] = 2;
    put_le32(bad, flags.crc_offset, internal::crc32c::value(bad.data() + flags.data_begin, flags.data_size));
    reseal_index(bad, l);
    expect_refused(bad, "tensor 'flags': bool element 0 is 2", "bool 2");
  }
  // A byte size that does not fit the shape.
  {
    std::string bad = good_;
    const auto& f32 = l.entries[0];
    put_le32(bad, f32.crc_offset - 8, 20);
    reseal_index(bad, l);
    expect_refused(bad, "tensor 'f32' (index entry 0): 20 bytes do not fit float32 [2,3]", "byte size");
  }
  // An unknown dtype.
  {
    std::string bad = good_;
    put_le32(bad, l.index_begin + 4 + 3, 77);
    reseal_index(bad, l);
    expect_refused(bad, "unknown dtype 77", "dtype");
  }
  // More tensors announced than the index holds.
  {
    std::string bad = good_;
    put_le32(bad, 12, static_cast<uint32_t>(l.entries.size() + 1));
    reseal_header(bad);
    expect_refused(bad, "the index ends", "count");
  }
  expect_unchanged();
  // A newer format version (its header intact) is not data loss: this build cannot read it.
  std::string newer = good_;
  put_le32(newer, 8, 2);
  reseal_header(newer);
  write_bytes(path("newer"), newer);
  EXPECT_THROW_MSG(saver_.restore(*session_, path("newer")), UnimplementedError, "version 2");
  expect_unchanged();
}

// ---- Mismatches between the file and the variables ----

TEST_F(SaverTest, RestoreChecksNamesDtypesAndShapesBeforeAssigning) {
  std::string saved;
  {
    Graph g;
    Variable w(g, Tensor::vector<float>({1, 2}), "w");
    Saver saver(g);
    Session s(g);
    s.run(global_variables_initializer(g));
    saved = saver.save(s, path("w"));
  }
  {
    Graph g;
    Variable w(g, Tensor::vector<float>({5, 5}), "w");
    Variable extra(g, Tensor::scalar(1.0f), "extra");
    Saver saver(g);
    Session s(g);
    s.run(global_variables_initializer(g));
    EXPECT_THROW_MSG(saver.restore(s, saved), NotFoundError, "variable 'extra' not found");
    EXPECT_EQ(s.run(w.value()).to_vector<float>(), (std::vector<float>{5, 5}));  // nothing assigned
  }
  {
    Graph g;
    Variable w(g, Tensor::vector<int32_t>({5, 5}), "w");
    Saver saver(g);
    Session s(g);
    EXPECT_THROW_MSG(saver.restore(s, saved), InvalidArgumentError, "variable 'w' is int32");
  }
  {
    Graph g;
    Variable w(g, Tensor::vector<float>({5, 5, 5}), "w");
    Saver saver(g);
    Session s(g);
    EXPECT_THROW_MSG(saver.restore(s, saved), InvalidArgumentError, "variable 'w' has shape [3]");
  }
  {
    Graph g;
    Variable w(g, Tensor::scalar(5.0f), "w");
    Saver saver(g);
    Session s(g);
    EXPECT_THROW_MSG(saver.restore(s, saved), InvalidArgumentError, "variable 'w' has shape []");
  }
}

// ---- Construction and save errors ----

TEST_F(SaverTest, ConstructionErrors) {
  Graph empty;
  EXPECT_THROW_MSG(Saver{empty}, InvalidArgumentError, "no variables");
  EXPECT_THROW(Saver(std::vector<Variable>{}), InvalidArgumentError);
  Graph g, other;
  Variable a(g, Tensor::scalar(1.0f), "a");
  Variable b(other, Tensor::scalar(1.0f), "b");
  EXPECT_THROW_MSG(Saver(g, {a, a}), InvalidArgumentError, "'a' is listed twice");
  EXPECT_THROW_MSG(Saver(g, {a, b}), InvalidArgumentError, "'b' is in another graph");
  EXPECT_THROW(Saver(g, {Variable()}), InvalidArgumentError);
  // A map: not empty, names not empty, each variable of g under one name.
  using VarMap = std::map<std::string, Variable>;
  EXPECT_THROW_MSG(Saver(g, VarMap{}), InvalidArgumentError, "no variables to save");
  EXPECT_THROW_MSG(Saver(g, VarMap{{"", a}}), InvalidArgumentError, "'a' has an empty checkpoint name");
  EXPECT_THROW_MSG(Saver(g, VarMap{{"x", a}, {"y", a}}), InvalidArgumentError,
                   "'a' is listed under two checkpoint names, 'x' and 'y'");
  EXPECT_THROW_MSG(Saver(g, VarMap{{"x", b}}), InvalidArgumentError, "'b' is in another graph");
  EXPECT_THROW(Saver(g, VarMap{{"x", Variable()}}), InvalidArgumentError);
  EXPECT_THROW_MSG(Saver(g, VarMap{{"x", a}}, SaverOptions{.name = ""}), InvalidArgumentError, "name must not be empty");
  // A braced list of variables still means a var_list (the map overload is a template for that).
  EXPECT_EQ(Saver(g, {a}).var_list().size(), 1u);
  Saver null;
  Session s(g);
  EXPECT_THROW(null.save(s, path("x")), InvalidArgumentError);
  EXPECT_THROW(null.restore(s, path("x")), InvalidArgumentError);
  EXPECT_THROW(null.last_checkpoints(), InvalidArgumentError);
}

TEST_F(SaverTest, SaveErrors) {
  Graph g;
  Variable ready(g, Tensor::scalar(1.0f), "ready");
  Variable not_ready(g, Tensor::scalar(2.0f), "not_ready");
  Saver saver(g);
  Session s(g);
  s.run(ready.initializer());
  EXPECT_THROW_MSG(saver.save(s, path("model")), FailedPreconditionError, "not_ready");
  s.run(not_ready.initializer());
  EXPECT_THROW_MSG(saver.save(s, path("no-such-dir/model")), NotFoundError, "no-such-dir");
  EXPECT_THROW(saver.save(s, path("")), InvalidArgumentError);
  EXPECT_THROW(saver.save(s, path("checkpoint")), InvalidArgumentError);
  EXPECT_TRUE(files_in(dir_).empty());
  EXPECT_EQ(saver.save(s, path("model")), path("model"));
}

// An index file is input like any other: paths it names outside the saver's directory, links and
// files that are not checkpoints are never deleted by max_to_keep (they used to be).
TEST_F(SaverTest, MaxToKeepDeletesOnlyCheckpointFilesOfItsDirectory) {
  Graph g;
  Variable v(g, Tensor::scalar(1.0f), "v");
  Saver saver(g, {}, SaverOptions{.max_to_keep = 1});
  Session s(g);
  s.run(v.initializer());
  const fs::path elsewhere = dir_ / "elsewhere";
  fs::create_directories(elsewhere);
  const std::string outside = (elsewhere / "precious").string();
  write_bytes(outside, "not yours");
  const std::string victim = path("notes.txt");
  write_bytes(victim, "not a checkpoint");
  const std::string genuine = saver.save(s, path("old"));  // a real checkpoint of this directory
  fs::create_symlink(genuine, path("link"));
  saver.recover_last_checkpoints({outside, victim, path("link"), path("../" + dir_.filename().string() + "/old")});
  saver.save(s, path("model"), 1);
  EXPECT_TRUE(fs::exists(outside)) << "outside the directory";
  EXPECT_TRUE(fs::exists(victim)) << "not a checkpoint";
  EXPECT_TRUE(fs::is_symlink(path("link"))) << "a link";
  EXPECT_FALSE(fs::exists(genuine)) << "a checkpoint of the directory (named through ..) is deleted";
  EXPECT_TRUE(fs::exists(path("model-1")));
}

// A save whose index cannot be written leaves no file behind, and its bookkeeping unchanged.
TEST_F(SaverTest, ASaveThatFailsAtTheIndexLeavesNoFile) {
  Graph g;
  Variable v(g, Tensor::scalar(1.0f), "v");
  Saver saver(g);
  Session s(g);
  s.run(v.initializer());
  fs::create_directories(dir_ / "checkpoint");  // the index file cannot replace a directory
  EXPECT_THROW(saver.save(s, path("model"), 7), Error);
  EXPECT_EQ(files_in(dir_), (std::set<std::string>{"checkpoint"}));
  EXPECT_TRUE(saver.last_checkpoints().empty());
  fs::remove(dir_ / "checkpoint");
  EXPECT_EQ(saver.save(s, path("model"), 8), path("model-8"));
  EXPECT_EQ(saver.last_checkpoints(), std::vector<std::string>{path("model-8")});
}

// Temporary files of saves killed midway (their process gone) are cleaned up by the next save;
// those of live processes are not.
TEST_F(SaverTest, TemporariesOfSavesThatDiedAreRemoved) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);  // gone: its pid names no process now
  const std::string stale = path(fmt::format("model.tmp-{}-3", child));
  const std::string mine = path(fmt::format("model.tmp-{}-999", ::getpid()));
  const std::string not_a_temp = path("model.tmp-notes");
  for (const auto& f : {stale, mine, not_a_temp}) write_bytes(f, "partial");
  Graph g;
  Variable v(g, Tensor::scalar(1.0f), "v");
  Saver saver(g);
  Session s(g);
  s.run(v.initializer());
  saver.save(s, path("model"));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(mine)) << "this process is alive";
  EXPECT_TRUE(fs::exists(not_a_temp));
}

TEST_F(SaverTest, SaverOpsIgnoreTheScopesOfTheBuildingCode) {
  Graph g;
  Variable w(g, Tensor::vector<float>({1, 2}), "w");
  Variable runs(g, Tensor::scalar<int32_t>(0), "runs");
  auto count = runs.assign_add(ops::constant(g, 1));
  std::optional<Saver> saver;
  {
    auto deps = g.control_dependencies({count.op()});
    auto names = g.name_scope("outer");
    auto device = g.device("/device:CPU:0");
    saver.emplace(g, std::vector<Variable>{w});
  }
  const Operation restore = saver->restore_op();
  EXPECT_EQ(restore.name(), "outer/save/restore_all");
  EXPECT_EQ(restore.device(), "");
  ASSERT_EQ(restore.control_inputs().size(), 1u);  // the assign only, not `count`
  const Operation assign = restore.control_inputs()[0];
  EXPECT_EQ(assign.type(), "Assign");
  EXPECT_TRUE(assign.control_inputs().empty());
  const Operation fed = assign.input(0).op();
  EXPECT_EQ(fed.type(), "Placeholder");
  EXPECT_EQ(fed.name(), "outer/save/w/restore_value");
  EXPECT_EQ(fed.device(), "");  // unplaced: fed from the client
  EXPECT_TRUE(fed.control_inputs().empty());
  Session s(g);
  s.run(global_variables_initializer(g));
  const std::string saved = saver->save(s, path("w"));
  saver->restore(s, saved);
  EXPECT_EQ(s.run(runs.value()).scalar<int32_t>(), 0);  // the control dependency was not added
  // A second Saver of the same graph gets its own ops.
  Saver again(g);
  EXPECT_NE(again.restore_op(), saver->restore_op());
  again.restore(s, again.save(s, path("all")));
}

}  // namespace
}  // namespace tessera
