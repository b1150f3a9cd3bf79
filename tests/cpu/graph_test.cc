// Building graphs: shape and dtype inference, and the errors users see for bad input.
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A value carries the graph that made it: another graph refuses it (its number would name some
// other node there), a copy of the graph takes it, and so does a value written by hand.
TEST(GraphTest, ValuesOfAnotherGraphAreRefused) {
  Graph a, b;
  const Value x = *a.AddInput("x", {Shape{4, 8}});
  const Value y = *b.AddInput("y", {Shape{4, 3}});
  EXPECT_NE(a.id(), b.id());
  auto foreign = nn::Linear(b, x, 16, "fc");
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(foreign.status().message(),
              HasSubstr("the value (node 0, output 0) was made by another graph"));
  EXPECT_EQ(b.num_nodes(), 1);  // Nothing of the failed layer stayed.
  EXPECT_FALSE(b.SpecOf(x).ok());
  EXPECT_FALSE(b.AddOp1(ops::ReluOp(), "r", {x}).ok());
  Graph copy = a;
  EXPECT_EQ(copy.id(), a.id());
  ASSERT_TRUE(nn::Linear(copy, x, 16, "fc").ok());
  ASSERT_TRUE(b.AddOp1(ops::ReluOp(), "r", {Value{y.node, y.output}}).ok());
  EXPECT_EQ(x, (Value{0, 0}));  // Equality and hashing ignore the graph.
}

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

TEST(GraphTest, ValueOfANodeTheGraphLacksIsRejected) {
  Graph g;
  auto z = g.AddOp1(ops::ReluOp(), "r", {Value{3, 0}});
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

TEST(GraphTest, InputsWhoseCountOrSizeWrapsAreRefusedNamingTheInput) {
  Graph g;
  auto square = g.AddInput("x", {Shape{int64_t{1} << 32, int64_t{1} << 32}});
  EXPECT_EQ(square.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(square.status().message(),
              AllOf(HasSubstr("input 'x'"), HasSubstr("[4294967296, 4294967296]")));
  auto wide = g.AddInput("y", {Shape{std::numeric_limits<int64_t>::max(), 2}});
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wide.status().message(), HasSubstr("input 'y'"));
  // 2^62 elements count, but not their bytes as f32.
  auto bytes = g.AddParameter("w", {Shape{int64_t{1} << 62, 4}}, Initializer::Zeros());
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bytes.status().message(), HasSubstr("parameter 'w'"));
  EXPECT_EQ(g.num_nodes(), 0);
}

TEST(GraphTest, RollBackRemovesNodesNamesAndControlEdgesAddedSinceTheMark) {
  Graph g;
  const Value a = *g.AddInput("a", {Shape{2}});
  const Value w = *g.AddParameter("w", {Shape{2}}, Initializer::Zeros());
  const Value r = *nn::Relu(g, a, "r");
  ASSERT_TRUE(g.AddControlEdge(a.node, r.node).ok());
  const std::string before = g.ToString();
  const Graph::Mark mark = g.GetMark();
  ASSERT_TRUE(g.AddControlEdge(w.node, r.node).ok());  // An edge onto a node from before.
  ASSERT_TRUE(nn::Add(g, r, w, "sum").ok());
  g.RollBack(mark);
  EXPECT_EQ(g.ToString(), before);
  EXPECT_EQ(g.node(r.node).control_inputs, std::vector<int32_t>{a.node});
  EXPECT_FALSE(g.FindNode("sum").ok());
  EXPECT_TRUE(nn::Add(g, r, w, "sum").ok());  // The name is free again.
}

TEST(GraphTest, TransactionalKeepsWhatSucceedsAndUndoesWhatFails) {
  Graph g;
  const Value a = *g.AddInput("a", {Shape{2}});
  const auto failed = Transactional(g, [&]() -> absl::StatusOr<Value> {
    RETURN_IF_ERROR(nn::Relu(g, a, "r1").status());
    return absl::InvalidArgumentError("the second step fails");
  });
  EXPECT_EQ(failed.status().message(), "the second step fails");
  EXPECT_EQ(g.num_nodes(), 1);
  const auto kept = Transactional(g, [&] { return nn::Relu(g, a, "r1"); });
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(g.num_nodes(), 2);
}

}  // namespace
}  // namespace reprise
