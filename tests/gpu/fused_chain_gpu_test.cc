// Fused pointwise chains over float32 and bfloat16 tensors, built by the fuse pass, on the GPU:
// against the CPU reference of the fused graph, and against the unfused ops of the same dtype run
// on the GPU.
//
// A fused chain computes its steps in float and rounds only what it stores, as the fused node's
// CPU reference does; the unfused ops round every intermediate value to the dtype (in float32, a
// no-op). relu and relu_grad commute with rounding, so a chain of one sum and those matches its
// unfused ops bit for bit; a second sum (the residual add) or a column sum over unrounded values
// may differ by a rounding or two (2^-8 relative each in bfloat16). A relu_grad whose mask comes
// from a twice-rounded sum is left out: where the sum is within a rounding of zero its mask flips,
// which is what fusing means, not an error to bound.
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
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

constexpr int64_t kRows = 75, kCols = 41;  // Ragged for the 32x32 column-sum blocks.

// One rounding to `dtype`, relative: bfloat16 keeps 8 significant bits, float32 24.
double OneRounding(DType dtype) { return dtype == DType::kBFloat16 ? 1.0 / 256 : 1.0 / (1 << 24); }

// How far the GPU may be from the CPU reference (relative L2): in bfloat16 the elementwise steps
// match bit for bit and a column sum (another order) may move to a neighbouring value; in float32
// either may differ by a few roundings.
double CpuTolerance(DType dtype, bool sums) {
  if (dtype == DType::kBFloat16) return sums ? OneRounding(dtype) : 0.0;
  return 1e-6;
}

enum class ChainKind {
  kBiasRelu,          // y = relu(bias_add(x, bias))
  kBiasResidualRelu,  // y = relu(bias_add(x, bias) + residual)
  kBiasReluBackward,  // y as kBiasRelu; dx = relu_grad(dy, y); db = column_sum(dx)
  kGradAddReluGrad,   // dx = relu_grad(dy + dy2, y0); db = column_sum(dx): a residual block's
                      // two gradients joined, then the ReLU's gradient and the bias gradient.
};

// The graph to fuse, the values the fused graph must keep, and how far each may be from the
// unfused ops' value (relative L2), in roundings of the dtype. All constants of the dtype under
// test: parameters are float32 by rule.
struct Chain {
  Graph graph;
  std::vector<Value> kept;
  std::vector<int> roundings;
};

Chain BuildChain(ChainKind kind, DType dtype) {
  Chain c;
  Graph& g = c.graph;
  const TensorSpec matrix{Shape{kRows, kCols}, dtype};
  auto keep = [&](Value v, int roundings) {
    c.kept.push_back(v);
    c.roundings.push_back(roundings);
  };
  if (kind == ChainKind::kGradAddReluGrad) {
    Value dy = *g.AddConstant("dy", matrix, Initializer::Uniform(-1, 1));
    Value dy2 = *g.AddConstant("dy2", matrix, Initializer::Uniform(-1, 1));
    Value y0 = *g.AddConstant("y0", matrix, Initializer::Uniform(-1, 1));
    Value sum = *g.AddOp1(ops::AddOp(), "block.grad_add", {dy, dy2});
    Value dx = *g.AddOp1(ops::ReluGradOp(), "block.relu.grad", {sum, y0});
    keep(dx, 0);
    // Fused, the column sums add the unrounded sums; unfused, the rounded dx.
    keep(*g.AddOp1(ops::ColumnSumOp(), "block.bias.grad", {dx}), 2);
    return c;
  }
  Value x = *g.AddConstant("x", matrix, Initializer::Uniform(-1, 1));
  Value bias = *g.AddConstant("bias", {Shape{kCols}, dtype}, Initializer::Uniform(-1, 1));
  Value h = *g.AddOp1(ops::BiasAddOp(), "fc.bias", {x, bias});
  const bool residual = kind == ChainKind::kBiasResidualRelu;
  if (residual) {
    Value r = *g.AddConstant("residual", matrix, Initializer::Uniform(-1, 1));
    h = *g.AddOp1(ops::AddOp(), "fc.add", {h, r});
  }
  Value y = *g.AddOp1(ops::ReluOp(), "fc.relu", {h});
  keep(y, residual ? 2 : 0);
  if (kind == ChainKind::kBiasReluBackward) {
    Value dy = *g.AddConstant("dy", matrix, Initializer::Uniform(-1, 1));
    Value dx = *g.AddOp1(ops::ReluGradOp(), "fc.relu.grad", {dy, y});
    keep(dx, 0);
    // dx holds dy's values or zero, exact in the dtype: fused or not, the same sums.
    keep(*g.AddOp1(ops::ColumnSumOp(), "fc.bias.grad", {dx}), 0);
  }
  return c;
}

// The same random values into every constant of `cpu` (both graphs name their leaves
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

class FusedChainGpuTest : public ::testing::TestWithParam<std::tuple<DType, ChainKind>> {};

TEST_P(FusedChainGpuTest, FusedChainMatchesCpuAndUnfusedOps) {
  REPRISE_REQUIRE_GPU();
  const auto [dtype, kind] = GetParam();
  Chain chain = BuildChain(kind, dtype);
  autodiff::TrainingGraph training;
  training.graph = chain.graph;
  training.loss = chain.kept[0];
  passes::FuseOptions options;
  options.whole_mlp_step = false;
  auto fused = passes::Fuse(training, chain.kept, options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& fg = fused->training.graph;
  // The whole chain, column sum included, is one fused_pointwise node over the dtype.
  int launches = 0;
  for (const Node& n : fg.nodes()) {
    if (ir::IsLeaf(n)) continue;
    ++launches;
    EXPECT_EQ(n.op, &ops::FusedPointwiseOp()) << n.name;
    for (const TensorSpec& out : n.outputs) EXPECT_EQ(out.dtype, dtype) << n.name;
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
  // neighbouring value.
  const bool sums = kind == ChainKind::kBiasReluBackward || kind == ChainKind::kGradAddReluGrad;
  ExpectGpuMatchesCpu(fg, fused_cpu, CpuTolerance(dtype, sums));
  ExpectGpuMatchesCpu(chain.graph, unfused_cpu, CpuTolerance(dtype, sums));

  auto fused_gpu = RunOnGpu(fg, fused_cpu, fused_kept);
  ASSERT_TRUE(fused_gpu.ok()) << fused_gpu.status();
  auto unfused_gpu = RunOnGpu(chain.graph, unfused_cpu, chain.kept);
  ASSERT_TRUE(unfused_gpu.ok()) << unfused_gpu.status();
  for (size_t k = 0; k < chain.kept.size(); ++k) {
    const std::string name = chain.graph.node(chain.kept[k].node).name;
    ASSERT_EQ((*fused_gpu)[k].spec(), (*unfused_gpu)[k].spec()) << name;
    EXPECT_LE(RelativeL2((*fused_gpu)[k], (*unfused_gpu)[k]),
              chain.roundings[k] * OneRounding(dtype))
        << name;
  }
}

std::string ChainName(ChainKind kind) {
  switch (kind) {
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
}

INSTANTIATE_TEST_SUITE_P(Float32AndBFloat16, FusedChainGpuTest,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::Values(ChainKind::kBiasRelu,
                                                              ChainKind::kBiasResidualRelu,
                                                              ChainKind::kBiasReluBackward,
                                                              ChainKind::kGradAddReluGrad)),
                         [](const auto& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               ChainName(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace reprise
