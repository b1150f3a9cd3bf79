// The fuse pass over the optimizers beyond plain SGD: every adam joins one adam_multi per set of
// shared hyperparameters but the weight decay, with the schedule and the clip coefficient folded
// in; every Nesterov or clipped sgd_momentum joins a multi-tensor node per set of shared
// hyperparameters; the fused step gives the unfused step's bits on the CPU reference, and the
// whole-MLP-step kernel declines what it does not implement.
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/ir/op_def.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"
#include "src/passes/fuse.h"
#include "src/passes/plan.h"
#include "tests/cpu/reference_runs.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

std::map<std::string, int> OpCounts(const Graph& g) {
  std::map<std::string, int> counts;
  for (const Node& n : g.nodes()) {
    if (!ir::IsLeaf(n)) ++counts[std::string(n.op_name())];
  }
  return counts;
}

// Every parameter and state tensor after `steps` steps, and the losses, as raw bytes.
struct StepRun {
  std::vector<std::string> losses;
  std::map<std::string, std::string> leaves;
};

StepRun RunCpu(const Graph& g, Value loss, bool float64, int steps) {
  ir::ReferenceExecutor cpu(g, float64, 7);
  std::mt19937 rng(3);
  StepRun run;
  for (int s = 0; s < steps; ++s) {
    testing::SetMlpBatch(cpu, rng, s);
    EXPECT_TRUE(cpu.Run().ok());
    const ir::HostTensor* value = *cpu.Tensor(loss);
    run.losses.emplace_back(static_cast<const char*>(value->raw()), value->spec().bytes());
  }
  for (const char* op : {"parameter", "state"}) {
    for (int32_t id : g.NodesOf(op)) {
      const ir::HostTensor* t = *cpu.Tensor({id, 0});
      run.leaves[g.node(id).name] =
          std::string(static_cast<const char*>(t->raw()), t->spec().bytes());
    }
  }
  return run;
}

struct Config {
  const char* name;
  OptimizerOptions options;
  std::map<std::string, int> optimizer_ops;  // After fusion.
};

const Config kConfigs[] = {
    {"adam_clipped",
     {.kind = OptimizerKind::kAdam, .learning_rate = 0.01f, .max_grad_norm = 0.3f},
     {{"adam_multi", 1}, {"grad_sum_squares", 1}, {"clip_coefficient", 0}}},
    {"adamw_rank1_undecayed_warmup_cosine",
     {.kind = OptimizerKind::kAdamW,
      .learning_rate = 0.01f,
      .weight_decay = 0.1f,
      .decay_rank1 = false,
      .schedule = {.warmup_steps = 2, .decay = LrDecay::kCosine, .total_steps = 5}},
     {{"adam_multi", 1}, {"lr_schedule", 0}}},
    {"sgd_nesterov_clipped_step_decay",
     {.kind = OptimizerKind::kSgd,
      .learning_rate = 0.05f,
      .nesterov = true,
      .weight_decay = 0.01f,
      .max_grad_norm = 0.5f,
      .schedule = {.decay = LrDecay::kStep, .step_size = 2, .gamma = 0.5f}},
     {{"sgd_multi", 1},
      {"sgd_momentum_multi", 0},
      {"grad_sum_squares", 1},
      {"clip_coefficient", 1},
      {"lr_schedule", 1}}},
};

class FusedOptimizerTest : public ::testing::TestWithParam<std::tuple<Config, bool>> {};

TEST_P(FusedOptimizerTest, MultiTensorStepsGiveTheUnfusedBits) {
  const auto& [config, float64] = GetParam();
  auto mlp =
      models::BuildMlp({.batch = 8, .input_features = 24, .depth = 3, .width = 24, .classes = 10});
  ASSERT_TRUE(mlp.ok());
  auto training = autodiff::BuildTrainingGraphWith(mlp->graph, mlp->loss, config.options);
  ASSERT_TRUE(training.ok()) << training.status();
  auto fused = passes::Fuse(*training, {training->loss}, {});
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_THAT(fused->whole_step_declined, ::testing::Not(::testing::IsEmpty()));
  const std::map<std::string, int> counts = OpCounts(fused->training.graph);
  EXPECT_EQ(counts.count("adam"), 0u);
  EXPECT_EQ(counts.count("sgd_momentum"), 0u);
  EXPECT_EQ(counts.count("mlp_train_step"), 0u);
  for (const auto& [op, count] : config.optimizer_ops) {
    EXPECT_EQ(counts.count(op) ? counts.at(op) : 0, count) << op;
  }
  const StepRun plain = RunCpu(training->graph, training->loss, float64, 5);
  const StepRun merged = RunCpu(fused->training.graph, fused->training.loss, float64, 5);
  EXPECT_EQ(plain.losses, merged.losses);
  ASSERT_EQ(plain.leaves.size(), merged.leaves.size());
  for (const auto& [name, bytes] : plain.leaves) {
    EXPECT_TRUE(bytes == merged.leaves.at(name)) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(OptimizersInFloat32AndFloat64, FusedOptimizerTest,
                         ::testing::Combine(::testing::ValuesIn(kConfigs), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<FusedOptimizerTest::ParamType>& info) {
                           return std::string(std::get<0>(info.param).name) +
                                  (std::get<1>(info.param) ? "_f64" : "_f32");
                         });

TEST(FuseOptimizerTest, WholeStepKernelDeclinesNesterovAndClipping) {
  auto mlp = models::BuildMlp({.batch = 8, .input_features = 16, .depth = 2, .width = 16});
  for (const OptimizerOptions& o :
       {OptimizerOptions{.nesterov = true}, OptimizerOptions{.max_grad_norm = 1}}) {
    auto training = autodiff::BuildTrainingGraphWith(mlp->graph, mlp->loss, o);
    ASSERT_TRUE(training.ok());
    auto fused = passes::Fuse(*training, {training->loss}, {});
    ASSERT_TRUE(fused.ok()) << fused.status();
    EXPECT_EQ(OpCounts(fused->training.graph).count("mlp_train_step"), 0u);
    EXPECT_THAT(fused->whole_step_declined,
                ::testing::AnyOf(HasSubstr("Nesterov"), HasSubstr("optimizer other")));
  }
}

// The whole pipeline plans AdamW with clipping and a schedule into three optimizer launches (the
// norm's partial sums; one update of every tensor, decayed or not, that schedules its rate and
// finishes the norm itself; the counter), on the weight lane when there are two.
TEST(FuseOptimizerTest, PlanRunsTheUpdateInAFewLaunches) {
  auto mlp = models::BuildMlp({.batch = 8, .input_features = 16, .depth = 4, .width = 16});
  for (int lanes : {1, 2}) {
    auto training = autodiff::BuildTrainingGraphWith(
        mlp->graph, mlp->loss,
        {.kind = OptimizerKind::kAdamW,
         .weight_decay = 0.1f,
         .decay_rank1 = false,
         .max_grad_norm = 1,
         .schedule = {.warmup_steps = 5, .decay = LrDecay::kCosine, .total_steps = 50}});
    ASSERT_TRUE(training.ok()) << training.status();
    auto plan = passes::BuildPlan(*std::move(training), {}, {.lanes = lanes});
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::map<std::string, int> optimizer_launches;
    bool advanced = false;  // The counter moves on after every reader, fused ones included.
    for (const passes::ScheduledLaunch& launch : plan->launches) {
      const Node& node = plan->graph().node(launch.node);
      if (node.op->kind != ir::OpKind::kOptimizer) continue;
      ++optimizer_launches[std::string(node.op_name())];
      EXPECT_EQ(launch.lane, lanes - 1) << node.name;
      EXPECT_FALSE(advanced) << node.name << " runs after the counter's advance";
      advanced = node.op == &ops::AdvanceStepOp();
      if (node.op != &ops::AdamMultiOp()) continue;
      EXPECT_EQ(*ir::IntAttr(node.attrs, "tensors"),
                static_cast<int64_t>(plan->training.parameters.size()));
      EXPECT_TRUE(ir::BoolAttrOr(node.attrs, "clip_norm", false));
      EXPECT_EQ(std::get<std::string>(node.attrs.at("decay")), "cosine");
    }
    EXPECT_EQ(optimizer_launches,
              (std::map<std::string, int>{
                  {"adam_multi", 1}, {"advance_step", 1}, {"grad_sum_squares", 1}}));
  }
}

// A scheduled rate or clip coefficient that something besides the updates reads stays a node of
// its own, and the update reads its value; the step keeps its bits.
TEST(FuseOptimizerTest, ScalarsReadOutsideTheUpdatesStayTheirOwnNodes) {
  auto mlp =
      models::BuildMlp({.batch = 8, .input_features = 24, .depth = 3, .width = 24, .classes = 10});
  ASSERT_TRUE(mlp.ok());
  auto training = autodiff::BuildTrainingGraphWith(
      mlp->graph, mlp->loss,
      {.kind = OptimizerKind::kAdamW,
       .learning_rate = 0.01f,
       .weight_decay = 0.1f,
       .decay_rank1 = false,
       .max_grad_norm = 0.5f,
       .schedule = {.warmup_steps = 2, .decay = LrDecay::kCosine, .total_steps = 5}});
  ASSERT_TRUE(training.ok()) << training.status();
  const Graph& g = training->graph;
  const Value rate{*g.FindNode(autodiff::kScheduledRate), 0};
  const Value coefficient{*g.FindNode(autodiff::kGradNorm), 1};
  for (const Value& read : {rate, coefficient}) {
    auto fused = passes::Fuse(*training, {training->loss, read}, {});
    ASSERT_TRUE(fused.ok()) << fused.status();
    const std::map<std::string, int> counts = OpCounts(fused->training.graph);
    EXPECT_EQ(counts.at("adam_multi"), 1);
    EXPECT_EQ(counts.count("lr_schedule"), read == rate ? 1u : 0u);
    EXPECT_EQ(counts.count("clip_coefficient"), read == coefficient ? 1u : 0u);
    const StepRun plain = RunCpu(g, training->loss, false, 5);
    const StepRun merged = RunCpu(fused->training.graph, fused->training.loss, false, 5);
    EXPECT_EQ(plain.losses, merged.losses);
    EXPECT_TRUE(plain.leaves == merged.leaves);
  }
}

}  // namespace
}  // namespace reprise
