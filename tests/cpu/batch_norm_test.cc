// Batch normalization on the CPU reference: gradients against float64 finite differences in both
// layouts, PyTorch's running-statistics update on a hand-checked case, and the shape and
// attribute errors.
#include "src/ops/batch_norm.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/reference_executor.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using ::testing::HasSubstr;
using testing::TestInit;

Shape ImageShape(Layout layout, int64_t n, int64_t c, int64_t h, int64_t w) {
  return layout == Layout::kNCHW ? Shape{n, c, h, w} : Shape{n, h, w, c};
}

// Ends `features` in flatten -> matmul -> softmax cross-entropy over 3 classes, so that every
// gradient can be checked through one scalar. The batch is 3.
Value Loss(Graph& g, Value features) {
  Value flat = *g.AddOp1(ops::FlattenOp(), "flatten", {features});
  Value w = *g.AddParameter("head", {Shape{g.spec(flat).shape.dim(1), 3}}, TestInit());
  Value logits = *g.AddOp1(ops::MatmulOp(), "head_mm", {flat, w});
  Value labels = *g.AddInput("labels", {Shape{3}, DType::kInt32});
  return *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {logits, labels});
}

const std::vector<int32_t> kLabels = {2, 0, 1};

Attrs WithLayout(Layout layout, Attrs attrs = {}) {
  attrs["layout"] = std::string(LayoutName(layout));
  return attrs;
}

class BatchNormLayoutTest : public ::testing::TestWithParam<Layout> {};

TEST_P(BatchNormLayoutTest, TrainGradientsMatchFiniteDifferences) {
  const Layout layout = GetParam();
  Graph g;
  Value x = *g.AddParameter("x", {ImageShape(layout, 3, 4, 5, 5)}, TestInit());
  Value gamma = *g.AddParameter("gamma", {Shape{4}}, Initializer::Uniform(0.5, 1.5));
  Value beta = *g.AddParameter("beta", {Shape{4}}, TestInit());
  Value mean = *g.AddState("running_mean", {Shape{4}}, Initializer::Zeros());
  Value var = *g.AddState("running_var", {Shape{4}}, Initializer::Constant(1));
  auto bn = g.AddOp(ops::BatchNormTrainOp(), "bn", {x, gamma, beta, mean, var},
                    WithLayout(layout, {{"epsilon", 1e-3}}));
  ASSERT_TRUE(bn.ok()) << bn.status();
  ExpectGradientsMatchFiniteDifferences(g, Loss(g, (*bn)[0]), kLabels, 11);
}

TEST_P(BatchNormLayoutTest, GradientIsOneNodeAndRunningStatisticsGetNone) {
  const Layout layout = GetParam();
  Graph g;
  Value x = *g.AddInput("x", {ImageShape(layout, 3, 4, 5, 5)});
  Value gamma = *g.AddParameter("gamma", {Shape{4}}, Initializer::Constant(1));
  Value beta = *g.AddParameter("beta", {Shape{4}}, Initializer::Zeros());
  Value mean = *g.AddState("running_mean", {Shape{4}}, Initializer::Zeros());
  Value var = *g.AddState("running_var", {Shape{4}}, Initializer::Constant(1));
  auto bn = g.AddOp(ops::BatchNormTrainOp(), "bn", {x, gamma, beta, mean, var}, WithLayout(layout));
  ASSERT_TRUE(bn.ok()) << bn.status();
  auto training = autodiff::BuildBackward(g, Loss(g, (*bn)[0]));
  ASSERT_TRUE(training.ok()) << training.status();
  int grads = 0;
  for (const Node& n : training->graph.nodes()) {
    if (n.op != &ops::BatchNormGradOp()) continue;
    ++grads;
    EXPECT_EQ(n.inputs[3], (Value{bn->front().node, 1}));  // saved_mean
    EXPECT_EQ(n.inputs[4], (Value{bn->front().node, 2}));  // saved_invstd
  }
  EXPECT_EQ(grads, 1);
  // x is an input: only gamma, beta (and the head) have gradients, both from batch_norm_grad.
  const Value dgamma = training->gradients.at(gamma.node);
  const Value dbeta = training->gradients.at(beta.node);
  EXPECT_EQ(training->graph.node(dgamma.node).op, &ops::BatchNormGradOp());
  EXPECT_EQ(dgamma.output, 1);
  EXPECT_EQ(dbeta.output, 2);
  EXPECT_FALSE(training->gradients.contains(mean.node));
  EXPECT_FALSE(training->gradients.contains(var.node));
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, BatchNormLayoutTest,
                         ::testing::Values(Layout::kNCHW, Layout::kNHWC),
                         [](const auto& info) { return std::string(LayoutName(info.param)); });

// x [N=2, C=2, H=2, W=1] NCHW: channel 0 holds {1, 2, 3, 4} (mean 2.5, biased variance 1.25,
// unbiased 5/3), channel 1 holds {10, 10, 10, 14} (mean 11, biased 3, unbiased 4). By hand, as
// torch.nn.BatchNorm2d(2) (momentum 0.1, eps 1e-5) computes it from running_mean {0, 1} and
// running_var {1, 1}:
//   step 1: running_mean = 0.9·{0, 1} + 0.1·{2.5, 11} = {0.25, 2.0}
//           running_var  = 0.9·{1, 1} + 0.1·{5/3, 4}  = {1.0666667, 1.3}
//   step 2: running_mean = {0.475, 2.9}, running_var = {1.1266667, 1.57}
TEST(BatchNormTest, TrainUpdatesRunningStatisticsAsPyTorch) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{2, 2, 2, 1}});
  Value gamma = *g.AddParameter("gamma", {Shape{2}}, Initializer::Zeros());
  Value beta = *g.AddParameter("beta", {Shape{2}}, Initializer::Zeros());
  Value mean = *g.AddState("running_mean", {Shape{2}}, Initializer::Zeros());
  Value var = *g.AddState("running_var", {Shape{2}}, Initializer::Constant(1));
  auto bn = g.AddOp(ops::BatchNormTrainOp(), "bn", {x, gamma, beta, mean, var});
  ASSERT_TRUE(bn.ok()) << bn.status();
  ir::ReferenceExecutor cpu(g, /*float64=*/false, 0);
  ASSERT_TRUE(cpu.SetLeaf("x", std::vector<double>{1, 2, 10, 10, 3, 4, 10, 14}).ok());
  ASSERT_TRUE(cpu.SetLeaf("gamma", std::vector<double>{2, 0.5}).ok());
  ASSERT_TRUE(cpu.SetLeaf("beta", std::vector<double>{0.5, -1}).ok());
  ASSERT_TRUE(cpu.SetLeaf("running_mean", std::vector<double>{0, 1}).ok());
  auto values = [&](Value v) {
    auto span = (*cpu.Tensor(v))->data<float>();
    return std::vector<float>(span.begin(), span.end());
  };
  using ::testing::ElementsAre;
  using ::testing::FloatNear;
  ASSERT_TRUE(cpu.Run().ok());
  EXPECT_THAT(values(mean), ElementsAre(FloatNear(0.25f, 1e-6), FloatNear(2.0f, 1e-6)));
  EXPECT_THAT(values(var), ElementsAre(FloatNear(1.0666667f, 1e-6), FloatNear(1.3f, 1e-6)));
  const float invstd0 = static_cast<float>(1 / std::sqrt(1.25 + 1e-5));
  const float invstd1 = static_cast<float>(1 / std::sqrt(3 + 1e-5));
  EXPECT_THAT(values((*bn)[1]), ElementsAre(FloatNear(2.5f, 1e-6), FloatNear(11.0f, 1e-6)));
  EXPECT_THAT(values((*bn)[2]), ElementsAre(FloatNear(invstd0, 1e-6), FloatNear(invstd1, 1e-6)));
  // y = (x - mean) · invstd · gamma + beta, normalised with the biased variance.
  const std::vector<float> y = values((*bn)[0]);
  EXPECT_NEAR(y[0], (1 - 2.5) * invstd0 * 2 + 0.5, 1e-5);
  EXPECT_NEAR(y[3], (10 - 11) * invstd1 * 0.5 - 1, 1e-5);
  EXPECT_NEAR(y[7], (14 - 11) * invstd1 * 0.5 - 1, 1e-5);
  ASSERT_TRUE(cpu.Run().ok());
  EXPECT_THAT(values(mean), ElementsAre(FloatNear(0.475f, 1e-6), FloatNear(2.9f, 1e-6)));
  EXPECT_THAT(values(var), ElementsAre(FloatNear(1.1266667f, 1e-6), FloatNear(1.57f, 1e-6)));
}

TEST(BatchNormTest, MomentumWeighsTheBatchStatistics) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{4, 1, 1, 1}});
  Value gamma = *g.AddParameter("gamma", {Shape{1}}, Initializer::Constant(1));
  Value beta = *g.AddParameter("beta", {Shape{1}}, Initializer::Zeros());
  Value mean = *g.AddState("running_mean", {Shape{1}}, Initializer::Constant(1));
  Value var = *g.AddState("running_var", {Shape{1}}, Initializer::Constant(1));
  ASSERT_TRUE(g.AddOp(ops::BatchNormTrainOp(), "bn", {x, gamma, beta, mean, var},
                      {{"momentum", 0.75}, {"layout", std::string("NHWC")}})
                  .ok());
  ir::ReferenceExecutor cpu(g, /*float64=*/true, 0);
  ASSERT_TRUE(cpu.SetLeaf("x", std::vector<double>{1, 2, 3, 4}).ok());
  ASSERT_TRUE(cpu.Run().ok());
  EXPECT_NEAR((*cpu.Tensor(mean))->data<double>()[0], 0.25 * 1 + 0.75 * 2.5, 1e-12);
  EXPECT_NEAR((*cpu.Tensor(var))->data<double>()[0], 0.25 * 1 + 0.75 * 5.0 / 3.0, 1e-12);
}

TEST(BatchNormTest, InferUsesRunningStatistics) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{1, 2, 1, 2}});
  Value gamma = *g.AddParameter("gamma", {Shape{2}}, Initializer::Constant(2));
  Value beta = *g.AddParameter("beta", {Shape{2}}, Initializer::Constant(1));
  Value mean = *g.AddState("running_mean", {Shape{2}}, Initializer::Zeros());
  Value var = *g.AddState("running_var", {Shape{2}}, Initializer::Constant(1));
  Value y =
      *g.AddOp1(ops::BatchNormInferOp(), "bn", {x, gamma, beta, mean, var}, {{"epsilon", 0.0}});
  ir::ReferenceExecutor cpu(g, /*float64=*/true, 0);
  ASSERT_TRUE(cpu.SetLeaf("x", std::vector<double>{1, 2, 3, 4}).ok());
  ASSERT_TRUE(cpu.SetLeaf("running_mean", std::vector<double>{1, 2}).ok());
  ASSERT_TRUE(cpu.SetLeaf("running_var", std::vector<double>{4, 16}).ok());
  ASSERT_TRUE(cpu.Run().ok());
  auto out = (*cpu.Tensor(y))->data<double>();
  EXPECT_THAT(std::vector<double>(out.begin(), out.end()),
              ::testing::ElementsAre(1.0, 2.0, 1.5, 2.0));  // (x - m) / sqrt(v) · 2 + 1
}

// Builds x, gamma, beta and the running statistics with the given specs and adds a
// batch_norm_train node; returns its status.
absl::Status AddTrain(TensorSpec x_spec, TensorSpec gamma_spec, TensorSpec var_spec,
                      Attrs attrs = {}, bool var_is_state = true) {
  Graph g;
  Value x = *g.AddInput("x", x_spec);
  Value gamma = *g.AddParameter("gamma", gamma_spec, Initializer::Constant(1));
  Value beta = *g.AddParameter("beta", {Shape{4}}, Initializer::Zeros());
  Value mean = *g.AddState("running_mean", {Shape{4}}, Initializer::Zeros());
  Value var = var_is_state ? *g.AddState("running_var", var_spec, Initializer::Constant(1))
                           : *g.AddConstant("running_var", var_spec, Initializer::Constant(1));
  return g.AddOp(ops::BatchNormTrainOp(), "bn", {x, gamma, beta, mean, var}, attrs).status();
}

TEST(BatchNormTest, ShapeAndAttributeErrorsNameTheShapes) {
  const TensorSpec c4{Shape{4}};
  const TensorSpec x{Shape{3, 4, 5, 5}};
  auto message = [](absl::Status s) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    return std::string(s.message());
  };
  EXPECT_THAT(message(AddTrain({Shape{3, 4, 5}}, c4, c4)),
              HasSubstr("op 'batch_norm_train' node 'bn': x must have rank 4 (NCHW), got "
                        "f32[3, 4, 5]"));
  EXPECT_THAT(message(AddTrain(x, {Shape{5}}, c4)),
              HasSubstr("gamma must be f32[4] (one value per channel of x f32[3, 4, 5, 5] in "
                        "NCHW), got f32[5]"));
  // The same x read as NHWC has 5 channels.
  EXPECT_THAT(message(AddTrain(x, c4, c4, {{"layout", std::string("NHWC")}})),
              HasSubstr("gamma must be f32[5]"));
  EXPECT_THAT(message(AddTrain(x, c4, {Shape{4}, DType::kFloat64})),
              HasSubstr("running_var must be f32[4]"));
  EXPECT_THAT(message(AddTrain(x, c4, c4, {{"layout", std::string("NCWH")}})),
              HasSubstr("attribute 'layout' must be \"NCHW\" or \"NHWC\", got \"NCWH\""));
  EXPECT_THAT(message(AddTrain(x, c4, c4, {{"epsilon", -1.0}})),
              HasSubstr("epsilon must be finite and non-negative, got -1"));
  EXPECT_THAT(message(AddTrain(x, c4, c4, {{"momentum", 1.5}})),
              HasSubstr("momentum must be in [0, 1], got 1.5"));
  EXPECT_THAT(message(AddTrain({Shape{1, 4, 1, 1}}, c4, c4)),
              HasSubstr("more than one value per channel"));
  EXPECT_THAT(message(AddTrain(x, c4, c4, {}, /*var_is_state=*/false)),
              HasSubstr("only parameters and state may be written"));
  EXPECT_TRUE(AddTrain(x, c4, c4).ok());
}

TEST(BatchNormTest, GradAndInferCheckTheirInputs) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{2, 4, 3, 3}});
  Value dy = *g.AddInput("dy", {Shape{2, 4, 3, 2}});
  Value c4 = *g.AddInput("c4", {Shape{4}});
  Value c3 = *g.AddInput("c3", {Shape{3}});
  auto grad = g.AddOp(ops::BatchNormGradOp(), "bn_grad", {dy, x, c4, c4, c4});
  EXPECT_THAT(grad.status().message(),
              HasSubstr("dy f32[2, 4, 3, 2] must match x f32[2, 4, 3, 3]"));
  auto saved = g.AddOp(ops::BatchNormGradOp(), "bn_grad2", {x, x, c4, c3, c4});
  EXPECT_THAT(saved.status().message(), HasSubstr("saved_mean must be f32[4]"));
  auto infer = g.AddOp(ops::BatchNormInferOp(), "bn_infer", {x, c4, c4, c4});
  EXPECT_THAT(infer.status().message(), HasSubstr("takes 5 inputs, got 4"));
  auto ok = g.AddOp(ops::BatchNormInferOp(), "bn_infer2", {x, c4, c4, c4, c4});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(g.spec((*ok)[0]), g.spec(x));
}

TEST(BatchNormTest, GradientIntoSavedStatisticsIsUnimplemented) {
  Graph g;
  Value x = *g.AddParameter("x", {Shape{3, 4, 2, 2}}, TestInit());
  Value gamma = *g.AddParameter("gamma", {Shape{4}}, Initializer::Constant(1));
  Value beta = *g.AddParameter("beta", {Shape{4}}, Initializer::Zeros());
  Value mean = *g.AddState("running_mean", {Shape{4}}, Initializer::Zeros());
  Value var = *g.AddState("running_var", {Shape{4}}, Initializer::Constant(1));
  auto bn = *g.AddOp(ops::BatchNormTrainOp(), "bn", {x, gamma, beta, mean, var});
  Value row = *g.AddOp1(ops::ReshapeOp(), "row", {bn[1]}, {{"shape", std::string("1,4")}});
  Value w = *g.AddParameter("w", {Shape{4, 3}}, TestInit());
  Value logits = *g.AddOp1(ops::MatmulOp(), "mm", {row, w});
  Value labels = *g.AddInput("labels", {Shape{1}, DType::kInt32});
  Value loss = *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {logits, labels});
  auto training = autodiff::BuildBackward(g, loss);
  EXPECT_EQ(training.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(training.status().message(), HasSubstr("node 'bn'"));
  EXPECT_THAT(training.status().message(), HasSubstr("saved_mean or saved_invstd"));
}

// The lowerings refuse what the GPU path does not run before touching any device.
TEST(BatchNormTest, LoweringRejectsFloat64AndAMissingCudnnHandle) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{2, 4, 3, 3}});
  Value c4 = *g.AddInput("c4", {Shape{4}});
  Value y = *g.AddOp1(ops::BatchNormInferOp(), "bn_infer", {x, c4, c4, c4, c4});
  const Node& node = g.node(y.node);
  ops::LoweringContext ctx;
  ctx.input_specs = {{Shape{2, 4, 3, 3}, DType::kFloat64},
                     {Shape{4}, DType::kFloat64},
                     {Shape{4}, DType::kFloat64},
                     {Shape{4}, DType::kFloat64},
                     {Shape{4}, DType::kFloat64}};
  auto f64 = node.op->lower(ctx, node);
  EXPECT_EQ(f64.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(f64.status().message(), HasSubstr("node 'bn_infer'"));
  EXPECT_THAT(f64.status().message(), HasSubstr("float32 only, got f64[2, 4, 3, 3]"));
  for (TensorSpec& spec : ctx.input_specs) spec.dtype = DType::kFloat32;
  auto no_cudnn = node.op->lower(ctx, node);
  EXPECT_EQ(no_cudnn.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_cudnn.status().message(), HasSubstr("node 'bn_infer'"));
}

}  // namespace
}  // namespace reprise
