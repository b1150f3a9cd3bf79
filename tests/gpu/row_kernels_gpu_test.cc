// The one-pass row kernels on the GPU: the layer-norm backward (src/codegen/
// layer_norm_backward_kernels.h) and softmax cross-entropy's one-pass rows (XentRowsOnePass in
// src/codegen/loss_kernels.h) against their CPU references at GPT-2's shapes and at odd ones (rows
// not a multiple of a block's rows, a width whose last vector lanes idle, one team a block, the
// padded vocabulary), the launches checked to be the one-pass kernels where they apply and the
// older ones where they do not, and every output giving the same bits on a second run.
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/layer_norm_residual.h"
#include "src/ops/loss_checks.h"
#include "src/ops/ops.h"
#include "src/ops/row_kernel_choice.h"
#include "src/ops/transformer_ops.h"
#include "tests/gpu/gpu_graph_run.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

double Tolerance(DType dtype) { return dtype == DType::kFloat32 ? 1e-5 : 1e-2; }

bool SameBits(const ir::HostTensor& a, const ir::HostTensor& b) {
  return a.spec() == b.spec() && std::memcmp(a.raw(), b.raw(), a.spec().bytes()) == 0;
}

bool AnyMentions(const std::vector<std::string>& described, const std::string& kernel) {
  for (const std::string& d : described) {
    if (d.find(kernel) != std::string::npos) return true;
  }
  return false;
}

std::string Suffixed(const std::string& base, DType dtype) {
  return dtype == DType::kBFloat16 ? base + "_bf16" : base;
}

class RowKernelsGpuTest : public ::testing::TestWithParam<DType> {};

struct LayerNormGradGraph {
  Graph g;
  std::vector<Value> grad, grad_add;  // (dx, dweight, dbias) of each op.
  // layer_norm_grad_column_sum's (dx, dweight, dbias, dsum) over each one's inputs.
  std::vector<Value> grad_sum, grad_add_sum;
};

// layer_norm's statistics feed layer_norm_grad and layer_norm_grad_add (dres a third tensor), and
// layer_norm_grad_column_sum over the inputs of each.
LayerNormGradGraph BuildLayerNormGrad(int64_t rows, int64_t cols, DType dtype) {
  LayerNormGradGraph l;
  Graph& g = l.g;
  Value x = *g.AddConstant("x", {Shape{rows, cols}, dtype}, Initializer::Uniform(-2, 3));
  Value dy = *g.AddConstant("dy", {Shape{rows, cols}, dtype}, Initializer::Uniform(-1, 1));
  Value dres = *g.AddConstant("dres", {Shape{rows, cols}, dtype}, Initializer::Uniform(-1, 1));
  Value w = *g.AddConstant("w", {Shape{cols}}, Initializer::Uniform(0.5, 1.5));
  Value b = *g.AddConstant("b", {Shape{cols}}, Initializer::Uniform(-1, 1));
  std::vector<Value> ln = *g.AddOp(ops::LayerNormOp(), "ln", {x, w, b});
  l.grad = *g.AddOp(ops::LayerNormGradOp(), "ln_grad", {dy, x, w, ln[1], ln[2]});
  l.grad_add = *g.AddOp(ops::LayerNormGradAddOp(), "ln_grad_add", {dy, x, w, ln[1], ln[2], dres});
  l.grad_sum = *g.AddOp(ops::LayerNormGradColumnSumOp(), "ln_grad_sum", {dy, x, w, ln[1], ln[2]});
  l.grad_add_sum =
      *g.AddOp(ops::LayerNormGradColumnSumOp(), "ln_grad_add_sum", {dy, x, w, ln[1], ln[2], dres});
  return l;
}

// Widths: GPT-2's over its B=16 T=1024 rows and over rows that leave the last block's steps
// partly empty; one vector a row; 1000 (13 lanes of 16-bit teams' last warp idle); a
// 512-thread team (4096 16-bit columns); and widths the one-pass kernel leaves to the older ones
// (not a multiple of the vector: 52 in 16 bits, 50; too wide: 4104 in 16 bits).
TEST_P(RowKernelsGpuTest, LayerNormBackwardMatchesCpuReferenceAndRepeatsBits) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  const int vec = dtype == DType::kFloat32 ? 4 : 8;
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{16384, 768},
                                                                    {1001, 768},
                                                                    {37, 8},
                                                                    {300, 1000},
                                                                    {129, 4096},
                                                                    {61, 52},
                                                                    {45, 50},
                                                                    {33, 4104}}) {
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << rows << "x" << cols);
    LayerNormGradGraph l = BuildLayerNormGrad(rows, cols, dtype);
    ir::ReferenceExecutor cpu(l.g, false, 21);
    std::vector<std::string> described;
    ExpectGpuMatchesCpu(l.g, cpu, Tolerance(dtype), {}, false, false, &described);
    const bool one_pass =
        !ops::TwoPassRowKernelsForced() && cols % vec == 0 && (cols / vec + 31) / 32 * 32 <= 512;
    // The warp form up to 4 vectors a lane (1024 16-bit or 512 float32 columns), else teams.
    const int lane_vectors = cols / vec <= 128 ? static_cast<int>((cols / vec + 31) / 32) : 0;
    const std::string form = lane_vectors > 0 ? absl::StrCat("_w", lane_vectors) : "";
    EXPECT_EQ(
        AnyMentions(described,
                    Suffixed(absl::StrCat("reprise_layer_norm_bwd", form, "_add"), dtype) + " "),
        one_pass);
    EXPECT_EQ(
        AnyMentions(described, Suffixed(absl::StrCat("reprise_layer_norm_bwd", form), dtype) + " "),
        one_pass);
    // The column sums ride in the warp form's kernel; elsewhere a column_sum launch follows.
    const bool sum_in_pass = one_pass && lane_vectors > 0;
    for (const char* add : {"", "_add"}) {
      EXPECT_EQ(
          AnyMentions(
              described,
              Suffixed(absl::StrCat("reprise_layer_norm_bwd", form, add, "_sum"), dtype) + " "),
          sum_in_pass)
          << add;
    }
    EXPECT_EQ(AnyMentions(described, Suffixed("reprise_layer_norm_dparams_total_sum", dtype)),
              sum_in_pass);
    std::vector<Value> fetch = l.grad;
    for (const std::vector<Value>* more : {&l.grad_add, &l.grad_sum, &l.grad_add_sum}) {
      fetch.insert(fetch.end(), more->begin(), more->end());
    }
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<ir::HostTensor> first, RunOnGpu(l.g, cpu, fetch));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<ir::HostTensor> second, RunOnGpu(l.g, cpu, fetch));
    for (size_t i = 0; i < fetch.size(); ++i) EXPECT_TRUE(SameBits(first[i], second[i])) << i;
    // The add variant's parameter gradients are the plain one's, bit for bit: same sums.
    EXPECT_TRUE(SameBits(first[1], first[4]));
    EXPECT_TRUE(SameBits(first[2], first[5]));
    // With the column sums, dx and the parameter gradients keep the bits of the forms without.
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(SameBits(first[i], first[6 + i])) << i;
      EXPECT_TRUE(SameBits(first[3 + i], first[10 + i])) << i;
    }
  }
}

struct XentGraph {
  Graph g;
  Value loss, grad, fused_loss, fused_grad;
};

XentGraph BuildXent(int64_t rows, int64_t cols, int64_t classes, DType dtype) {
  XentGraph x;
  Graph& g = x.g;
  Value z = *g.AddConstant("z", {Shape{rows, cols}, dtype}, Initializer::Uniform(-8, 8));
  Value labels = *g.AddInput("labels", {Shape{rows}, DType::kInt32});
  Value dloss = *g.AddConstant("dloss", {Shape{}, DType::kFloat32}, Initializer::Constant(3.0));
  Attrs attrs;
  if (classes < cols) attrs[ops::kLossClassesAttr] = classes;
  x.loss = *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {z, labels}, attrs);
  x.grad = *g.AddOp1(ops::SoftmaxCrossEntropyGradOp(), "grad", {z, labels, dloss}, attrs);
  std::vector<Value> both =
      *g.AddOp(ops::SoftmaxCrossEntropyWithGradOp(), "both", {z, labels, dloss}, attrs);
  x.fused_loss = both[0];
  x.fused_grad = both[1];
  return x;
}

// Labels 0 and classes - 1 among others, so both ends of a row's real part are labels.
std::vector<int32_t> Labels(int64_t rows, int64_t classes) {
  std::vector<int32_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r) {
    labels[r] = static_cast<int32_t>(r == 0 ? 0 : r == 1 ? classes - 1 : (r * 7919) % classes);
  }
  return labels;
}

// GPT-2's padded vocabulary (50,304 columns, 50,257 classes: the last vector straddles the end
// of the real classes) and unpadded, rows of 40,000 columns (float32's 160 KB: one block a
// multiprocessor) and of 70,000 (16-bit's 140 KB; float32's 280 KB are past the shared memory and
// take the two-pass kernel), one vector a row with a padding column, and rows the one-pass kernel
// leaves alone (50,257 columns: not whole vectors; 100,000: past 192 KB in either type).
TEST_P(RowKernelsGpuTest, SoftmaxCrossEntropyMatchesCpuReferenceAndRepeatsBits) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  const int vec = dtype == DType::kFloat32 ? 4 : 8;
  for (auto [rows, cols, classes] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{64, 50304, 50257},
                                                          {33, 50304, 50304},
                                                          {19, 40000, 40000},
                                                          {300, 8, 7},
                                                          {21, 5120, 5003},
                                                          {17, 50257, 50257},
                                                          {5, 70000, 69999},
                                                          {3, 100000, 99999}}) {
    SCOPED_TRACE(::testing::Message()
                 << DTypeName(dtype) << " " << rows << "x" << cols << " classes " << classes);
    XentGraph x = BuildXent(rows, cols, classes, dtype);
    ir::ReferenceExecutor cpu(x.g, false, 22);
    ASSERT_TRUE(cpu.SetLeaf("labels", Labels(rows, classes)).ok());
    std::vector<std::string> described;
    ExpectGpuMatchesCpu(x.g, cpu, Tolerance(dtype), {}, false, false, &described);
    const bool one_pass = !ops::TwoPassRowKernelsForced() && cols % vec == 0 &&
                          cols * (dtype == DType::kFloat32 ? 4 : 2) <= 192 * 1024;
    EXPECT_EQ(AnyMentions(described, Suffixed("reprise_xent_onepass_loss_grad", dtype) + " "),
              one_pass);
    const std::vector<Value> fetch = {x.loss, x.grad, x.fused_loss, x.fused_grad};
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<ir::HostTensor> first, RunOnGpu(x.g, cpu, fetch));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<ir::HostTensor> second, RunOnGpu(x.g, cpu, fetch));
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(SameBits(first[i], second[i])) << i;
    // The fused pair has the separate ops' bits, and padding columns a gradient of exactly 0.
    EXPECT_TRUE(SameBits(first[0], first[2]));
    EXPECT_TRUE(SameBits(first[1], first[3]));
    int64_t nonzero = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = classes; c < cols; ++c)
        nonzero += ir::FloatElement(first[3], r * cols + c) != 0;
    }
    EXPECT_EQ(nonzero, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Float32AndBFloat16, RowKernelsGpuTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace reprise
