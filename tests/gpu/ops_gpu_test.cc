// Each op's GPU lowering against its CPU reference: a one-op graph runs on both, fed the same
// random values, and every output is compared (fp32: relative error under 1e-5).
#include <random>

#include "capture/executor.h"
#include "capture/lowered_step.h"
#include "gtest/gtest.h"
#include "src/ir/initializer.h"
#include "src/ir/op_def.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"
#include "src/passes/memory_plan.h"
#include "src/passes/schedule.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/owners.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

Initializer Random() { return Initializer::Uniform(-1, 1); }

class MatmulGpuTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(MatmulGpuTest, MatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  const auto [ta, tb] = GetParam();
  const int64_t m = 33, n = 17, k = 65;
  Graph g;
  Value a = *g.AddParameter("a", {ta ? Shape{k, m} : Shape{m, k}}, Random());
  Value b = *g.AddParameter("b", {tb ? Shape{n, k} : Shape{k, n}}, Random());
  ASSERT_TRUE(
      g.AddOp1(ops::MatmulOp(), "mm", {a, b}, {{"transpose_a", ta}, {"transpose_b", tb}}).ok());
  ir::ReferenceExecutor cpu(g, false, 1);
  ExpectGpuMatchesCpu(g, cpu, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, MatmulGpuTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

// The pointwise ops and column_sum: pointwise_gpu_test.cc, over float32 and bfloat16.

TEST(OpsGpuTest, SoftmaxCrossEntropyAndGradMatchCpuReference) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  Value z = *g.AddParameter("z", {Shape{70, 45}}, Initializer::Uniform(-4, 4));
  Value labels = *g.AddInput("labels", {Shape{70}, DType::kInt32});
  Value dloss = *g.AddConstant("dloss", {Shape{}}, Initializer::Constant(1.5));
  ASSERT_TRUE(g.AddOp1(ops::SoftmaxCrossEntropyOp(), "xent", {z, labels}).ok());
  ASSERT_TRUE(g.AddOp1(ops::SoftmaxCrossEntropyGradOp(), "xent_grad", {z, labels, dloss}).ok());
  ir::ReferenceExecutor cpu(g, false, 3);
  std::vector<int32_t> l(70);
  for (int i = 0; i < 70; ++i) l[i] = (i * 13) % 45;
  ASSERT_TRUE(cpu.SetLeaf("labels", l).ok());
  ExpectGpuMatchesCpu(g, cpu, 1e-5);
}

TEST(OpsGpuTest, SgdMomentumMatchesCpuReferenceBitwise) {
  REPRISE_REQUIRE_GPU();
  Graph g;
  Value w = *g.AddParameter("w", {Shape{1000}}, Random());
  Value grad = *g.AddConstant("g", {Shape{1000}}, Random());
  Value v = *g.AddState("v", {Shape{1000}}, Random());
  Value lr = *g.AddInput("lr", {Shape{}}, Initializer::Constant(0.1));
  Value mu = *g.AddInput("mu", {Shape{}}, Initializer::Constant(0.9));
  Value wd = *g.AddInput("wd", {Shape{}}, Initializer::Constant(0.01));
  ASSERT_TRUE(g.AddOp(ops::SgdMomentumOp(), "sgd", {w, grad, v, lr, mu, wd}).ok());
  ir::ReferenceExecutor cpu(g, false, 4);
  ExpectGpuMatchesCpu(g, cpu, 0.0);
}

}  // namespace
}  // namespace reprise
