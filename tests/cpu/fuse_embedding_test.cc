// The tied embedding's gradient sum (src/passes/fuse_embedding_rules.cc): GPT-2's two gradients of
// transformer.wte.weight, the embedding's and the padded output product's cut back to the table,
// become one embedding_grad_accumulate written over the padded gradient (embedding_grad_add, which
// reads it, where the sum may not be written over it); the fused step gives the unfused step's
// bits on the CPU reference; the compiled step gives the sum the padded gradient's place; the op's
// shape rule refuses a base that cannot hold the table.
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/api/compile_options.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"
#include "src/ops/transformer_ops.h"
#include "src/passes/fuse.h"
#include "src/passes/memory_plan.h"
#include "src/passes/pipeline.h"
#include "src/passes/schedule.h"
#include "tests/cpu/token_steps.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kVocab = testing::kTinyGpt2Vocab;

models::Gpt2Config Tiny() { return testing::TinyGpt2(); }

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
  return testing::RunTinyGpt2Steps(g, loss, steps);
}

TEST(FuseEmbeddingTest, Gpt2TiedGradientsBecomeOneSumWrittenOverThePaddedGradient) {
  auto gpt = models::BuildGpt2(Tiny());
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  ASSERT_EQ(models::Gpt2LogitsWidth(Tiny()), 128);  // The output product reads a padded table.
  auto t = autodiff::BuildTrainingGraph(gpt->graph, gpt->loss, {0.1f, 0.9f, 0.0f});
  ASSERT_TRUE(t.ok()) << t.status();
  const std::map<std::string, int> before = OpCounts(t->graph);
  ASSERT_EQ(before.at("embedding_grad"), 1);
  ASSERT_EQ(before.at("resize_rows"), 2);  // The padding, and its gradient cut back.

  passes::FuseOptions apart;
  apart.whole_mlp_step = false;
  apart.embedding_gradient_in_place = false;
  passes::FuseOptions without = apart;
  without.embedding_gradient_sums = false;
  auto unfused = passes::Fuse(*t, {t->loss}, without);
  ASSERT_TRUE(unfused.ok()) << unfused.status();
  EXPECT_EQ(OpCounts(unfused->training.graph).count("embedding_grad_add"), 0u);
  const auto plain = RunCpu(unfused->training.graph, unfused->training.loss, 3);

  for (const bool in_place : {true, false}) {
    SCOPED_TRACE(in_place);
    const std::string op = in_place ? "embedding_grad_accumulate" : "embedding_grad_add";
    auto fused = passes::Fuse(*t, {t->loss},
                              in_place ? passes::FuseOptions{.whole_mlp_step = false} : apart);
    ASSERT_TRUE(fused.ok()) << fused.status();
    const Graph& g = fused->training.graph;
    const std::map<std::string, int> counts = OpCounts(g);
    EXPECT_EQ(counts.at(op), 1);
    EXPECT_EQ(counts.count("embedding_grad"), 0u);
    EXPECT_EQ(counts.count(in_place ? "embedding_grad_add" : "embedding_grad_accumulate"), 0u);
    EXPECT_EQ(counts.at("resize_rows"), 1);  // Only the forward padding is left.
    for (const Node& n : g.nodes()) {
      if (n.op_name() != op) continue;
      EXPECT_EQ(g.spec(n.inputs[2]).shape, (Shape{128, 16}));  // The padded product's gradient.
      EXPECT_EQ(n.outputs[0].shape, (Shape{kVocab, 16}));
    }
    const auto merged = RunCpu(g, fused->training.loss, 3);
    EXPECT_EQ(plain.first, merged.first);
    for (const auto& [name, values] : plain.second) {
      EXPECT_EQ(values, merged.second.at(name)) << name;
    }
  }
}

// The whole compiler, as a Trainer calls it, in both precisions and on one and two lanes: the sum
// is written over the padded product's gradient, and the memory plan gives both one place. Data
// parallel in float32, the sum is averaged by a collective, which places it beside the other
// gradients: it keeps memory of its own there.
TEST(FuseEmbeddingTest, CompiledGpt2StepGivesTheSumThePaddedGradientsPlace) {
  auto gpt = models::BuildGpt2(Tiny());
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const int lanes : {1, 2, 0}) {  // 0: two lanes, data parallel.
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), ", lanes ", lanes));
      TrainOptions options;
      options.numerics.compute_dtype = dtype;
      options.launch.lanes = lanes == 0 ? 2 : lanes;
      if (lanes == 0) options.parallel.data_parallel = DataParallel{.world_size = 2};
      auto step = passes::CompileStep(gpt->graph, gpt->loss,
                                      CompileOptionsFor(options, codegen::MlpStepTarget{}));
      ASSERT_TRUE(step.ok()) << step.status();
      const passes::Plan& plan = step->plan;
      const std::map<std::string, int> counts = OpCounts(plan.graph());
      // In bfloat16 the collective averages the sum's float32 cast, not the sum.
      const bool averaged = lanes == 0 && dtype == DType::kFloat32;
      EXPECT_EQ(counts.count("embedding_grad_add"), averaged ? 1u : 0u);
      EXPECT_EQ(counts.count("embedding_grad_accumulate"), averaged ? 0u : 1u);
      for (const Node& n : plan.graph().nodes()) {
        if (n.op_name() != "embedding_grad_accumulate") continue;
        const passes::Buffer* base = plan.memory.Find(n.inputs[2]);
        const passes::Buffer* sum = plan.memory.Find(Value{n.id, 0});
        ASSERT_NE(base, nullptr);
        ASSERT_NE(sum, nullptr);
        EXPECT_EQ(base->offset, sum->offset);
        EXPECT_TRUE(plan.memory.SharePlace(*base, *sum));
      }
    }
  }
}

// Where the gradient added to is read after the sum, the sum keeps memory of its own.
TEST(FuseEmbeddingTest, SumStaysApartWhereTheOtherGradientIsReadAfterIt) {
  autodiff::TrainingGraph t;
  Graph& g = t.graph;
  Value dy = *g.AddInput("dy", {Shape{6, 4}});
  Value ids = *g.AddInput("ids", {Shape{6}, DType::kInt32});
  Value x = *g.AddInput("x", {Shape{10, 4}});
  Value other = *g.AddOp1(ops::ReluOp(), "other", {x});
  Value grad = *g.AddOp1(ops::EmbeddingGradOp(), "grad", {dy, ids}, {{"vocab", int64_t{10}}});
  Value sum = *g.AddOp1(ops::AddOp(), "sum", {grad, other});
  t.loss = *g.AddOp1(ops::AddOp(), "late", {sum, other});  // `other`, read after the sum.
  auto fused = passes::Fuse(t, {t.loss}, {.whole_mlp_step = false});
  ASSERT_TRUE(fused.ok()) << fused.status();
  const std::map<std::string, int> counts = OpCounts(fused->training.graph);
  EXPECT_EQ(counts.at("embedding_grad_add"), 1);
  EXPECT_EQ(counts.count("embedding_grad_accumulate"), 0u);
}

// embedding_grad_accumulate's output takes its base's place: the memory plan gives both one offset
// where both are transient, and refuses to keep the sum after the step (or to write over a kept
// base), naming the node.
TEST(FuseEmbeddingTest, EmbeddingGradAccumulateTakesItsBasesPlace) {
  Graph g;
  Value dy = *g.AddInput("dy", {Shape{6, 4}});
  Value ids = *g.AddInput("ids", {Shape{6}, DType::kInt32});
  Value a = *g.AddInput("a", {Shape{12, 4}});
  Value base = *g.AddOp1(ops::AddOp(), "base", {a, a});
  Value sum =
      *g.AddOp1(ops::EmbeddingGradAccumulateOp(), "sum", {dy, ids, base}, {{"vocab", int64_t{10}}});
  Value doubled = *g.AddOp1(ops::AddOp(), "doubled", {sum, sum});
  auto schedule = passes::Schedule(g);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  auto memory = passes::PlanMemory(g, absl::MakeSpan(*schedule), {doubled});
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->Find(base)->offset, memory->Find(sum)->offset);
  EXPECT_GE(memory->Find(base)->bytes, memory->Find(sum)->bytes);
  for (Value kept : {sum, base}) {
    auto refused = passes::PlanMemory(g, absl::MakeSpan(*schedule), {kept, doubled});
    EXPECT_THAT(refused.status().message(), HasSubstr("'sum' writes its output over input 2"));
  }
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
