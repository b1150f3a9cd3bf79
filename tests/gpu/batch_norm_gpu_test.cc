// Batch normalization's GPU lowerings against the CPU reference, in both layouts: y, the saved
// statistics, the running statistics updated in place (PyTorch's unbiased running variance), the
// gradient, and inference with the running statistics. NCHW and inference run cuDNN; NHWC
// training runs our own kernels (src/ops/batch_norm_nhwc.h). Then the fused forms in a graph,
// over float32 and in mixed precision.
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/ir/reference_executor.h"
#include "src/ops/batch_norm.h"
#include "src/ops/batch_norm_act.h"
#include "src/ops/batch_norm_apply.h"
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

// Through the plan's lowering (capture/lowered_step.cc lets 16-bit floats through on
// low_precision_lowering): a layer in either layout, fused and plain, with its recomputes (one
// batch norm + ReLU, one chain of block outputs), against the CPU reference, with float32 data or
// in mixed precision (bfloat16 data, float32 per-channel tensors; the reference takes the 16-bit
// tensors through float32). One tolerance serves every output, so in mixed precision it is the
// bfloat16 outputs' 1e-2; the float32 statistics are held to 1e-5 by
// batch_norm_bf16_gpu_test.cc.
struct GraphCase {
  int64_t n, h, w, c;
  Layout layout = Layout::kNHWC;
};

class BatchNormGraphGpuTest : public ::testing::TestWithParam<std::tuple<DType, GraphCase>> {};

TEST_P(BatchNormGraphGpuTest, FusedAndPlainOpsMatchCpuReference) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = std::get<0>(GetParam());
  const GraphCase k = std::get<1>(GetParam());
  const Shape image =
      k.layout == Layout::kNHWC ? Shape{k.n, k.h, k.w, k.c} : Shape{k.n, k.c, k.h, k.w};
  const TensorSpec data{image, dtype};
  Graph g;
  const Value x = *g.AddConstant("x", data, Initializer::Uniform(-3, 5));
  const Value residual = *g.AddConstant("residual", data, Initializer::Uniform(-1, 1));
  const Value dy = *g.AddConstant("dy", data, Initializer::Uniform(-1, 1));
  const Value gamma = *g.AddParameter("gamma", {Shape{k.c}}, Initializer::Uniform(0.5, 1.5));
  const Value beta = *g.AddParameter("beta", {Shape{k.c}}, Initializer::Uniform(-1, 1));
  // Each training node updates running statistics of its own, so their order does not matter.
  auto state = [&](const std::string& name, double low, double high) {
    return *g.AddState(name, {Shape{k.c}}, Initializer::Uniform(low, high));
  };
  const Attrs base = {
      {"layout", std::string(LayoutName(k.layout))}, {"epsilon", 1e-5}, {"momentum", 0.1}};
  Attrs with_residual = base, with_mask = base, apply_attrs = base;
  with_residual["residual"] = true;
  with_mask["masked_output"] = true;
  apply_attrs["residual"] = true;
  apply_attrs["relu"] = true;

  auto act = g.AddOp(ops::BatchNormActTrainOp(), "bn_act",
                     {x, gamma, beta, state("rm_act", -1, 1), state("rv_act", 0.5, 2), residual},
                     with_residual);
  ASSERT_TRUE(act.ok()) << act.status();
  auto act_grad = g.AddOp(ops::BatchNormActGradOp(), "bn_act.grad",
                          {dy, (*act)[0], x, gamma, (*act)[1], (*act)[2]}, with_mask);
  ASSERT_TRUE(act_grad.ok()) << act_grad.status();
  // dy as the sum of two gradients, added as the statistics pass loads them (the residual as
  // the second summand).
  Attrs with_sum = with_mask;
  with_sum["dy_addend"] = true;
  auto sum_grad = g.AddOp(ops::BatchNormActGradOp(), "bn_act.grad_sum",
                          {dy, (*act)[0], x, gamma, (*act)[1], (*act)[2], residual}, with_sum);
  ASSERT_TRUE(sum_grad.ok()) << sum_grad.status();
  auto plain = g.AddOp(ops::BatchNormTrainOp(), "bn",
                       {x, gamma, beta, state("rm", -1, 1), state("rv", 0.5, 2)}, base);
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto plain_grad =
      g.AddOp(ops::BatchNormGradOp(), "bn.grad", {dy, x, gamma, (*plain)[1], (*plain)[2]}, base);
  ASSERT_TRUE(plain_grad.ok()) << plain_grad.status();
  auto apply = g.AddOp1(ops::BatchNormApplyOp(), "bn_act.twin",
                        {x, gamma, beta, (*act)[1], (*act)[2], residual}, apply_attrs);
  ASSERT_TRUE(apply.ok()) << apply.status();
  // A recomputed stage's block outputs: the shortcut's batch norm, then two blocks, each
  // relu(its batch norm + the output before); every carried value rounds to the data's type.
  std::vector<Value> chain = {residual, gamma, beta, (*plain)[1], (*plain)[2]};
  for (const Value& step_x : {x, residual}) {
    chain.insert(chain.end(), {step_x, gamma, beta, (*act)[1], (*act)[2]});
  }
  auto chained = g.AddOp(ops::BatchNormApplyChainOp(), "bn_chain.twin", chain,
                         {{"layout", std::string(LayoutName(k.layout))}});
  ASSERT_TRUE(chained.ok()) << chained.status();
  ir::ReferenceExecutor cpu(g, /*float64=*/false, 11);
  ExpectGpuMatchesCpu(g, cpu, dtype == DType::kBFloat16 ? 1e-2 : 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BatchNormGraphGpuTest,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::Values(GraphCase{8, 14, 14, 64}, GraphCase{2, 7, 7, 2048},
                                         GraphCase{4, 6, 6, 10}, GraphCase{3, 5, 1, 1},
                                         GraphCase{8, 14, 14, 64, Layout::kNCHW},
                                         GraphCase{2, 7, 7, 2048, Layout::kNCHW},
                                         GraphCase{3, 5, 1, 1, Layout::kNCHW})),
    [](const auto& info) {
      const GraphCase& k = std::get<1>(info.param);
      return absl::StrCat(DTypeName(std::get<0>(info.param)), "_", k.n, "x", k.h, "x", k.w, "x",
                          k.c, k.layout == Layout::kNCHW ? "_nchw" : "");
    });

}  // namespace
}  // namespace reprise
