// Fused pointwise chains over bfloat16 tensors, built by the fuse pass, on the GPU: against the
// CPU reference of the fused graph, and against the unfused bfloat16 ops run on the GPU.
//
// A fused chain computes its steps in float and rounds only what it stores, as the fused node's
// CPU reference does; the unfused ops round every intermediate value to bfloat16. relu and
// relu_grad commute with rounding, so a chain of one sum and those matches its unfused ops bit
// for bit; a second sum (the residual add) or a column sum over unrounded values may differ by a
// rounding or two (2^-8 relative each). A relu_grad whose mask comes from a twice-rounded sum is
// left out: where the sum is within a rounding of zero its mask flips, which is what fusing means,
// not an error to bound.
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/reference_executor.h"
#include "src/ops/fused_pointwise.h"
#include "src/ops/ops.h"
#include "src/passes/fuse.h"
#include "tests/gpu/gpu_graph_run.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

constexpr DType kBf16 = DType::kBFloat16;
constexpr int64_t kRows = 75, kCols = 41;  // Ragged for the 32x32 column-sum blocks.

// bfloat16 keeps 8 significant bits: one rounding is at most 2^-8 relative.
constexpr double kOneRounding = 1.0 / 256;
constexpr double kTwoRoundings = 2.0 / 256;

enum class ChainKind {
  kBiasRelu,          // y = relu(bias_add(x, bias))
  kBiasResidualRelu,  // y = relu(bias_add(x, bias) + residual)
  kBiasReluBackward,  // y as kBiasRelu; dx = relu_grad(dy, y); db = column_sum(dx)
  kGradAddReluGrad,   // dx = relu_grad(dy + dy2, y0); db = column_sum(dx): a residual block's
                      // two gradients joined, then the ReLU's gradient and the bias gradient.
};

// The graph to fuse, the values the fused graph must keep, and how far each may be from the
// unfused ops' value (relative L2). All bfloat16 constants: parameters are float32 by rule.
struct Chain {
  Graph graph;
  std::vector<Value> kept;
  std::vector<double> tolerance;
};

Chain BuildChain(ChainKind kind) {
  Chain c;
  Graph& g = c.graph;
  const TensorSpec matrix{Shape{kRows, kCols}, kBf16};
  auto keep = [&](Value v, double tolerance) {
    c.kept.push_back(v);
    c.tolerance.push_back(tolerance);
  };
  if (kind == ChainKind::kGradAddReluGrad) {
    Value dy = *g.AddConstant("dy", matrix, Initializer::Uniform(-1, 1));
    Value dy2 = *g.AddConstant("dy2", matrix, Initializer::Uniform(-1, 1));
    Value y0 = *g.AddConstant("y0", matrix, Initializer::Uniform(-1, 1));
    Value sum = *g.AddOp1(ops::AddOp(), "block.grad_add", {dy, dy2});
    Value dx = *g.AddOp1(ops::ReluGradOp(), "block.relu.grad", {sum, y0});
    keep(dx, 0.0);
    // Fused, the column sums add the unrounded sums; unfused, the rounded dx.
    keep(*g.AddOp1(ops::ColumnSumOp(), "block.bias.grad", {dx}), kTwoRoundings);
    return c;
  }
  Value x = *g.AddConstant("x", matrix, Initializer::Uniform(-1, 1));
  Value bias = *g.AddConstant("bias", {Shape{kCols}, kBf16}, Initializer::Uniform(-1, 1));
  Value h = *g.AddOp1(ops::BiasAddOp(), "fc.bias", {x, bias});
  const bool residual = kind == ChainKind::kBiasResidualRelu;
  if (residual) {
    Value r = *g.AddConstant("residual", matrix, Initializer::Uniform(-1, 1));
    h = *g.AddOp1(ops::AddOp(), "fc.add", {h, r});
  }
  Value y = *g.AddOp1(ops::ReluOp(), "fc.relu", {h});
  keep(y, residual ? kTwoRoundings : 0.0);
  if (kind == ChainKind::kBiasReluBackward) {
    Value dy = *g.AddConstant("dy", matrix, Initializer::Uniform(-1, 1));
    Value dx = *g.AddOp1(ops::ReluGradOp(), "fc.relu.grad", {dy, y});
    keep(dx, 0.0);
    // dx holds dy's values or zero, exact in bfloat16: fused or not, the same sums.
    keep(*g.AddOp1(ops::ColumnSumOp(), "fc.bias.grad", {dx}), 0.0);
  }
  return c;
}

// The same random bfloat16 values into every constant of `cpu` (both graphs name their leaves
// alike), so the fused and unfused runs start from the same bits.
void FillLeaves(const Graph& g, ir::ReferenceExecutor& cpu, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-1, 1);
  for (const char* name : {"x", "bias", "residual", "dy", "dy2", "y0"}) {
    if (!g.FindNode(name).ok()) continue;
    absl::StatusOr<ir::HostTensor*> leaf = cpu.Leaf(name);
    ASSERT_TRUE(leaf.ok()) << leaf.status();
    std::vector<double> values((*leaf)->size());
    for (double& v : values) v = uniform(rng);
    ASSERT_TRUE(cpu.SetLeaf(name, values).ok());
  }
}

class FusedPointwiseBf16GpuTest : public ::testing::TestWithParam<ChainKind> {};

TEST_P(FusedPointwiseBf16GpuTest, FusedChainMatchesCpuAndUnfusedOps) {
  REPRISE_REQUIRE_GPU();
  Chain chain = BuildChain(GetParam());
  autodiff::TrainingGraph training;
  training.graph = chain.graph;
  training.loss = chain.kept[0];
  passes::FuseOptions options;
  options.whole_mlp_step = false;
  auto fused = passes::Fuse(training, chain.kept, options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& fg = fused->training.graph;
  // The whole chain, column sum included, is one fused_pointwise node over bfloat16.
  int launches = 0;
  for (const Node& n : fg.nodes()) {
    if (ir::IsLeaf(n)) continue;
    ++launches;
    EXPECT_EQ(n.op, &ops::FusedPointwiseOp()) << n.name;
    for (const TensorSpec& out : n.outputs) EXPECT_EQ(out.dtype, kBf16) << n.name;
  }
  EXPECT_EQ(launches, 1);
  std::vector<Value> fused_kept;
  for (const Value& v : chain.kept) fused_kept.push_back(fused->values.at(v));

  ir::ReferenceExecutor fused_cpu(fg, false, 71), unfused_cpu(chain.graph, false, 71);
  FillLeaves(fg, fused_cpu, 72);
  FillLeaves(chain.graph, unfused_cpu, 72);
  // The fused kernel computes what the fused node's reference computes: the same float
  // operations in the same order, one rounding per stored element. Only the column sums add in
  // another order (32 row slices against the rows in order), which may move a sum to a
  // neighbouring bfloat16.
  const bool sums =
      GetParam() == ChainKind::kBiasReluBackward || GetParam() == ChainKind::kGradAddReluGrad;
  ExpectGpuMatchesCpu(fg, fused_cpu, sums ? kOneRounding : 0.0);
  ExpectGpuMatchesCpu(chain.graph, unfused_cpu, sums ? kOneRounding : 0.0);

  auto fused_gpu = RunOnGpu(fg, fused_cpu, fused_kept);
  ASSERT_TRUE(fused_gpu.ok()) << fused_gpu.status();
  auto unfused_gpu = RunOnGpu(chain.graph, unfused_cpu, chain.kept);
  ASSERT_TRUE(unfused_gpu.ok()) << unfused_gpu.status();
  for (size_t k = 0; k < chain.kept.size(); ++k) {
    const std::string name = chain.graph.node(chain.kept[k].node).name;
    ASSERT_EQ((*fused_gpu)[k].spec(), (*unfused_gpu)[k].spec()) << name;
    EXPECT_LE(RelativeL2((*fused_gpu)[k], (*unfused_gpu)[k]), chain.tolerance[k]) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Chains, FusedPointwiseBf16GpuTest,
                         ::testing::Values(ChainKind::kBiasRelu, ChainKind::kBiasResidualRelu,
                                           ChainKind::kBiasReluBackward,
                                           ChainKind::kGradAddReluGrad),
                         [](const auto& info) -> std::string {
                           switch (info.param) {
                             case ChainKind::kBiasRelu:
                               return "BiasAddRelu";
                             case ChainKind::kBiasResidualRelu:
                               return "BiasAddResidualRelu";
                             case ChainKind::kBiasReluBackward:
                               return "BiasAddReluThenReluGradAndBiasGrad";
                             case ChainKind::kGradAddReluGrad:
                               return "GradAddReluGradAndBiasGrad";
                           }
                           return "";
                         });

}  // namespace
}  // namespace reprise
