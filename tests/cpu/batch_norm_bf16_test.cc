// Batch norm under mixed precision, without a device: bfloat16 data beside float32 per-channel
// tensors passes every op's shape rule and the CPU reference, the training ops say they lower
// bfloat16 (OpDef::low_precision_lowering), the lowerings of either layout take it as far as the
// kernel store, and bfloat16 per-channel tensors are refused by node name. The GPU side is
// tests/gpu/batch_norm_launcher_gpu_test.cc and batch_norm_gpu_test.cc.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/ir/op_def.h"
#include "src/ir/reference_executor.h"
#include "src/ops/batch_norm.h"
#include "src/ops/batch_norm_act.h"
#include "src/ops/batch_norm_apply.h"
#include "src/ops/gpu_kernel.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kN = 2, kH = 3, kW = 3, kC = 8;

Shape ImageShape(Layout layout) {
  return layout == Layout::kNHWC ? Shape{kN, kH, kW, kC} : Shape{kN, kC, kH, kW};
}

Attrs LayoutAttrs(Layout layout, Attrs more = {}) {
  more["layout"] = std::string(LayoutName(layout));
  return more;
}

// One mixed-precision batch-norm layer and its gradient, fused or not: bfloat16 images, float32
// gamma, beta and statistics.
struct MixedLayer {
  Graph g;
  Value x, dy, residual, gamma, beta, mean, var;
};

void AddLeaves(MixedLayer& l, Layout layout) {
  const TensorSpec image{ImageShape(layout), DType::kBFloat16};
  l.x = *l.g.AddConstant("x", image, Initializer::Uniform(-3, 5));
  l.dy = *l.g.AddConstant("dy", image, Initializer::Uniform(-1, 1));
  l.residual = *l.g.AddConstant("residual", image, Initializer::Uniform(-1, 1));
  l.gamma = *l.g.AddParameter("gamma", {Shape{kC}}, Initializer::Uniform(0.5, 1.5));
  l.beta = *l.g.AddParameter("beta", {Shape{kC}}, Initializer::Uniform(-1, 1));
  l.mean = *l.g.AddState("running_mean", {Shape{kC}}, Initializer::Uniform(-1, 1));
  l.var = *l.g.AddState("running_var", {Shape{kC}}, Initializer::Uniform(0.5, 2));
}

TEST(BatchNormBFloat16Test, TrainingOpsSayTheyLowerBFloat16AndInferenceDoesNot) {
  EXPECT_TRUE(ops::BatchNormTrainOp().low_precision_lowering);
  EXPECT_TRUE(ops::BatchNormGradOp().low_precision_lowering);
  EXPECT_TRUE(ops::BatchNormActTrainOp().low_precision_lowering);
  EXPECT_TRUE(ops::BatchNormActGradOp().low_precision_lowering);
  EXPECT_TRUE(ops::BatchNormApplyOp().low_precision_lowering);
  EXPECT_FALSE(ops::BatchNormInferOp().low_precision_lowering);  // cuDNN, float32 only.
}

// Every op's shape rule takes bfloat16 data with float32 per-channel tensors: the data outputs
// are bfloat16, the per-channel outputs float32 (gamma's type).
TEST(BatchNormBFloat16Test, ShapeRulesKeepPerChannelTensorsFloat32) {
  MixedLayer l;
  AddLeaves(l, Layout::kNHWC);
  Graph& g = l.g;
  const TensorSpec image{ImageShape(Layout::kNHWC), DType::kBFloat16};
  const TensorSpec channel{Shape{kC}, DType::kFloat32};
  auto train =
      g.AddOp(ops::BatchNormActTrainOp(), "bn", {l.x, l.gamma, l.beta, l.mean, l.var, l.residual},
              LayoutAttrs(Layout::kNHWC, {{"residual", true}}));
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(g.spec((*train)[0]), image);
  EXPECT_EQ(g.spec((*train)[1]), channel);
  EXPECT_EQ(g.spec((*train)[2]), channel);
  auto grad = g.AddOp(ops::BatchNormActGradOp(), "bn.grad",
                      {l.dy, (*train)[0], l.x, l.gamma, (*train)[1], (*train)[2]},
                      LayoutAttrs(Layout::kNHWC, {{"masked_output", true}}));
  ASSERT_TRUE(grad.ok()) << grad.status();
  EXPECT_EQ(g.spec((*grad)[0]), image);
  EXPECT_EQ(g.spec((*grad)[1]), channel);
  EXPECT_EQ(g.spec((*grad)[2]), channel);
  EXPECT_EQ(g.spec((*grad)[3]), image);
  auto apply = g.AddOp1(ops::BatchNormApplyOp(), "bn.twin",
                        {l.x, l.gamma, l.beta, (*train)[1], (*train)[2], l.residual},
                        LayoutAttrs(Layout::kNHWC, {{"residual", true}, {"relu", true}}));
  ASSERT_TRUE(apply.ok()) << apply.status();
  EXPECT_EQ(g.spec(*apply), image);
  // A float32 residual beside bfloat16 x is still refused.
  const Value f32_residual =
      *g.AddConstant("f32_residual", {ImageShape(Layout::kNHWC)}, Initializer::Uniform(-1, 1));
  auto mixed = g.AddOp(ops::BatchNormActTrainOp(), "bn_mixed",
                       {l.x, l.gamma, l.beta, l.mean, l.var, f32_residual},
                       LayoutAttrs(Layout::kNHWC, {{"residual", true}}));
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mixed.status().message(), HasSubstr("residual"));

  // The reference runs the mixed graph (16-bit tensors through float32) and rounds y to bfloat16.
  ir::ReferenceExecutor cpu(g, /*float64=*/false, 3);
  ASSERT_TRUE(cpu.Run().ok());
  EXPECT_EQ((*cpu.Tensor((*train)[0]))->dtype(), DType::kBFloat16);
  EXPECT_EQ((*cpu.Tensor((*grad)[1]))->dtype(), DType::kFloat32);
}

// Fake, 16-byte aligned device addresses: the lowerings below stop before using them.
ops::LoweringContext FakeContext(const Graph& g, const Node& node) {
  ops::LoweringContext ctx;
  ctx.workspace = reinterpret_cast<void*>(uintptr_t{1} << 30);
  ctx.workspace_bytes = 64 << 20;
  uintptr_t next = 0x10000;
  for (const Value& v : node.inputs) {
    ctx.input_specs.push_back(g.spec(v));
    ctx.inputs.push_back(reinterpret_cast<void*>(next += 0x10000));
  }
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    ctx.outputs.push_back(reinterpret_cast<void*>(next += 0x10000));
  }
  return ctx;
}

// The layer's four training nodes (forward and gradient, plain and fused) and its recompute in
// `layout`, each lowered without a kernel store.
std::vector<absl::Status> LowerEachNode(Layout layout) {
  MixedLayer l;
  AddLeaves(l, layout);
  Graph& g = l.g;
  const Attrs attrs = LayoutAttrs(layout);
  std::vector<Value> outs;
  auto bn = g.AddOp(ops::BatchNormTrainOp(), "bn", {l.x, l.gamma, l.beta, l.mean, l.var}, attrs);
  EXPECT_TRUE(bn.ok()) << bn.status();
  outs.push_back((*bn)[0]);
  auto grad =
      g.AddOp(ops::BatchNormGradOp(), "bn.grad", {l.dy, l.x, l.gamma, (*bn)[1], (*bn)[2]}, attrs);
  EXPECT_TRUE(grad.ok()) << grad.status();
  outs.push_back((*grad)[0]);
  auto act =
      g.AddOp(ops::BatchNormActTrainOp(), "bn_act", {l.x, l.gamma, l.beta, l.mean, l.var}, attrs);
  EXPECT_TRUE(act.ok()) << act.status();
  outs.push_back((*act)[0]);
  auto act_grad = g.AddOp(ops::BatchNormActGradOp(), "bn_act.grad",
                          {l.dy, (*act)[0], l.x, l.gamma, (*act)[1], (*act)[2]}, attrs);
  EXPECT_TRUE(act_grad.ok()) << act_grad.status();
  outs.push_back((*act_grad)[0]);
  auto apply = g.AddOp1(ops::BatchNormApplyOp(), "bn.twin",
                        {l.x, l.gamma, l.beta, (*bn)[1], (*bn)[2]}, attrs);
  EXPECT_TRUE(apply.ok()) << apply.status();
  outs.push_back(*apply);
  std::vector<absl::Status> results;
  for (const Value& v : outs) {
    const Node& node = g.node(v.node);
    results.push_back(node.op->lower(FakeContext(g, node), node).status());
  }
  return results;
}

// Every node passes its type checks and stops only at the missing kernel store, naming the node
// (and, NCHW, the layout): NCHW batch norm, its gradient, its recompute and the fused forms run
// on the NHWC kernels (planar view), so they take bfloat16 as far.
class BatchNormBFloat16LoweringTest : public ::testing::TestWithParam<Layout> {};

TEST_P(BatchNormBFloat16LoweringTest, LoweringsTakeBFloat16UpToTheKernelStore) {
  const Layout layout = GetParam();
  const std::vector<absl::Status> results = LowerEachNode(layout);
  const char* names[] = {"'bn'", "'bn.grad'", "'bn_act'", "'bn_act.grad'", "'bn.twin'"};
  ASSERT_EQ(results.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(results[i].code(), absl::StatusCode::kFailedPrecondition) << results[i];
    EXPECT_THAT(results[i].message(), AllOf(HasSubstr(names[i]), HasSubstr("kernel store")));
    if (layout == Layout::kNCHW) EXPECT_THAT(results[i].message(), HasSubstr("nchw"));
  }
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, BatchNormBFloat16LoweringTest,
                         ::testing::Values(Layout::kNHWC, Layout::kNCHW),
                         [](const auto& info) { return std::string(LayoutName(info.param)); });

// A graph built in bfloat16 throughout (per-channel tensors too) has no GPU batch norm: the NHWC
// lowering names the node and the per-channel input.
TEST(BatchNormBFloat16Test, BFloat16PerChannelTensorsAreRefusedByName) {
  Graph g;
  const TensorSpec image{ImageShape(Layout::kNHWC), DType::kBFloat16};
  const TensorSpec channel{Shape{kC}, DType::kBFloat16};
  const Value x = *g.AddInput("x", image);
  const Value c = *g.AddInput("c", channel);
  const Value rm = *g.AddState("rm", channel, Initializer::Zeros());
  const Value rv = *g.AddState("rv", channel, Initializer::Constant(1));
  auto bn = g.AddOp(ops::BatchNormTrainOp(), "bn16", {x, c, c, rm, rv}, LayoutAttrs(Layout::kNHWC));
  ASSERT_TRUE(bn.ok()) << bn.status();
  const Node& node = g.node((*bn)[0].node);
  const absl::Status s = node.op->lower(FakeContext(g, node), node).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("node 'bn16'"), HasSubstr("float32 per-channel"),
                                 HasSubstr("bf16[8] for input 1")));
}

}  // namespace
}  // namespace reprise
