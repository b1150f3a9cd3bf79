// Every op's gradient rule, and a whole MLP's, against central finite differences in float64.
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "src/ops/ops.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using testing::TestInit;

const std::vector<int32_t> kLabels = {2, 0, 1, 2};  // Batch 4, 3 classes.

// Ends a [4, 3] value in softmax cross-entropy so that every op can be checked through a scalar.
Value Loss(Graph& g, Value logits) {
  Value labels = *g.AddInput("labels", {Shape{4}, DType::kInt32});
  return *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {logits, labels});
}

class MatmulGradientTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(MatmulGradientTest, MatchesFiniteDifferences) {
  const auto [ta, tb] = GetParam();
  Graph g;
  Value a = *g.AddParameter("a", {ta ? Shape{5, 4} : Shape{4, 5}}, TestInit());
  Value b = *g.AddParameter("b", {tb ? Shape{3, 5} : Shape{5, 3}}, TestInit());
  Value c = *g.AddOp1(ops::MatmulOp(), "mm", {a, b}, {{"transpose_a", ta}, {"transpose_b", tb}});
  ExpectGradientsMatchFiniteDifferences(g, Loss(g, c), kLabels, 1);
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, MatmulGradientTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(GradientTest, BiasAddMatchesFiniteDifferences) {
  Graph g;
  Value x = *g.AddParameter("x", {Shape{4, 3}}, TestInit());
  Value b = *g.AddParameter("b", {Shape{3}}, TestInit());
  ExpectGradientsMatchFiniteDifferences(g, Loss(g, *g.AddOp1(ops::BiasAddOp(), "", {x, b})),
                                        kLabels, 2);
}

TEST(GradientTest, ReluMatchesFiniteDifferences) {
  Graph g;
  Value x = *g.AddParameter("x", {Shape{4, 3}}, TestInit());
  ExpectGradientsMatchFiniteDifferences(g, Loss(g, *g.AddOp1(ops::ReluOp(), "", {x})), kLabels, 3);
}

TEST(GradientTest, AddWithSharedInputSumsBothContributions) {
  Graph g;
  Value x = *g.AddParameter("x", {Shape{4, 3}}, TestInit());
  Value y = *g.AddParameter("y", {Shape{4, 3}}, TestInit());
  Value s = *g.AddOp1(ops::AddOp(), "", {x, y});
  Value t = *g.AddOp1(ops::AddOp(), "", {s, x});  // x reaches the loss twice.
  ExpectGradientsMatchFiniteDifferences(g, Loss(g, t), kLabels, 4);
}

TEST(GradientTest, SoftmaxCrossEntropyMatchesFiniteDifferences) {
  Graph g;
  Value z = *g.AddParameter("z", {Shape{4, 3}}, TestInit());
  ExpectGradientsMatchFiniteDifferences(g, Loss(g, z), kLabels, 5);
}

TEST(GradientTest, ThreeLayerMlpMatchesFiniteDifferences) {
  auto mlp =
      models::BuildMlp({.batch = 4, .input_features = 5, .depth = 2, .width = 6, .classes = 3});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  ExpectGradientsMatchFiniteDifferences(mlp->graph, mlp->loss, kLabels, 6);
}

}  // namespace
}  // namespace reprise
