// layer_norm and layer_norm_grad: shape and dtype rules with messages naming the node, the CPU
// reference against values worked out by hand, gradients against central finite differences in
// float64, and mixed precision keeping the parameters and statistics float32.
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/nn.h"
#include "src/ir/reference_executor.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/ops.h"
#include "src/ops/transformer_ops.h"
#include "src/passes/mixed_precision.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using testing::ExpectGradientsMatchFiniteDifferences;
using ::testing::HasSubstr;
using testing::TestInit;

TEST(LayerNormTest, ShapeAndDTypeErrorsNameTheNode) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{3, 4}});
  Value w4 = *g.AddParameter("w4", {Shape{4}}, Initializer::Zeros());
  Value w5 = *g.AddParameter("w5", {Shape{5}}, Initializer::Zeros());
  Value ids = *g.AddInput("ids", {Shape{3, 4}, DType::kInt32});
  EXPECT_THAT(g.AddOp(ops::LayerNormOp(), "ln_a", {x, w5, w4}).status().message(),
              HasSubstr("node 'ln_a': weight must be f32[4]"));
  EXPECT_THAT(g.AddOp(ops::LayerNormOp(), "ln_b", {ids, w4, w4}).status().message(),
              AllOf(HasSubstr("ln_b"), HasSubstr("x must be a float tensor")));
  EXPECT_THAT(
      g.AddOp(ops::LayerNormOp(), "ln_c", {x, w4, w4}, {{"epsilon", -1.0}}).status().message(),
      AllOf(HasSubstr("ln_c"), HasSubstr("epsilon must be finite and non-negative")));
  EXPECT_THAT(g.AddOp(ops::LayerNormOp(), "ln_d", {x, w4}).status().message(),
              AllOf(HasSubstr("ln_d"), HasSubstr("takes 3 inputs")));
  auto ln = g.AddOp(ops::LayerNormOp(), "ln", {x, w4, w4});
  ASSERT_TRUE(ln.ok()) << ln.status();
  EXPECT_EQ((*ln)[1].valid(), true);
  EXPECT_EQ(g.spec((*ln)[1]).ToString(), "f32[3]");
  Value dy_bad = *g.AddInput("dy_bad", {Shape{4, 3}});
  EXPECT_THAT(g.AddOp(ops::LayerNormGradOp(), "ln_grad", {dy_bad, x, w4, (*ln)[1], (*ln)[2]})
                  .status()
                  .message(),
              AllOf(HasSubstr("ln_grad"), HasSubstr("dy f32[4, 3] must match x f32[3, 4]")));
  EXPECT_THAT(
      g.AddOp(ops::LayerNormGradOp(), "ln_grad2", {x, x, w4, (*ln)[1], w4}).status().message(),
      AllOf(HasSubstr("ln_grad2"), HasSubstr("rstd must be f32[3]")));
}

// Row 0: mean 2.5, biased variance 1.25, + epsilon 0.75 = 2, so x̂ = (-1.5, -0.5, 0.5, 1.5)/√2.
// Row 1 is constant: x̂ = 0, y = bias.
TEST(LayerNormTest, ForwardMatchesHandComputedValues) {
  for (bool float64 : {false, true}) {
    Graph g;
    Value x = *g.AddInput("x", {Shape{2, 1, 4}});
    Value w = *g.AddParameter("w", {Shape{4}}, Initializer::Zeros());
    Value b = *g.AddParameter("b", {Shape{4}}, Initializer::Zeros());
    auto out = g.AddOp(ops::LayerNormOp(), "ln", {x, w, b}, {{"epsilon", 0.75}});
    ASSERT_TRUE(out.ok()) << out.status();
    ir::ReferenceExecutor exec(g, float64, 1);
    ASSERT_TRUE(exec.SetLeaf("x", std::vector<double>{1, 2, 3, 4, 2, 2, 2, 2}).ok());
    ASSERT_TRUE(exec.SetLeaf("w", std::vector<double>{1, 2, 1, -1}).ok());
    ASSERT_TRUE(exec.SetLeaf("b", std::vector<double>{0, 0.5, 0, 1}).ok());
    ASSERT_TRUE(exec.Run().ok());
    const double r = 1 / std::sqrt(2.0);
    const std::vector<double> want = {
        -1.5 * r, -0.5 * r * 2 + 0.5, 0.5 * r, -1.5 * r + 1, 0, 0.5, 0, 1};
    auto read = [&](Value v, int i) {
      ir::HostTensor* t = *exec.Tensor(v);
      return float64 ? t->data<double>()[i] : t->data<float>()[i];
    };
    const double tol = float64 ? 1e-12 : 1e-6;
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(read((*out)[0], i), want[i], tol) << i;
    EXPECT_NEAR(read((*out)[1], 0), 2.5, tol);
    EXPECT_NEAR(read((*out)[1], 1), 2.0, tol);
    EXPECT_NEAR(read((*out)[2], 0), r, tol);
    EXPECT_NEAR(read((*out)[2], 1), 1 / std::sqrt(0.75), tol);
  }
}

// One row, weight 1: dx = rstd·(dy - mean(dy) - x̂·mean(dy·x̂)); dweight = Σ dy·x̂, dbias = Σ dy.
TEST(LayerNormTest, GradientMatchesHandComputedValues) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{1, 2}});
  Value dy = *g.AddInput("dy", {Shape{1, 2}});
  Value w = *g.AddParameter("w", {Shape{2}}, Initializer::Constant(1));
  Value b = *g.AddParameter("b", {Shape{2}}, Initializer::Zeros());
  auto fwd = g.AddOp(ops::LayerNormOp(), "ln", {x, w, b}, {{"epsilon", 0.0}});
  ASSERT_TRUE(fwd.ok());
  auto grad = g.AddOp(ops::LayerNormGradOp(), "ln_grad", {dy, x, w, (*fwd)[1], (*fwd)[2]},
                      {{"epsilon", 0.0}});
  ASSERT_TRUE(grad.ok()) << grad.status();
  ir::ReferenceExecutor exec(g, true, 1);
  // x = (0, 2): mean 1, var 1, rstd 1, x̂ = (-1, 1). dy = (3, 1): mean 2, mean(dy·x̂) = -1.
  ASSERT_TRUE(exec.SetLeaf("x", std::vector<double>{0, 2}).ok());
  ASSERT_TRUE(exec.SetLeaf("dy", std::vector<double>{3, 1}).ok());
  ASSERT_TRUE(exec.Run().ok());
  auto dx = (*exec.Tensor((*grad)[0]))->data<double>();
  auto dw = (*exec.Tensor((*grad)[1]))->data<double>();
  auto db = (*exec.Tensor((*grad)[2]))->data<double>();
  EXPECT_DOUBLE_EQ(dx[0], 3 - 2 - (-1) * (-1));  // 0
  EXPECT_DOUBLE_EQ(dx[1], 1 - 2 - 1 * (-1));     // 0
  EXPECT_DOUBLE_EQ(dw[0], -3);
  EXPECT_DOUBLE_EQ(dw[1], 1);
  EXPECT_DOUBLE_EQ(db[0], 3);
  EXPECT_DOUBLE_EQ(db[1], 1);
}

TEST(LayerNormTest, GradientsMatchFiniteDifferences) {
  Graph g;
  Value x = *g.AddParameter("x", {Shape{4, 3}}, TestInit());
  Value w = *g.AddParameter("w", {Shape{3}}, TestInit());
  Value b = *g.AddParameter("b", {Shape{3}}, TestInit());
  Value y = (*g.AddOp(ops::LayerNormOp(), "ln", {x, w, b}, {{"epsilon", 1e-3}}))[0];
  Value labels = *g.AddInput("labels", {Shape{4}, DType::kInt32});
  Value loss = *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {y, labels});
  ExpectGradientsMatchFiniteDifferences(g, loss, {2, 0, 1, 2}, 11);
}

// What the GPU lowerings cannot run is refused before they touch a device, naming the node.
TEST(LayerNormTest, GpuLoweringRefusesWhatItCannotRunNamingTheNode) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{64, 16}, DType::kFloat64});
  Value w = *g.AddInput("w", {Shape{16}, DType::kFloat64});
  auto fwd = g.AddOp(ops::LayerNormOp(), "ln", {x, w, w});
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  auto grad = g.AddOp(ops::LayerNormGradOp(), "ln.grad", {x, x, w, (*fwd)[1], (*fwd)[2]});
  ASSERT_TRUE(grad.ok()) << grad.status();
  ops::LoweringContext ctx;
  ctx.input_specs = {g.spec(x), g.spec(w), g.spec(w)};
  ctx.inputs = {nullptr, nullptr, nullptr};
  ctx.outputs = {nullptr, nullptr, nullptr};
  const Node& ln = g.node((*fwd)[0].node);
  absl::Status s = ln.op->lower(ctx, ln).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("node 'ln'"), HasSubstr("f64[64, 16]")));
  // float32 data, but no workspace for the parameter gradients' partial sums.
  Graph h;
  Value x32 = *h.AddInput("x", {Shape{64, 16}});
  Value w32 = *h.AddParameter("w", {Shape{16}}, Initializer::Zeros());
  Value m32 = *h.AddInput("m", {Shape{64}});
  auto grad32 = h.AddOp(ops::LayerNormGradOp(), "ln.grad", {x32, x32, w32, m32, m32});
  ASSERT_TRUE(grad32.ok()) << grad32.status();
  ctx.input_specs = {h.spec(x32), h.spec(x32), h.spec(w32), h.spec(m32), h.spec(m32)};
  ctx.inputs.assign(5, nullptr);
  const Node& node = h.node((*grad32)[0].node);
  s = node.op->lower(ctx, node).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("node 'ln.grad'"), HasSubstr("bytes of scratch")));
}

TEST(LayerNormTest, BuilderAddsPyTorchNamedParameters) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{2, 5, 8}});
  auto y = nn::LayerNorm(g, x, "ln_f");
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(g.spec(*y).ToString(), "f32[2, 5, 8]");
  const Node& w = g.node(*g.FindNode("ln_f.weight"));
  EXPECT_EQ(w.outputs[0].ToString(), "f32[8]");
  EXPECT_EQ(w.init.kind, Initializer::Kind::kConstant);
  EXPECT_EQ(w.init.value, 1.0);
  EXPECT_EQ(g.node(*g.FindNode("ln_f.bias")).outputs[0].ToString(), "f32[8]");
}

TEST(LayerNormTest, MixedPrecisionKeepsParametersAndStatisticsFloat32) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{4, 8}});
  Value y = *nn::LayerNorm(g, x, "ln");
  Value labels = *g.AddInput("labels", {Shape{4}, DType::kInt32});
  Value loss = *nn::SoftmaxCrossEntropy(g, *nn::Linear(g, y, 3, "fc"), labels, "loss");
  auto mixed = passes::ConvertToMixedPrecision(g, loss, {}, DType::kBFloat16);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  const Node& ln = mixed->graph.node(*mixed->graph.FindNode("ln"));
  EXPECT_EQ(mixed->graph.spec(ln.inputs[0]).dtype, DType::kBFloat16);
  EXPECT_EQ(mixed->graph.spec(ln.inputs[1]).dtype, DType::kFloat32);
  EXPECT_EQ(mixed->graph.spec(ln.inputs[2]).dtype, DType::kFloat32);
  EXPECT_EQ(ln.outputs[0].dtype, DType::kBFloat16);
  EXPECT_EQ(ln.outputs[1].dtype, DType::kFloat32);
  auto training = autodiff::BuildBackward(mixed->graph, mixed->loss);
  ASSERT_TRUE(training.ok()) << training.status();
  const Node& grad = training->graph.node(*training->graph.FindNode("ln.grad"));
  EXPECT_EQ(grad.outputs[0].dtype, DType::kBFloat16);
  EXPECT_EQ(grad.outputs[1].dtype, DType::kFloat32);
  EXPECT_EQ(grad.outputs[2].dtype, DType::kFloat32);
}

}  // namespace
}  // namespace reprise
