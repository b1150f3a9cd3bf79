// The transformer fusions (src/passes/fuse_gelu_rules.cc, fuse_layer_norm_rules.cc): a pre-norm
// MLP block's GELU layer, residual projection and layer-norm input gradient become the fused
// nodes, the fused step gives the unfused step's bits on the CPU reference, a bfloat16 plan holds
// them, and what the rules cannot take stays unfused.
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/nn.h"
#include "reprise/trainer.h"
#include "src/api/compile_options.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/reference_executor.h"
#include "src/ops/layer_norm_residual.h"
#include "src/ops/matmul_gelu.h"
#include "src/ops/ops.h"
#include "src/passes/fuse.h"
#include "src/passes/pipeline.h"
#include "src/passes/schedule.h"
#include "tests/cpu/token_steps.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kTokens = 12, kVocab = 20, kWidth = 16;

struct Block {
  Graph graph;
  Value loss;
};

// ids -> wte -> x; x + fc2(gelu(fc1(ln_1(x)))) -> ln_f -> head -> loss: GPT-2's MLP half-block.
Block BuildBlock(int64_t hidden = 4 * kWidth) {
  Block b;
  Graph& g = b.graph;
  Value ids = *g.AddInput("ids", {Shape{kTokens}, DType::kInt32});
  Value labels = *g.AddInput("labels", {Shape{kTokens}, DType::kInt32});
  Value x = *nn::Embedding(g, ids, kVocab, kWidth, "wte", 0.5);
  Value h = *nn::Gelu(g, *nn::Linear(g, *nn::LayerNorm(g, x, "ln_1"), hidden, "c_fc"), "gelu");
  x = *nn::Add(g, x, *nn::Linear(g, h, kWidth, "c_proj"), "residual");
  Value logits = *nn::Linear(g, *nn::LayerNorm(g, x, "ln_f"), kVocab, "head");
  b.loss = *nn::SoftmaxCrossEntropy(g, logits, labels, "loss");
  return b;
}

std::map<std::string, int> OpCounts(const Graph& g) {
  std::map<std::string, int> counts;
  for (const Node& n : g.nodes()) {
    if (!ir::IsLeaf(n)) ++counts[std::string(n.op_name())];
  }
  return counts;
}

passes::FuseOptions Unfused() {
  passes::FuseOptions o;
  o.whole_mlp_step = false;
  o.gemm_epilogues = o.gelu_epilogues = o.residual_epilogues = o.layer_norm_residual = false;
  o.loss_with_grad = o.batch_norm_activations = o.conv_dgrad_accumulate = false;
  o.pointwise_chains = o.multi_tensor_optimizer = false;
  return o;
}

TEST(FuseGeluTest, BlockBecomesGeluResidualAndLayerNormGradientNodes) {
  Block b = BuildBlock();
  auto t = autodiff::BuildTrainingGraph(b.graph, b.loss, {0.1f, 0.9f, 0.0f});
  ASSERT_TRUE(t.ok()) << t.status();
  auto fused = passes::Fuse(
      *t, {t->loss},
      {.whole_mlp_step = false, .gelu_backward_epilogue = true, .weight_gradient_bias_sums = true});
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& g = fused->training.graph;
  const std::map<std::string, int> counts = OpCounts(g);
  EXPECT_EQ(counts.at("matmul_bias_gelu_aux"), 1);
  EXPECT_EQ(counts.at("matmul_dgelu"), 1);
  EXPECT_EQ(counts.at("matmul_bias_residual"), 1);
  // c_fc's and head's bias gradients, each summed by its weight gradient; c_proj's by ln_f's
  // backward, which writes its dY (the layer norm's rule runs first).
  EXPECT_EQ(counts.at("matmul_bgrad"), 2);
  EXPECT_EQ(counts.count("column_sum"), 0u);
  EXPECT_EQ(counts.at("layer_norm_grad_add"), 1);  // ln_1's dx plus the residual path's gradient.
  EXPECT_EQ(counts.at("layer_norm_grad_column_sum"), 1);
  EXPECT_EQ(counts.count("gelu"), 0u);
  EXPECT_EQ(counts.count("gelu_grad"), 0u);
  // The backward reads the pre-activation the forward kept.
  const Node& forward = g.node(*g.FindNode("c_fc.matmul+bias+gelu"));
  const Node& backward = g.node(*g.FindNode("c_proj.matmul.dgrad+gelu.grad"));
  EXPECT_EQ(backward.inputs[2], (Value{forward.id, 1}));
  // The residual projection reads the embedding as its C.
  const Node& residual = g.node(*g.FindNode("c_proj.matmul+bias+residual"));
  EXPECT_EQ(g.node(residual.inputs[3].node).op_name(), "embedding");
}

struct FusedBlock {
  autodiff::TrainingGraph training;
  passes::FusedTraining fused;
};

// BuildBlock's training graph and what the fuse pass makes of it with `options`.
absl::StatusOr<FusedBlock> FuseBlock(const passes::FuseOptions& options) {
  Block b = BuildBlock();
  absl::StatusOr<autodiff::TrainingGraph> t =
      autodiff::BuildTrainingGraph(b.graph, b.loss, {0.1f, 0.9f, 0.0f});
  if (!t.ok()) return t.status();
  absl::StatusOr<passes::FusedTraining> fused = passes::Fuse(*t, {t->loss}, options);
  if (!fused.ok()) return fused.status();
  return FusedBlock{*std::move(t), *std::move(fused)};
}

// `steps` steps on the CPU reference with fixed batches: the losses and the parameters.
testing::CpuSteps RunCpu(const Graph& g, Value loss, int steps) {
  return testing::RunTokenSteps(g, loss, steps, "ids", "labels", kTokens, kVocab, kVocab);
}

TEST(FuseGeluTest, FusedStepGivesTheUnfusedStepsBitsOnTheCpuReference) {
  Block b = BuildBlock();
  auto t = autodiff::BuildTrainingGraph(b.graph, b.loss, {0.1f, 0.9f, 0.0f});
  ASSERT_TRUE(t.ok()) << t.status();
  passes::FuseOptions only_ours = Unfused();
  only_ours.gemm_epilogues = only_ours.gelu_epilogues = only_ours.residual_epilogues = true;
  only_ours.layer_norm_residual = only_ours.gelu_backward_epilogue = true;
  only_ours.weight_gradient_bias_sums = true;
  auto fused = passes::Fuse(*t, {t->loss}, only_ours);
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(OpCounts(fused->training.graph).count("matmul_dgelu"), 1u);
  EXPECT_EQ(OpCounts(fused->training.graph).at("matmul_bgrad"), 2);
  EXPECT_EQ(OpCounts(fused->training.graph).at("layer_norm_grad_column_sum"), 1);
  const auto plain = RunCpu(t->graph, t->loss, 3);
  const auto merged = RunCpu(fused->training.graph, fused->training.loss, 3);
  EXPECT_EQ(plain.first, merged.first);
  EXPECT_LT(plain.first.back(), plain.first.front());
  for (const auto& [name, values] : plain.second) {
    EXPECT_EQ(values, merged.second.at(name)) << name;
  }
}

// Without the residual epilogue the residual add joins the layer norm after it (add_layer_norm),
// and the step keeps the unfused step's bits.
TEST(FuseGeluTest, WithoutTheResidualEpilogueTheAddJoinsTheLayerNorm) {
  Block b = BuildBlock();
  auto t = autodiff::BuildTrainingGraph(b.graph, b.loss, {0.1f, 0.9f, 0.0f});
  ASSERT_TRUE(t.ok()) << t.status();
  passes::FuseOptions options = Unfused();
  options.layer_norm_residual = true;
  auto fused = passes::Fuse(*t, {t->loss}, options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& g = fused->training.graph;
  const std::map<std::string, int> counts = OpCounts(g);
  EXPECT_EQ(counts.at("add_layer_norm"), 1);
  EXPECT_EQ(counts.count("matmul_bias_residual"), 0u);
  // ln_f's backward reads the sum the fused node wrote.
  const Node& forward = g.node(*g.FindNode("residual+ln_f"));
  for (const Node& n : g.nodes()) {
    if (n.op_name() == "layer_norm_grad" || n.op_name() == "layer_norm_grad_add") {
      if (n.name.rfind("ln_f", 0) == 0) EXPECT_EQ(n.inputs[1], (Value{forward.id, 0})) << n.name;
    }
  }
  const auto plain = RunCpu(t->graph, t->loss, 3);
  const auto merged = RunCpu(g, fused->training.loss, 3);
  EXPECT_EQ(plain.first, merged.first);
  for (const auto& [name, values] : plain.second) {
    EXPECT_EQ(values, merged.second.at(name)) << name;
  }
}

// By default the backward is one matmul_dgelu node and c_fc's bias gradient a column_sum of its
// output on the weight-gradient lane; without the backward
// epilogue it is a product plus one fused pointwise kernel (GELU's derivative and the bias
// gradient), which reads the pre-activation the fused forward kept.
TEST(FuseGeluTest, DefaultBackwardIsTheEpilogueNode) {
  absl::StatusOr<FusedBlock> block = FuseBlock({.whole_mlp_step = false});
  ASSERT_TRUE(block.ok()) << block.status();
  const Graph& g = block->fused.training.graph;
  const std::map<std::string, int> counts = OpCounts(g);
  EXPECT_EQ(counts.at("matmul_dgelu"), 1);
  EXPECT_EQ(counts.count("gelu_grad"), 0u);
  const Node& forward = g.node(*g.FindNode("c_fc.matmul+bias+gelu"));
  const Node& backward = g.node(*g.FindNode("c_proj.matmul.dgrad+gelu.grad"));
  EXPECT_EQ(backward.inputs[2], (Value{forward.id, 1}));
  int bias_gradients = 0;
  for (const Node& n : g.nodes()) {
    if (n.inputs.empty() || n.inputs[0] != Value{backward.id, 0}) continue;
    if (n.op != &ops::MatmulBiasGradOp() && n.op != &ops::ColumnSumOp()) continue;
    ++bias_gradients;
    EXPECT_EQ(n.op, &ops::ColumnSumOp()) << n.name;
    EXPECT_TRUE(passes::IsWeightGradient(n)) << n.name;
  }
  EXPECT_EQ(bias_gradients, 1);
}

TEST(FuseGeluTest, WithoutTheBackwardEpilogueTheBackwardIsTheProductAndAPointwiseChain) {
  Block b = BuildBlock();
  auto t = autodiff::BuildTrainingGraph(b.graph, b.loss, {0.1f, 0.9f, 0.0f});
  ASSERT_TRUE(t.ok()) << t.status();
  auto fused =
      passes::Fuse(*t, {t->loss}, {.whole_mlp_step = false, .gelu_backward_epilogue = false});
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& g = fused->training.graph;
  const std::map<std::string, int> counts = OpCounts(g);
  EXPECT_EQ(counts.at("matmul_bias_gelu_aux"), 1);
  EXPECT_EQ(counts.count("matmul_dgelu"), 0u);
  EXPECT_EQ(counts.count("gelu_grad"), 0u);  // In a fused_pointwise chain.
  const Node& forward = g.node(*g.FindNode("c_fc.matmul+bias+gelu"));
  bool read = false;
  for (const Node& n : g.nodes()) {
    if (n.op_name() != "fused_pointwise") continue;
    for (const Value& v : n.inputs) read = read || v == Value{forward.id, 1};
  }
  EXPECT_TRUE(read);
}

// The plan a bfloat16 Trainer runs holds the fused nodes in bfloat16.
TEST(FuseGeluTest, Bf16PlanHoldsTheFusedNodes) {
  Block b = BuildBlock();
  TrainOptions options;
  options.numerics.compute_dtype = DType::kBFloat16;
  auto step =
      passes::CompileStep(b.graph, b.loss, CompileOptionsFor(options, codegen::MlpStepTarget{}));
  ASSERT_TRUE(step.ok()) << step.status();
  const Graph& g = step->plan.graph();
  const std::map<std::string, int> counts = OpCounts(g);
  for (const char* op : {"matmul_bias_gelu_aux", "matmul_dgelu", "matmul_bias_residual",
                         "layer_norm_grad_add", "layer_norm_grad_column_sum"}) {
    EXPECT_EQ(counts.count(op), 1u) << op;
  }
  for (const Node& n : g.nodes()) {
    if (n.op == &ops::MatmulBiasGeluAuxOp()) {
      EXPECT_EQ(n.outputs[1].dtype, DType::kBFloat16);
    }
  }
}

// With FuseOptions::weight_gradient_bias_sums (and the layer norm's sums off, which would take
// c_proj's first) each bias gradient joins its weight gradient, though the widening casts of the
// two 16-bit gradients lie between them in the training graph (the node goes where the first was).
TEST(FuseGeluTest, Bf16BiasGradientsJoinTheirWeightGradientsAcrossTheCasts) {
  Block b = BuildBlock();
  TrainOptions options;
  options.numerics.compute_dtype = DType::kBFloat16;
  passes::CompileOptions compile = CompileOptionsFor(options, codegen::MlpStepTarget{});
  compile.plan.fusion.weight_gradient_bias_sums = true;
  compile.plan.fusion.layer_norm_bias_sums = false;
  auto step = passes::CompileStep(b.graph, b.loss, compile);
  ASSERT_TRUE(step.ok()) << step.status();
  const std::map<std::string, int> counts = OpCounts(step->plan.graph());
  EXPECT_EQ(counts.at("matmul_bgrad"), 3);  // c_fc, c_proj and head.
  EXPECT_EQ(counts.count("column_sum"), 0u);
  for (const Node& n : step->plan.graph().nodes()) {
    if (n.op == &ops::MatmulBiasGradOp()) EXPECT_TRUE(passes::IsWeightGradient(n)) << n.name;
  }
}

// By default c_proj's bias gradient, the column sum of the residual stream's gradient that ln_f's
// backward writes, is summed in that backward (layer_norm_grad_column_sum), whose output 3 is what
// the optimizer reads; without FuseOptions::layer_norm_bias_sums the column_sum stays a node.
TEST(FuseGeluTest, ProjectionBiasGradientIsSummedInTheLayerNormBackward) {
  absl::StatusOr<FusedBlock> block = FuseBlock({.whole_mlp_step = false});
  ASSERT_TRUE(block.ok()) << block.status();
  const autodiff::TrainingGraph& t = block->training;
  const Graph& g = block->fused.training.graph;
  const std::map<std::string, int> counts = OpCounts(g);
  ASSERT_EQ(counts.at("layer_norm_grad_column_sum"), 1);
  EXPECT_EQ(counts.at("column_sum"), 2);  // c_fc's and head's.
  const Node* fused_sum = nullptr;
  for (const Node& n : g.nodes()) {
    if (n.op == &ops::LayerNormGradColumnSumOp()) fused_sum = &n;
  }
  ASSERT_NE(fused_sum, nullptr);
  EXPECT_THAT(fused_sum->name, HasSubstr("ln_f"));
  EXPECT_THAT(fused_sum->name, HasSubstr("c_proj"));
  EXPECT_EQ(fused_sum->inputs.size(), 5u);  // ln_f's dx has no residual gradient to add.
  ASSERT_EQ(fused_sum->outputs.size(), 4u);
  EXPECT_EQ(fused_sum->outputs[3].shape, Shape{kWidth});
  bool read = false;  // The bias gradient reaches the update.
  for (const Node& n : g.nodes()) {
    for (const Value& v : n.inputs) read = read || v == Value{fused_sum->id, 3};
  }
  EXPECT_TRUE(read);
  absl::StatusOr<FusedBlock> apart =
      FuseBlock({.whole_mlp_step = false, .layer_norm_bias_sums = false});
  ASSERT_TRUE(apart.ok()) << apart.status();
  const std::map<std::string, int> apart_counts = OpCounts(apart->fused.training.graph);
  EXPECT_EQ(apart_counts.count("layer_norm_grad_column_sum"), 0u);
  EXPECT_EQ(apart_counts.at("column_sum"), 3);
  // The fused step keeps the unfused step's bits on the CPU reference.
  const auto plain = RunCpu(t.graph, t.loss, 3);
  const auto merged = RunCpu(g, block->fused.training.loss, 3);
  EXPECT_EQ(plain.first, merged.first);
  for (const auto& [name, values] : plain.second) {
    EXPECT_EQ(values, merged.second.at(name)) << name;
  }
}

// cuBLASLt's GELU aux needs widths that are multiples of 8: a hidden width of 20 stays unfused.
TEST(FuseGeluTest, WidthNotAMultipleOfEightStaysUnfused) {
  Block b = BuildBlock(/*hidden=*/20);
  auto t = autodiff::BuildTrainingGraph(b.graph, b.loss, {0.1f, 0.9f, 0.0f});
  ASSERT_TRUE(t.ok()) << t.status();
  auto fused = passes::Fuse(*t, {t->loss}, {.whole_mlp_step = false});
  ASSERT_TRUE(fused.ok()) << fused.status();
  const std::map<std::string, int> counts = OpCounts(fused->training.graph);
  EXPECT_EQ(counts.count("matmul_bias_gelu_aux"), 0u);
  EXPECT_EQ(counts.count("matmul_dgelu"), 0u);
  EXPECT_EQ(counts.at("matmul_bias_residual"), 1);
}

TEST(FuseGeluTest, FusedOpsRefuseMismatchedOperandsByName) {
  Graph g;
  Value a = *g.AddInput("a", {Shape{4, 8}});
  Value w = *g.AddInput("w", {Shape{16, 8}});
  Value bias = *g.AddInput("bias", {Shape{16}});
  Value short_bias = *g.AddInput("short_bias", {Shape{15}});
  Value pre = *g.AddInput("pre", {Shape{4, 16}});
  Value wrong = *g.AddInput("wrong", {Shape{4, 15}});
  const Attrs tb = {{"transpose_b", true}};
  EXPECT_TRUE(g.AddOp(ops::MatmulBiasGeluAuxOp(), "ok", {a, w, bias}, tb).ok());
  EXPECT_THAT(g.AddOp(ops::MatmulBiasGeluAuxOp(), "fc", {a, w, short_bias}, tb).status().message(),
              AllOf(HasSubstr("fc"), HasSubstr("bias")));
  Value dy = *g.AddInput("dy", {Shape{4, 8}});
  // dy's 8 columns against w's 16 rows: the inner dimensions differ.
  EXPECT_EQ(g.AddOp(ops::MatmulDGeluOp(), "back", {dy, w, pre}).status().code(),
            absl::StatusCode::kInvalidArgument);
  Value w2 = *g.AddInput("w2", {Shape{8, 16}});
  EXPECT_TRUE(g.AddOp(ops::MatmulDGeluOp(), "back2", {dy, w2, pre}).ok());
  EXPECT_THAT(g.AddOp(ops::MatmulDGeluOp(), "back3", {dy, w2, wrong}).status().message(),
              HasSubstr("GELU input"));
  EXPECT_THAT(
      g.AddOp(ops::MatmulBiasResidualOp(), "proj", {a, w, bias, wrong}, tb).status().message(),
      AllOf(HasSubstr("proj"), HasSubstr("residual")));
  // matmul_bgrad: dyᵀ·pre ([8, 16]) and dy's column sums ([8]); A must be read transposed.
  const std::vector<Value> wgrad =
      *g.AddOp(ops::MatmulBiasGradOp(), "wgrad", {dy, pre}, {{"transpose_a", true}});
  EXPECT_EQ(g.spec(wgrad[0]), (TensorSpec{Shape{8, 16}}));
  EXPECT_EQ(g.spec(wgrad[1]), (TensorSpec{Shape{8}}));
  EXPECT_THAT(g.AddOp(ops::MatmulBiasGradOp(), "wgrad2", {dy, pre}).status().message(),
              AllOf(HasSubstr("wgrad2"), HasSubstr("transpose_a")));
  EXPECT_EQ(
      g.AddOp(ops::MatmulBiasGradOp(), "wgrad3", {dy, w}, {{"transpose_a", true}}).status().code(),
      absl::StatusCode::kInvalidArgument);
  Value x = *g.AddInput("x", {Shape{4, 16}});
  Value wln = *g.AddInput("wln", {Shape{16}});
  Value stat = *g.AddInput("stat", {Shape{4}});
  EXPECT_TRUE(g.AddOp(ops::LayerNormGradAddOp(), "ln_grad", {pre, x, wln, stat, stat, x}).ok());
  EXPECT_THAT(g.AddOp(ops::LayerNormGradAddOp(), "ln_grad2", {pre, x, wln, stat, stat, wrong})
                  .status()
                  .message(),
              AllOf(HasSubstr("ln_grad2"), HasSubstr("residual gradient")));
  // layer_norm_grad_column_sum: either op's inputs, dx's column sums as a fourth output.
  const std::vector<Value> with_sum =
      *g.AddOp(ops::LayerNormGradColumnSumOp(), "ln_sum", {pre, x, wln, stat, stat, x});
  ASSERT_EQ(with_sum.size(), 4u);
  EXPECT_EQ(g.spec(with_sum[3]), (TensorSpec{Shape{16}}));
  EXPECT_EQ(g.AddOp(ops::LayerNormGradColumnSumOp(), "ln_sum1", {pre, x, wln, stat, stat})->size(),
            4u);
  EXPECT_THAT(
      g.AddOp(ops::LayerNormGradColumnSumOp(), "ln_sum2", {pre, x, wln, stat}).status().message(),
      AllOf(HasSubstr("ln_sum2"), HasSubstr("5 inputs or")));
  EXPECT_THAT(g.AddOp(ops::LayerNormGradColumnSumOp(), "ln_sum3", {pre, x, wln, stat, stat, wrong})
                  .status()
                  .message(),
              HasSubstr("residual gradient"));
}

}  // namespace
}  // namespace reprise
