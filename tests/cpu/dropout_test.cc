// Dropout on the CPU reference: the Philox generator against its published test vectors, the
// drop rate and scaling, gradients by finite differences, and masks that change every training
// step and repeat for the same seed.
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/nn.h"
#include "src/autodiff/autodiff.h"
#include "src/codegen/random_kernels.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

// Known-answer vectors of Philox4x32-10 from the Random123 distribution.
TEST(PhiloxTest, MatchesPublishedVectors) {
  using A4 = std::array<uint32_t, 4>;
  EXPECT_EQ(codegen::Philox4x32({0, 0, 0, 0}, {0, 0}),
            (A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(codegen::Philox4x32({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(codegen::Philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                                {0xa4093822, 0x299f31d0}),
            (A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// x (ones) -> dropout; returns the executor's output after one run at the given step.
std::vector<float> DropOnes(int64_t n, double rate, uint64_t seed, int32_t step) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{n}}, Initializer::Constant(1));
  Value y = *nn::Dropout(g, x, rate, "drop", seed);
  ir::ReferenceExecutor cpu(g, false, 0);
  EXPECT_TRUE(cpu.SetLeaf(autodiff::kStepCounter, std::vector<int32_t>{step, 0}).ok());
  EXPECT_TRUE(cpu.Run().ok());
  auto out = (*cpu.Tensor(y))->data<float>();
  return {out.begin(), out.end()};
}

TEST(DropoutTest, DropsAboutRateAndScalesTheRestExactly) {
  const double rate = 0.3;
  const std::vector<float> y = DropOnes(200000, rate, 7, 0);
  int64_t dropped = 0;
  for (float v : y) {
    if (v == 0) {
      ++dropped;
    } else {
      ASSERT_EQ(v, static_cast<float>(1.0 / (1.0 - rate)));
    }
  }
  EXPECT_NEAR(static_cast<double>(dropped) / y.size(), rate, 0.005);
}

TEST(DropoutTest, MasksChangeWithStepAndSeedAndRepeatOtherwise) {
  EXPECT_EQ(DropOnes(4096, 0.5, 1, 3), DropOnes(4096, 0.5, 1, 3));
  EXPECT_NE(DropOnes(4096, 0.5, 1, 3), DropOnes(4096, 0.5, 1, 4));
  EXPECT_NE(DropOnes(4096, 0.5, 1, 3), DropOnes(4096, 0.5, 2, 3));
  const std::vector<float> none = DropOnes(1000, 0.0, 1, 0);
  EXPECT_EQ(none, std::vector<float>(1000, 1.0f));
}

TEST(DropoutTest, GradientMatchesFiniteDifferences) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{4, 6}});
  Value h = *nn::Linear(g, x, 5, "fc0");
  h = *nn::Dropout(g, h, 0.4, "drop", 11);
  Value logits = *nn::Linear(g, h, 3, "fc1");
  Value labels = *g.AddInput("labels", {Shape{4}, DType::kInt32});
  Value loss = *nn::SoftmaxCrossEntropy(g, logits, labels, "loss");
  testing::ExpectGradientsMatchFiniteDifferences(g, loss, {2, 0, 1, 2}, 3);
}

TEST(DropoutTest, TrainingStepAdvancesTheCounterAfterEveryReader) {
  Graph g;
  Value x = *g.AddInput("features", {Shape{4, 6}});
  Value h = *nn::Dropout(g, *nn::Linear(g, x, 5, "fc0"), 0.5, "drop");
  Value labels = *g.AddInput("labels", {Shape{4}, DType::kInt32});
  Value loss = *nn::SoftmaxCrossEntropy(g, *nn::Linear(g, h, 3, "fc1"), labels, "loss");
  auto t = autodiff::BuildTrainingGraph(g, loss, {});
  ASSERT_TRUE(t.ok()) << t.status();
  const Node& advance = t->graph.node(*t->graph.FindNode("rng.advance"));
  EXPECT_EQ(advance.op, &ops::AdvanceStepOp());
  // After the dropout and its gradient.
  std::vector<std::string> after;
  for (int32_t c : advance.control_inputs) after.push_back(t->graph.node(c).name);
  EXPECT_THAT(after, ::testing::UnorderedElementsAre("drop", "drop.grad"));
  ir::ReferenceExecutor cpu(t->graph, false, 0);
  ASSERT_TRUE(cpu.SetLeaf("labels", std::vector<int32_t>{0, 1, 2, 0}).ok());
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(cpu.Run().ok());
  EXPECT_EQ((*cpu.Leaf(autodiff::kStepCounter))->data<int32_t>()[0], 3);
}

TEST(DropoutTest, BadRateIsAClearError) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{4}});
  EXPECT_THAT(nn::Dropout(g, x, 1.0, "drop").status().message(),
              HasSubstr("rate must be in [0, 1)"));
}

}  // namespace
}  // namespace reprise
