// Softmax cross-entropy from 16-bit logits: the shape rules (a float32 loss and dloss, the
// gradient in the logits' type), the CPU reference against a double computation of the widened
// logits, the row-per-block kernels compiling, and a bfloat16 language-model step whose plan holds
// no float32 tensor of the logits' size.
#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/nn.h"
#include "reprise/trainer.h"
#include "src/api/compile_options.h"
#include "src/codegen/loss_kernels.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/ops.h"
#include "src/passes/pipeline.h"
#include "src/runtime/kernel_store.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

constexpr DType kBf16 = DType::kBFloat16;

TEST(LossTest, SixteenBitLogitsGiveAFloat32LossAndA16BitGradient) {
  for (DType dtype : {kBf16, DType::kFloat16}) {
    Graph g;
    Value z = *g.AddInput("z", {Shape{6, 9}, dtype});
    Value labels = *g.AddInput("labels", {Shape{6}, DType::kInt32});
    Value loss = *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {z, labels});
    EXPECT_EQ(g.spec(loss), (TensorSpec{Shape{}, DType::kFloat32}));
    Value dloss = *g.AddInput("dloss", {Shape{}, DType::kFloat32});
    Value dz = *g.AddOp1(ops::SoftmaxCrossEntropyGradOp(), "grad", {z, labels, dloss});
    EXPECT_EQ(g.spec(dz), (TensorSpec{Shape{6, 9}, dtype}));
    auto both = g.AddOp(ops::SoftmaxCrossEntropyWithGradOp(), "both", {z, labels, dloss});
    ASSERT_TRUE(both.ok()) << both.status();
    EXPECT_EQ(g.spec((*both)[0]).dtype, DType::kFloat32);
    EXPECT_EQ(g.spec((*both)[1]), (TensorSpec{Shape{6, 9}, dtype}));
    // A 16-bit dloss is refused, naming what it must be.
    Value bad = *g.AddInput("bad", {Shape{}, dtype});
    EXPECT_THAT(
        g.AddOp1(ops::SoftmaxCrossEntropyGradOp(), "bad_grad", {z, labels, bad}).status().message(),
        AllOf(HasSubstr("bad_grad"), HasSubstr("dloss must be a scalar f32")));
  }
  // float32 and float64 logits keep their own type throughout.
  Graph g;
  Value z = *g.AddInput("z", {Shape{2, 3}, DType::kFloat64});
  Value labels = *g.AddInput("labels", {Shape{2}, DType::kInt32});
  EXPECT_EQ(g.spec(*g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {z, labels})).dtype,
            DType::kFloat64);
}

// The reference of a bfloat16 graph computes on the widened logits and rounds the gradient once.
TEST(LossTest, Bf16ReferenceMatchesDoubleOfTheWidenedLogits) {
  constexpr int64_t kRows = 5, kCols = 300;
  Graph g;
  Value z = *g.AddConstant("z", {Shape{kRows, kCols}, kBf16}, Initializer::Uniform(-6, 6));
  Value labels = *g.AddInput("labels", {Shape{kRows}, DType::kInt32});
  Value dloss = *g.AddConstant("dloss", {Shape{}, DType::kFloat32}, Initializer::Constant(2.0));
  auto both = g.AddOp(ops::SoftmaxCrossEntropyWithGradOp(), "xent", {z, labels, dloss});
  ASSERT_TRUE(both.ok()) << both.status();
  ir::ReferenceExecutor cpu(g, /*float64=*/false, 3);
  const std::vector<int32_t> label_values = {0, 299, 17, 150, 3};
  ASSERT_TRUE(cpu.SetLeaf("labels", label_values).ok());
  ASSERT_TRUE(cpu.Run().ok());
  const ir::HostTensor& logits = **cpu.Tensor(z);
  const ir::HostTensor& grad = **cpu.Tensor((*both)[1]);
  std::vector<double> wide(kRows * kCols), grad_wide(kRows * kCols);
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    wide[i] = ir::FloatElement(logits, i);
    grad_wide[i] = ir::FloatElement(grad, i);
  }
  double total = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < kCols; ++c) m = std::max(m, wide[r * kCols + c]);
    for (int64_t c = 0; c < kCols; ++c) s += std::exp(wide[r * kCols + c] - m);
    total += std::log(s) + m - wide[r * kCols + label_values[r]];
    for (int64_t c = 0; c < kCols; ++c) {
      const double p = std::exp(wide[r * kCols + c] - m) / s;
      const double expected = 2.0 / kRows * (p - (c == label_values[r] ? 1.0 : 0.0));
      EXPECT_NEAR(grad_wide[r * kCols + c], expected, std::abs(expected) / 128 + 1e-30)
          << r << "," << c;  // One bfloat16 rounding.
    }
  }
  EXPECT_NEAR((*cpu.Tensor((*both)[0]))->data<float>()[0], total / kRows, 1e-5 * total / kRows);
}

TEST(LossTest, RowPerBlockKernelsTakeWideAndSixteenBitRows) {
  EXPECT_TRUE(codegen::UseRowPerBlockLoss(16384, 50257, kBf16));
  EXPECT_TRUE(codegen::UseRowPerBlockLoss(4, 10, DType::kFloat16));
  EXPECT_TRUE(codegen::UseRowPerBlockLoss(8, 50257, DType::kFloat32));
  EXPECT_TRUE(codegen::UseRowPerBlockLoss(256, 10, DType::kFloat32));  // Past one block's rows.
  EXPECT_FALSE(codegen::UseRowPerBlockLoss(64, 10, DType::kFloat32));
  EXPECT_FALSE(codegen::UseRowPerBlockLoss(32, 1000, DType::kFloat32));
}

TEST(LossTest, RowKernelsCompileForSm90) {
  for (const codegen::GeneratedKernel& kernel : codegen::LossKernels()) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    EXPECT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
  }
}

// A small language model's bfloat16 step: the loss and its gradient read and write the bfloat16
// logits; nothing in the plan is a float32 tensor of the logits' size.
TEST(LossTest, Bf16StepKeepsNoFloat32CopyOfTheLogits) {
  constexpr int64_t kTokens = 64, kVocab = 2000, kWidth = 32;
  Graph g;
  Value ids = *g.AddInput("ids", {Shape{kTokens}, DType::kInt32});
  Value labels = *g.AddInput("labels", {Shape{kTokens}, DType::kInt32});
  Value x = *nn::Embedding(g, ids, kVocab, kWidth, "wte");
  x = *nn::LayerNorm(g, x, "ln_f");
  Value logits = *nn::Linear(g, x, kVocab, "lm_head", /*bias=*/false);
  Value loss = *nn::SoftmaxCrossEntropy(g, logits, labels, "loss");
  TrainOptions options;
  options.numerics.compute_dtype = kBf16;
  auto step = passes::CompileStep(g, loss, CompileOptionsFor(options, codegen::MlpStepTarget{}));
  ASSERT_TRUE(step.ok()) << step.status();
  const Graph& plan = step->plan.graph();
  const Shape logits_shape{kTokens, kVocab};
  int xent = 0;
  for (const Node& n : plan.nodes()) {
    for (const TensorSpec& out : n.outputs) {
      EXPECT_FALSE(out.shape == logits_shape && out.dtype == DType::kFloat32)
          << n.name << " (" << n.op_name() << ") writes " << out.ToString();
    }
    if (n.op != &ops::SoftmaxCrossEntropyWithGradOp()) continue;
    ++xent;
    EXPECT_EQ(plan.spec(n.inputs[0]), (TensorSpec{logits_shape, kBf16}));
    EXPECT_EQ(n.outputs[0].dtype, DType::kFloat32);
    EXPECT_EQ(n.outputs[1], (TensorSpec{logits_shape, kBf16}));
  }
  EXPECT_EQ(xent, 1);
}

}  // namespace
}  // namespace reprise
