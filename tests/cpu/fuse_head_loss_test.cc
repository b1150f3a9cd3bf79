// The output layer in row slices (FuseOptions::head_loss_chunks, src/passes/fuse_kernel_rules.cc):
// GPT-2's lm_head product, its loss with the gradient and the data gradient become one
// head_loss_chunks node; the fused step gives the unfused step's bits on the CPU reference, in
// float32 and in a bfloat16 plan; logits that are fetched keep the nodes apart; the op's shape rule
// and TrainOptions refuse what cannot run.
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/trainer.h"
#include "src/api/compile_options.h"
#include "src/api/input_checks.h"
#include "src/autodiff/autodiff.h"
#include "src/ops/ops.h"
#include "src/passes/fuse.h"
#include "src/passes/pipeline.h"
#include "tests/cpu/token_steps.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kRows = testing::kTinyGpt2Batch * testing::kTinyGpt2Seq;
constexpr int64_t kVocab = testing::kTinyGpt2Vocab;

int Count(const Graph& g, absl::string_view op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op_name() == op;
  return n;
}

testing::CpuSteps RunCpu(const Graph& g, Value loss) {
  return testing::RunTinyGpt2Steps(g, loss, 3);
}

TEST(FuseHeadLossTest, Gpt2OutputLayerBecomesOneNodeWithTheUnfusedBits) {
  auto gpt = models::BuildGpt2(testing::TinyGpt2());
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  auto t = autodiff::BuildTrainingGraph(gpt->graph, gpt->loss, {0.1f, 0.9f, 0.0f});
  ASSERT_TRUE(t.ok()) << t.status();
  auto apart = passes::Fuse(*t, {t->loss}, {.whole_mlp_step = false});
  ASSERT_TRUE(apart.ok()) << apart.status();
  EXPECT_EQ(Count(apart->training.graph, "head_loss_chunks"), 0);
  EXPECT_EQ(Count(apart->training.graph, "softmax_cross_entropy_with_grad"), 1);
  const testing::CpuSteps plain = RunCpu(apart->training.graph, apart->training.loss);
  // Three slices do not divide the 16 rows: 5, 5 and 6.
  for (const int chunks : {2, 3}) {
    SCOPED_TRACE(chunks);
    auto fused = passes::Fuse(*t, {t->loss}, {.whole_mlp_step = false, .head_loss_chunks = chunks});
    ASSERT_TRUE(fused.ok()) << fused.status();
    const Graph& g = fused->training.graph;
    ASSERT_EQ(Count(g, "head_loss_chunks"), 1);
    EXPECT_EQ(Count(g, "softmax_cross_entropy_with_grad"), 0);
    EXPECT_EQ(Count(g, "matmul"), Count(apart->training.graph, "matmul") - 2);
    for (const Node& n : g.nodes()) {
      if (n.op != &ops::HeadLossChunksOp()) continue;
      EXPECT_EQ(std::get<int64_t>(n.attrs.at(ops::kHeadLossChunksAttr)), chunks);
      EXPECT_EQ(std::get<int64_t>(n.attrs.at("classes")), kVocab);  // Of the padded 128.
      ASSERT_EQ(n.outputs.size(), 3u);
      EXPECT_EQ(n.outputs[1].shape, (Shape{kRows, 128}));
      EXPECT_EQ(n.outputs[2].shape, (Shape{kRows, 16}));
      EXPECT_THAT(n.name, HasSubstr("lm_head"));
    }
    const testing::CpuSteps merged = RunCpu(g, fused->training.loss);
    EXPECT_EQ(plain.first, merged.first);
    for (const auto& [name, values] : plain.second) {
      EXPECT_EQ(values, merged.second.at(name)) << name;
    }
  }
}

// In a bfloat16 plan the reference rounds the logits and their gradient as the unfused nodes
// store them: the same bits.
TEST(FuseHeadLossTest, BFloat16PlanKeepsTheUnfusedBits) {
  auto gpt = models::BuildGpt2(testing::TinyGpt2());
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  std::vector<testing::CpuSteps> runs;
  for (const int chunks : {0, 2}) {
    TrainOptions options;
    options.numerics.compute_dtype = DType::kBFloat16;
    options.kernels.head_loss_chunks = chunks;
    passes::CompileOptions compile = CompileOptionsFor(options, codegen::MlpStepTarget{});
    auto step = passes::CompileStep(gpt->graph, gpt->loss, compile);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(Count(step->plan.graph(), "head_loss_chunks"), chunks > 1 ? 1 : 0);
    runs.push_back(RunCpu(step->plan.graph(), step->plan.training.loss));
  }
  EXPECT_EQ(runs[0].first, runs[1].first);
  for (const auto& [name, values] : runs[0].second) {
    EXPECT_EQ(values, runs[1].second.at(name)) << name;
  }
}

// Chosen (-1, the default): two slices from head_loss_chunks_min_elements logits on, apart
// below. The tiny model's logits hold kRows * 128 (its padded vocabulary) elements.
TEST(FuseHeadLossTest, ChosenSlicesFollowTheLogitsSize) {
  auto gpt = models::BuildGpt2(testing::TinyGpt2());
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  auto t = autodiff::BuildTrainingGraph(gpt->graph, gpt->loss, {0.1f, 0.9f, 0.0f});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(passes::FuseOptions{}.head_loss_chunks, -1);
  EXPECT_EQ(TrainOptions{}.kernels.head_loss_chunks, -1);
  for (const int64_t min_elements : {kRows * 128, kRows * 128 + 1}) {
    SCOPED_TRACE(min_elements);
    auto fused = passes::Fuse(*t, {t->loss},
                              {.whole_mlp_step = false,
                               .head_loss_chunks = -1,
                               .head_loss_chunks_min_elements = min_elements});
    ASSERT_TRUE(fused.ok()) << fused.status();
    const bool sliced = min_elements <= kRows * 128;
    EXPECT_EQ(Count(fused->training.graph, "head_loss_chunks"), sliced ? 1 : 0);
    for (const Node& n : fused->training.graph.nodes()) {
      if (n.op != &ops::HeadLossChunksOp()) continue;
      EXPECT_EQ(std::get<int64_t>(n.attrs.at(ops::kHeadLossChunksAttr)), 2);
    }
  }
  // At the default threshold the tiny model stays apart.
  auto apart = passes::Fuse(*t, {t->loss}, {.whole_mlp_step = false});
  ASSERT_TRUE(apart.ok()) << apart.status();
  EXPECT_EQ(Count(apart->training.graph, "head_loss_chunks"), 0);
}

// The logits' place is written over by their gradient: fetched logits keep the nodes apart.
TEST(FuseHeadLossTest, FetchedLogitsStayApart) {
  auto gpt = models::BuildGpt2(testing::TinyGpt2());
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  auto t = autodiff::BuildTrainingGraph(gpt->graph, gpt->loss, {0.1f, 0.9f, 0.0f});
  ASSERT_TRUE(t.ok()) << t.status();
  auto fused =
      passes::Fuse(*t, {t->loss, gpt->logits}, {.whole_mlp_step = false, .head_loss_chunks = 2});
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(Count(fused->training.graph, "head_loss_chunks"), 0);
}

TEST(FuseHeadLossTest, ShapeRuleAndOptionsRefuseWhatCannotRun) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{6, 8}});
  Value w = *g.AddInput("w", {Shape{16, 8}});
  Value narrow = *g.AddInput("narrow", {Shape{16, 4}});
  Value labels = *g.AddInput("labels", {Shape{6}, DType::kInt32});
  Value dloss = *g.AddInput("dloss", {Shape{}});
  const Attrs two = {{ops::kHeadLossChunksAttr, int64_t{2}}};
  auto ok = g.AddOp(ops::HeadLossChunksOp(), "ok", {x, w, labels, dloss}, two);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(g.spec((*ok)[1]).shape, (Shape{6, 16}));
  EXPECT_THAT(
      g.AddOp(ops::HeadLossChunksOp(), "head", {x, narrow, labels, dloss}, two).status().message(),
      AllOf(HasSubstr("head"), HasSubstr("[classes, 8]")));
  EXPECT_THAT(g.AddOp(ops::HeadLossChunksOp(), "many", {x, w, labels, dloss},
                      {{ops::kHeadLossChunksAttr, int64_t{7}}})
                  .status()
                  .message(),
              HasSubstr("chunks must be in [1, 6]"));
  EXPECT_FALSE(g.AddOp(ops::HeadLossChunksOp(), "none", {x, w, labels, dloss}).ok());
  EXPECT_FALSE(g.AddOp(ops::HeadLossChunksOp(), "labels", {x, w, dloss, dloss}, two).ok());

  for (const int chunks : {-2, 65}) {
    TrainOptions options;
    options.kernels.head_loss_chunks = chunks;
    EXPECT_THAT(ValidateTrainOptions(options).message(),
                HasSubstr("kernels.head_loss_chunks must be -1 (chosen) or in [0, 64]"));
  }
}

}  // namespace
}  // namespace reprise
