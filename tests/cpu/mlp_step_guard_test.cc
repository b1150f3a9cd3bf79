// The non-finite guard inside the whole-step MLP kernels (codegen::MlpGuard), without a GPU: a
// guarded training graph fuses into mlp_train_step / batched_mlp_train_step with the guard's
// counters, so that no plan under the default options is unguarded; the fused CPU reference skips
// and counts exactly as the unfused guarded graph does (kSkipStep and kStop); guarded plans add the
// workspace for the step-start copies, keep the group schedule (its exchange areas clear of the
// copies), add no grid barrier, never pick the cluster schedule, and compile for sm_90.
#include <cmath>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/trainer.h"
#include "src/api/compile_options.h"
#include "src/autodiff/autodiff.h"
#include "src/autodiff/non_finite_guard.h"
#include "src/codegen/mlp_cluster_kernel.h"
#include "src/codegen/mlp_step_kernel.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/mlp_step.h"
#include "src/passes/fuse.h"
#include "src/passes/pipeline.h"
#include "src/runtime/kernel_store.h"
#include "tests/cpu/guard_test_util.h"

namespace reprise {
namespace {

using autodiff::NonFinitePolicy;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kFeatures = testing::kGuardFeatures;
// Step `step`'s batch (this file's seeds); with `nan_at` >= 0 that one feature is a NaN.
void SetBatch(ir::ReferenceExecutor& exec, int step, int nan_at = -1) {
  testing::SetGuardBatch(exec, 200 + step, nan_at);
}

// What the guard may add to a step's launches: the check of the gradients, then the check's
// verdict and its counters.
constexpr int64_t kMaxGuardLaunches = 2;

// Every parameter and state (the guard's counters included), as doubles, but the kernel's
// barrier and shadow (its own state, which the unfused graph lacks).
std::map<std::string, std::vector<double>> Leaves(const Graph& g, ir::ReferenceExecutor& exec) {
  std::map<std::string, std::vector<double>> out;
  for (const char* op : {"parameter", "state"}) {
    for (int32_t id : g.NodesOf(op)) {
      const std::string& name = g.node(id).name;
      if (name.find("barrier") != std::string::npos || name.find(".shadow") != std::string::npos) {
        continue;
      }
      const ir::HostTensor* t = *exec.Tensor({id, 0});
      std::vector<double>& values = out[name];
      for (int64_t i = 0; i < t->size(); ++i) {
        values.push_back(t->dtype() == DType::kInt32 ? t->data<int32_t>()[i]
                                                     : ir::FloatElement(*t, i));
      }
    }
  }
  return out;
}

// A guarded step fuses whole: the kernel takes the guard's counters and its policy, and a shadow
// of every weight and velocity to double-buffer them (codegen::MlpGuard).
TEST(MlpStepGuardTest, WholeStepKeepsAGuardedStep) {
  const models::Mlp mlp = testing::BuildGuardMlp();
  for (NonFinitePolicy policy : {NonFinitePolicy::kSkipStep, NonFinitePolicy::kStop}) {
    auto t = testing::BuildGuarded(mlp, policy);
    ASSERT_TRUE(t.ok()) << t.status();
    auto fused = passes::Fuse(*t, {t->loss}, {});
    ASSERT_TRUE(fused.ok()) << fused.status();
    EXPECT_TRUE(fused->whole_step_declined.empty()) << fused->whole_step_declined;
    const Graph& g = fused->training.graph;
    auto step = g.FindNode("mlp_train_step");
    ASSERT_TRUE(step.ok()) << step.status();
    const Node& node = g.node(*step);
    EXPECT_EQ(std::get<std::string>(node.attrs.at("non_finite")),
              policy == NonFinitePolicy::kStop ? "stop" : "skip");
    const size_t n = node.inputs.size();
    EXPECT_EQ(g.node(node.inputs[n - 3].node).name, autodiff::kNonFiniteSkippedSteps);
    EXPECT_EQ(g.node(node.inputs[n - 2].node).name, autodiff::kNonFiniteRecord);
    EXPECT_EQ(g.node(node.inputs[n - 1].node).name, "mlp_train_step.shadow");
    EXPECT_EQ(g.spec(node.inputs[n - 1]),
              (TensorSpec{Shape{codegen::MlpStepShadowFloats({kFeatures, 12, 12, 4}, 1)},
                          DType::kFloat32}));
    EXPECT_FALSE(g.FindNode(std::string(autodiff::kNonFiniteCheck)).ok());
  }
}

// The fused reference against the unfused guarded graph, bit for bit, over a clean step, a step
// with one NaN feature (the case) and clean steps after: weights, momenta and counters.
TEST(MlpStepGuardTest, FusedReferenceSkipsAndCountsAsTheUnfusedGraph) {
  const models::Mlp mlp = testing::BuildGuardMlp();
  for (NonFinitePolicy policy : {NonFinitePolicy::kSkipStep, NonFinitePolicy::kStop}) {
    auto t = testing::BuildGuarded(mlp, policy);
    ASSERT_TRUE(t.ok()) << t.status();
    auto fused = passes::Fuse(*t, {t->loss}, {});
    ASSERT_TRUE(fused.ok()) << fused.status();
    ASSERT_TRUE(fused->training.graph.FindNode("mlp_train_step").ok());
    ir::ReferenceExecutor a(t->graph, false, 9), b(fused->training.graph, false, 9);
    for (int32_t id : t->graph.NodesOf("parameter")) {
      const ir::HostTensor* w = *a.Tensor({id, 0});
      std::vector<double> values;
      for (int64_t i = 0; i < w->size(); ++i) values.push_back(ir::FloatElement(*w, i));
      ASSERT_TRUE(b.SetLeaf(t->graph.node(id).name, values).ok());
    }
    std::map<std::string, std::vector<double>> before;
    for (int step = 0; step < 4; ++step) {
      const int nan_at = step == 1 ? 3 * kFeatures + 2 : -1;
      SetBatch(a, step, nan_at);
      SetBatch(b, step, nan_at);
      ASSERT_TRUE(a.Run().ok());
      ASSERT_TRUE(b.Run().ok());
      const auto unfused = Leaves(t->graph, a);
      ASSERT_EQ(Leaves(fused->training.graph, b), unfused) << "step " << step;
      if (step == 0) before = unfused;
      if (step == 1) {  // Skipped: all but the counters as before it.
        for (const auto& [name, values] : unfused) {
          if (!autodiff::IsNonFiniteCounter(name)) EXPECT_EQ(values, before.at(name)) << name;
        }
        EXPECT_EQ(unfused.at(autodiff::kNonFiniteSkippedSteps), std::vector<double>{1});
        EXPECT_EQ(unfused.at(autodiff::kNonFiniteRecord), (std::vector<double>{2, 2}));
      }
    }
    const auto last = Leaves(t->graph, a);
    // kSkipStep trains on after the skipped step; kStop skips every later step too.
    EXPECT_EQ(last.at(autodiff::kNonFiniteSkippedSteps),
              std::vector<double>{policy == NonFinitePolicy::kStop ? 3.0 : 1.0});
    EXPECT_EQ(last.at("fc0.weight") == before.at("fc0.weight"), policy == NonFinitePolicy::kStop);
  }
}

// Under the default TrainOptions (kSkipStep) every whole-step plan is guarded: the single MLP's
// and the ensemble's kernels take the guard.
TEST(MlpStepGuardTest, DefaultPlansOfWholeStepKernelsAreGuarded) {
  const codegen::MlpStepTarget h100;  // The default target: 132 SMs.
  const models::MlpConfig config{
      .batch = 32, .input_features = 64, .depth = 2, .width = 64, .classes = 10};
  auto mlp = models::BuildMlp(config);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  TrainOptions options;
  options.numerics.allow_tf32 = true;
  auto single = passes::CompileStep(mlp->graph, mlp->loss, CompileOptionsFor(options, h100));
  ASSERT_TRUE(single.ok()) << single.status();
  auto step = single->plan.graph().FindNode("mlp_train_step");
  ASSERT_TRUE(step.ok()) << single->plan.whole_step_declined;
  EXPECT_EQ(std::get<std::string>(single->plan.graph().node(*step).attrs.at("non_finite")), "skip");
  for (int models : {4, 32}) {
    auto ensemble = models::BuildMlpEnsemble(models, config);
    ASSERT_TRUE(ensemble.ok()) << ensemble.status();
    auto compiled =
        passes::CompileStep(ensemble->graph, ensemble->loss, CompileOptionsFor(options, h100));
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    auto batched = compiled->plan.graph().FindNode("batched_mlp_train_step");
    ASSERT_TRUE(batched.ok()) << models << " models: " << compiled->plan.whole_step_declined;
    EXPECT_EQ(std::get<std::string>(compiled->plan.graph().node(*batched).attrs.at("non_finite")),
              "skip");
  }
  options.numerics.non_finite.policy = NonFinitePolicy::kIgnore;
  auto ignored = passes::CompileStep(mlp->graph, mlp->loss, CompileOptionsFor(options, h100));
  ASSERT_TRUE(ignored.ok()) << ignored.status();
  step = ignored->plan.graph().FindNode("mlp_train_step");
  ASSERT_TRUE(step.ok());
  EXPECT_FALSE(ignored->plan.graph().node(*step).attrs.contains("non_finite"));
}

// A guarded plan: one more stamped section (the guard's, after the last phase) and no more grid
// barriers; each layer's step-start parameters and velocities in the workspace after the row
// losses, apart; the flag word in shared memory; 32 models keep the group schedule, its exchange
// areas clear of the gradients; the cluster schedule only double-buffered (a restore by the last
// block could come before a later wave of models has written its updates).
TEST(MlpStepGuardTest, GuardedPlansAddTheCheckKeepTheGroupsAndClusterOnlyDoubleBuffered) {
  const std::vector<int64_t> widths = {64, 256, 256, 10};
  for (int64_t models : {1, 4, 32}) {
    for (codegen::MlpSchedule schedule :
         {codegen::MlpSchedule::kAuto, codegen::MlpSchedule::kLayerPhases,
          codegen::MlpSchedule::kRowChain}) {
      codegen::MlpStepTarget target;
      target.tf32 = true;
      target.schedule = schedule;
      auto plain = codegen::PlanMlpStep(64, widths, target, models);
      target.guard = codegen::MlpGuard::kSkip;
      auto guarded = codegen::PlanMlpStep(64, widths, target, models);
      ASSERT_TRUE(plain.ok() && guarded.ok()) << guarded.status();
      if (models == 32 && schedule == codegen::MlpSchedule::kAuto) {
        EXPECT_GT(guarded->groups, 0) << "the group schedule under the guard";
        EXPECT_EQ(guarded->groups, plain->groups);
        EXPECT_EQ(guarded->cluster, plain->cluster);
        // The exchange areas lie before the gradients or after them, in the workspace.
        const int64_t areas =
            guarded->groups * guarded->exchange_areas * codegen::GroupAreaFloats(*guarded);
        EXPECT_TRUE(guarded->area_offset + areas <= guarded->grad_w_offset[0] ||
                    guarded->area_offset >= guarded->grad_b_offset.back() + models * widths.back());
        EXPECT_LE(guarded->area_offset + areas, guarded->workspace_floats);
      } else {
        EXPECT_EQ(guarded->cluster, 0) << models << " models";
      }
      EXPECT_LE(guarded->shared_bytes, target.max_shared_bytes);
      if (plain->cluster == 0) {
        EXPECT_EQ(guarded->phases, plain->phases + 1);
        EXPECT_EQ(guarded->barriers, plain->barriers) << "the guard adds no grid barrier";
      }
      int64_t grads = 0;
      int64_t end = guarded->row_loss_offset + models * 64;
      for (int l = 0; l + 1 < static_cast<int>(widths.size()); ++l) {
        const int64_t weights = models * widths[l + 1] * widths[l], biases = models * widths[l + 1];
        grads += weights + biases;
        // w, b, the velocities of w and b: in order, none overlapping the one before.
        const int64_t starts[] = {guarded->grad_w_offset[l], guarded->grad_b_offset[l],
                                  guarded->start_vw_offset[l], guarded->start_vb_offset[l]};
        const int64_t sizes[] = {weights, biases, weights, biases};
        for (int i = 0; i < 4; ++i) {
          EXPECT_GE(starts[i], end) << "layer " << l << ", copy " << i;
          EXPECT_EQ(starts[i] % 32, 0);
          end = starts[i] + sizes[i];
        }
        EXPECT_LE(end, guarded->workspace_floats);
      }
      EXPECT_EQ(guarded->workspace_floats,
                codegen::MlpStepWorkspaceFloats(64, widths, models, /*start_copies=*/true));
      EXPECT_GE(guarded->grad_b_offset.back() - guarded->grad_w_offset[0],
                grads - models * widths.back());
    }
  }
  // The cluster schedule guards only double-buffered: a model's cluster may run in a wave after
  // the last block's restore. Without a shadow, asked for, it is refused, and kAuto plans another.
  codegen::MlpStepTarget cluster;
  cluster.tf32 = true;
  cluster.schedule = codegen::MlpSchedule::kCluster;
  cluster.guard = codegen::MlpGuard::kStop;
  auto refused = codegen::PlanMlpStep(64, widths, cluster, 8);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(refused.status().message(), HasSubstr("only double-buffered"));
  cluster.schedule = codegen::MlpSchedule::kAuto;
  auto copied = codegen::PlanMlpStep(64, widths, cluster, 8);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->cluster, 0);
  cluster.shadow = true;
  for (auto schedule : {codegen::MlpSchedule::kCluster, codegen::MlpSchedule::kAuto}) {
    cluster.schedule = schedule;
    auto clustered = codegen::PlanMlpStep(64, widths, cluster, 8);
    ASSERT_TRUE(clustered.ok()) << clustered.status();
    EXPECT_GT(clustered->cluster, 0);
    EXPECT_EQ(clustered->groups, 0);
    EXPECT_TRUE(clustered->double_buffered);
    EXPECT_FALSE(clustered->deferred_verdict);
    EXPECT_EQ(clustered->shadow_w_offset.size(), widths.size() - 1);
  }
  // The guard word counts at most 65535 finished blocks: 8192 models of 8 blocks are refused
  // guarded (unguarded, the same clusters launch 65536 blocks).
  cluster.schedule = codegen::MlpSchedule::kCluster;
  auto too_many = codegen::PlanMlpStep(16, {512, 512, 4}, cluster, 8192);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(too_many.status().message(), HasSubstr("at most 65535 blocks"));
  cluster.guard = codegen::MlpGuard::kNone;
  auto unguarded = codegen::PlanMlpStep(16, {512, 512, 4}, cluster, 8192);
  ASSERT_TRUE(unguarded.ok()) << unguarded.status();
  EXPECT_GT(unguarded->grid(), 0xffff) << "the case no longer reaches the limit";
}

// The guard's launches per step on a mixed-precision ResNet-50 (the plan a Trainer runs): it reads
// the 16-bit gradients, so every widening cast stays folded into the multi-tensor update. With SGD
// in one launch (the default) the guarded step may take fewer launches than the unguarded one:
// its updates, which wait for the check anyway, are one sgd_multi instead of one per 32 tensors.
TEST(MlpStepGuardTest, GuardAddsFewLaunchesToAMixedPrecisionResNet50) {
  absl::StatusOr<models::ResNet> net =
      models::BuildResNet({.depth = 50, .batch = 2, .classes = 10, .image_size = 32});
  ASSERT_TRUE(net.ok()) << net.status();
  for (auto [dtype, one_launch] :
       {std::pair{DType::kBFloat16, false}, std::pair{DType::kFloat32, false},
        std::pair{DType::kBFloat16, true}}) {
    TrainOptions options;
    options.numerics.compute_dtype = dtype;
    options.kernels.sgd_one_launch = one_launch;
    auto guarded = passes::CompileStep(net->graph, net->loss,
                                       CompileOptionsFor(options, codegen::MlpStepTarget{}));
    options.numerics.non_finite.policy = NonFinitePolicy::kIgnore;
    auto ignored = passes::CompileStep(net->graph, net->loss,
                                       CompileOptionsFor(options, codegen::MlpStepTarget{}));
    ASSERT_TRUE(guarded.ok() && ignored.ok()) << guarded.status() << ignored.status();
    const int64_t added = static_cast<int64_t>(guarded->plan.launches.size()) -
                          static_cast<int64_t>(ignored->plan.launches.size());
    auto casts = [](const passes::Plan& plan) {
      int n = 0;
      for (const auto& launch : plan.launches)
        n += plan.graph().node(launch.node).op_name() == "cast";
      return n;
    };
    EXPECT_EQ(casts(guarded->plan), casts(ignored->plan)) << DTypeName(dtype);
    if (!one_launch) EXPECT_GE(added, 1);
    EXPECT_LE(added, kMaxGuardLaunches) << DTypeName(dtype);
  }
}

// One case per test, so that ctest's shards spread the 60 kernels' NVRTC compiles over the cores.
struct GuardedKernelCase {
  int64_t models, batch;
  std::vector<int64_t> widths;
  bool aligned;
  friend void PrintTo(const GuardedKernelCase& c, std::ostream* os) {
    *os << c.models << " models, batch " << c.batch << ", widths " << absl::StrJoin(c.widths, "x")
        << (c.aligned ? ", aligned" : "");
  }
};

class GuardedKernelsCompileTest : public ::testing::TestWithParam<GuardedKernelCase> {};

TEST_P(GuardedKernelsCompileTest, ForSm90) {
  const GuardedKernelCase& c = GetParam();
  for (bool tf32 : {false, true}) {
    for (codegen::MlpSchedule schedule :
         {codegen::MlpSchedule::kLayerPhases, codegen::MlpSchedule::kRowChain}) {
      for (codegen::MlpGuard guard : {codegen::MlpGuard::kSkip, codegen::MlpGuard::kStop}) {
        // With a shadow (double-buffered), for TF32 only: the compile time is the test's.
        for (bool shadow : {false, tf32}) {
          codegen::MlpStepTarget target;
          target.aligned = c.aligned;
          target.tf32 = tf32;
          target.schedule = schedule;
          target.guard = guard;
          target.shadow = shadow;
          auto plan = codegen::PlanMlpStep(c.batch, c.widths, target, c.models);
          ASSERT_TRUE(plan.ok()) << plan.status();
          const codegen::GeneratedKernel kernel =
              c.models == 1 ? codegen::MlpStepKernel(*plan)
                            : codegen::BatchedMlpStepKernel(*plan, false, c.models == 3);
          // No grid-wide wait for the check: with copies each block arrives on the guard word
          // and leaves, the last restoring a skipped step; double-buffered, no block arrives and
          // the next step reads the verdict.
          EXPECT_THAT(kernel.code,
                      HasSubstr(shadow ? "mlpg::VerdictEnd(barrier" : "mlpg::GuardFinish(barrier"));
          EXPECT_EQ(plan->deferred_verdict, shadow);
          EXPECT_EQ(kernel.code.find("mlpg::Restore<") != std::string::npos, !shadow);
          EXPECT_THAT(kernel.code, Not(HasSubstr("GuardBarrier(")));
          auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
          ASSERT_TRUE(compiled.ok()) << c.models << " models, layers " << plan->layers()
                                     << (tf32 ? " tf32" : "") << (plan->row_chain ? " chain" : "")
                                     << (shadow ? " shadow" : "") << ": " << compiled.status();
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(MlpStepGuardTest, GuardedKernelsCompileTest,
                         ::testing::Values(GuardedKernelCase{1, 32, {256, 256, 256, 10}, true},
                                           GuardedKernelCase{1, 5, {3, 7, 7, 3}, false},
                                           GuardedKernelCase{1, 7, {12, 4}, true},
                                           GuardedKernelCase{4, 64, {64, 256, 256, 10}, true},
                                           GuardedKernelCase{3, 5, {3, 7, 7, 3}, false}));

// The group and cluster schedules' guarded kernels (no grid barrier; the last block to arrive
// decides: restores a skipped step's copies, or flips the double-buffered parity), deep and
// shallow, padded and not, single and batched. The cluster schedule is double-buffered only.
TEST(MlpStepGuardTest, GuardedGroupAndClusterKernelsCompileForSm90) {
  struct Case {
    int64_t models, batch;
    std::vector<int64_t> widths;
    bool aligned;
  };
  const std::vector<Case> cases = {{32, 64, {64, 256, 256, 10}, true},
                                   {3, 5, {3, 7, 7, 3}, false},
                                   {1, 16, {16, 32, 32, 32, 32, 8}, true},
                                   {2, 16, {20, 40, 40, 40, 6}, true}};
  for (const Case& c : cases) {
    for (bool tf32 : {false, true}) {
      for (codegen::MlpGuard guard : {codegen::MlpGuard::kSkip, codegen::MlpGuard::kStop}) {
        // Without a shadow the updates copy the step-start values; with one they double-buffer.
        for (auto [schedule, shadow] : {std::pair{codegen::MlpSchedule::kGroups, false},
                                        std::pair{codegen::MlpSchedule::kGroups, true},
                                        std::pair{codegen::MlpSchedule::kCluster, true}}) {
          codegen::MlpStepTarget target;
          target.aligned = c.aligned;
          target.tf32 = tf32;
          target.schedule = schedule;
          target.guard = guard;
          target.shadow = shadow;
          auto plan = codegen::PlanMlpStep(c.batch, c.widths, target, c.models);
          ASSERT_TRUE(plan.ok()) << plan.status();
          ASSERT_GT(plan->cluster, 0);
          ASSERT_EQ(plan->groups > 0, schedule == codegen::MlpSchedule::kGroups);
          EXPECT_EQ(plan->double_buffered, shadow);
          const codegen::GeneratedKernel kernel =
              c.models == 1 ? codegen::MlpStepKernel(*plan)
                            : codegen::BatchedMlpStepKernel(*plan, false, c.models == 3);
          EXPECT_THAT(kernel.code, HasSubstr("GuardFinish"));
          const std::string copies = shadow ? "false" : "true";
          EXPECT_THAT(kernel.code, HasSubstr(", " + copies + ">{Sgd<"));
          EXPECT_THAT(kernel.code, HasSubstr("BiasSgdGuarded<" + copies + ", "));
          EXPECT_THAT(kernel.code, Not(HasSubstr("BiasSgd<")));
          EXPECT_EQ(kernel.code.find("mlpg::Restore<") != std::string::npos, !shadow);
          auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
          ASSERT_TRUE(compiled.ok())
              << c.models << " models, layers " << plan->layers() << (tf32 ? " tf32" : "")
              << (plan->groups > 0 ? " groups" : " clusters") << (shadow ? " shadow" : "") << ": "
              << compiled.status();
        }
      }
    }
  }
}

}  // namespace
}  // namespace reprise
