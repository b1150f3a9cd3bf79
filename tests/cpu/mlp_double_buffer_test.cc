// The double-buffered guarded MLP step (MlpGuard in src/codegen/mlp_step_kernel.h), as generated
// source: guarded layer-phase and row-chain plans read each weight and velocity from the buffer
// the parity word names and write the update to the other, copy and restore only the biases, and
// flip the word when the step is applied; the settle kernel copies the shadow's buffers back. Only
// a plan given a shadow (MlpStepTarget::shadow, which the fuse passes add as persistent state)
// double-buffers.
// Both compile for sm_90 without warnings. The GPU side: tests/gpu/mlp_step_guard_gpu_test.cc.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/codegen/mlp_step_kernel.h"
#include "src/ir/op_def.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/mlp_step.h"
#include "src/runtime/kernel_store.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

codegen::MlpStepPlan Plan(int64_t models, codegen::MlpSchedule schedule, codegen::MlpGuard guard,
                          bool shadow = true) {
  codegen::MlpStepTarget target;
  target.tf32 = true;
  target.schedule = schedule;
  target.guard = guard;
  target.shadow = shadow && guard != codegen::MlpGuard::kNone;
  auto plan = codegen::PlanMlpStep(64, {64, 256, 256, 10}, target, models);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

void ExpectCompilesCleanly(const codegen::GeneratedKernel& kernel) {
  auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(compiled->log.find("warning"), std::string::npos) << compiled->log;
}

TEST(MlpDoubleBufferTest, GuardedLayerPhasesAndRowChainAreDoubleBufferedTheOthersNot) {
  using codegen::MlpGuard;
  using codegen::MlpSchedule;
  for (MlpSchedule schedule : {MlpSchedule::kLayerPhases, MlpSchedule::kRowChain}) {
    EXPECT_TRUE(Plan(1, schedule, MlpGuard::kSkip).double_buffered);
    EXPECT_TRUE(Plan(4, schedule, MlpGuard::kStop).double_buffered);
    EXPECT_FALSE(Plan(4, schedule, MlpGuard::kNone).double_buffered);
    EXPECT_FALSE(Plan(4, schedule, MlpGuard::kSkip, /*shadow=*/false).double_buffered);
  }
  // The shadow holds each weight and velocity once, 128-byte aligned, at the plan's offsets.
  const codegen::MlpStepPlan plan = Plan(4, MlpSchedule::kLayerPhases, MlpGuard::kSkip);
  EXPECT_EQ(plan.shadow_w_offset, (std::vector<int64_t>{0, 2 * 65536, 2 * 65536 + 2 * 262144}));
  EXPECT_EQ(plan.shadow_vw_offset,
            (std::vector<int64_t>{65536, 2 * 65536 + 262144, 2 * 65536 + 2 * 262144 + 10240}));
  EXPECT_EQ(codegen::MlpStepShadowFloats({64, 256, 256, 10}, 4), 2 * (65536 + 262144 + 10240));
  EXPECT_EQ(codegen::MlpStepShadowFloats({1, 3}, 1), 2 * 32);  // Aligned up.
  EXPECT_EQ(codegen::MlpStepShadowFloats({int64_t{1} << 40, int64_t{1} << 40}, 8),
            std::numeric_limits<int64_t>::max());  // Saturates, never wraps.
  // The group schedule copies in its updates (its own form is still to come).
  const codegen::MlpStepPlan groups = Plan(32, MlpSchedule::kGroups, MlpGuard::kSkip);
  EXPECT_GT(groups.groups, 0);
  EXPECT_FALSE(groups.double_buffered);
}

TEST(MlpDoubleBufferTest, StepReadsOneBufferWritesTheOtherAndCopiesOnlyTheBiases) {
  for (codegen::MlpSchedule schedule :
       {codegen::MlpSchedule::kLayerPhases, codegen::MlpSchedule::kRowChain}) {
    for (int64_t models : {1, 4}) {
      SCOPED_TRACE(::testing::Message()
                   << models << " models, schedule " << static_cast<int>(schedule));
      const codegen::MlpStepPlan plan = Plan(models, schedule, codegen::MlpGuard::kSkip);
      const codegen::GeneratedKernel kernel =
          models == 1 ? codegen::MlpStepKernel(plan)
                      : codegen::BatchedMlpStepKernel(plan, false, false);
      const std::string& code = kernel.code;
      EXPECT_THAT(code, HasSubstr("const bool flip = barrier[62] != 0u;"));
      for (int l = 0; l < plan.layers(); ++l) {
        const std::string w = "w" + std::to_string(l), vw = "vw" + std::to_string(l);
        EXPECT_THAT(code, HasSubstr(w + "_now = flip ? shadow + " +
                                    std::to_string(plan.shadow_w_offset[l]) + " : " + w + ";"));
        EXPECT_THAT(code, HasSubstr(vw + "_next = flip ? " + vw + " : shadow + " +
                                    std::to_string(plan.shadow_vw_offset[l]) + ";"));
        // The weight gradient's update: written to _next, the step's values read from _now.
        EXPECT_THAT(code, HasSubstr(w + "_next, " + w + "_now, " + vw + "_now, " + vw + "_next, b" +
                                    std::to_string(l)));
        EXPECT_THAT(
            code, Not(HasSubstr("(ws + " + std::to_string(plan.grad_w_offset[l]) + ", " + w + ",")))
            << "no step-start copy of " << w;
        EXPECT_THAT(code, HasSubstr("mlpg::Restore<"));
      }
      EXPECT_THAT(code, HasSubstr("record, barrier + 62))"));
      EXPECT_THAT(code, HasSubstr("int* record, float* shadow, float* loss"));
      ExpectCompilesCleanly(kernel);
    }
  }
  // Unguarded kernels update in place, as before.
  const std::string plain =
      codegen::MlpStepKernel(Plan(1, codegen::MlpSchedule::kLayerPhases, codegen::MlpGuard::kNone))
          .code;
  EXPECT_THAT(plain, Not(HasSubstr("const bool flip")));
  EXPECT_THAT(plain, HasSubstr("constexpr bool kDoubleBuffer = false;"));
}

TEST(MlpDoubleBufferTest, SettleCopiesEveryWeightAndVelocityBackThenClears) {
  const codegen::MlpStepPlan plan =
      Plan(4, codegen::MlpSchedule::kLayerPhases, codegen::MlpGuard::kSkip);
  const codegen::GeneratedKernel settle = codegen::MlpStepSettleKernel(plan);
  EXPECT_EQ(settle.name, "reprise_mlp_step_settle");
  EXPECT_THAT(settle.code, HasSubstr("if (barrier[62] == 0u) return;"));
  EXPECT_THAT(settle.code, HasSubstr("barrier[62] = 0u;"));
  for (int l = 0; l < plan.layers(); ++l) {
    const int64_t weights = int64_t{plan.models} * plan.widths[l + 1] * plan.widths[l];
    const std::string bound = "i < " + std::to_string(weights) + "; i += step) ";
    EXPECT_THAT(settle.code, HasSubstr(bound + "w" + std::to_string(l) + "[i] = shadow[" +
                                       std::to_string(plan.shadow_w_offset[l]) + " + i];"));
    EXPECT_THAT(settle.code, HasSubstr(bound + "vw" + std::to_string(l) + "[i] = shadow[" +
                                       std::to_string(plan.shadow_vw_offset[l]) + " + i];"));
  }
  ExpectCompilesCleanly(settle);
  // Nothing to settle in a plan that is not double-buffered.
  const codegen::GeneratedKernel none = codegen::MlpStepSettleKernel(
      Plan(4, codegen::MlpSchedule::kLayerPhases, codegen::MlpGuard::kNone));
  EXPECT_THAT(none.code, Not(HasSubstr("shadow[")));
  ExpectCompilesCleanly(none);
}

// The op's shape rule: a guarded step takes a shadow of exactly MlpStepShadowFloats after its
// counters, or none (then it copies, as before); anything else is refused, naming the shadow.
TEST(MlpDoubleBufferTest, ShapeRuleTakesAShadowOfTheRightSizeOrNone) {
  const TensorSpec scalar{Shape{}, DType::kFloat32};
  std::vector<TensorSpec> in = {
      {Shape{8, 6}, DType::kFloat32}, {Shape{8}, DType::kInt32}, scalar, scalar, scalar, scalar};
  for (auto [out, from] : {std::pair{12, 6}, std::pair{4, 12}}) {
    const TensorSpec w{Shape{out, from}, DType::kFloat32}, b{Shape{out}, DType::kFloat32};
    for (const TensorSpec& t : {w, b, w, b}) in.push_back(t);
  }
  in.push_back({Shape{codegen::kMlpStepBarrierWords}, DType::kInt32});
  in.push_back({Shape{}, DType::kInt32});
  in.push_back({Shape{2}, DType::kInt32});
  const Attrs attrs = {{"layers", int64_t{2}}, {"non_finite", std::string("skip")}};
  const ir::OpDef& op = ops::MlpTrainStepOp();
  EXPECT_TRUE(op.infer(attrs, in).ok()) << "no shadow";
  const int64_t floats = codegen::MlpStepShadowFloats({6, 12, 4}, 1);
  EXPECT_EQ(floats, 2 * 96 + 2 * 64);
  in.push_back({Shape{floats}, DType::kFloat32});
  EXPECT_TRUE(op.infer(attrs, in).ok()) << "with its shadow";
  in.back() = {Shape{floats - 1}, DType::kFloat32};
  const absl::StatusOr<std::vector<TensorSpec>> short_one = op.infer(attrs, in);
  ASSERT_FALSE(short_one.ok());
  EXPECT_THAT(short_one.status().message(), HasSubstr("(shadow) must be f32[320]"));
  in.push_back({Shape{floats}, DType::kFloat32});
  EXPECT_FALSE(op.infer(attrs, in).ok()) << "two shadows";
}

}  // namespace
}  // namespace reprise
