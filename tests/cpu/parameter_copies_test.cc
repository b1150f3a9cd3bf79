// The parameters' 16-bit copies kept between steps and written by AdamW (src/passes/
// parameter_copies.h): the plan's shape (one refresh_copies, the copies as state, every reader
// ordered after the refresh and before the update), the casts' bits step after step on the CPU
// reference, a refresh after the host wrote a weight, and the ops' checks.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/cast.h"
#include "src/ops/ops.h"
#include "src/passes/pipeline.h"
#include "tests/cpu/sixteen_bit_gradient_step.h"
#include "tests/cpu/token_steps.h"

namespace reprise {
namespace {

models::Gpt2Config Small() {
  return {.batch = 2,
          .seq = 16,
          .max_positions = 16,
          .vocab = 64,
          .layers = 2,
          .heads = 2,
          .width = 32};
}

passes::CompileOptions Bf16AdamW(bool keep_copies) {
  passes::CompileOptions options;
  options.compute_dtype = DType::kBFloat16;
  options.optimizer = {.kind = OptimizerKind::kAdamW,
                       .learning_rate = 1e-2f,
                       .beta2 = 0.95f,
                       .weight_decay = 0.1f,
                       .decay_rank1 = false,
                       .max_grad_norm = 1.0f};
  options.plan.lanes = 2;
  options.plan.fusion.update_writes_copies = keep_copies;
  return options;
}

passes::CompiledStep Compile(bool keep_copies) {
  auto gpt = models::BuildGpt2(Small());
  EXPECT_TRUE(gpt.ok()) << gpt.status();
  auto compiled = passes::CompileStep(gpt->graph, gpt->loss, Bf16AdamW(keep_copies));
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return *std::move(compiled);
}

int32_t OnlyNodeOf(const Graph& g, absl::string_view op) {
  int32_t found = -1;
  for (const Node& node : g.nodes()) {
    if (node.op_name() != op) continue;
    EXPECT_EQ(found, -1) << "two " << op << " nodes";
    found = node.id;
  }
  return found;
}

bool HasControlInput(const Node& node, int32_t before) {
  for (int32_t c : node.control_inputs) {
    if (c == before) return true;
  }
  return false;
}

TEST(ParameterCopiesTest, TheUpdateWritesTheCopiesThatTheStepReads) {
  const passes::CompiledStep compiled = Compile(true);
  const Graph& g = compiled.plan.graph();
  EXPECT_EQ(OnlyNodeOf(g, "cast_multi"), -1);
  const int32_t refresh = OnlyNodeOf(g, "refresh_copies");
  const int32_t update = OnlyNodeOf(g, "adam_multi");
  ASSERT_GE(refresh, 0);
  ASSERT_GE(update, 0);
  const Node& r = g.node(refresh);
  const int64_t n = static_cast<int64_t>(r.inputs.size()) / 2;
  EXPECT_EQ(*ir::IntAttr(g.node(update).attrs, "copies"), n);
  // Every matrix and bias: wte, wpe and 8 a block; the layer norms read their float32 weights.
  EXPECT_EQ(n, 2 + 8 * Small().layers);
  const Value stale = r.inputs.back();
  EXPECT_EQ(g.node(stale.node).name, "parameters.to_bf16.stale");
  EXPECT_EQ(g.node(update).inputs.back(), stale);
  for (int64_t t = 0; t < n; ++t) {
    const Node& parameter = g.node(r.inputs[t].node);
    const Node& copy = g.node(r.inputs[n + t].node);
    EXPECT_EQ(parameter.op_name(), "parameter");
    EXPECT_EQ(copy.op_name(), "state");
    EXPECT_EQ(copy.name, parameter.name + ".bf16_copy");
    // The update's first n tensors are the refresh's, in its order.
    EXPECT_EQ(g.node(update).inputs[ops::kAdamMultiInputsPerTensor * t], r.inputs[t]);
    int readers = 0;
    for (const Node& node : g.nodes()) {
      if (node.id == refresh || node.id == update) continue;
      for (const Value& v : node.inputs) {
        if (v.node != copy.id) continue;
        ++readers;
        EXPECT_TRUE(HasControlInput(node, refresh)) << node.name << " reads " << copy.name;
        EXPECT_TRUE(HasControlInput(g.node(update), node.id)) << node.name;
        break;
      }
    }
    EXPECT_GT(readers, 0) << copy.name;
  }
}

TEST(ParameterCopiesTest, OffKeepsTheCastAtEveryStep) {
  const passes::CompiledStep compiled = Compile(false);
  const Graph& g = compiled.plan.graph();
  EXPECT_GE(OnlyNodeOf(g, "cast_multi"), 0);
  EXPECT_EQ(OnlyNodeOf(g, "refresh_copies"), -1);
  EXPECT_FALSE(g.node(OnlyNodeOf(g, "adam_multi")).attrs.contains("copies"));
}

constexpr int64_t kTokens = 2 * 16;

TEST(ParameterCopiesTest, StepsHaveTheCastsBitsOnTheCpuReference) {
  const passes::CompiledStep kept = Compile(true);
  const passes::CompiledStep cast = Compile(false);
  const testing::CpuSteps a = testing::RunTokenSteps(kept.plan.graph(), kept.plan.training.loss, 4,
                                                     "tokens", "targets", kTokens, 64, 64);
  const testing::CpuSteps b = testing::RunTokenSteps(cast.plan.graph(), cast.plan.training.loss, 4,
                                                     "tokens", "targets", kTokens, 64, 64);
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
}

// The host writes a weight between steps and sets the flag, as the GPU kernel's Settle does: the
// next step rounds the new weight; without the flag it would read the old copy.
TEST(ParameterCopiesTest, AHostWriteIsRoundedAgainWhenTheFlagIsSet) {
  const passes::CompiledStep kept = Compile(true);
  const passes::CompiledStep cast = Compile(false);
  const std::string weight = "transformer.h.0.mlp.c_fc.weight";
  std::vector<std::vector<float>> losses(3);
  for (int variant = 0; variant < 3; ++variant) {  // Cast, kept with the flag, kept without.
    const passes::Plan& plan = variant == 0 ? cast.plan : kept.plan;
    ir::ReferenceExecutor cpu(plan.graph(), /*float64=*/false, 5);
    for (int s = 0; s < 3; ++s) {
      std::vector<int32_t> tokens(kTokens), targets(kTokens);
      for (int64_t i = 0; i < kTokens; ++i) {
        tokens[i] = static_cast<int32_t>((i * 7 + s) % 64);
        targets[i] = static_cast<int32_t>((i * 3 + 1) % 64);
      }
      ASSERT_TRUE(cpu.SetLeaf("tokens", tokens).ok());
      ASSERT_TRUE(cpu.SetLeaf("targets", targets).ok());
      if (s == 2) {
        const int32_t id = *plan.graph().FindNode(weight);
        const std::vector<double> ones(plan.graph().spec({id, 0}).NumElements(), 0.5);
        ASSERT_TRUE(cpu.SetLeaf(weight, ones).ok());
        if (variant == 1)
          ASSERT_TRUE(cpu.SetLeaf("parameters.to_bf16.stale", std::vector<int32_t>{1}).ok());
      }
      ASSERT_TRUE(cpu.Run().ok());
      losses[variant].push_back((*cpu.Tensor(plan.training.loss))->data<float>()[0]);
    }
  }
  EXPECT_EQ(losses[1], losses[0]);
  EXPECT_EQ(losses[2][1], losses[0][1]);
  EXPECT_NE(losses[2][2], losses[0][2]);  // The stale copy was read.
}

// The reference's update: each copy is its new weight rounded, the flag cleared; a skipped step
// writes no copy (as the kernel, which returns at once).
TEST(ParameterCopiesTest, TheUpdateRoundsEachNewWeightIntoItsCopyUnlessSkipped) {
  for (bool skipped : {false, true}) {
    auto step = testing::BuildSixteenBitGradientStep(6, /*widening_casts=*/false,
                                                     /*scaled=*/true, /*copies=*/4);
    ASSERT_TRUE(step.ok()) << step.status();
    ir::ReferenceExecutor cpu(step->graph, false, 5);
    ASSERT_TRUE(cpu.SetLeaf("stale", std::vector<int32_t>{0}).ok());  // The refresh does nothing.
    ASSERT_TRUE(cpu.SetLeaf("check", std::vector<double>{0.125, skipped ? 1.0 : 0.0}).ok());
    const std::vector<std::vector<uint16_t>> before = testing::CopyBits(cpu, 4);
    ASSERT_TRUE(cpu.Run().ok());
    testing::ExpectCopiesHoldTheRoundedWeights(cpu, 4, before, skipped);
  }
}

TEST(ParameterCopiesTest, OpsRefuseCopiesOfTheWrongTypeOrShapeAndABadFlag) {
  Graph g;
  const Value p = *g.AddParameter("p", {Shape{4, 2}}, Initializer::Zeros());
  const Value good =
      *g.AddState("p.bf16_copy", {Shape{4, 2}, DType::kBFloat16}, Initializer::Zeros());
  const Value wide = *g.AddState("wide", {Shape{4, 2}, DType::kFloat32}, Initializer::Zeros());
  const Value flat = *g.AddState("flat", {Shape{8}, DType::kBFloat16}, Initializer::Zeros());
  const Value stale = *g.AddState("stale", {Shape{}, DType::kInt32}, Initializer::Constant(1));
  const Value vector_flag = *g.AddState("flags", {Shape{2}, DType::kInt32}, Initializer::Zeros());
  const Attrs bf16 = {{"dtype", std::string("bf16")}};
  EXPECT_TRUE(g.AddOp(ops::RefreshCopiesOp(), "ok", {p, good, stale}, bf16).ok());
  for (const auto& [inputs, message] : std::vector<std::pair<std::vector<Value>, std::string>>{
           {{p, wide, stale}, "copy 0 is f32[4, 2]"},
           {{p, flat, stale}, "copy 0 is bf16[8]"},
           {{p, good, vector_flag}, "stale flag is i32[2]"},
           {{p, good}, "got 2 inputs"}}) {
    auto added = g.AddOp(ops::RefreshCopiesOp(), "bad", inputs, bf16);
    EXPECT_EQ(added.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(added.status().message(), message)) << added.status();
  }
}

}  // namespace
}  // namespace reprise
