// The tied embedding's gradient sum (src/passes/fuse_embedding_rules.cc): GPT-2's two gradients of
// transformer.wte.weight, the embedding's and the padded output product's cut back to the table,
// become one embedding_grad_add that reads the padded gradient; the fused step gives the unfused
// step's bits on the CPU reference; the op's shape rule refuses a base that cannot hold the table.
// In mixed precision the embedding gathers from the float32 table, rounding the rows, with the
// bits of a gather from the table's 16-bit copy.
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/reference_executor.h"
#include "src/ops/cast.h"
#include "src/ops/ops.h"
#include "src/ops/transformer_ops.h"
#include "src/passes/fuse.h"
#include "src/passes/pipeline.h"
#include "tests/cpu/token_steps.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kBatch = 2, kSeq = 8, kVocab = 100;

models::Gpt2Config Tiny() {
  return {.batch = kBatch,
          .seq = kSeq,
          .max_positions = kSeq,
          .vocab = kVocab,
          .layers = 1,
          .heads = 2,
          .width = 16};
}

std::map<std::string, int> OpCounts(const Graph& g) {
  std::map<std::string, int> counts;
  for (const Node& n : g.nodes()) {
    if (!ir::IsLeaf(n)) ++counts[std::string(n.op_name())];
  }
  return counts;
}

// `steps` steps on the CPU reference with fixed batches (ids repeat: rows with several tokens):
// the losses and the parameters.
testing::CpuSteps RunCpu(const Graph& g, Value loss, int steps) {
  return testing::RunTokenSteps(g, loss, steps, "tokens", "targets", kBatch * kSeq, 13, kVocab);
}

// Three steps of `a` and `b` on the CPU reference give the same losses and parameters, bit for bit.
void ExpectSameSteps(const autodiff::TrainingGraph& a, const autodiff::TrainingGraph& b) {
  const auto first = RunCpu(a.graph, a.loss, 3);
  const auto second = RunCpu(b.graph, b.loss, 3);
  EXPECT_EQ(first.first, second.first);
  for (const auto& [name, values] : first.second) {
    EXPECT_EQ(values, second.second.at(name)) << name;
  }
}

TEST(FuseEmbeddingTest, Gpt2TiedGradientsBecomeOneEmbeddingGradAddWithTheUnfusedBits) {
  auto gpt = models::BuildGpt2(Tiny());
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  ASSERT_EQ(models::Gpt2LogitsWidth(Tiny()), 128);  // The output product reads a padded table.
  auto t = autodiff::BuildTrainingGraph(gpt->graph, gpt->loss, {0.1f, 0.9f, 0.0f});
  ASSERT_TRUE(t.ok()) << t.status();
  const std::map<std::string, int> before = OpCounts(t->graph);
  ASSERT_EQ(before.at("embedding_grad"), 1);
  ASSERT_EQ(before.at("resize_rows"), 2);  // The padding, and its gradient cut back.

  auto fused = passes::Fuse(*t, {t->loss}, {.whole_mlp_step = false});
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& g = fused->training.graph;
  const std::map<std::string, int> counts = OpCounts(g);
  EXPECT_EQ(counts.at("embedding_grad_add"), 1);
  EXPECT_EQ(counts.count("embedding_grad"), 0u);
  EXPECT_EQ(counts.at("resize_rows"), 1);  // Only the forward padding is left.
  for (const Node& n : g.nodes()) {
    if (n.op_name() != "embedding_grad_add") continue;
    EXPECT_EQ(g.spec(n.inputs[2]).shape, (Shape{128, 16}));  // The padded product's gradient.
    EXPECT_EQ(n.outputs[0].shape, (Shape{kVocab, 16}));
  }

  passes::FuseOptions without;
  without.whole_mlp_step = false;
  without.embedding_gradient_sums = false;
  auto unfused = passes::Fuse(*t, {t->loss}, without);
  ASSERT_TRUE(unfused.ok()) << unfused.status();
  EXPECT_EQ(OpCounts(unfused->training.graph).count("embedding_grad_add"), 0u);
  ExpectSameSteps(unfused->training, fused->training);
}

TEST(FuseEmbeddingTest, MixedPrecisionEmbeddingGathersTheFloat32TableWithTheCopysBits) {
  auto gpt = models::BuildGpt2(Tiny());
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  passes::CompileOptions options;
  options.compute_dtype = DType::kBFloat16;
  options.optimizer.learning_rate = 0.1f;
  auto step = passes::BuildTrainingStep(gpt->graph, gpt->loss, options);
  ASSERT_TRUE(step.ok()) << step.status();
  const autodiff::TrainingGraph& t = step->training;
  auto fused = passes::Fuse(t, {t.loss}, {.whole_mlp_step = false});
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& g = fused->training.graph;
  int embeddings = 0, table_copies = 0;
  for (const Node& n : g.nodes()) {
    if (n.op == &ops::EmbeddingOp()) {
      ++embeddings;
      EXPECT_EQ(g.node(n.inputs[1].node).op, &ir::ParameterOp());
      EXPECT_EQ(g.spec(n.inputs[1]).dtype, DType::kFloat32);
      EXPECT_EQ(n.outputs[0].dtype, DType::kBFloat16);
    }
    for (const TensorSpec& out : n.outputs) {
      table_copies += out == TensorSpec{Shape{kVocab, 16}, DType::kBFloat16} &&
                      n.op_name().find("cast") != std::string::npos;
    }
  }
  EXPECT_EQ(embeddings, 1);
  EXPECT_EQ(table_copies, 1);  // Still made, for the tied output product.

  passes::FuseOptions without;
  without.whole_mlp_step = false;
  without.embedding_from_float32_table = false;
  auto unfused = passes::Fuse(t, {t.loss}, without);
  ASSERT_TRUE(unfused.ok()) << unfused.status();
  ExpectSameSteps(unfused->training, fused->training);
}

// attr dtype: a float32 table's rows rounded to a 16-bit type, its gradient widened back; other
// combinations refused with the types named.
TEST(FuseEmbeddingTest, EmbeddingRowsTypeAttrRoundsAFloat32TableOnly) {
  Graph g;
  Value ids = *g.AddInput("ids", {Shape{6}, DType::kInt32});
  Value table = *g.AddParameter("table", {Shape{10, 4}}, Initializer::Uniform(-1, 1));
  Value half = *g.AddInput("half", {Shape{10, 4}, DType::kBFloat16});
  auto rows = g.AddOp1(ops::EmbeddingOp(), "rows", {ids, table}, {{"dtype", std::string("bf16")}});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(g.spec(*rows), (TensorSpec{Shape{6, 4}, DType::kBFloat16}));
  EXPECT_THAT(g.AddOp1(ops::EmbeddingOp(), "bad", {ids, half}, {{"dtype", std::string("f16")}})
                  .status()
                  .message(),
              HasSubstr("bf16 rows to f16"));
  EXPECT_THAT(g.AddOp1(ops::EmbeddingOp(), "wide", {ids, table}, {{"dtype", std::string("f32")}})
                  .status()
                  .message(),
              HasSubstr("f32 rows to f32"));
  Value labels = *g.AddInput("labels", {Shape{6}, DType::kInt32});
  Value logits = *g.AddOp1(ops::CastOp(), "widen", {*rows}, {{"dtype", std::string("f32")}});
  Value loss = *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {logits, labels});
  auto t = autodiff::BuildTrainingGraph(g, loss, {0.1f, 0.9f, 0.0f});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->graph.spec(t->gradients.at(table.node)).dtype, DType::kFloat32);
}

TEST(FuseEmbeddingTest, EmbeddingGradAddRefusesABaseThatCannotHoldTheTable) {
  Graph g;
  Value dy = *g.AddInput("dy", {Shape{6, 4}});
  Value ids = *g.AddInput("ids", {Shape{6}, DType::kInt32});
  Value fits = *g.AddInput("fits", {Shape{12, 4}});
  Value short_base = *g.AddInput("short", {Shape{9, 4}});
  Value narrow = *g.AddInput("narrow", {Shape{10, 3}});
  Value half = *g.AddInput("half", {Shape{10, 4}, DType::kBFloat16});
  const Attrs vocab = {{"vocab", int64_t{10}}};
  auto ok = g.AddOp1(ops::EmbeddingGradAddOp(), "ok", {dy, ids, fits}, vocab);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(g.spec(*ok).shape, (Shape{10, 4}));
  for (Value base : {short_base, narrow, half}) {
    EXPECT_THAT(
        g.AddOp1(ops::EmbeddingGradAddOp(), "bad", {dy, ids, base}, vocab).status().message(),
        HasSubstr("base"));
  }
}

}  // namespace
}  // namespace reprise
