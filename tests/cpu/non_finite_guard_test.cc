// The non-finite guard on the CPU reference (src/autodiff/non_finite_guard.h): its nodes are in the
// training graph by default and absent with kIgnore; a batch holding one NaN has its step skipped
// whole and counted (kSkipStep), every later step skipped too (kStop), or reaches the weights
// (kIgnore); loss scaling keeps its own check; and ReLU keeps a NaN, as torch.relu does. The
// whole-step kernels' guard: mlp_step_guard_test.cc.
#include "src/autodiff/non_finite_guard.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/trainer.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"
#include "src/passes/fuse.h"
#include "tests/cpu/guard_test_util.h"

namespace reprise {
namespace {

using autodiff::NonFiniteOptions;
using autodiff::NonFinitePolicy;
using ::testing::HasSubstr;

constexpr int kFeatures = testing::kGuardFeatures;
// Step `step`'s batch (this file's seeds); with `nan_at` >= 0 that one feature is a NaN.
void SetBatch(ir::ReferenceExecutor& exec, int step, int nan_at = -1) {
  testing::SetGuardBatch(exec, 100 + step, nan_at);
}

// Every parameter and state tensor but the guard's own counters, as doubles.
std::map<std::string, std::vector<double>> Weights(const Graph& g, ir::ReferenceExecutor& exec) {
  std::map<std::string, std::vector<double>> out;
  for (const char* op : {"parameter", "state"}) {
    for (int32_t id : g.NodesOf(op)) {
      const std::string& name = g.node(id).name;
      if (name.rfind("non_finite.", 0) == 0) continue;
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

std::vector<int32_t> Ints(ir::ReferenceExecutor& exec, const char* name) {
  const ir::HostTensor* t = *exec.Leaf(name);
  auto data = t->data<int32_t>();
  return {data.begin(), data.end()};
}

bool AnyNan(const std::vector<double>& values) {
  for (double v : values) {
    if (std::isnan(v)) return true;
  }
  return false;
}

TEST(NonFiniteGuardTest, TrainOptionsGuardByDefault) {
  EXPECT_EQ(TrainOptions{}.numerics.non_finite.policy, NonFinitePolicy::kSkipStep);
}

TEST(NonFiniteGuardTest, PolicyNamesRoundTrip) {
  for (NonFinitePolicy p :
       {NonFinitePolicy::kSkipStep, NonFinitePolicy::kStop, NonFinitePolicy::kIgnore}) {
    auto parsed = ParseNonFinitePolicy(NonFinitePolicyName(p));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_THAT(ParseNonFinitePolicy("halt").status().message(), HasSubstr("'halt'"));
}

// The guard's check reads the loss and every gradient, and every update reads the check.
TEST(NonFiniteGuardTest, GuardNodesArePresentByDefaultAndAbsentWithIgnore) {
  const models::Mlp mlp = testing::BuildGuardMlp();
  for (const OptimizerOptions& optimizer :
       {OptimizerOptions{}, OptimizerOptions{.kind = OptimizerKind::kAdam, .max_grad_norm = 1}}) {
    auto guarded = testing::BuildGuarded(mlp, NonFiniteOptions{}.policy, optimizer);
    ASSERT_TRUE(guarded.ok()) << guarded.status();
    const Graph& g = guarded->graph;
    auto check = g.FindNode(autodiff::kNonFiniteCheck);
    ASSERT_TRUE(check.ok()) << check.status();
    const Node& flags = g.node(g.node(*check).inputs[0].node);
    EXPECT_EQ(flags.op, &ops::GradNonfiniteOp());
    EXPECT_EQ(flags.inputs.size(), guarded->parameters.size() + 1);
    EXPECT_EQ(flags.inputs.back(), guarded->loss);
    EXPECT_TRUE(g.FindNode(autodiff::kNonFiniteSkippedSteps).ok());
    EXPECT_TRUE(g.FindNode(autodiff::kNonFiniteRecord).ok());
    EXPECT_TRUE(ir::BoolAttrOr(g.node(*check).attrs, "count", false));  // It keeps the counters.
    int updates = 0;
    for (const Node& n : g.nodes()) {
      if (n.op != &ops::SgdMomentumOp() && n.op != &ops::AdamOp()) continue;
      ++updates;
      EXPECT_EQ(n.inputs.back(), (Value{*check, 0})) << n.name;
      EXPECT_TRUE(ir::BoolAttrOr(n.attrs, "loss_scaled", false)) << n.name;
    }
    EXPECT_EQ(updates, static_cast<int>(guarded->parameters.size()));

    auto ignored = testing::BuildGuarded(mlp, NonFinitePolicy::kIgnore, optimizer);
    ASSERT_TRUE(ignored.ok()) << ignored.status();
    for (const Node& n : ignored->graph.nodes()) {
      EXPECT_NE(n.op, &ops::GradNonfiniteOp()) << n.name;
      EXPECT_NE(n.op, &ops::LossScaleCheckOp()) << n.name;
      EXPECT_EQ(n.name.rfind("non_finite.", 0), std::string::npos) << n.name;
      EXPECT_FALSE(ir::BoolAttrOr(n.attrs, "loss_scaled", false)) << n.name;
    }
  }
}

// The case: one NaN among the input features. The step is skipped whole: parameters,
// momenta and the step counter as before it; counted; the next clean step trains.
TEST(NonFiniteGuardTest, NanBatchIsSkippedWholeAndCounted) {
  const models::Mlp mlp = testing::BuildGuardMlp();
  for (const OptimizerOptions& optimizer :
       {OptimizerOptions{}, OptimizerOptions{.kind = OptimizerKind::kAdamW,
                            .learning_rate = 1e-2f,
                            .max_grad_norm = 1.0f,
                            .schedule = {.warmup_steps = 2}}}) {
    auto t = testing::BuildGuarded(mlp, NonFinitePolicy::kSkipStep, optimizer);
    ASSERT_TRUE(t.ok()) << t.status();
    ir::ReferenceExecutor exec(t->graph, false, 9);
    SetBatch(exec, 0);
    ASSERT_TRUE(exec.Run().ok());
    const auto before = Weights(t->graph, exec);
    SetBatch(exec, 1, /*nan_at=*/3 * kFeatures + 2);
    ASSERT_TRUE(exec.Run().ok());
    EXPECT_EQ(Weights(t->graph, exec), before);
    EXPECT_EQ(Ints(exec, autodiff::kNonFiniteSkippedSteps), std::vector<int32_t>{1});
    EXPECT_EQ(Ints(exec, autodiff::kNonFiniteRecord), (std::vector<int32_t>{2, 2}));
    SetBatch(exec, 2);
    ASSERT_TRUE(exec.Run().ok());
    const auto after = Weights(t->graph, exec);
    EXPECT_NE(after, before);
    for (const auto& [name, values] : after) EXPECT_FALSE(AnyNan(values)) << name;
    EXPECT_EQ(Ints(exec, autodiff::kNonFiniteSkippedSteps), std::vector<int32_t>{1});
    EXPECT_EQ(Ints(exec, autodiff::kNonFiniteRecord), (std::vector<int32_t>{3, 2}));
  }
}

// With the guard on and no NaN, training is bit for bit that of the unguarded graph: the updates
// multiply each gradient by check[0] = 1, exactly.
TEST(NonFiniteGuardTest, CleanStepsTrainBitForBitAsUnguarded) {
  const models::Mlp mlp = testing::BuildGuardMlp();
  for (const bool float64 : {false, true}) {
    auto guarded = testing::BuildGuarded(mlp, NonFinitePolicy::kSkipStep);
    auto plain = testing::BuildGuarded(mlp, NonFinitePolicy::kIgnore);
    ASSERT_TRUE(guarded.ok() && plain.ok());
    ir::ReferenceExecutor a(guarded->graph, float64, 9), b(plain->graph, float64, 9);
    for (int step = 0; step < 5; ++step) {
      SetBatch(a, step);
      SetBatch(b, step);
      ASSERT_TRUE(a.Run().ok());
      ASSERT_TRUE(b.Run().ok());
      ASSERT_EQ(Weights(guarded->graph, a), Weights(plain->graph, b)) << "step " << step;
    }
  }
}

// With clipping the fuse pass moves the check into the norm's pass over the gradients
// (grad_sum_squares_nonfinite): the same weights and counters as the check on its own, through a
// skipped step.
TEST(NonFiniteGuardTest, TheCheckInTheNormsPassKeepsTheUnfusedBitsAndCounts) {
  const models::Mlp mlp = testing::BuildGuardMlp();
  auto t = testing::BuildGuarded(
      mlp, NonFinitePolicy::kSkipStep,
      {.kind = OptimizerKind::kAdamW, .learning_rate = 1e-2f, .max_grad_norm = 1.0f});
  ASSERT_TRUE(t.ok()) << t.status();
  passes::FuseOptions apart;
  apart.whole_mlp_step = false;
  apart.nonfinite_check_with_norm = false;
  auto fused = passes::Fuse(*t, {t->loss}, {.whole_mlp_step = false});
  auto unfused = passes::Fuse(*t, {t->loss}, apart);
  ASSERT_TRUE(fused.ok() && unfused.ok()) << fused.status() << unfused.status();
  const Graph& g = fused->training.graph;
  EXPECT_EQ(g.NodesOf("grad_sum_squares_nonfinite").size(), 1u);
  EXPECT_TRUE(g.NodesOf("grad_nonfinite").empty());
  EXPECT_EQ(unfused->training.graph.NodesOf("grad_nonfinite").size(), 1u);
  ir::ReferenceExecutor a(g, false, 9), b(unfused->training.graph, false, 9);
  for (int step = 0; step < 3; ++step) {
    SetBatch(a, step, step == 1 ? 2 * kFeatures + 1 : -1);
    SetBatch(b, step, step == 1 ? 2 * kFeatures + 1 : -1);
    ASSERT_TRUE(a.Run().ok());
    ASSERT_TRUE(b.Run().ok());
    ASSERT_EQ(Weights(g, a), Weights(unfused->training.graph, b)) << "step " << step;
    EXPECT_EQ(Ints(a, autodiff::kNonFiniteRecord), Ints(b, autodiff::kNonFiniteRecord));
  }
  EXPECT_EQ(Ints(a, autodiff::kNonFiniteSkippedSteps), std::vector<int32_t>{1});
}

TEST(NonFiniteGuardTest, IgnoreLetsTheNanIntoTheWeights) {
  const models::Mlp mlp = testing::BuildGuardMlp();
  auto t = testing::BuildGuarded(mlp, NonFinitePolicy::kIgnore);
  ASSERT_TRUE(t.ok()) << t.status();
  ir::ReferenceExecutor exec(t->graph, false, 9);
  SetBatch(exec, 0, /*nan_at=*/5);
  ASSERT_TRUE(exec.Run().ok());
  bool nan = false;
  for (const auto& [name, values] : Weights(t->graph, exec)) nan = nan || AnyNan(values);
  EXPECT_TRUE(nan);
}

// kStop: the non-finite step and every later one are skipped, and the record keeps the first.
TEST(NonFiniteGuardTest, StopSkipsEveryLaterStepAndRecordsTheFirst) {
  const models::Mlp mlp = testing::BuildGuardMlp();
  auto t = testing::BuildGuarded(mlp, NonFinitePolicy::kStop);
  ASSERT_TRUE(t.ok()) << t.status();
  ir::ReferenceExecutor exec(t->graph, false, 9);
  SetBatch(exec, 0);
  ASSERT_TRUE(exec.Run().ok());
  SetBatch(exec, 1);
  ASSERT_TRUE(exec.Run().ok());
  const auto before = Weights(t->graph, exec);
  SetBatch(exec, 2, /*nan_at=*/0);
  ASSERT_TRUE(exec.Run().ok());
  for (int step = 3; step < 5; ++step) {
    SetBatch(exec, step);
    ASSERT_TRUE(exec.Run().ok());
  }
  EXPECT_EQ(Weights(t->graph, exec), before);
  EXPECT_EQ(Ints(exec, autodiff::kNonFiniteSkippedSteps), std::vector<int32_t>{3});
  EXPECT_EQ(Ints(exec, autodiff::kNonFiniteRecord), (std::vector<int32_t>{5, 3}));
}

TEST(NonFiniteGuardTest, StopWithLossScalingIsInvalidArgument) {
  const models::Mlp mlp = testing::BuildGuardMlp();
  auto t = testing::BuildGuarded(mlp, NonFinitePolicy::kStop, {}, {.mode = LossScaling::kDynamic});
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("kStop"));
}

// Under loss scaling the scaler's check is the guard (no second one): the guard adds the loss to
// it; with kIgnore it is exactly loss scaling's as before, the gradients only.
TEST(NonFiniteGuardTest, LossScalingKeepsItsOwnCheck) {
  const models::Mlp mlp = testing::BuildGuardMlp();
  const LossScaleOptions dynamic{.mode = LossScaling::kDynamic};
  for (NonFinitePolicy policy : {NonFinitePolicy::kSkipStep, NonFinitePolicy::kIgnore}) {
    auto t = testing::BuildGuarded(mlp, policy, {}, dynamic);
    ASSERT_TRUE(t.ok()) << t.status();
    const Graph& g = t->graph;
    EXPECT_FALSE(g.FindNode(autodiff::kNonFiniteCheck).ok());
    EXPECT_FALSE(g.FindNode(autodiff::kNonFiniteSkippedSteps).ok());
    auto check = g.FindNode(autodiff::kLossScaleCheck);
    ASSERT_TRUE(check.ok());
    const Node& flags = g.node(g.node(*check).inputs[0].node);
    const bool guarded = policy != NonFinitePolicy::kIgnore;
    EXPECT_EQ(flags.inputs.size(), t->parameters.size() + (guarded ? 1 : 0));
    // A NaN batch is skipped and counted by the scaler either way (its gradients are NaN).
    ir::ReferenceExecutor exec(g, false, 9);
    SetBatch(exec, 0);
    ASSERT_TRUE(exec.Run().ok());
    const auto before = Weights(g, exec);
    SetBatch(exec, 1, /*nan_at=*/7);
    ASSERT_TRUE(exec.Run().ok());
    auto after = Weights(g, exec);
    for (auto* w : {&after}) {
      w->erase(autodiff::kLossScale);
      w->erase(autodiff::kLossScaleGrowthTracker);
      w->erase(autodiff::kLossScaleSkippedSteps);
    }
    auto expected = before;
    expected.erase(autodiff::kLossScale);
    expected.erase(autodiff::kLossScaleGrowthTracker);
    expected.erase(autodiff::kLossScaleSkippedSteps);
    EXPECT_EQ(after, expected);
    EXPECT_EQ(Ints(exec, autodiff::kLossScaleSkippedSteps), std::vector<int32_t>{1});
  }
}

// torch.relu keeps a NaN; so do relu and the matmul_bias ReLU reference built on it.
TEST(NonFiniteGuardTest, ReluKeepsNanOnTheCpuReference) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  Graph g;
  auto x = g.AddInput("x", {Shape{6}, DType::kFloat32});
  ASSERT_TRUE(x.ok());
  auto y = g.AddOp1(ops::ReluOp(), "relu", {*x});
  ASSERT_TRUE(y.ok()) << y.status();
  ir::ReferenceExecutor exec(g, false, 1);
  ASSERT_TRUE(exec.SetLeaf("x", std::vector<double>{nan, -1, 2, -0.0, inf, -inf}).ok());
  ASSERT_TRUE(exec.Run().ok());
  const ir::HostTensor* out = *exec.Tensor(*y);
  EXPECT_TRUE(std::isnan(ir::FloatElement(*out, 0)));
  EXPECT_EQ(ir::FloatElement(*out, 1), 0.0);
  EXPECT_EQ(ir::FloatElement(*out, 2), 2.0);
  EXPECT_EQ(ir::FloatElement(*out, 3), 0.0);
  EXPECT_FALSE(std::signbit(ir::FloatElement(*out, 3)));  // +0, as before.
  EXPECT_EQ(ir::FloatElement(*out, 4), inf);
  EXPECT_EQ(ir::FloatElement(*out, 5), 0.0);
  // The fused chains' expression of relu keeps it too.
  EXPECT_THAT(std::string(ops::ReluOp().pointwise.expression), HasSubstr("$0 != $0"));
}

// The MLP: one NaN feature now reaches the loss (ReLU no longer hides it).
TEST(NonFiniteGuardTest, NanFeatureReachesTheLossThroughRelu) {
  const models::Mlp mlp = testing::BuildGuardMlp();
  auto t = testing::BuildGuarded(mlp, NonFinitePolicy::kIgnore);
  ASSERT_TRUE(t.ok()) << t.status();
  ir::ReferenceExecutor exec(t->graph, false, 9);
  SetBatch(exec, 0, /*nan_at=*/2);
  ASSERT_TRUE(exec.Run().ok());
  EXPECT_TRUE(std::isnan(ir::FloatElement(**exec.Tensor(t->loss), 0)));
}

}  // namespace
}  // namespace reprise
