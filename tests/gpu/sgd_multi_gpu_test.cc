// sgd_multi on the GPU (TrainOptions::kernels.sgd_one_launch): the chunked kernel gives the CPU
// reference's bits over two launches of odd-sized tensors whose gradients are float32, bfloat16
// and float16 (clipped, checked, skipped, Nesterov, with 16-bit copies); and ResNet-18 in bfloat16
// trains bit for bit as with sgd_momentum_multi's launches and a cast of every weight per step,
// and its captured step replays eager.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/ir/reference_executor.h"
#include "tests/cpu/sgd_multi_step.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/update_agreement.h"

namespace reprise {
namespace {

TEST(SgdMultiGpuTest, GivesTheCpuBitsForMixedGradientTypes) {
  REPRISE_REQUIRE_GPU();
  for (const char* mode : {"plain", "clipped", "checked", "skipped", "nesterov", "copies"}) {
    SCOPED_TRACE(mode);
    const std::string m = mode;
    // 600 tensors: two launches, 512 tensors and 88.
    testing::SgdMultiStepOptions o{.tensors = 600,
                                   .clip = m == "clipped" || m == "copies",
                                   .checked = m == "checked" || m == "skipped" || m == "copies",
                                   .nesterov = m == "nesterov",
                                   .copies = m == "copies" ? 530 : 0};
    auto g = testing::BuildSgdMultiStep(o);
    ASSERT_TRUE(g.ok()) << g.status();
    ir::ReferenceExecutor cpu(*g, false, 5);
    if (o.checked) {
      ASSERT_TRUE(
          cpu.SetLeaf("check", std::vector<double>{0.125, m == "skipped" ? 1.0 : 0.0}).ok());
    }
    ExpectGpuMatchesCpu(*g, cpu, /*tolerance=*/0);
  }
}

absl::StatusOr<models::ResNet> SmallResNet() {
  return models::BuildResNet(
      {.depth = 18, .batch = 2, .classes = 4, .image_size = 32, .layout = Layout::kNHWC});
}

TrainOptions Bf16Options(bool one_launch) {
  TrainOptions options;
  options.seed = 42;
  options.numerics.compute_dtype = DType::kBFloat16;
  options.numerics.deterministic = true;
  options.launch.lanes = 2;
  options.kernels.sgd_one_launch = one_launch;
  return options;
}

void SetBatch(Trainer& t, int step) {
  std::vector<float> images(2 * 32 * 32 * 3);
  std::mt19937 batch(static_cast<unsigned>(step));
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  for (float& x : images) x = pixel(batch);
  ASSERT_TRUE(t.SetInput("images", images).ok());
  ASSERT_TRUE(t.SetInput("labels", std::vector<int32_t>{step % 4, (step + 1) % 4}).ok());
}

TEST(SgdMultiGpuTest, ResNet18Bf16TrainsBitForBitAsWithTheLaunchesPer32Tensors) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(models::ResNet net, SmallResNet());
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> on,
                               Trainer::Create(net.graph, net.loss, Bf16Options(true)));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> off,
                               Trainer::Create(net.graph, net.loss, Bf16Options(false)));
  for (int step = 0; step < 4; ++step) {
    for (Trainer* t : {on.get(), off.get()}) {
      SetBatch(*t, step);
      ASSERT_TRUE(t->Step().ok());
    }
    REPRISE_ASSERT_OK_AND_ASSIGN(float with, on->Loss());
    REPRISE_ASSERT_OK_AND_ASSIGN(float without, off->Loss());
    ASSERT_EQ(with, without) << "step " << step;
  }
  EXPECT_EQ(testing::ParameterValues(*on), testing::ParameterValues(*off));
  // A host write of a weight makes the next step round it again into its copy.
  const std::string conv = "conv1.weight";
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> w, on->GetParameter(conv));
  for (float& x : w) x *= 0.5f;
  for (Trainer* t : {on.get(), off.get()}) {
    ASSERT_TRUE(t->SetParameter(conv, w).ok());
    SetBatch(*t, 9);
    ASSERT_TRUE(t->Step().ok());
  }
  EXPECT_EQ(*on->Loss(), *off->Loss());
  REPRISE_ASSERT_OK_AND_ASSIGN(VerifyResult verified, on->Verify(3));
  EXPECT_TRUE(verified.ok()) << verified.ToString();
}

}  // namespace
}  // namespace reprise
