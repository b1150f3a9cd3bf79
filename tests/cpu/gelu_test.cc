// gelu and gelu_grad: shape rules, the CPU reference against PyTorch's tanh-form values, gradients
// against central finite differences in float64, and the fuse pass chaining both into generated
// pointwise kernels whose reference gives the unfused step's bits.
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/nn.h"
#include "src/codegen/gelu_kernels.h"
#include "src/ir/reference_executor.h"
#include "src/ops/fused_pointwise.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/ops.h"
#include "src/ops/transformer_ops.h"
#include "src/passes/fuse.h"
#include "src/runtime/kernel_store.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(GeluTest, ShapeErrorsNameTheNode) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{3, 4}});
  Value y = *g.AddInput("y", {Shape{4, 3}});
  Value ids = *g.AddInput("ids", {Shape{3}, DType::kInt32});
  EXPECT_THAT(nn::Gelu(g, ids, "act").status().message(),
              AllOf(HasSubstr("node 'act'"), HasSubstr("x must be a float tensor")));
  EXPECT_THAT(g.AddOp1(ops::GeluGradOp(), "act_grad", {y, x}).status().message(),
              AllOf(HasSubstr("node 'act_grad'"), HasSubstr("dy f32[4, 3] must match x")));
}

// Values of torch.nn.functional.gelu(x, approximate='tanh') and of its derivative.
TEST(GeluTest, MatchesPyTorchTanhFormValues) {
  for (bool float64 : {false, true}) {
    Graph g;
    Value x = *g.AddInput("x", {Shape{6}});
    Value dy = *g.AddInput("dy", {Shape{6}});
    Value y = *nn::Gelu(g, x, "gelu");
    Value dx = *g.AddOp1(ops::GeluGradOp(), "gelu_grad", {dy, x});
    ir::ReferenceExecutor exec(g, float64, 1);
    ASSERT_TRUE(exec.SetLeaf("x", std::vector<double>{1, -1, 2, -3, 0.5, 0}).ok());
    ASSERT_TRUE(exec.SetLeaf("dy", std::vector<double>{1, 2, 1, 1, 1, 3}).ok());
    ASSERT_TRUE(exec.Run().ok());
    auto read = [&](Value v, int i) {
      ir::HostTensor* t = *exec.Tensor(v);
      return float64 ? t->data<double>()[i] : t->data<float>()[i];
    };
    const double tol = float64 ? 1e-12 : 1e-6;
    const std::vector<double> want = {0.8411919906082768,  -0.15880800939172324,
                                      1.954597694087775,   -0.0036373920817729943,
                                      0.34571400982514394, 0};
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(read(y, i), want[i], tol) << i;
    EXPECT_NEAR(read(dx, 0), 1.0829640838457826, tol);  // gelu'(1)
    EXPECT_NEAR(read(dx, 5), 3 * 0.5, tol);             // 3·gelu'(0)
  }
}

TEST(GeluTest, GradientMatchesFiniteDifferences) {
  Graph g;
  Value x = *g.AddParameter("x", {Shape{4, 3}}, Initializer::Uniform(-3, 3));
  Value labels = *g.AddInput("labels", {Shape{4}, DType::kInt32});
  Value loss = *nn::SoftmaxCrossEntropy(g, *nn::Gelu(g, x, "gelu"), labels, "loss");
  testing::ExpectGradientsMatchFiniteDifferences(g, loss, {2, 0, 1, 2}, 12);
}

// x -> fc -> gelu -> + x -> out -> loss: the forward's gelu and add form one chain, the backward's
// gelu_grad another (with fc's bias gradient as its column sum).
TEST(GeluTest, FusePassChainsGeluAndItsGradientWithTheStepsBits) {
  Graph g;
  Value x = *g.AddInput("features", {Shape{8, 6}});
  Value h = *nn::Gelu(g, *nn::Linear(g, x, 6, "fc"), "gelu");
  Value s = *nn::Add(g, h, x, "residual");
  Value labels = *g.AddInput("labels", {Shape{8}, DType::kInt32});
  Value loss = *nn::SoftmaxCrossEntropy(g, *nn::Linear(g, s, 4, "out"), labels, "loss");
  auto training = autodiff::BuildTrainingGraph(g, loss, {.learning_rate = 0.1f});
  ASSERT_TRUE(training.ok()) << training.status();
  passes::FuseOptions options;
  options.whole_mlp_step = false;
  auto fused = passes::Fuse(*training, {training->loss}, options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  bool forward = false, backward = false;
  for (const Node& n : fused->training.graph.nodes()) {
    if (n.op != &ops::FusedPointwiseOp()) continue;
    const std::string steps = std::get<std::string>(n.attrs.at("steps"));
    forward = forward || (absl::StrContains(steps, "gelu:") && absl::StrContains(steps, "add:"));
    backward = backward || absl::StrContains(steps, "gelu_grad:");
    auto kernel = ops::FusedPointwiseKernel(n);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    auto compiled = runtime::CompileWithNvrtc(*kernel, "sm_90");
    EXPECT_TRUE(compiled.ok()) << n.name << ": " << compiled.status();
  }
  EXPECT_TRUE(forward);
  EXPECT_TRUE(backward);
  // The fused chains' reference runs each step's own reference: the same bits as unfused.
  ir::ReferenceExecutor plain(training->graph, false, 5), merged(fused->training.graph, false, 5);
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> uniform(-2, 2);
  for (int step = 0; step < 3; ++step) {
    std::vector<double> features(48);
    for (double& v : features) v = uniform(rng);
    const std::vector<int32_t> l = {0, 1, 2, 3, 3, 2, 1, 0};
    for (ir::ReferenceExecutor* exec : {&plain, &merged}) {
      ASSERT_TRUE(exec->SetLeaf("features", features).ok());
      ASSERT_TRUE(exec->SetLeaf("labels", l).ok());
      ASSERT_TRUE(exec->Run().ok());
    }
    EXPECT_EQ((*plain.Tensor(training->loss))->data<float>()[0],
              (*merged.Tensor(fused->training.loss))->data<float>()[0]);
  }
}

TEST(GeluTest, KernelsCompileForSm90) {
  for (const codegen::GeneratedKernel& kernel : codegen::GeluKernels()) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
  }
}

}  // namespace
}  // namespace reprise
