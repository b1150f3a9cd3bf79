// The structure autodiff builds: separate dgrad and wgrad nodes, no dgrad into the features, and
// each optimizer update ordered after every reader of its weight.
#include "src/autodiff/autodiff.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/ir/op_def.h"
#include "src/passes/schedule.h"

namespace reprise {
namespace {

TEST(AutodiffTest, MatmulGradientsAreSeparateDgradAndWgradNodes) {
  auto mlp =
      models::BuildMlp({.batch = 4, .input_features = 5, .depth = 2, .width = 6, .classes = 3});
  auto t = autodiff::BuildTrainingGraph(mlp->graph, mlp->loss, {});
  ASSERT_TRUE(t.ok()) << t.status();
  const Graph& g = t->graph;
  EXPECT_TRUE(g.FindNode("fc2.matmul.dgrad").ok());
  EXPECT_TRUE(g.FindNode("fc2.matmul.wgrad").ok());
  EXPECT_TRUE(g.FindNode("fc0.matmul.wgrad").ok());
  // The first layer's input is data: no gradient is computed for it.
  EXPECT_FALSE(g.FindNode("fc0.matmul.dgrad").ok());
  const Node& dgrad = g.node(*g.FindNode("fc1.matmul.dgrad"));
  const Node& wgrad = g.node(*g.FindNode("fc1.matmul.wgrad"));
  for (int32_t c : wgrad.control_inputs) EXPECT_NE(c, dgrad.id);
  for (int32_t c : dgrad.control_inputs) EXPECT_NE(c, wgrad.id);
  EXPECT_EQ(t->parameters.size(), 6u);
  EXPECT_EQ(t->optimizer_nodes.size(), 6u);
}

TEST(AutodiffTest, UpdatesRunAfterEveryReaderOfTheirWeight) {
  auto mlp =
      models::BuildMlp({.batch = 4, .input_features = 5, .depth = 3, .width = 6, .classes = 3});
  auto t = autodiff::BuildTrainingGraph(mlp->graph, mlp->loss, {});
  ASSERT_TRUE(t.ok());
  auto order = passes::Schedule(t->graph);
  ASSERT_TRUE(order.ok());
  std::vector<int> position(t->graph.num_nodes(), -1);
  for (size_t i = 0; i < order->size(); ++i) position[(*order)[i].node] = i;
  for (int32_t update : t->optimizer_nodes) {
    const int32_t weight = t->graph.node(update).inputs[0].node;
    for (const Node& n : t->graph.nodes()) {
      if (n.id == update) continue;
      for (const Value& v : n.inputs) {
        if (v.node == weight) {
          EXPECT_LT(position[n.id], position[update]) << n.name;
        }
      }
    }
  }
}

TEST(AutodiffTest, NonScalarLossIsRejected) {
  auto mlp =
      models::BuildMlp({.batch = 4, .input_features = 5, .depth = 1, .width = 6, .classes = 3});
  auto t = autodiff::BuildTrainingGraph(mlp->graph, mlp->logits, {});
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), ::testing::HasSubstr("f32[4, 3]"));
}

TEST(AutodiffTest, ALossThatReadsNoParameterIsRefusedWithTheReason) {
  Graph g;
  const Value x = *g.AddInput("x", {Shape{4, 3}});
  const Value labels = *g.AddInput("labels", {Shape{4}, DType::kInt32});
  ASSERT_TRUE(nn::Linear(g, x, 3, "unused").ok());  // Parameters the loss never reads.
  const Value loss = *nn::SoftmaxCrossEntropy(g, x, labels, "loss");
  const auto training = autodiff::BuildTrainingGraph(g, loss, {});
  EXPECT_EQ(training.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      training.status().message(),
      ::testing::AllOf(::testing::HasSubstr("'loss'"), ::testing::HasSubstr("unused.weight"),
                       ::testing::HasSubstr("update nothing")));
}

TEST(AutodiffTest, AGraphWithoutParametersIsRefused) {
  Graph g;
  const Value x = *g.AddInput("x", {Shape{4, 3}});
  const Value labels = *g.AddInput("labels", {Shape{4}, DType::kInt32});
  const Value loss = *nn::SoftmaxCrossEntropy(g, x, labels, "loss");
  const auto training = autodiff::BuildTrainingGraphWith(g, loss, autodiff::FromSgd({}));
  EXPECT_EQ(training.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(training.status().message(), ::testing::HasSubstr("no parameter"));
}

}  // namespace
}  // namespace reprise
