// The fused MLP-step kernel generator without a GPU: plans stay within shared memory, every
// generated kernel compiles with NVRTC for sm_90 (tiny odd shapes, one layer, unaligned tensors,
// the two benchmark MLPs), and the workspace layout is the documented one.
#include "src/codegen/mlp_step_kernel.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/kernel_store.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

struct Shape {
  int64_t batch;
  std::vector<int64_t> widths;  // F, out_0, ..., out_{L-1}.
  bool aligned;
};

TEST(MlpStepKernelTest, GeneratedKernelCompilesForSm90) {
  const std::vector<Shape> shapes = {
      {32, {256, 256, 256, 256, 256, 256, 256, 256, 256, 10}, true},
      {5, {3, 7, 7, 3}, true},
      {5, {3, 7, 7, 3}, false},
      {256, {1024, 1024, 1024, 1024, 1024, 10}, true},
      {7, {12, 4}, true},
      {1, {1, 1, 2}, false},
  };
  for (const Shape& s : shapes) {
    codegen::MlpStepTarget target;
    target.aligned = s.aligned;
    auto plan = codegen::PlanMlpStep(s.batch, s.widths, target);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_LE(plan->shared_bytes, target.max_shared_bytes);
    const int layers = plan->layers();
    EXPECT_EQ(plan->phases, layers == 1 ? 2 : 2 * layers - 1);
    EXPECT_EQ(plan->barriers, plan->phases - 1);
    const codegen::GeneratedKernel kernel = codegen::MlpStepKernel(*plan);
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    EXPECT_FALSE(compiled->cubin.empty());
  }
}

TEST(MlpStepKernelTest, TilesCoverEveryGemmOfTheStep) {
  auto plan = codegen::PlanMlpStep(32, {256, 256, 256, 10}, codegen::MlpStepTarget{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->forward.size(), 2u);
  for (const codegen::MlpGemmTile& t : plan->forward) {
    EXPECT_EQ(t.tiles, (32 + t.tm - 1) / t.tm * ((256 + t.tn - 1) / t.tn));
    EXPECT_LE(t.tiles, 132);  // One round on an H100.
  }
  EXPECT_GT(plan->dgrad[1].tiles, 0);  // Layer 2's dgrad is in the head; layer 0 has none.
  for (int l = 0; l < 3; ++l) EXPECT_GT(plan->wgrad[l].tiles, 0) << l;
  EXPECT_EQ(plan->head_rows, 1);
}

TEST(MlpStepKernelTest, WorkspaceHoldsActivationsGradientsAndRowLosses) {
  // Rows 32: losses 32; h_1 8192; dz_0 8192, dz_1 320; each rounded up to 32 floats.
  EXPECT_EQ(codegen::MlpStepWorkspaceFloats(32, {256, 256, 10}), 32 + 8192 + 8192 + 320);
  EXPECT_EQ(codegen::MlpStepWorkspaceFloats(5, {3, 7, 3}), 32 + 64 + 64 + 32);
  auto plan = codegen::PlanMlpStep(5, {3, 7, 3}, codegen::MlpStepTarget{});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->workspace_floats, 32 + 64 + 64 + 32);
  EXPECT_EQ(plan->h_offset[1] % 32, 0);
  EXPECT_EQ(plan->dz_offset[1] % 32, 0);
  EXPECT_EQ(plan->row_loss_offset % 32, 0);
}

TEST(MlpStepKernelTest, LimitsAreUnimplementedAndSayWhich) {
  const codegen::MlpStepTarget h100;
  auto too_many_classes = codegen::PlanMlpStep(8, {1024, 1024, 56}, h100);
  EXPECT_EQ(too_many_classes.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(too_many_classes.status().message(), HasSubstr("56 classes x 1024 inputs"));
  EXPECT_TRUE(codegen::PlanMlpStep(8, {1024, 1024, 55}, h100).ok());
  auto big_batch = codegen::PlanMlpStep(65537, {4, 4, 2}, h100);
  EXPECT_THAT(big_batch.status().message(), HasSubstr("batch 65537"));
  EXPECT_EQ(codegen::PlanMlpStep(0, {4, 2}, h100).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace reprise
