// Checkpoints on the GPU: a trainer restored from a checkpoint continues bit for bit as the
// uninterrupted run (losses, parameters, AdamW moments, BN statistics, step counter), for the MLP
// with dropout and for ResNet-18; a checkpoint of another model, or a corrupt or truncated one, is
// refused and changes nothing.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/api/checkpoint_format.h"
#include "tests/cpu/cache_test_util.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/trust_test_models.h"
#include "tests/gpu/update_agreement.h"

namespace reprise {
namespace {

using ::reprise::testing::FeedStep;
using ::reprise::testing::MakeTrustTrainer;
using ::reprise::testing::ReadFile;
using ::reprise::testing::SameBits;
using ::reprise::testing::ScopedTempDir;
using ::reprise::testing::TrustModel;
using ::reprise::testing::TrustOptions;
using ::reprise::testing::WriteFile;
using ::testing::HasSubstr;

// Steps [from, to) with each step's own batch; the loss of each.
std::vector<float> RunSteps(Trainer& t, const TrustModel& m, int from, int to) {
  std::vector<float> losses;
  for (int s = from; s < to; ++s) {
    FeedStep(t, m, s);
    EXPECT_TRUE(t.Step().ok());
    absl::StatusOr<float> loss = t.Loss();
    EXPECT_TRUE(loss.ok()) << loss.status();
    losses.push_back(loss.ok() ? *loss : 0);
  }
  return losses;
}

// Every tensor of two checkpoints agrees bit for bit, and so do their steps.
void ExpectSameState(const std::string& a_path, const std::string& b_path) {
  absl::StatusOr<Checkpoint> a = ReadCheckpoint(a_path);
  absl::StatusOr<Checkpoint> b = ReadCheckpoint(b_path);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->header.step, b->header.step);
  EXPECT_EQ(a->header.model, b->header.model);
  ASSERT_EQ(a->file.entries.size(), b->file.entries.size());
  for (const util::SafetensorsEntry& entry : a->file.entries) {
    const util::SafetensorsEntry* other = b->file.Find(entry.name);
    ASSERT_NE(other, nullptr) << entry.name;
    EXPECT_TRUE(a->file.Data(entry) == b->file.Data(*other)) << entry.name << " differs";
  }
}

class CheckpointGpuTest : public ::testing::TestWithParam<bool> {
 protected:
  TrustModel Model() const { return GetParam() ? testing::SmallResNet18() : testing::DropoutMlp(); }
};

TEST_P(CheckpointGpuTest, RestoreThenContinueIsTheUninterruptedRunBitForBit) {
  REPRISE_REQUIRE_GPU();
  const TrustModel m = Model();
  const int first = GetParam() ? 6 : 30, then = GetParam() ? 6 : 30;
  ScopedTempDir dir;
  const std::string saved = dir.path() + "/at_first.safetensors";

  auto a = MakeTrustTrainer(m, TrustOptions(m));
  ASSERT_NE(a, nullptr);
  RunSteps(*a, m, 0, first);
  REPRISE_ASSERT_OK(a->SaveCheckpoint(saved));
  const std::vector<float> uninterrupted = RunSteps(*a, m, first, first + then);
  REPRISE_ASSERT_OK(a->SaveCheckpoint(dir.path() + "/a_end.safetensors"));

  // Other initial weights: everything the continuation reads must come from the checkpoint.
  auto b = MakeTrustTrainer(m, TrustOptions(m, ExecMode::kGraph, /*seed=*/99));
  ASSERT_NE(b, nullptr);
  REPRISE_ASSERT_OK(b->RestoreCheckpoint(saved));
  EXPECT_EQ(b->stats().steps, first);
  const std::vector<float> resumed = RunSteps(*b, m, first, first + then);
  ASSERT_EQ(resumed.size(), uninterrupted.size());
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_TRUE(SameBits(resumed[i], uninterrupted[i]))
        << "step " << first + i << ": " << resumed[i] << " vs " << uninterrupted[i];
  }
  REPRISE_ASSERT_OK(b->SaveCheckpoint(dir.path() + "/b_end.safetensors"));
  ExpectSameState(dir.path() + "/a_end.safetensors", dir.path() + "/b_end.safetensors");
  EXPECT_EQ(b->stats().graph_instantiations, 1);  // Restoring writes in place: no re-capture.
}

INSTANTIATE_TEST_SUITE_P(MlpAndResNet18, CheckpointGpuTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "ResNet18" : "DropoutMlp";
                         });

TEST(CheckpointRefusalGpuTest, OtherModelCorruptOrTruncatedChangesNothing) {
  REPRISE_REQUIRE_GPU();
  const TrustModel m = testing::DropoutMlp();
  ScopedTempDir dir;
  const std::string good = dir.path() + "/good.safetensors";
  auto a = MakeTrustTrainer(m, TrustOptions(m));
  ASSERT_NE(a, nullptr);
  RunSteps(*a, m, 0, 3);
  REPRISE_ASSERT_OK(a->SaveCheckpoint(good));

  auto target = MakeTrustTrainer(m, TrustOptions(m, ExecMode::kGraph, /*seed=*/5));
  ASSERT_NE(target, nullptr);
  RunSteps(*target, m, 0, 1);
  const std::vector<std::vector<float>> before = testing::ParameterValues(*target);

  // Another model: a wider MLP's checkpoint.
  const TrustModel wide = testing::DropoutMlp(/*width=*/40);
  auto other = MakeTrustTrainer(wide, TrustOptions(wide));
  ASSERT_NE(other, nullptr);
  const std::string wide_path = dir.path() + "/wide.safetensors";
  REPRISE_ASSERT_OK(other->SaveCheckpoint(wide_path));
  absl::Status status = target->RestoreCheckpoint(wide_path);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("another model"));

  // A flipped bit in the data, and a cut file.
  std::string bytes = ReadFile(good);
  std::string flipped = bytes;
  flipped[flipped.size() - 3] ^= 0x10;
  WriteFile(dir.path() + "/flipped.safetensors", flipped);
  status = target->RestoreCheckpoint(dir.path() + "/flipped.safetensors");
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr("checksum"));
  WriteFile(dir.path() + "/cut.safetensors", bytes.substr(0, bytes.size() / 2));
  status = target->RestoreCheckpoint(dir.path() + "/cut.safetensors");
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;

  const std::vector<std::vector<float>> after = testing::ParameterValues(*target);
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(SameBits(before[i], after[i])) << i;
  EXPECT_EQ(target->stats().steps, 1);
  // The good file still restores.
  REPRISE_ASSERT_OK(target->RestoreCheckpoint(good));
  EXPECT_EQ(target->stats().steps, 3);
}

}  // namespace
}  // namespace reprise
