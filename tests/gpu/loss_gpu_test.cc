// Softmax cross-entropy on the GPU: the loss, its gradient and the fused pair against the CPU
// reference in float32 and bfloat16 (relative L2 1e-5 and 1e-2), on the one-block kernels and the
// row-per-block ones (wide rows, unaligned row starts); the same with padding columns left out
// (the "classes" attribute: their gradient exactly 0); the fused pair giving the separate ops'
// bits; a language-model step in bfloat16 replayed bit for bit as eager runs it; the GPT-2-sized
// loss's time, printed, unpadded and padded to 50,304 columns.
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/loss_checks.h"
#include "src/ops/ops.h"
#include "tests/gpu/gpu_graph_run.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/node_timing.h"

namespace reprise {
namespace {

double Tolerance(DType dtype) { return dtype == DType::kFloat32 ? 1e-5 : 1e-2; }

struct XentGraph {
  Graph g;
  Value loss, grad, fused_loss, fused_grad;
};

// The three ops on the same logits and labels (labels 0, classes - 1 and others in between), over
// the first `classes` columns (0: all of them).
XentGraph BuildXent(int64_t rows, int64_t cols, DType dtype, int64_t classes = 0) {
  XentGraph x;
  Graph& g = x.g;
  Value z = *g.AddConstant("z", {Shape{rows, cols}, dtype}, Initializer::Uniform(-8, 8));
  Value labels = *g.AddInput("labels", {Shape{rows}, DType::kInt32});
  Value dloss = *g.AddConstant("dloss", {Shape{}, DType::kFloat32}, Initializer::Constant(3.0));
  Attrs attrs;
  if (classes > 0) attrs[ops::kLossClassesAttr] = classes;
  x.loss = *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {z, labels}, attrs);
  x.grad = *g.AddOp1(ops::SoftmaxCrossEntropyGradOp(), "grad", {z, labels, dloss}, attrs);
  std::vector<Value> both =
      *g.AddOp(ops::SoftmaxCrossEntropyWithGradOp(), "both", {z, labels, dloss}, attrs);
  x.fused_loss = both[0];
  x.fused_grad = both[1];
  return x;
}

std::vector<int32_t> Labels(int64_t rows, int64_t cols) {
  std::vector<int32_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r) {
    labels[r] = static_cast<int32_t>(r == 0 ? 0 : r == 1 ? cols - 1 : (r * 7919) % cols);
  }
  return labels;
}

bool SameBits(const ir::HostTensor& a, const ir::HostTensor& b) {
  return a.spec() == b.spec() && std::memcmp(a.raw(), b.raw(), a.spec().bytes()) == 0;
}

class LossGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(LossGpuTest, LossGradientAndFusedPairMatchCpuReference) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  // One-block sizes, odd widths whose rows start unaligned, and a vocabulary as wide as GPT-2's.
  for (auto [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{{37, 50}, {67, 5003}, {9, 50257}, {13000, 7}}) {
    XentGraph x = BuildXent(rows, cols, dtype);
    ir::ReferenceExecutor cpu(x.g, false, 11);
    ASSERT_TRUE(cpu.SetLeaf("labels", Labels(rows, cols)).ok());
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
    ExpectGpuMatchesCpu(x.g, cpu, Tolerance(dtype));
  }
}

// The fused pair writes the loss op's loss and the gradient op's gradient, bit for bit, and a
// second run gives the same bits.
TEST_P(LossGpuTest, FusedPairHasTheSeparateOpsBitsOnEveryRun) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{37, 50}, {131, 50257}}) {
    XentGraph x = BuildXent(rows, cols, dtype);
    ir::ReferenceExecutor cpu(x.g, false, 12);
    ASSERT_TRUE(cpu.SetLeaf("labels", Labels(rows, cols)).ok());
    const std::vector<Value> fetch = {x.loss, x.grad, x.fused_loss, x.fused_grad};
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<ir::HostTensor> first, RunOnGpu(x.g, cpu, fetch));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<ir::HostTensor> second, RunOnGpu(x.g, cpu, fetch));
    EXPECT_TRUE(SameBits(first[0], first[2])) << rows << "x" << cols;
    EXPECT_TRUE(SameBits(first[1], first[3])) << rows << "x" << cols;
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(SameBits(first[i], second[i])) << i;
  }
}

// Padding columns left out: small rows (which would take the one-block kernels without the
// attribute), rows whose real part ends unaligned, and GPT-2's vocabulary padded to 50,304. The
// gradient of every padding column is exactly 0; the fused pair has the separate ops' bits.
TEST_P(LossGpuTest, PaddingColumnsLeftOutMatchCpuReference) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  for (auto [rows, cols, classes] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {37, 64, 50}, {67, 5120, 5003}, {9, 50304, 50257}, {13000, 8, 7}}) {
    XentGraph x = BuildXent(rows, cols, dtype, classes);
    ir::ReferenceExecutor cpu(x.g, false, 13);
    ASSERT_TRUE(cpu.SetLeaf("labels", Labels(rows, classes)).ok());
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " classes " << classes);
    ExpectGpuMatchesCpu(x.g, cpu, Tolerance(dtype));
    const std::vector<Value> fetch = {x.loss, x.grad, x.fused_loss, x.fused_grad};
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<ir::HostTensor> got, RunOnGpu(x.g, cpu, fetch));
    EXPECT_TRUE(SameBits(got[0], got[2]));
    EXPECT_TRUE(SameBits(got[1], got[3]));
    int64_t nonzero = 0;
    for (int i : {1, 3}) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = classes; c < cols; ++c)
          nonzero += ir::FloatElement(got[i], r * cols + c) != 0;
      }
    }
    EXPECT_EQ(nonzero, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Float32AndBFloat16, LossGpuTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// A language model's head over a 3,001-token vocabulary (odd: unaligned rows) trained in
// bfloat16 and float32: the captured replay gives eager's bits, and the loss falls.
TEST(LossTrainerGpuTest, LanguageModelHeadReplaysEagerBitsAndLearns) {
  REPRISE_REQUIRE_GPU();
  constexpr int64_t kTokens = 256, kVocab = 3001, kWidth = 64;
  for (DType compute : {DType::kBFloat16, DType::kFloat32}) {
    Graph g;
    Value ids = *g.AddInput("ids", {Shape{kTokens}, DType::kInt32});
    Value labels = *g.AddInput("labels", {Shape{kTokens}, DType::kInt32});
    Value x = *nn::Embedding(g, ids, kVocab, kWidth, "wte", 0.5);
    x = *nn::LayerNorm(g, x, "ln_f");
    Value loss = *nn::SoftmaxCrossEntropy(g, *nn::Linear(g, x, kVocab, "lm_head"), labels, "loss");
    TrainOptions options;
    options.numerics.compute_dtype = compute;
    options.optimizer.learning_rate = 0.2f;
    REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> trainer,
                                 Trainer::Create(g, loss, options));
    std::vector<int32_t> id_values(kTokens), label_values(kTokens);
    for (int64_t i = 0; i < kTokens; ++i) {
      id_values[i] = static_cast<int32_t>((i * 37) % kVocab);
      label_values[i] = static_cast<int32_t>((i * 101 + 5) % kVocab);
    }
    REPRISE_ASSERT_OK(trainer->SetInput("ids", id_values));
    REPRISE_ASSERT_OK(trainer->SetInput("labels", label_values));
    REPRISE_ASSERT_OK(trainer->Step());
    REPRISE_ASSERT_OK_AND_ASSIGN(const float first, trainer->Loss());
    REPRISE_ASSERT_OK_AND_ASSIGN(const VerifyResult result, trainer->Verify(5));
    EXPECT_TRUE(result.ok()) << DTypeName(compute) << ": " << result.ToString();
    for (int s = 0; s < 20; ++s) REPRISE_ASSERT_OK(trainer->Step());
    REPRISE_ASSERT_OK_AND_ASSIGN(const float later, trainer->Loss());
    EXPECT_LT(later, first) << DTypeName(compute);
  }
}

// GPT-2 124M's loss at B=16, T=1024 in bfloat16 (1.65 GB of logits read, the gradient written;
// an H200's bandwidth floor is ~0.8 ms), printed for the record: speed is measured, not asserted.
TEST(LossTimingGpuTest, Gpt2SizedLossAndGradient) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  Value z = *g.AddInput("z", {Shape{16384, 50257}, DType::kBFloat16});
  Value labels = *g.AddInput("labels", {Shape{16384}, DType::kInt32});
  Value dloss = *g.AddInput("dloss", {Shape{}, DType::kFloat32});
  ASSERT_TRUE(g.AddOp(ops::SoftmaxCrossEntropyWithGradOp(), "xent", {z, labels, dloss}).ok());
  REPRISE_ASSERT_OK_AND_ASSIGN(const double ms, TimeNodeMs(g, "xent", 20));
  std::printf("softmax_cross_entropy_with_grad bf16 [16384, 50257]: %.3f ms\n", ms);
  Graph padded;
  z = *padded.AddInput("z", {Shape{16384, 50304}, DType::kBFloat16});
  labels = *padded.AddInput("labels", {Shape{16384}, DType::kInt32});
  dloss = *padded.AddInput("dloss", {Shape{}, DType::kFloat32});
  ASSERT_TRUE(padded
                  .AddOp(ops::SoftmaxCrossEntropyWithGradOp(), "xent", {z, labels, dloss},
                         {{ops::kLossClassesAttr, int64_t{50257}}})
                  .ok());
  REPRISE_ASSERT_OK_AND_ASSIGN(const double padded_ms, TimeNodeMs(padded, "xent", 20));
  std::printf("softmax_cross_entropy_with_grad bf16 [16384, 50304], 50257 classes: %.3f ms\n",
              padded_ms);
}

}  // namespace
}  // namespace reprise
