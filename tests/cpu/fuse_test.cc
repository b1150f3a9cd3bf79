// The fuse pass: which nodes it groups, that the fused training step computes the same bits as
// the unfused one on the CPU reference, and that what the user fetches stays readable.
#include "src/passes/fuse.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/codegen/fused_kernels.h"
#include "src/ir/reference_executor.h"
#include "src/ops/fused_pointwise.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/ops.h"
#include "src/passes/fuse_mlp_step.h"
#include "src/passes/mixed_precision.h"
#include "src/passes/plan.h"
#include "src/runtime/kernel_store.h"
#include "tests/cpu/reference_runs.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

struct Training {
  models::Mlp mlp;
  autodiff::TrainingGraph training;
};

Training MlpTraining(int depth, int width, int batch, int classes) {
  Training t;
  t.mlp = *models::BuildMlp({.batch = batch,
                             .input_features = width,
                             .depth = depth,
                             .width = width,
                             .classes = classes});
  t.training = *autodiff::BuildTrainingGraph(t.mlp.graph, t.mlp.loss, {0.05f, 0.9f, 0.01f});
  return t;
}

std::map<std::string, int> OpCounts(const Graph& g) {
  std::map<std::string, int> counts;
  for (const Node& n : g.nodes()) {
    if (!ir::IsLeaf(n)) ++counts[std::string(n.op_name())];
  }
  return counts;
}

passes::FuseOptions PerLayer() {
  passes::FuseOptions options;
  options.whole_mlp_step = false;
  return options;
}

TEST(FuseTest, MlpBecomesOneLaunchPerGemmPlusLossChainsAndOneOptimizer) {
  Training t = MlpTraining(8, 64, 16, 10);
  auto fused = passes::Fuse(t.training, {t.training.loss}, PerLayer());
  ASSERT_TRUE(fused.ok()) << fused.status();
  const std::map<std::string, int> counts = OpCounts(fused->training.graph);
  EXPECT_EQ(counts.at("matmul_bias"), 9);                      // Every forward layer.
  EXPECT_EQ(counts.at("softmax_cross_entropy_with_grad"), 1);  // Loss and its gradient.
  EXPECT_EQ(counts.at("fused_pointwise"), 8);                  // relu_grad + bias gradient.
  EXPECT_EQ(counts.at("sgd_momentum_multi"), 1);
  EXPECT_EQ(counts.at("matmul"), 9 + 8);  // Weight gradients and data gradients.
  EXPECT_EQ(counts.at("column_sum"), 1);  // The output layer's bias gradient.
  EXPECT_EQ(counts.count("relu"), 0u);
  EXPECT_EQ(counts.count("sgd_momentum"), 0u);
  EXPECT_EQ(fused->groups.size(), 9u + 1 + 8 + 1);
  const Node& sgd = fused->training.graph.node(fused->training.optimizer_nodes.at(0));
  EXPECT_THAT(std::get<std::string>(sgd.attrs.at("fused_nodes")), HasSubstr("fc8.bias.sgd"));
}

// Each hidden layer's relu_grad and bias gradient ride in the epilogue of the data-gradient
// matmul before them, which reads the ReLU mask its forward matmul kept.
TEST(FuseTest, HiddenLayerBackwardJoinsTheDataGradientEpilogue) {
  Training t = MlpTraining(8, 64, 16, 10);
  passes::FuseOptions options = PerLayer();
  options.relu_backward_epilogues = true;
  auto fused = passes::Fuse(t.training, {t.training.loss}, options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& g = fused->training.graph;
  const std::map<std::string, int> counts = OpCounts(g);
  EXPECT_EQ(counts.at("matmul_bias_relu_mask"), 8);  // The hidden layers.
  EXPECT_EQ(counts.at("matmul_bias"), 1);            // The output layer.
  EXPECT_EQ(counts.at("matmul_drelu_bgrad"), 8);     // fc1..fc8's data gradients.
  EXPECT_EQ(counts.at("matmul"), 9);                 // Weight gradients only.
  EXPECT_EQ(counts.at("column_sum"), 1);             // The output layer's bias gradient.
  EXPECT_EQ(counts.count("fused_pointwise"), 0u);
  EXPECT_EQ(counts.count("relu_grad"), 0u);
  EXPECT_EQ(fused->groups.size(), 8u + 1 + 1 + 8 + 1);
  // fc1's data gradient reads the mask fc0's forward kept.
  const Node& backward = g.node(*g.FindNode("fc1.matmul.dgrad+fc0.relu.grad+bias_grad"));
  const Node& forward = g.node(*g.FindNode("fc0.matmul+bias+relu+mask"));
  EXPECT_EQ(backward.inputs[2], (Value{forward.id, 1}));
  EXPECT_EQ(g.spec(backward.inputs[2]).dtype, DType::kInt32);
}

// Runs `steps` training steps of `g` on the CPU reference with fixed inputs; returns the loss
// after each step and the parameters at the end, keyed by name.
struct CpuRun {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> parameters;
};

CpuRun RunCpu(const Graph& g, Value loss, bool float64, int steps) {
  ir::ReferenceExecutor cpu(g, float64, 7);
  std::mt19937 rng(3);
  CpuRun run;
  for (int s = 0; s < steps; ++s) {
    testing::SetMlpBatch(cpu, rng, s);
    EXPECT_TRUE(cpu.Run().ok());
    const ir::HostTensor* value = *cpu.Tensor(loss);
    run.losses.push_back(float64 ? value->data<double>()[0] : value->data<float>()[0]);
  }
  run.parameters = testing::ReferenceLeaves(g, cpu, float64);
  return run;
}

class FusedMatchesUnfusedTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

// The fused ops' references (the per-layer ones and the whole-step one) compute what the
// replaced ops' references compute in the same order, so even in float32 the fused step gives
// the same bits.
TEST_P(FusedMatchesUnfusedTest, ThreeTrainingStepsGiveTheSameBits) {
  const auto [float64, whole_step] = GetParam();
  Training t = MlpTraining(3, 24, 8, 10);
  passes::FuseOptions options;
  options.whole_mlp_step = whole_step;
  options.relu_backward_epilogues = !whole_step;  // The per-layer form with every epilogue.
  auto fused = passes::Fuse(t.training, {t.training.loss}, options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  const CpuRun plain = RunCpu(t.training.graph, t.training.loss, float64, 3);
  const CpuRun merged = RunCpu(fused->training.graph, fused->training.loss, float64, 3);
  EXPECT_EQ(plain.losses, merged.losses);
  EXPECT_LT(plain.losses.back(), plain.losses.front() + 1.0);
  ASSERT_EQ(plain.parameters.size(), merged.parameters.size());
  for (const auto& [name, values] : plain.parameters) {
    EXPECT_EQ(values, merged.parameters.at(name)) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Float32AndFloat64PerLayerAndWholeStep, FusedMatchesUnfusedTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

// Mixed precision: the updates read the 16-bit gradients themselves (the widening casts folded
// into sgd_momentum_multi, which widens exactly on load), and the step keeps its bits.
class FoldedGradientCastsTest : public ::testing::TestWithParam<DType> {};

TEST_P(FoldedGradientCastsTest, UpdatesReadThe16BitGradientsAndTheStepKeepsItsBits) {
  const DType compute = GetParam();
  auto mlp =
      models::BuildMlp({.batch = 8, .input_features = 24, .depth = 3, .width = 64, .classes = 10});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  auto mixed = passes::ConvertToMixedPrecision(mlp->graph, mlp->loss, {}, compute);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  auto training = autodiff::BuildTrainingGraph(mixed->graph, mixed->loss, {0.05f, 0.9f, 0.01f});
  ASSERT_TRUE(training.ok()) << training.status();
  auto fused = passes::Fuse(*training, {training->loss}, PerLayer());
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& g = fused->training.graph;
  int narrow = 0, multi = 0;
  for (const Node& node : g.nodes()) {
    if (node.op_name() == "cast") {
      for (const Node& reader : g.nodes()) {
        if (reader.op->kind != ir::OpKind::kOptimizer) continue;
        for (const Value& v : reader.inputs) {
          EXPECT_NE(v.node, node.id) << "an update still reads the cast '" << node.name << "'";
        }
      }
    }
    if (node.op_name() != "sgd_momentum_multi") continue;
    ++multi;
    for (size_t i = 1; i < node.inputs.size(); i += 3) {
      if (g.spec(node.inputs[i]).dtype == compute) ++narrow;
    }
  }
  EXPECT_EQ(multi, 1);
  EXPECT_EQ(narrow, static_cast<int>(training->parameters.size()));  // Every layer's w and b.
  for (const auto& [parameter, gradient] : fused->training.gradients) {
    EXPECT_EQ(g.spec(gradient).dtype, compute) << g.node(parameter).name;
  }
  // Against the same fusions without the folding (other fusions round 16-bit values once where
  // the unfused ops round twice, so the unfused graph is not the reference here).
  passes::FuseOptions unfolded = PerLayer();
  unfolded.fold_gradient_casts = false;
  auto casts_kept = passes::Fuse(*training, {training->loss}, unfolded);
  ASSERT_TRUE(casts_kept.ok()) << casts_kept.status();
  const CpuRun plain = RunCpu(casts_kept->training.graph, casts_kept->training.loss, false, 3);
  const CpuRun merged = RunCpu(g, fused->training.loss, false, 3);
  EXPECT_EQ(plain.losses, merged.losses);
  for (const auto& [name, values] : plain.parameters) {
    EXPECT_EQ(values, merged.parameters.at(name)) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Bf16AndF16, FoldedGradientCastsTest,
                         ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// A widening cast that something besides the update reads (here: a fetched gradient) stays.
TEST(FoldedGradientCastsTest, ACastWithAnotherReaderStays) {
  auto mlp =
      models::BuildMlp({.batch = 8, .input_features = 24, .depth = 3, .width = 64, .classes = 10});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  auto mixed = passes::ConvertToMixedPrecision(mlp->graph, mlp->loss, {}, DType::kBFloat16);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  auto training = autodiff::BuildTrainingGraph(mixed->graph, mixed->loss, {0.05f, 0.9f, 0.01f});
  ASSERT_TRUE(training.ok()) << training.status();
  const int32_t first = training->parameters[0];
  const Value kept = training->gradients.at(first);
  auto fused = passes::Fuse(*training, {training->loss, kept}, PerLayer());
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& g = fused->training.graph;
  const Value mapped = fused->values.at(kept);
  EXPECT_EQ(g.spec(mapped).dtype, DType::kFloat32);
  EXPECT_EQ(g.node(mapped.node).op_name(), "cast");
}

TEST(FuseTest, SmallMlpBecomesOneWholeStepNode) {
  Training t = MlpTraining(8, 256, 32, 10);
  auto fused = passes::Fuse(t.training, {t.training.loss, t.mlp.logits}, {});
  ASSERT_TRUE(fused.ok()) << fused.status();
  const std::map<std::string, int> counts = OpCounts(fused->training.graph);
  EXPECT_EQ(counts, (std::map<std::string, int>{{"mlp_train_step", 1}}));
  EXPECT_TRUE(fused->training.graph.FindNode("mlp_train_step.barrier").ok());
  EXPECT_TRUE(fused->values.contains(t.mlp.logits));
  EXPECT_TRUE(fused->whole_step_declined.empty());
}

// The whole-step match's walk over the forward chain: the layers first to last and the input
// they start from; a layer of another form is named in the reason.
TEST(FuseTest, WalkMlpChainFindsTheLayersOrSaysWhichIsNot) {
  const passes::MlpChainOps plain{&ops::MatmulOp(), &ops::BiasAddOp(), "a bias add", "x·Wᵀ"};
  Training t = MlpTraining(2, 16, 4, 3);
  const Graph& mlp = t.mlp.graph;
  auto reads_input = [](const Graph& g) {
    return [graph = &g](Value h) { return graph->node(h.node).op == &ir::InputOp(); };
  };
  Value first;
  std::string why;
  auto layers = passes::WalkMlpChain(mlp, t.mlp.logits, plain, reads_input(mlp), &first, &why);
  ASSERT_TRUE(layers.has_value()) << why;
  ASSERT_EQ(layers->size(), 3u);
  EXPECT_EQ(mlp.node(layers->front().weight).name, "fc0.weight");
  EXPECT_EQ(mlp.node(layers->back().bias).name, "fc2.bias");
  EXPECT_EQ(mlp.node(first.node).name, "features");

  Graph g;
  const Value x = *g.AddInput("x", {Shape{4, 8}, DType::kFloat32});
  const Value w = *g.AddParameter("w", {Shape{3, 8}, DType::kFloat32}, Initializer::Zeros());
  const Value wt = *g.AddParameter("wt", {Shape{8, 3}, DType::kFloat32}, Initializer::Zeros());
  const Value b = *g.AddParameter("b", {Shape{3}, DType::kFloat32}, Initializer::Zeros());
  const Value no_bias = *g.AddOp1(ops::MatmulOp(), "no_bias", {x, w}, {{"transpose_b", true}});
  EXPECT_FALSE(passes::WalkMlpChain(g, no_bias, plain, reads_input(g), &first, &why).has_value());
  EXPECT_EQ(why, "'no_bias' is not a bias add");
  const Value x_w = *g.AddOp1(ops::MatmulOp(), "x_w", {x, wt}, {});
  const Value biased = *g.AddOp1(ops::BiasAddOp(), "biased", {x_w, b}, {});
  EXPECT_FALSE(passes::WalkMlpChain(g, biased, plain, reads_input(g), &first, &why).has_value());
  EXPECT_EQ(why, "'x_w' is not x·Wᵀ");
}

// A count too large for int64 (saturated) is said so, not printed as 2^63 - 1.
TEST(FuseTest, TooManyMultiplyAddsSaysWhenTheCountSaturated) {
  EXPECT_EQ(passes::TooManyMultiplyAdds("the", 268435456),
            absl::StrCat("the forward pass has 268435456 multiply-adds; library GEMMs win above ",
                         passes::kMlpStepMaxForwardMultiplyAdds));
  EXPECT_THAT(passes::TooManyMultiplyAdds("each model's", std::numeric_limits<int64_t>::max()),
              HasSubstr("each model's forward pass has more multiply-adds than int64 counts"));
}

TEST(FuseTest, WholeStepIsDeclinedWithAReason) {
  // Large products: library GEMMs are faster.
  Training big = MlpTraining(4, 1024, 256, 10);
  auto fused = passes::Fuse(big.training, {big.training.loss}, {});
  ASSERT_TRUE(fused.ok());
  EXPECT_THAT(fused->whole_step_declined, HasSubstr("multiply-adds"));
  EXPECT_EQ(OpCounts(fused->training.graph).count("mlp_train_step"), 0u);
  // A fetched hidden activation lives inside the step.
  Training t = MlpTraining(2, 16, 4, 3);
  const Value hidden{*t.mlp.graph.FindNode("fc0.relu"), 0};
  fused = passes::Fuse(t.training, {t.training.loss, hidden}, {});
  ASSERT_TRUE(fused.ok());
  EXPECT_THAT(fused->whole_step_declined, HasSubstr("fetched value"));
}

TEST(FuseTest, FetchedPreActivationStaysMaterialisedAndMapped) {
  Training t = MlpTraining(2, 16, 4, 3);
  const Value pre = Value{*t.mlp.graph.FindNode("fc0.bias_add"), 0};
  auto plan = passes::BuildPlan(t.training, {pre});
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto mapped = plan->MapValue(pre);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ(plan->graph().node(mapped->node).op_name(), "matmul_bias");
  EXPECT_NE(plan->memory.Find(*mapped), nullptr);
  // The relu could not join the epilogue: its input is kept.
  EXPECT_TRUE(plan->graph().FindNode("fc0.relu").ok());
  // A value fused away is a clear error, not a wrong buffer.
  auto gone = plan->MapValue(Value{*t.mlp.graph.FindNode("fc1.matmul"), 0});
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr("TrainOptions::fetch"));
}

TEST(FuseTest, FusionOffKeepsEveryNode) {
  Training t = MlpTraining(2, 16, 4, 3);
  auto plan = passes::BuildPlan(t.training, {}, {.fuse = false});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->graph().num_nodes(), t.training.graph.num_nodes());
  EXPECT_TRUE(plan->fused_groups.empty());
  auto fused = passes::BuildPlan(t.training, {}, {.fusion = PerLayer()});
  ASSERT_TRUE(fused.ok());
  EXPECT_LT(fused->launches.size(), plan->launches.size());
  EXPECT_THAT(passes::PlanToString(*fused), HasSubstr("[fuses fc0.matmul,fc0.bias_add,fc0.relu]"));
}

TEST(PointwiseProgramTest, RoundTripsThroughAttributes) {
  ops::PointwiseProgram program;
  program.steps.push_back({&ops::ReluGradOp(), {0, 1}});
  program.steps.push_back({&ops::BiasAddOp(), {ops::PointwiseProgram::StepOperand(0), 2}});
  program.outputs = {1};
  program.column_sum = 0;
  auto back = ops::PointwiseProgram::FromAttrs(program.ToAttrs());
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->steps.size(), 2u);
  EXPECT_EQ(back->steps[1].op, &ops::BiasAddOp());
  EXPECT_EQ(back->steps[1].operands, (std::vector<int>{-1, 2}));
  EXPECT_EQ(back->outputs, std::vector<int>{1});
  EXPECT_EQ(back->column_sum, 0);
}

TEST(PointwiseProgramTest, BadProgramsAreClearErrors) {
  Attrs attrs = {{"steps", std::string("matmul:0,1")},
                 {"outputs", std::string("0")},
                 {"column_sum", int64_t{-1}}};
  EXPECT_THAT(ops::PointwiseProgram::FromAttrs(attrs).status().message(),
              HasSubstr("'matmul' is not a chainable pointwise op"));
  Graph g;
  Value x = *g.AddInput("x", {Shape{4, 3}});
  attrs["steps"] = std::string("relu:s0");
  auto bad = g.AddOp(ops::FusedPointwiseOp(), "f", {x}, attrs);
  EXPECT_THAT(bad.status().message(), HasSubstr("neither an input nor an earlier step"));
  attrs["steps"] = std::string("relu:0");
  attrs["outputs"] = std::string("3");
  EXPECT_THAT(g.AddOp(ops::FusedPointwiseOp(), "f", {x}, attrs).status().message(),
              HasSubstr("output step 3 does not exist"));
}

TEST(FusedKernelsTest, EveryFusedKernelFormCompilesForSm90) {
  codegen::FusedPointwiseSpec chain{.inputs = {codegen::Broadcast::kFull, codegen::Broadcast::kRow},
                                    .expressions = {"in0 + in1", "(s0 > 0.0f ? s0 : 0.0f)"},
                                    .outputs = {1}};
  codegen::FusedPointwiseSpec with_sum = chain;
  with_sum.column_sum = 0;
  for (const codegen::GeneratedKernel& kernel :
       {codegen::FusedPointwise(chain), codegen::FusedPointwise(with_sum),
        codegen::SoftmaxCrossEntropyWithGrad(), codegen::SgdMomentumMulti()}) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    EXPECT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
  }
}

}  // namespace
}  // namespace reprise
