// SaveWeights with torch_compatible: the file holds exactly torch's state dict of the model
// (TorchStateDictNamesOf, checked on the CPU against torchvision's keys), with the values the
// trainer holds and num_batches_tracked as int64 scalars, and loads back.
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/api/torch_state_dict.h"
#include "src/util/safetensors.h"
#include "tests/cpu/cache_test_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::reprise::testing::ScopedTempDir;
using ::testing::HasSubstr;

TEST(TorchWeightsGpuTest, ResNet18FileIsTorchvisionsStateDict) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(
      models::ResNet net,
      models::BuildResNet({.depth = 18, .batch = 2, .classes = 10, .image_size = 32}));
  REPRISE_ASSERT_OK_AND_ASSIGN(auto trainer, Trainer::Create(net.graph, net.loss, {}));
  std::vector<float> images(2 * 3 * 32 * 32);
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<float>(i % 17) / 17 - 0.5f;
  const std::vector<int32_t> labels = {1, 7};
  constexpr int kSteps = 3;
  for (int step = 0; step < kSteps; ++step) {
    REPRISE_ASSERT_OK(trainer->SetInput("images", images));
    REPRISE_ASSERT_OK(trainer->SetInput("labels", labels));
    REPRISE_ASSERT_OK(trainer->Step());
  }
  ScopedTempDir dir;
  const std::string path = dir.path() + "/resnet18.safetensors";
  REPRISE_ASSERT_OK(trainer->SaveWeights(path, {.torch_compatible = true}));
  REPRISE_ASSERT_OK_AND_ASSIGN(const util::SafetensorsFile file, util::ReadSafetensors(path));

  const TorchStateDictNames expected = TorchStateDictNamesOf(net.graph);
  std::set<std::string> names;
  for (const util::SafetensorsEntry& entry : file.entries) names.insert(entry.name);
  std::set<std::string> want(expected.tensors.begin(), expected.tensors.end());
  want.insert(expected.batch_counters.begin(), expected.batch_counters.end());
  EXPECT_EQ(names, want);
  EXPECT_EQ(names.size(), 62u + 20u * 3u);

  const util::SafetensorsEntry* counter = file.Find("layer1.0.bn2.num_batches_tracked");
  ASSERT_NE(counter, nullptr);
  EXPECT_EQ(counter->dtype, util::SafetensorsDType::kI64);
  EXPECT_TRUE(counter->shape.empty());
  int64_t batches = 0;
  std::memcpy(&batches, file.Data(*counter).data(), sizeof(batches));
  EXPECT_EQ(batches, kSteps);

  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> conv1, trainer->GetParameter("conv1.weight"));
  const util::SafetensorsEntry* saved = file.Find("conv1.weight");
  ASSERT_NE(saved, nullptr);
  ASSERT_EQ(file.Data(*saved).size(), conv1.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(file.Data(*saved).data(), conv1.data(), conv1.size() * sizeof(float)), 0);

  // Back in: the optimizer state is missing from a torch file, and the counters are unexpected.
  REPRISE_ASSERT_OK(trainer->LoadWeights(path, {.allow_missing = true}));
  const absl::Status strict = trainer->LoadWeights(path);
  EXPECT_THAT(strict.message(), HasSubstr("momentum"));
}

}  // namespace
}  // namespace reprise
