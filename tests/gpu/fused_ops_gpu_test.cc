// Each fused op's GPU lowering against its CPU reference (which runs the references of the ops
// it replaces), at shapes with ragged edges.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/codegen/fused_kernels.h"
#include "src/ir/reference_executor.h"
#include "src/ops/fused_pointwise.h"
#include "src/ops/ops.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

Initializer Random() { return Initializer::Uniform(-1, 1); }

class MatmulBiasGpuTest : public ::testing::TestWithParam<std::tuple<bool, bool, bool>> {};

TEST_P(MatmulBiasGpuTest, EpilogueMatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  const auto [ta, tb, relu] = GetParam();
  const int64_t m = 33, n = 17, k = 65;
  Graph g;
  Value a = *g.AddParameter("a", {ta ? Shape{k, m} : Shape{m, k}}, Random());
  Value b = *g.AddParameter("b", {tb ? Shape{n, k} : Shape{k, n}}, Random());
  Value bias = *g.AddParameter("bias", {Shape{n}}, Random());
  auto out = g.AddOp1(ops::MatmulBiasOp(), "mm", {a, b, bias},
                      {{"transpose_a", ta}, {"transpose_b", tb}, {"relu", relu}});
  ASSERT_TRUE(out.ok()) << out.status();
  ir::ReferenceExecutor cpu(g, false, 11);
  ExpectGpuMatchesCpu(g, cpu, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(TransposesAndRelu, MatmulBiasGpuTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Bool()));

// A hidden layer's forward keeping its ReLU mask, and the backward that reads it: the data
// gradient dz2 · W2 (op(A)·op(B) in each transpose form) masked, with its column sums. With 128
// outputs the mask has no padding and is compared bit for bit; with 17, its padding bits are
// unspecified, so only the float results are.
class ReluMaskEpilogueGpuTest : public ::testing::TestWithParam<std::tuple<bool, bool, int64_t>> {};

TEST_P(ReluMaskEpilogueGpuTest, ForwardMaskAndBackwardMatchCpuReference) {
  REPRISE_REQUIRE_GPU();
  const auto [ta, tb, n] = GetParam();
  const int64_t m = 33, k = 65, k2 = 40;
  Graph g;
  Value x = *g.AddParameter("x", {Shape{m, k}}, Random());
  Value w = *g.AddParameter("w", {Shape{n, k}}, Random());
  Value bias = *g.AddParameter("bias", {Shape{n}}, Random());
  auto forward = g.AddOp(ops::MatmulBiasReluMaskOp(), "fwd", {x, w, bias},
                         {{"transpose_a", false}, {"transpose_b", true}});
  ASSERT_TRUE(forward.ok()) << forward.status();
  Value dz2 = *g.AddParameter("dz2", {ta ? Shape{k2, m} : Shape{m, k2}}, Random());
  Value w2 = *g.AddParameter("w2", {tb ? Shape{n, k2} : Shape{k2, n}}, Random());
  auto backward = g.AddOp(ops::MatmulDReluBiasGradOp(), "bwd", {dz2, w2, (*forward)[1]},
                          {{"transpose_a", ta}, {"transpose_b", tb}});
  ASSERT_TRUE(backward.ok()) << backward.status();
  ir::ReferenceExecutor cpu(g, false, 11);
  absl::flat_hash_set<Value> unchecked;
  if (n % 128 != 0) unchecked.insert((*forward)[1]);
  ExpectGpuMatchesCpu(g, cpu, 1e-5, unchecked);
}

INSTANTIATE_TEST_SUITE_P(TransposesAndWidths, ReluMaskEpilogueGpuTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values<int64_t>(128, 17)));

// relu_grad -> bias_add -> relu, storing steps 0 and 2, optionally summing step 0's columns.
ops::PointwiseProgram Chain(bool column_sum) {
  ops::PointwiseProgram p;
  p.steps.push_back({&ops::ReluGradOp(), {0, 1}});
  p.steps.push_back({&ops::BiasAddOp(), {ops::PointwiseProgram::StepOperand(0), 2}});
  p.steps.push_back({&ops::ReluOp(), {ops::PointwiseProgram::StepOperand(1)}});
  p.outputs = {0, 2};
  p.column_sum = column_sum ? 0 : -1;
  return p;
}

class FusedPointwiseGpuTest : public ::testing::TestWithParam<bool> {};

TEST_P(FusedPointwiseGpuTest, ChainMatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  Value dy = *g.AddParameter("dy", {Shape{75, 41}}, Random());
  Value y = *g.AddParameter("y", {Shape{75, 41}}, Random());
  Value bias = *g.AddParameter("bias", {Shape{41}}, Random());
  auto out = g.AddOp(ops::FusedPointwiseOp(), "chain", {dy, y, bias}, Chain(GetParam()).ToAttrs());
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), GetParam() ? 3u : 2u);
  ir::ReferenceExecutor cpu(g, false, 12);
  ExpectGpuMatchesCpu(g, cpu, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutColumnSum, FusedPointwiseGpuTest, ::testing::Bool());

TEST(FusedOpsGpuTest, LossWithGradMatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  Value z = *g.AddParameter("z", {Shape{70, 45}}, Initializer::Uniform(-4, 4));
  Value labels = *g.AddInput("labels", {Shape{70}, DType::kInt32});
  Value dloss = *g.AddConstant("dloss", {Shape{}}, Initializer::Constant(1.5));
  ASSERT_TRUE(g.AddOp(ops::SoftmaxCrossEntropyWithGradOp(), "xent", {z, labels, dloss}).ok());
  ir::ReferenceExecutor cpu(g, false, 13);
  std::vector<int32_t> l(70);
  for (int i = 0; i < 70; ++i) l[i] = (i * 13) % 45;
  ASSERT_TRUE(cpu.SetLeaf("labels", l).ok());
  ExpectGpuMatchesCpu(g, cpu, 1e-5);
}

// More tensors than one launch's table holds, of ragged sizes; the arithmetic is the CPU's, so
// the update is bitwise.
TEST(FusedOpsGpuTest, MultiTensorSgdOverSeveralTablesIsBitwise) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  const int tensors = codegen::kSgdTableSize + 7;
  std::vector<Value> inputs;
  for (int t = 0; t < tensors; ++t) {
    const Shape shape{1 + (t * 37) % 300};
    inputs.push_back(*g.AddParameter("w" + std::to_string(t), {shape}, Random()));
    inputs.push_back(*g.AddParameter("g" + std::to_string(t), {shape}, Random()));
    inputs.push_back(*g.AddState("v" + std::to_string(t), {shape}, Random()));
  }
  inputs.push_back(*g.AddConstant("lr", {Shape{}}, Initializer::Constant(0.1)));
  inputs.push_back(*g.AddConstant("mu", {Shape{}}, Initializer::Constant(0.9)));
  inputs.push_back(*g.AddConstant("wd", {Shape{}}, Initializer::Constant(0.01)));
  ASSERT_TRUE(g.AddOp(ops::SgdMomentumMultiOp(), "sgd", inputs,
                      {{"tensors", static_cast<int64_t>(tensors)}})
                  .ok());
  ir::ReferenceExecutor cpu(g, false, 14);
  ExpectGpuMatchesCpu(g, cpu, 0.0);
}

}  // namespace
}  // namespace reprise
