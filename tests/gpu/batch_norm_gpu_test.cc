// Batch normalization's GPU lowerings against the CPU reference, in both layouts: y, the saved
// statistics, the running statistics updated in place (PyTorch's unbiased running variance), the
// gradient, and inference with the running statistics. NCHW and inference run cuDNN; NHWC
// training runs our own kernels (src/ops/batch_norm_nhwc.h).
#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "src/ir/reference_executor.h"
#include "src/ops/batch_norm.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

struct BnCase {
  Layout layout;
  int64_t n, c, h, w;
};

Shape ImageShape(const BnCase& k) {
  return k.layout == Layout::kNCHW ? Shape{k.n, k.c, k.h, k.w} : Shape{k.n, k.h, k.w, k.c};
}

std::string CaseName(const ::testing::TestParamInfo<BnCase>& info) {
  const BnCase& k = info.param;
  return absl::StrCat(LayoutName(k.layout), "_", k.n, "x", k.c, "x", k.h, "x", k.w);
}

// x, gamma, beta and the running statistics of one batch-norm layer.
struct BnLeaves {
  Value x, gamma, beta, mean, var;
};

BnLeaves AddLeaves(Graph& g, const BnCase& k) {
  BnLeaves l;
  l.x = *g.AddParameter("x", {ImageShape(k)}, Initializer::Uniform(-3, 5));
  l.gamma = *g.AddParameter("gamma", {Shape{k.c}}, Initializer::Uniform(0.5, 1.5));
  l.beta = *g.AddParameter("beta", {Shape{k.c}}, Initializer::Uniform(-1, 1));
  l.mean = *g.AddState("running_mean", {Shape{k.c}}, Initializer::Uniform(-1, 1));
  l.var = *g.AddState("running_var", {Shape{k.c}}, Initializer::Uniform(0.5, 2));
  return l;
}

Attrs LayerAttrs(const BnCase& k) {
  return {{"layout", std::string(LayoutName(k.layout))}, {"epsilon", 1e-5}, {"momentum", 0.1}};
}

class BatchNormGpuTest : public ::testing::TestWithParam<BnCase> {};

// Forward training (y, saved statistics, running statistics written in place) and the backward
// pass fed with the forward's saved statistics.
TEST_P(BatchNormGpuTest, TrainAndGradMatchCpuReference) {
  REPRISE_REQUIRE_GPU();
  const BnCase k = GetParam();
  Graph g;
  const BnLeaves l = AddLeaves(g, k);
  Value dy = *g.AddConstant("dy", {ImageShape(k)}, Initializer::Uniform(-1, 1));
  auto bn =
      g.AddOp(ops::BatchNormTrainOp(), "bn", {l.x, l.gamma, l.beta, l.mean, l.var}, LayerAttrs(k));
  ASSERT_TRUE(bn.ok()) << bn.status();
  ASSERT_TRUE(g.AddOp(ops::BatchNormGradOp(), "bn_grad", {dy, l.x, l.gamma, (*bn)[1], (*bn)[2]},
                      LayerAttrs(k))
                  .ok());
  ir::ReferenceExecutor cpu(g, false, 7);
  ExpectGpuMatchesCpu(g, cpu, 1e-5);
}

TEST_P(BatchNormGpuTest, InferMatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  const BnCase k = GetParam();
  Graph g;
  const BnLeaves l = AddLeaves(g, k);
  ASSERT_TRUE(g.AddOp1(ops::BatchNormInferOp(), "bn_infer", {l.x, l.gamma, l.beta, l.mean, l.var},
                       LayerAttrs(k))
                  .ok());
  ir::ReferenceExecutor cpu(g, false, 8);
  ExpectGpuMatchesCpu(g, cpu, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BatchNormGpuTest,
    ::testing::Values(BnCase{Layout::kNCHW, 3, 4, 5, 5}, BnCase{Layout::kNHWC, 3, 4, 5, 5},
                      BnCase{Layout::kNCHW, 8, 64, 14, 14}, BnCase{Layout::kNHWC, 8, 64, 14, 14},
                      BnCase{Layout::kNHWC, 5, 3, 7, 9}, BnCase{Layout::kNCHW, 32, 16, 1, 1},
                      // NHWC training runs our own kernels: scalar columns (C % 4 != 0), wide
                      // channels over few rows, and many rows over many chunks.
                      BnCase{Layout::kNHWC, 4, 10, 6, 6}, BnCase{Layout::kNHWC, 2, 37, 5, 5},
                      BnCase{Layout::kNHWC, 2, 2048, 7, 7}, BnCase{Layout::kNHWC, 64, 8, 28, 28},
                      BnCase{Layout::kNHWC, 3, 5, 1, 1},
                      // ResNet-18's at 64x64, batch 8: the stem's 8192 values per channel, and
                      // layer3's and layer4's few.
                      BnCase{Layout::kNCHW, 8, 64, 32, 32}, BnCase{Layout::kNHWC, 8, 64, 32, 32},
                      BnCase{Layout::kNCHW, 8, 256, 4, 4}, BnCase{Layout::kNCHW, 8, 512, 2, 2}),
    CaseName);

}  // namespace
}  // namespace reprise
