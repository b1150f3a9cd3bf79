// Mixed-precision ResNet training on the GPU (TrainOptions::numerics.compute_dtype bfloat16): every
// launch of the plan lowers, replay gives the bits of the bulked run, the first loss is the float32
// network's within bfloat16 rounding, and the loss falls.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

constexpr int kBatch = 8, kSize = 64, kClasses = 4;

std::unique_ptr<Trainer> MakeTrainer(const models::ResNet& net, ExecMode mode, DType compute) {
  TrainOptions options;
  options.launch.mode = mode;
  options.numerics.deterministic = true;
  options.numerics.compute_dtype = compute;
  options.optimizer.learning_rate = 0.005f;
  options.seed = 42;
  auto trainer = Trainer::Create(net.graph, net.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

// Each class is a fixed random image template under noise; the same batches for every trainer.
std::vector<float> Train(Trainer& t, int steps) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::normal_distribution<float> normal;
  const size_t image = 3 * kSize * kSize;
  std::vector<std::vector<float>> templates(kClasses, std::vector<float>(image));
  for (auto& t : templates) {
    for (float& v : t) v = uniform(rng);
  }
  std::vector<float> x(kBatch * image), losses;
  std::vector<int32_t> y(kBatch);
  for (int s = 0; s < steps; ++s) {
    for (int i = 0; i < kBatch; ++i) {
      y[i] = static_cast<int32_t>(rng() % kClasses);
      for (size_t j = 0; j < image; ++j) x[i * image + j] = templates[y[i]][j] + 0.5f * normal(rng);
    }
    EXPECT_TRUE(t.SetInput("images", x).ok());
    EXPECT_TRUE(t.SetInput("labels", y).ok());
    EXPECT_TRUE(t.Step().ok());
    losses.push_back(*t.Loss());
  }
  return losses;
}

class ResNetBf16GpuTest : public ::testing::TestWithParam<Layout> {};

TEST_P(ResNetBf16GpuTest, ReplayEqualsBulkedFollowsFloat32AndLossFalls) {
  REPRISE_REQUIRE_GPU();
  auto net = models::BuildResNet({.depth = 18,
                                  .batch = kBatch,
                                  .classes = kClasses,
                                  .image_size = kSize,
                                  .layout = GetParam()});
  ASSERT_TRUE(net.ok()) << net.status();
  auto graph = MakeTrainer(*net, ExecMode::kGraph, DType::kBFloat16);
  auto bulked = MakeTrainer(*net, ExecMode::kBulked, DType::kBFloat16);
  auto fp32 = MakeTrainer(*net, ExecMode::kGraph, DType::kFloat32);
  ASSERT_TRUE(graph && bulked && fp32);
  std::cout << "ResNet-18 bf16 " << LayoutName(GetParam()) << ": " << graph->stats().ToString()
            << "\n";

  const int steps = 40;
  const std::vector<float> replayed = Train(*graph, steps), eager = Train(*bulked, steps);
  const std::vector<float> reference = Train(*fp32, 1);
  EXPECT_EQ(replayed, eager);
  for (const std::string& name : graph->ParameterNames()) {
    EXPECT_EQ(*graph->GetParameter(name), *bulked->GetParameter(name)) << name;
  }
  // The same weights and batch: the forward differs by bfloat16 rounding (8 significant bits)
  // through 18 layers.
  EXPECT_NEAR(replayed[0], reference[0], 2e-2 * reference[0]);
  float first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += replayed[i], last += replayed[steps - 5 + i];
  EXPECT_LT(last, 0.7f * first) << ::testing::PrintToString(replayed);
  EXPECT_EQ(graph->stats().graph_instantiations, 1);
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, ResNetBf16GpuTest,
                         ::testing::Values(Layout::kNCHW, Layout::kNHWC),
                         [](const auto& info) { return std::string(LayoutName(info.param)); });

}  // namespace
}  // namespace reprise
