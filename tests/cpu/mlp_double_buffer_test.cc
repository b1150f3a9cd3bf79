// The double-buffered guarded MLP step (MlpGuard in src/codegen/mlp_step_kernel.h), as generated
// source: guarded layer-phase, row-chain and group plans read each parameter and velocity from the
// buffer the parity names and write the update to the other, copy and restore nothing; the
// group plans' last block writes the flipped word when the step is applied, the others' next step
// reads the verdict (the deferred verdict); the settle kernel copies the shadow's buffers back and
// folds a deferred verdict into the counters. Only a plan given a shadow (MlpStepTarget::shadow,
// which the fuse passes add as persistent state) double-buffers. All compile for sm_90 without
// warnings. The GPU side: tests/gpu/mlp_step_guard_gpu_test.cc.
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

TEST(MlpDoubleBufferTest, GuardedPlansWithAShadowAreDoubleBufferedTheOthersNot) {
  using codegen::MlpGuard;
  using codegen::MlpSchedule;
  for (MlpSchedule schedule :
       {MlpSchedule::kLayerPhases, MlpSchedule::kRowChain, MlpSchedule::kGroups}) {
    const int64_t models = schedule == MlpSchedule::kGroups ? 32 : 4;
    if (schedule != MlpSchedule::kGroups)
      EXPECT_TRUE(Plan(1, schedule, MlpGuard::kSkip).double_buffered);
    EXPECT_TRUE(Plan(models, schedule, MlpGuard::kStop).double_buffered);
    EXPECT_FALSE(Plan(models, schedule, MlpGuard::kNone).double_buffered);
    EXPECT_FALSE(Plan(models, schedule, MlpGuard::kSkip, /*shadow=*/false).double_buffered);
    // Nothing is copied, so the workspace is the unguarded plan's; with copies it holds them too.
    const int64_t plain = Plan(models, schedule, MlpGuard::kNone).workspace_floats;
    EXPECT_EQ(Plan(models, schedule, MlpGuard::kSkip).workspace_floats, plain);
    EXPECT_GT(Plan(models, schedule, MlpGuard::kSkip, /*shadow=*/false).workspace_floats, plain);
  }
  // The shadow holds each layer's weights, their velocities, biases and theirs once, 128-byte
  // aligned, at the plan's offsets: 4 models of 64-256-256-10 have 65536, 262144 and 10240
  // weights and 1024, 1024 and 40 (aligned up to 64) biases per layer.
  const codegen::MlpStepPlan plan = Plan(4, MlpSchedule::kLayerPhases, MlpGuard::kSkip);
  const int64_t layer1 = 2 * 65536 + 2 * 1024, layer2 = layer1 + 2 * 262144 + 2 * 1024;
  EXPECT_EQ(plan.shadow_w_offset, (std::vector<int64_t>{0, layer1, layer2}));
  EXPECT_EQ(plan.shadow_vw_offset, (std::vector<int64_t>{65536, layer1 + 262144, layer2 + 10240}));
  EXPECT_EQ(plan.shadow_b_offset,
            (std::vector<int64_t>{2 * 65536, layer1 + 2 * 262144, layer2 + 2 * 10240}));
  EXPECT_EQ(plan.shadow_vb_offset,
            (std::vector<int64_t>{2 * 65536 + 1024, layer1 + 2 * 262144 + 1024,
                                  layer2 + 2 * 10240 + 64}));
  EXPECT_EQ(codegen::MlpStepShadowFloats({64, 256, 256, 10}, 4), layer2 + 2 * 10240 + 2 * 64);
  EXPECT_EQ(codegen::MlpStepShadowFloats({1, 3}, 1), 4 * 32);  // Aligned up.
  EXPECT_EQ(codegen::MlpStepShadowFloats({int64_t{1} << 40, int64_t{1} << 40}, 8),
            std::numeric_limits<int64_t>::max());  // Saturates, never wraps.
  // The group schedule's barriers stay below the parity word: at most 60 groups when it is used.
  codegen::MlpStepTarget wide;
  wide.tf32 = true;
  wide.schedule = MlpSchedule::kGroups;
  wide.grid = 4 * 132;
  for (bool shadow : {false, true}) {
    wide.guard = MlpGuard::kSkip;
    wide.shadow = shadow;
    auto groups = codegen::PlanMlpStep(8, {16, 32, 8}, wide, 128);
    ASSERT_TRUE(groups.ok()) << groups.status();
    EXPECT_EQ(groups->groups,
              shadow ? codegen::kMlpStepParityWord - 2 : codegen::kMlpStepGuardWord - 2);
  }
}

// The group schedule's double-buffered form: each model's parameters and velocities read through
// <param><l>k from the current buffers and its updates written through n<param><l>k to the others.
TEST(MlpDoubleBufferTest, GroupStepReadsOneBufferWritesTheOtherAndCopiesNothing) {
  const codegen::MlpStepPlan plan =
      Plan(32, codegen::MlpSchedule::kGroups, codegen::MlpGuard::kSkip);
  ASSERT_GT(plan.groups, 0);
  const codegen::GeneratedKernel kernel = codegen::BatchedMlpStepKernel(plan, false, false);
  const std::string& code = kernel.code;
  EXPECT_THAT(code, HasSubstr("  const bool flip = barrier[62] != 0u;\n"));
  for (int l = 0; l < plan.layers(); ++l) {
    const std::string n = std::to_string(l);
    EXPECT_THAT(code, HasSubstr("float* const w" + n + "k = w" + n + "_now + "));
    EXPECT_THAT(code, HasSubstr("float* const nw" + n + "k = w" + n + "_next + "));
    EXPECT_THAT(code, HasSubstr("float* const nvb" + n + "k = vb" + n + "_next + "));
    EXPECT_THAT(code, Not(HasSubstr("float* const sw" + n + "k")));
  }
  EXPECT_THAT(code, HasSubstr("SgdGuarded<true, true, false>{Sgd<true, true>{"));
  EXPECT_THAT(code, HasSubstr("BiasSgdGuarded<false, "));
  EXPECT_THAT(code, Not(HasSubstr("mlpg::Restore<"))) << "no restore";
  EXPECT_THAT(code, HasSubstr("record, barrier + 62, flip))"));
  EXPECT_FALSE(plan.deferred_verdict) << "no grid barrier to defer the verdict past";
  ExpectCompilesCleanly(kernel);
}

TEST(MlpDoubleBufferTest, StepReadsOneBufferWritesTheOtherAndCopiesNothing) {
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
      // One body for both parities, reading the verdict words once; the next step decides
      // (no block arrives on the guard word).
      EXPECT_TRUE(plan.deferred_verdict);
      EXPECT_THAT(code, HasSubstr("mlpg::VerdictBegin<kGuardSticky>(barrier + 60, record);\n"));
      EXPECT_THAT(code, HasSubstr("  const bool flip = verdict.flip;\n"));
      EXPECT_THAT(code,
                  HasSubstr("  mlpg::VerdictEnd(barrier + 60, verdict, skipped_steps, record);"));
      EXPECT_THAT(code, Not(HasSubstr("mlpg::GuardFinish(")));
      EXPECT_THAT(code, Not(HasSubstr("mlpg::GuardBegin<")));
      EXPECT_THAT(code, HasSubstr("constexpr int kBadFlag = 3;"));
      EXPECT_THAT(code, Not(HasSubstr("constexpr bool flip")));
      for (int l = 0; l < plan.layers(); ++l) {
        const std::string n = std::to_string(l), w = "w" + n, vw = "vw" + n, b = "b" + n,
                          vb = "vb" + n;
        EXPECT_THAT(code, HasSubstr(w + "_now = flip ? shadow + " +
                                    std::to_string(plan.shadow_w_offset[l]) + " : " + w + ";"));
        EXPECT_THAT(code, HasSubstr(vw + "_next = flip ? " + vw + " : shadow + " +
                                    std::to_string(plan.shadow_vw_offset[l]) + ";"));
        EXPECT_THAT(code, HasSubstr(b + "_now = flip ? shadow + " +
                                    std::to_string(plan.shadow_b_offset[l]) + " : " + b + ";"));
        EXPECT_THAT(code, HasSubstr(vb + "_next = flip ? " + vb + " : shadow + " +
                                    std::to_string(plan.shadow_vb_offset[l]) + ";"));
        // The weight gradient's update: written to _next, the step's values read from _now.
        EXPECT_THAT(code, HasSubstr(w + "_next, " + w + "_now, " + vw + "_now, " + vw + "_next, " +
                                    b + "_now, " + vb + "_now, " + b + "_next, " + vb + "_next"));
      }
      EXPECT_THAT(code, Not(HasSubstr("mlpg::CopyStart<"))) << "no step-start copies";
      EXPECT_THAT(code, Not(HasSubstr("mlpg::Restore<"))) << "no restore";
      EXPECT_THAT(code, HasSubstr("int* record, float* shadow, float* loss"));
      ExpectCompilesCleanly(kernel);
    }
  }
  // Unguarded kernels update in place, as before.
  const std::string plain =
      codegen::MlpStepKernel(Plan(1, codegen::MlpSchedule::kLayerPhases, codegen::MlpGuard::kNone))
          .code;
  EXPECT_THAT(plain, Not(HasSubstr("bool flip")));
  EXPECT_THAT(plain, HasSubstr("constexpr bool kDoubleBuffer = false;"));
}

TEST(MlpDoubleBufferTest, SettleCopiesEveryParameterAndVelocityBackThenClears) {
  const codegen::MlpStepPlan plan =
      Plan(4, codegen::MlpSchedule::kLayerPhases, codegen::MlpGuard::kSkip);
  ASSERT_TRUE(plan.deferred_verdict);
  const codegen::GeneratedKernel settle = codegen::MlpStepSettleKernel(plan);
  EXPECT_EQ(settle.name, "reprise_mlp_step_settle");
  // The parity and the fold are the step's own device library (mlpg::VerdictBegin decodes the
  // words as the next step would): mode 0 copies back where the current values are in the
  // shadow, modes 1 and 2 fold the last verdict and the step count into the counters.
  EXPECT_THAT(settle.code, HasSubstr("MLP_DEV void VerdictFold("));
  EXPECT_THAT(settle.code,
              HasSubstr("if (!mlpg::VerdictBegin<false>(words, record).flip) return;"));
  EXPECT_THAT(settle.code,
              HasSubstr("mlpg::VerdictFold(words, skipped_steps, record, mode == 2);"));
  for (int l = 0; l < plan.layers(); ++l) {
    const std::string n = std::to_string(l);
    const int64_t weights = int64_t{plan.models} * plan.widths[l + 1] * plan.widths[l];
    const int64_t biases = int64_t{plan.models} * plan.widths[l + 1];
    const std::string by_weight = "i < " + std::to_string(weights) + "; i += step) ";
    const std::string by_bias = "i < " + std::to_string(biases) + "; i += step) ";
    EXPECT_THAT(settle.code, HasSubstr(by_weight + "w" + n + "[i] = shadow[" +
                                       std::to_string(plan.shadow_w_offset[l]) + " + i];"));
    EXPECT_THAT(settle.code, HasSubstr(by_weight + "vw" + n + "[i] = shadow[" +
                                       std::to_string(plan.shadow_vw_offset[l]) + " + i];"));
    EXPECT_THAT(settle.code, HasSubstr(by_bias + "b" + n + "[i] = shadow[" +
                                       std::to_string(plan.shadow_b_offset[l]) + " + i];"));
    EXPECT_THAT(settle.code, HasSubstr(by_bias + "vb" + n + "[i] = shadow[" +
                                       std::to_string(plan.shadow_vb_offset[l]) + " + i];"));
  }
  EXPECT_THAT(settle.code, HasSubstr("float* w0, float* b0, float* vw0, float* vb0, float* w1"));
  EXPECT_THAT(settle.code,
              HasSubstr("const float* shadow, int* skipped_steps, int* record, int mode"));
  ExpectCompilesCleanly(settle);
  // The group schedule's verdict is the last block's, in the step: its settle reads the parity
  // word alone.
  const codegen::MlpStepPlan groups =
      Plan(32, codegen::MlpSchedule::kGroups, codegen::MlpGuard::kSkip);
  ASSERT_FALSE(groups.deferred_verdict);
  const codegen::GeneratedKernel group_settle = codegen::MlpStepSettleKernel(groups);
  EXPECT_THAT(group_settle.code, HasSubstr("if (barrier[62] == 0u || mode == 2) return;"));
  EXPECT_THAT(group_settle.code, HasSubstr("barrier[62] = 0u;"));
  EXPECT_THAT(group_settle.code, Not(HasSubstr("record[")));
  ExpectCompilesCleanly(group_settle);
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
  EXPECT_EQ(floats, 2 * 96 + 2 * 64 + 4 * 32);  // Weights 72 and 48, biases 12 and 4, aligned.
  in.push_back({Shape{floats}, DType::kFloat32});
  EXPECT_TRUE(op.infer(attrs, in).ok()) << "with its shadow";
  in.back() = {Shape{floats - 1}, DType::kFloat32};
  const absl::StatusOr<std::vector<TensorSpec>> short_one = op.infer(attrs, in);
  ASSERT_FALSE(short_one.ok());
  EXPECT_THAT(short_one.status().message(), HasSubstr("(shadow) must be f32[448]"));
  in.push_back({Shape{floats}, DType::kFloat32});
  EXPECT_FALSE(op.infer(attrs, in).ok()) << "two shadows";
}

}  // namespace
}  // namespace reprise
