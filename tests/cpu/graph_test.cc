// Building graphs: shape and dtype inference, and the errors users see for bad input.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "src/ops/ops.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(GraphTest, LinearInfersShapeAndCreatesNamedParameters) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{32, 100}});
  auto y = nn::Linear(g, x, 64, "fc");
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(g.spec(*y).ToString(), "f32[32, 64]");
  EXPECT_EQ(g.spec({*g.FindNode("fc.weight"), 0}).ToString(), "f32[64, 100]");
  EXPECT_EQ(g.spec({*g.FindNode("fc.bias"), 0}).ToString(), "f32[64]");
  EXPECT_EQ(g.NumParameterElements(), 64 * 100 + 64);
}

TEST(GraphTest, MatmulInnerDimensionMismatchNamesOpNodeAndBothShapes) {
  Graph g;
  Value a = *g.AddInput("a", {Shape{8, 5}});
  Value b = *g.AddInput("b", {Shape{6, 3}});
  auto c = g.AddOp1(ops::MatmulOp(), "proj", {a, b});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), AllOf(HasSubstr("matmul"), HasSubstr("proj"),
                                          HasSubstr("f32[8, 5]"), HasSubstr("f32[6, 3]")));
}

TEST(GraphTest, BiasOfWrongLengthIsRejected) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{4, 3}});
  Value b = *g.AddInput("b", {Shape{5}});
  auto y = g.AddOp1(ops::BiasAddOp(), "add_bias", {x, b});
  EXPECT_THAT(y.status().message(),
              AllOf(HasSubstr("add_bias"), HasSubstr("f32[5]"), HasSubstr("f32[4, 3]")));
}

TEST(GraphTest, LossRejectsFloatLabelsAndBatchMismatch) {
  Graph g;
  Value z = *g.AddInput("z", {Shape{4, 3}});
  Value float_labels = *g.AddInput("fl", {Shape{4}});
  EXPECT_THAT(nn::SoftmaxCrossEntropy(g, z, float_labels, "loss").status().message(),
              AllOf(HasSubstr("softmax_cross_entropy"), HasSubstr("i32")));
  Value short_labels = *g.AddInput("sl", {Shape{3}, DType::kInt32});
  EXPECT_THAT(nn::SoftmaxCrossEntropy(g, z, short_labels, "loss2").status().message(),
              AllOf(HasSubstr("i32[3]"), HasSubstr("f32[4, 3]")));
}

TEST(GraphTest, LinearOnRankOneInputIsRejected) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{7}});
  auto y = nn::Linear(g, x, 3, "fc");
  EXPECT_THAT(y.status().message(), AllOf(HasSubstr("fc"), HasSubstr("f32[7]")));
}

TEST(GraphTest, DuplicateNamesAndUnknownNamesAreErrors) {
  Graph g;
  ASSERT_TRUE(g.AddInput("x", {Shape{2}}).ok());
  EXPECT_EQ(g.AddInput("x", {Shape{2}}).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(g.FindNode("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(GraphTest, ValueFromAnotherGraphIsRejected) {
  Graph g, other;
  Value x = *other.AddInput("x", {Shape{2, 2}});
  Value y = *other.AddInput("y", {Shape{2, 2}});
  auto z = g.AddOp1(ops::AddOp(), "sum", {x, y});
  EXPECT_EQ(z.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(z.status().message(), HasSubstr("not in this graph"));
}

TEST(GraphTest, NonPositiveExtentsAndBadMlpConfigsAreRejected) {
  Graph g;
  EXPECT_THAT(g.AddInput("x", {Shape{0, 3}}).status().message(), HasSubstr("[0, 3]"));
  EXPECT_FALSE(models::BuildMlp({.batch = 0}).ok());
  EXPECT_FALSE(models::BuildMlp({.classes = 1}).ok());
}

TEST(GraphTest, MlpHasExpectedLayersAndPrints) {
  auto mlp =
      models::BuildMlp({.batch = 8, .input_features = 4, .depth = 2, .width = 16, .classes = 3});
  ASSERT_TRUE(mlp.ok());
  EXPECT_EQ(mlp->graph.spec(mlp->logits).ToString(), "f32[8, 3]");
  EXPECT_EQ(mlp->graph.spec(mlp->loss).ToString(), "f32[]");
  EXPECT_THAT(mlp->graph.ToString(), HasSubstr("fc2.matmul = matmul(fc1.relu, fc2.weight)"));
}

}  // namespace
}  // namespace reprise
