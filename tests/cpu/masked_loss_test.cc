// masked_softmax_cross_entropy: rows labelled nn::kPaddingLabel change neither the loss nor any
// gradient, so a batch padded to a shape bucket trains as the batch itself (float64 references).
#include "src/ops/masked_loss.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/nn.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kFeatures = 5, kClasses = 3;

// features [rows, 5] -> fc (3) -> loss; the masked loss or the plain one.
struct Net {
  Graph graph;
  Value loss;
};
Net Build(int64_t rows, bool masked) {
  Net n;
  Value x = *n.graph.AddInput("features", {Shape{rows, kFeatures}, DType::kFloat32});
  Value y = *n.graph.AddInput("labels", {Shape{rows}, DType::kInt32});
  Value logits = *nn::Linear(n.graph, x, kClasses, "fc");
  n.loss = masked ? *nn::MaskedSoftmaxCrossEntropy(n.graph, logits, y, "loss")
                  : *nn::SoftmaxCrossEntropy(n.graph, logits, y, "loss");
  return n;
}

// The loss and every parameter gradient, in float64.
struct Result {
  double loss = 0;
  std::vector<std::vector<double>> grads;
};
Result LossAndGradients(const Net& n, const std::vector<double>& x, const std::vector<int32_t>& y) {
  auto training = autodiff::BuildBackward(n.graph, n.loss);
  EXPECT_TRUE(training.ok()) << training.status();
  ir::ReferenceExecutor cpu(training->graph, /*float64=*/true, /*seed=*/5);
  EXPECT_TRUE(cpu.SetLeaf("features", x).ok());
  EXPECT_TRUE(cpu.SetLeaf("labels", y).ok());
  const absl::Status run = cpu.Run();
  EXPECT_TRUE(run.ok()) << run;
  Result r;
  r.loss = (*cpu.Tensor(training->loss))->data<double>()[0];
  for (int32_t p : training->parameters) {
    auto g = (*cpu.Tensor(training->gradients.at(p)))->data<double>();
    r.grads.emplace_back(g.begin(), g.end());
  }
  return r;
}

TEST(MaskedLossTest, PaddedRowsChangeNeitherLossNorGradients) {
  const std::vector<int32_t> labels = {2, 0, 1, 1, 0};
  std::vector<double> x;
  for (int i = 0; i < 5 * kFeatures; ++i) x.push_back(0.37 * ((i * 7) % 11) - 1.8);
  const Result alone = LossAndGradients(Build(5, /*masked=*/false), x, labels);
  // Padded to 8 rows with junk features: only the labels mark them.
  std::vector<double> padded_x = x;
  for (int i = 0; i < 3 * kFeatures; ++i) padded_x.push_back(5.0 - i);
  std::vector<int32_t> padded_y = labels;
  padded_y.insert(padded_y.end(), 3, nn::kPaddingLabel);
  const Result padded = LossAndGradients(Build(8, /*masked=*/true), padded_x, padded_y);
  EXPECT_NEAR(padded.loss, alone.loss, 1e-13);
  ASSERT_EQ(padded.grads.size(), alone.grads.size());
  for (size_t p = 0; p < alone.grads.size(); ++p) {
    ASSERT_EQ(padded.grads[p].size(), alone.grads[p].size());
    for (size_t i = 0; i < alone.grads[p].size(); ++i) {
      EXPECT_NEAR(padded.grads[p][i], alone.grads[p][i], 1e-13)
          << "parameter " << p << " [" << i << "]";
    }
  }
  // Unpadded, the masked loss is the plain one.
  const Result masked = LossAndGradients(Build(5, /*masked=*/true), x, labels);
  EXPECT_NEAR(masked.loss, alone.loss, 1e-13);
}

TEST(MaskedLossTest, GradientMatchesFiniteDifferencesWithPaddedRows) {
  Graph g;
  Value z = *g.AddParameter("z", {Shape{4, kClasses}}, testing::TestInit());
  Value y = *g.AddInput("labels", {Shape{4}, DType::kInt32});
  Value loss = *nn::MaskedSoftmaxCrossEntropy(g, z, y, "loss");
  testing::ExpectGradientsMatchFiniteDifferences(g, loss, {2, nn::kPaddingLabel, 0, 1}, 3);
}

TEST(MaskedLossTest, AllPaddingGivesZeroLossAndGradient) {
  Graph g;
  Value z = *g.AddParameter("z", {Shape{2, kClasses}}, testing::TestInit());
  Value y = *g.AddInput("labels", {Shape{2}, DType::kInt32});
  Value dloss = *g.AddConstant("dloss", {Shape{}}, Initializer::Constant(1));
  ASSERT_TRUE(g.AddOp1(ops::MaskedSoftmaxCrossEntropyOp(), "loss", {z, y}).ok());
  Value grad = *g.AddOp1(ops::MaskedSoftmaxCrossEntropyGradOp(), "grad", {z, y, dloss});
  ir::ReferenceExecutor cpu(g, false, 1);
  ASSERT_TRUE(cpu.SetLeaf("labels", std::vector<int32_t>{-1, -1}).ok());
  ASSERT_TRUE(cpu.Run().ok());
  EXPECT_EQ((*cpu.Tensor({*g.FindNode("loss"), 0}))->data<float>()[0], 0.0f);
  for (float v : (*cpu.Tensor(grad))->data<float>()) EXPECT_EQ(v, 0.0f);
}

TEST(MaskedLossTest, OtherLabelsOutsideTheClassesAreRefusedNamingTheRow) {
  for (int32_t bad : {-2, 3}) {
    Graph g;
    Value z = *g.AddParameter("z", {Shape{2, kClasses}}, testing::TestInit());
    Value y = *g.AddInput("labels", {Shape{2}, DType::kInt32});
    ASSERT_TRUE(g.AddOp1(ops::MaskedSoftmaxCrossEntropyOp(), "loss", {z, y}).ok());
    ir::ReferenceExecutor cpu(g, false, 1);
    ASSERT_TRUE(cpu.SetLeaf("labels", std::vector<int32_t>{0, bad}).ok());
    const absl::Status status = cpu.Run();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("of row 1")) << bad;
  }
}

TEST(MaskedLossTest, ShapesAreChecked) {
  Graph g;
  Value z = *g.AddParameter("z", {Shape{4, kClasses}}, testing::TestInit());
  Value y = *g.AddInput("labels", {Shape{3}, DType::kInt32});
  absl::StatusOr<Value> loss = nn::MaskedSoftmaxCrossEntropy(g, z, y);
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loss.status().message(), HasSubstr("do not match the batch"));
}

}  // namespace
}  // namespace reprise
