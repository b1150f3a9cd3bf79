// Checkpoint files: a round trip keeps the header and every byte; the write is atomic; every
// truncation and every single flipped bit is refused; a checkpoint of another model, or with a
// tensor of another shape, missing or extra, is refused naming what differs.
#include "src/api/checkpoint_format.h"

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cpu/cache_test_util.h"

namespace reprise {
namespace {

using ::reprise::testing::ReadFile;
using ::reprise::testing::ScopedTempDir;
using ::testing::HasSubstr;

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A small training state: a weight, its Adam moments, a step counter.
class CheckpointFormatTest : public ::testing::Test {
 protected:
  CheckpointFormatTest()
      : weight_(Bytes<float>({0.5f, -1.25f, 3.0f, 0.0f, -0.0f, 7.5f})),
        exp_avg_(Bytes<float>({1e-3f, 2e-3f, -3e-3f, 4e-3f, 5e-3f, 6e-3f})),
        step_(Bytes<int32_t>({41, 0})) {
    tensors_ = {{"fc.weight", util::SafetensorsDType::kF32, {2, 3}, weight_},
                {"fc.weight.exp_avg", util::SafetensorsDType::kF32, {2, 3}, exp_avg_},
                {"rng.step", util::SafetensorsDType::kI32, {2}, step_}};
    expected_ = {{"fc.weight", util::SafetensorsDType::kF32, {2, 3}},
                 {"fc.weight.exp_avg", util::SafetensorsDType::kF32, {2, 3}},
                 {"rng.step", util::SafetensorsDType::kI32, {2}}};
  }

  std::string Serialized() const {
    absl::StatusOr<std::string> bytes = SerializeCheckpoint(header_, tensors_);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return bytes.ok() ? *bytes : "";
  }

  CheckpointHeader header_{.model = "model-a", .step = 41};
  std::string weight_, exp_avg_, step_;
  std::vector<util::TensorView> tensors_;
  std::vector<ExpectedTensor> expected_;
};

TEST_F(CheckpointFormatTest, RoundTripKeepsHeaderAndEveryByte) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/state.safetensors";
  ASSERT_TRUE(WriteCheckpoint(path, header_, tensors_).ok());
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->header.format_version, kCheckpointFormatVersion);
  EXPECT_EQ(read->header.model, "model-a");
  EXPECT_EQ(read->header.step, 41);
  EXPECT_TRUE(CheckCheckpointMatches(*read, path, "model-a", expected_).ok());
  for (const util::TensorView& t : tensors_) {
    const util::SafetensorsEntry* entry = read->file.Find(t.name);
    ASSERT_NE(entry, nullptr) << t.name;
    EXPECT_EQ(read->file.Data(*entry), t.data) << t.name;
  }
  // Still a safetensors file PyTorch reads: its metadata says so.
  EXPECT_EQ(read->file.metadata.at("format"), "pt");
  EXPECT_EQ(ReadFile(path), Serialized());
}

TEST_F(CheckpointFormatTest, WriteReplacesTheFileAndLeavesNoTemporary) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/state.safetensors";
  ASSERT_TRUE(WriteCheckpoint(path, header_, tensors_).ok());
  header_.step = 42;
  ASSERT_TRUE(WriteCheckpoint(path, header_, tensors_).ok());
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(e.path().filename().string());
  }
  EXPECT_THAT(names, ::testing::ElementsAre("state.safetensors"));
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->header.step, 42);
}

TEST_F(CheckpointFormatTest, EveryTruncationIsDataLoss) {
  const std::string bytes = Serialized();
  for (size_t size = 0; size < bytes.size(); ++size) {
    absl::StatusOr<Checkpoint> read = ParseCheckpoint(bytes.substr(0, size), "cut.safetensors");
    ASSERT_FALSE(read.ok()) << "truncated to " << size << " bytes was accepted";
    EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << size << ": " << read.status();
    EXPECT_THAT(read.status().message(), HasSubstr("cut.safetensors"));
  }
}

TEST_F(CheckpointFormatTest, EverySingleBitFlipIsRefused) {
  const std::string bytes = Serialized();
  ASSERT_TRUE(ParseCheckpoint(bytes, "ok").ok());
  int checksum_mismatches = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = bytes;
      flipped[i] = static_cast<char>(flipped[i] ^ (1 << bit));
      absl::StatusOr<Checkpoint> read = ParseCheckpoint(flipped, "flipped.safetensors");
      ASSERT_FALSE(read.ok()) << "byte " << i << " bit " << bit << " flipped was accepted";
      if (read.status().code() == absl::StatusCode::kDataLoss &&
          absl::StrContains(read.status().message(), "checksum")) {
        ++checksum_mismatches;
      }
    }
  }
  // Every flip inside the tensor data parses and is caught by the checksum alone.
  const size_t data_bits = (weight_.size() + exp_avg_.size() + step_.size()) * 8;
  EXPECT_GE(checksum_mismatches, static_cast<int>(data_bits));
}

TEST_F(CheckpointFormatTest, ChecksumMismatchIsDataLossNamingTheFile) {
  std::string bytes = Serialized();
  bytes[bytes.size() - 1] ^= 0x01;  // The last byte of the last tensor's data.
  absl::StatusOr<Checkpoint> read = ParseCheckpoint(bytes, "bad.safetensors");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr("bad.safetensors"));
  EXPECT_THAT(read.status().message(), HasSubstr("checksum mismatch"));
}

TEST_F(CheckpointFormatTest, AnotherModelIsFailedPrecondition) {
  absl::StatusOr<Checkpoint> read = ParseCheckpoint(Serialized(), "a.safetensors");
  ASSERT_TRUE(read.ok());
  absl::Status status = CheckCheckpointMatches(*read, "a.safetensors", "model-b", expected_);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("another model"));
  EXPECT_THAT(status.message(), HasSubstr("model-a"));
  EXPECT_THAT(status.message(), HasSubstr("model-b"));
}

TEST_F(CheckpointFormatTest, WrongShapeDtypeMissingOrExtraTensorIsNamed) {
  absl::StatusOr<Checkpoint> read = ParseCheckpoint(Serialized(), "a.safetensors");
  ASSERT_TRUE(read.ok());
  std::vector<ExpectedTensor> shape = expected_;
  shape[0].shape = {3, 2};
  absl::Status status = CheckCheckpointMatches(*read, "a.safetensors", "model-a", shape);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'fc.weight' is F32[2, 3] in the checkpoint but "
                                          "F32[3, 2] in the model"));

  std::vector<ExpectedTensor> dtype = expected_;
  dtype[2].dtype = util::SafetensorsDType::kF32;
  status = CheckCheckpointMatches(*read, "a.safetensors", "model-a", dtype);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'rng.step' is I32[2]"));

  std::vector<ExpectedTensor> more = expected_;
  more.push_back({"fc.bias", util::SafetensorsDType::kF32, {2}});
  status = CheckCheckpointMatches(*read, "a.safetensors", "model-a", more);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("no tensor 'fc.bias'"));

  std::vector<ExpectedTensor> fewer = {expected_[0], expected_[2]};
  status = CheckCheckpointMatches(*read, "a.safetensors", "model-a", fewer);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'fc.weight.exp_avg' is not part of this model"));
}

TEST_F(CheckpointFormatTest, WeightsFileIsNotACheckpoint) {
  absl::StatusOr<std::string> weights = util::SerializeSafetensors(tensors_, {{"format", "pt"}});
  ASSERT_TRUE(weights.ok());
  absl::StatusOr<Checkpoint> read = ParseCheckpoint(*weights, "w.safetensors");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("not a reprise checkpoint"));
  EXPECT_THAT(read.status().message(), HasSubstr("LoadWeights"));
}

TEST_F(CheckpointFormatTest, OtherFormatVersionIsRefused) {
  header_.format_version = kCheckpointFormatVersion + 1;
  absl::StatusOr<Checkpoint> read = ParseCheckpoint(Serialized(), "v2.safetensors");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("format version 2; this build reads 1"));
}

TEST_F(CheckpointFormatTest, MissingFileIsNotFoundAndNegativeStepIsRefused) {
  ScopedTempDir dir;
  EXPECT_EQ(ReadCheckpoint(dir.path() + "/none.safetensors").status().code(),
            absl::StatusCode::kNotFound);
  header_.step = -1;
  EXPECT_EQ(SerializeCheckpoint(header_, tensors_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(WriteCheckpoint(dir.path() + "/neg.safetensors", header_, tensors_).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/neg.safetensors"));
}

TEST_F(CheckpointFormatTest, ReadingANamedPipeIsRefusedAtOnce) {
  ScopedTempDir dir;
  const std::string fifo = dir.path() + "/state.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const absl::Status s = ReadCheckpoint(fifo).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(fifo, ": is a named pipe")));
}

TEST_F(CheckpointFormatTest, WritingOntoADeviceIsRefusedAndTheDeviceStays) {
  const absl::Status s = WriteCheckpoint("/dev/null", header_, tensors_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("/dev/null: is a character device"));
  struct stat st;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST_F(CheckpointFormatTest, WritingThroughASymlinkUpdatesItsTarget) {
  ScopedTempDir dir;
  const std::string target = dir.path() + "/step41.safetensors";
  const std::string link = dir.path() + "/latest.safetensors";
  ASSERT_TRUE(WriteCheckpoint(target, header_, tensors_).ok());
  std::filesystem::create_symlink(target, link);
  header_.step = 42;
  ASSERT_TRUE(WriteCheckpoint(link, header_, tensors_).ok());
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(target);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->header.step, 42);
}

}  // namespace
}  // namespace reprise
