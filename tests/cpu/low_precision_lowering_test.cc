// 16-bit (bfloat16 and float16) GPU lowerings, the parts visible without a device: which ops have
// them, that their kernels exist per element type under distinct names and compile with NVRTC,
// that the fuse pass chains 16-bit ops as it chains float32 ones, and that tensors of another
// type, or of mixed types, are refused by name before any kernel is built.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "capture/lowered_step.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/nn.h"
#include "src/autodiff/autodiff.h"
#include "src/codegen/conv_kernels.h"
#include "src/codegen/element_type.h"
#include "src/codegen/fused_kernels.h"
#include "src/codegen/generated_kernel.h"
#include "src/codegen/pooling_kernels.h"
#include "src/codegen/transpose_kernels.h"
#include "src/ir/reference_executor.h"
#include "src/ops/conv.h"
#include "src/ops/fused_pointwise.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/masked_loss.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/ops/transpose.h"
#include "src/passes/fuse.h"
#include "src/passes/memory_plan.h"
#include "src/passes/schedule.h"
#include "src/runtime/kernel_store.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr DType kBf16 = DType::kBFloat16;

// The 16-bit element types: each kernel's twin of its float32 kernel, named with their suffix.
class SixteenBitLoweringTest : public ::testing::TestWithParam<DType> {
 protected:
  std::string Suffix() const { return codegen::ElementKernelName("", GetParam()); }
};

TEST(Bf16LoweringTest, OpsWithBfloat16KernelsSaySo) {
  for (const ir::OpDef* op : {&ops::MaxPool2dOp(), &ops::MaxPool2dGradOp(), &ops::GlobalAvgPoolOp(),
                              &ops::GlobalAvgPoolGradOp(), &ops::FlattenOp(), &ops::ReshapeOp(),
                              &ops::AddOp(), &ops::ReluOp(), &ops::ReluGradOp(), &ops::BiasAddOp(),
                              &ops::ColumnSumOp(), &ops::FusedPointwiseOp(), &ops::TransposeOp(),
                              &ops::ChannelBiasAddOp(), &ops::ChannelSumOp()}) {
    EXPECT_TRUE(op->low_precision_lowering) << op->name;
  }
}

// Every kernel list in every type: the 16-bit kernel of each float32 one, named apart (so all
// can live in one kernel store), reading 16-bit elements, and compiling for sm_90.
TEST_P(SixteenBitLoweringTest, EveryKernelHasADistinctTwinThatCompiles) {
  const DType dtype = GetParam();
  std::vector<std::pair<codegen::GeneratedKernel, codegen::GeneratedKernel>> twins = {
      {codegen::Add(), codegen::Add(dtype)},
      {codegen::Relu(), codegen::Relu(dtype)},
      {codegen::ReluGrad(), codegen::ReluGrad(dtype)},
      {codegen::BiasAdd(), codegen::BiasAdd(dtype)},
      {codegen::ColumnSum(), codegen::ColumnSum(dtype)},
      {codegen::MaxPool2d(), codegen::MaxPool2d(dtype)},
      {codegen::MaxPool2dGrad(), codegen::MaxPool2dGrad(dtype)},
      {codegen::GlobalAvgPoolNchw(), codegen::GlobalAvgPoolNchw(dtype)},
      {codegen::GlobalAvgPoolNhwc(), codegen::GlobalAvgPoolNhwc(dtype)},
      {codegen::GlobalAvgPoolGrad(), codegen::GlobalAvgPoolGrad(dtype)},
      {codegen::ChannelBiasAdd(), codegen::ChannelBiasAdd(dtype)},
      {codegen::ChannelSum(), codegen::ChannelSum(dtype)}};
  // The transposes move elements as words: their 16-bit kernels are listed under bfloat16 only.
  if (dtype == DType::kBFloat16) {
    twins.push_back({codegen::TransposeTiled(), codegen::TransposeTiled(dtype)});
    twins.push_back({codegen::TransposeGather(), codegen::TransposeGather(dtype)});
  }
  for (bool column_sum : {false, true}) {
    codegen::FusedPointwiseSpec spec{
        .inputs = {codegen::Broadcast::kFull, codegen::Broadcast::kRow},
        .expressions = {"in0 + in1", "(s0 > 0.0f ? s0 : 0.0f)"},
        .outputs = {0, 1},
        .column_sum = column_sum ? 0 : -1};
    codegen::FusedPointwiseSpec half = spec;
    half.dtype = dtype;
    twins.push_back({codegen::FusedPointwise(spec), codegen::FusedPointwise(half)});
  }
  for (const auto& [f32, half] : twins) {
    EXPECT_FALSE(absl::EndsWith(f32.name, Suffix())) << f32.name;
    EXPECT_EQ(half.name, f32.name + Suffix());
    EXPECT_THAT(half.code, HasSubstr("extern \"C\" __global__ void " + half.name + "("));
    EXPECT_THAT(half.code, HasSubstr("typedef unsigned short"));
    EXPECT_THAT(f32.code, ::testing::Not(HasSubstr("unsigned short")));
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(half), "sm_90");
    ASSERT_TRUE(compiled.ok()) << half.name << ": " << compiled.status();
    EXPECT_FALSE(compiled->cubin.empty()) << half.name;
  }
}

// The lists the kernel store warms (and the compile tests walk) hold every type.
TEST_P(SixteenBitLoweringTest, KernelListsHoldEveryType) {
  auto has = [](const std::vector<codegen::GeneratedKernel>& list, const std::string& name) {
    for (const codegen::GeneratedKernel& k : list) {
      if (k.name == name) return true;
    }
    return false;
  };
  const std::vector<std::pair<std::vector<codegen::GeneratedKernel>, std::vector<std::string>>>
      lists = {{codegen::AllKernels(),
                {"reprise_relu", "reprise_column_sum", "reprise_bias_add", "reprise_add",
                 "reprise_relu_grad"}},
               {codegen::PoolingKernels(),
                {"reprise_max_pool2d", "reprise_max_pool2d_grad", "reprise_global_avg_pool_nchw",
                 "reprise_global_avg_pool_nhwc", "reprise_global_avg_pool_grad"}},
               {codegen::ConvKernels(), {"reprise_channel_bias_add", "reprise_channel_sum"}}};
  for (const auto& [list, names] : lists) {
    for (const std::string& name : names) {
      EXPECT_TRUE(has(list, name)) << name;
      EXPECT_TRUE(has(list, name + Suffix())) << name + Suffix();
    }
  }
  if (GetParam() != DType::kBFloat16) return;  // The transposes', as above.
  for (const char* name : {"reprise_transpose_tiled_bf16", "reprise_transpose_gather_bf16"}) {
    EXPECT_TRUE(has(codegen::TransposeKernels(), name)) << name;
  }
}

// A lowering's context with `node`'s input specs replaced by `specs` (no device: the element type
// check comes before any kernel is built).
absl::StatusOr<std::unique_ptr<ops::GpuKernel>> LowerWith(const Node& node,
                                                          std::vector<TensorSpec> specs) {
  ops::LoweringContext ctx;
  ctx.input_specs = std::move(specs);
  ctx.inputs.assign(ctx.input_specs.size(), nullptr);
  ctx.outputs.assign(node.outputs.size(), nullptr);
  return node.op->lower(ctx, node);
}

std::vector<TensorSpec> WithDType(const Graph& g, const Node& node, DType dtype) {
  std::vector<TensorSpec> specs;
  for (const Value& v : node.inputs) specs.push_back({g.spec(v).shape, dtype});
  return specs;
}

Attrs PoolAttrs() {
  return {{"kernel_h", 3}, {"kernel_w", 3}, {"stride_h", 2},
          {"stride_w", 2}, {"pad_h", 1},    {"pad_w", 1}};
}

// Nodes built in float32; their lowerings then see float64 or float16 inputs (against float32
// outputs), which no kernel reads.
TEST(Bf16LoweringTest, OtherTypesAreRefusedNamingTheNode) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{2, 4, 8, 8}});
  Value m = *g.AddInput("m", {Shape{6, 5}});
  Value bias = *g.AddInput("bias", {Shape{5}});
  Value pooled = *g.AddOp1(ops::MaxPool2dOp(), "pool", {x}, PoolAttrs());
  ASSERT_TRUE(g.AddOp1(ops::MaxPool2dGradOp(), "pool_grad", {pooled, x, pooled}, PoolAttrs()).ok());
  Value mean = *g.AddOp1(ops::GlobalAvgPoolOp(), "gap", {x});
  ASSERT_TRUE(
      g.AddOp1(ops::GlobalAvgPoolGradOp(), "gap_grad", {mean}, {{"height", 8}, {"width", 8}}).ok());
  Value sum = *g.AddOp1(ops::AddOp(), "add", {m, m});
  Value y = *g.AddOp1(ops::ReluOp(), "relu", {sum});
  ASSERT_TRUE(g.AddOp1(ops::ReluGradOp(), "relu_grad", {m, y}).ok());
  ASSERT_TRUE(g.AddOp1(ops::BiasAddOp(), "bias_add", {m, bias}).ok());
  ASSERT_TRUE(g.AddOp1(ops::ColumnSumOp(), "column_sum", {m}).ok());
  Value channel_bias = *g.AddInput("channel_bias", {Shape{4}});
  ASSERT_TRUE(g.AddOp1(ops::ChannelBiasAddOp(), "channel_bias_add", {x, channel_bias}).ok());
  ASSERT_TRUE(g.AddOp1(ops::ChannelSumOp(), "channel_sum", {x}).ok());
  for (DType dtype : {DType::kFloat64, DType::kFloat16}) {
    for (const Node& node : g.nodes()) {
      if (ir::IsLeaf(node)) continue;
      auto lowered = LowerWith(node, WithDType(g, node, dtype));
      EXPECT_THAT(lowered.status(),
                  ::testing::Property(&absl::Status::code, absl::StatusCode::kUnimplemented))
          << node.name;
      EXPECT_THAT(lowered.status().message(),
                  AllOf(HasSubstr("node '" + node.name + "': " + std::string(node.op_name())),
                        HasSubstr("runs on the GPU in float32, bfloat16 or float16"),
                        HasSubstr(std::string(DTypeName(dtype)))))
          << node.name;
    }
  }
}

// A chain the fuse pass built over a 16-bit type: its kernel is that type's; inputs of mixed types
// (which the fuse pass never makes: each op's shape rule keeps its inputs' type) are refused by
// name rather than read as the wrong bytes.
TEST_P(SixteenBitLoweringTest, FusedChainKernelFollowsItsTypeAndMixedTypesAreRefused) {
  const DType dtype = GetParam();
  ops::PointwiseProgram program;
  program.steps.push_back({&ops::BiasAddOp(), {0, 1}});
  program.steps.push_back({&ops::ReluOp(), {ops::PointwiseProgram::StepOperand(0)}});
  program.outputs = {1};
  program.column_sum = 1;
  Graph g;
  Value x = *g.AddInput("x", {Shape{6, 5}, dtype});
  Value b = *g.AddInput("b", {Shape{5}, dtype});
  auto out = g.AddOp(ops::FusedPointwiseOp(), "fc.bias+fc.relu", {x, b}, program.ToAttrs());
  ASSERT_TRUE(out.ok()) << out.status();
  const Node& node = g.node((*out)[0].node);
  auto source = ops::FusedPointwiseKernel(node);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(source->name, "reprise_fused_pointwise_colsum" + Suffix());

  auto mixed = LowerWith(node, {{Shape{6, 5}, dtype}, {Shape{5}, DType::kFloat32}});
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(mixed.status().message(),
              AllOf(HasSubstr("node 'fc.bias+fc.relu': fused_pointwise"),
                    HasSubstr("all its tensors of one type"), HasSubstr("f32[5]")));
}

// The fuse pass chains 16-bit ops as it chains float32 ones: bias_add -> relu -> relu_grad and
// the bias gradient become one fused node whose kernel is the 16-bit one. Its reference (the
// steps in float, one rounding per stored value) equals the unfused 16-bit ops' here: relu and
// relu_grad commute with rounding, and the column sums add values that the type holds exactly.
TEST_P(SixteenBitLoweringTest, FusePassChainsSixteenBitOpsIntoOneKernelOfTheirType) {
  const DType dtype = GetParam();
  Graph g;
  Value x = *g.AddConstant("x", {Shape{75, 41}, dtype}, Initializer::Uniform(-1, 1));
  Value bias = *g.AddConstant("bias", {Shape{41}, dtype}, Initializer::Uniform(-1, 1));
  Value dy = *g.AddConstant("dy", {Shape{75, 41}, dtype}, Initializer::Uniform(-1, 1));
  Value y =
      *g.AddOp1(ops::ReluOp(), "fc.relu", {*g.AddOp1(ops::BiasAddOp(), "fc.bias", {x, bias})});
  Value dx = *g.AddOp1(ops::ReluGradOp(), "fc.relu.grad", {dy, y});
  Value db = *g.AddOp1(ops::ColumnSumOp(), "fc.bias.grad", {dx});
  const std::vector<Value> kept = {y, dx, db};
  autodiff::TrainingGraph training;
  training.graph = g;
  training.loss = y;
  passes::FuseOptions options;
  options.whole_mlp_step = false;
  auto fused = passes::Fuse(training, kept, options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  const Graph& fg = fused->training.graph;
  std::vector<const Node*> launches;
  for (const Node& n : fg.nodes()) {
    if (!ir::IsLeaf(n)) launches.push_back(&n);
  }
  ASSERT_EQ(launches.size(), 1u);
  ASSERT_EQ(launches[0]->op, &ops::FusedPointwiseOp());
  auto source = ops::FusedPointwiseKernel(*launches[0]);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(source->name, "reprise_fused_pointwise_colsum" + Suffix());

  ir::ReferenceExecutor unfused_cpu(g, false, 81), fused_cpu(fg, false, 81);
  ASSERT_TRUE(unfused_cpu.Run().ok());
  ASSERT_TRUE(fused_cpu.Run().ok());
  for (const Value& v : kept) {
    const ir::HostTensor* want = *unfused_cpu.Tensor(v);
    const ir::HostTensor* got = *fused_cpu.Tensor(fused->values.at(v));
    ASSERT_EQ(got->spec(), want->spec());
    EXPECT_EQ(std::memcmp(got->raw(), want->raw(), want->spec().bytes()), 0) << g.node(v.node).name;
  }
}

INSTANTIATE_TEST_SUITE_P(BFloat16AndFloat16, SixteenBitLoweringTest,
                         ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(Bf16LoweringTest, TransposeOfEightByteElementsIsRefusedNamingTheNode) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{2, 3, 4, 5}});
  Value y =
      *g.AddOp1(ops::TransposeOp(), "x.to_nhwc", {x}, {{"perm", std::string(ops::kNchwToNhwc)}});
  auto lowered = LowerWith(g.node(y.node), {{Shape{2, 3, 4, 5}, DType::kFloat64}});
  EXPECT_EQ(lowered.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(lowered.status().message(),
              AllOf(HasSubstr("node 'x.to_nhwc'"), HasSubstr("f32, i32, bf16 and f16")));
}

// Lowering a plan refuses a 16-bit node whose op has no such kernels before lowering it: a
// bfloat16 masked loss (it stays float32 under mixed precision) and a float16 dropout.
TEST(Bf16LoweringTest, PlanLoweringRefusesSixteenBitNodesWithoutKernelsByName) {
  struct Case {
    std::string node;
    Graph graph;
  };
  std::vector<Case> cases(2);
  {
    Graph& g = cases[0].graph;
    cases[0].node = "loss";
    Value z = *g.AddInput("z", {Shape{8, 4}, kBf16});
    Value labels = *g.AddInput("labels", {Shape{8}, DType::kInt32});
    ASSERT_TRUE(g.AddOp1(ops::MaskedSoftmaxCrossEntropyOp(), "loss", {z, labels}).ok());
  }
  {
    Graph& g = cases[1].graph;  // dropout has no 16-bit lowering (relu's serves float16 too).
    cases[1].node = "drop16";
    Value x = *g.AddInput("x", {Shape{8, 4}, DType::kFloat16});
    ASSERT_TRUE(nn::Dropout(g, x, 0.5, "drop16").ok());
  }
  for (const Case& c : cases) {
    auto schedule = passes::Schedule(c.graph);
    ASSERT_TRUE(schedule.ok()) << schedule.status();
    std::vector<Value> outputs;
    for (const Node& n : c.graph.nodes()) outputs.push_back({n.id, 0});
    auto memory = passes::PlanMemory(c.graph, absl::MakeSpan(*schedule), outputs);
    ASSERT_TRUE(memory.ok()) << memory.status();
    passes::Plan plan;
    plan.training.graph = c.graph;
    plan.launches = *schedule;
    plan.memory = *memory;
    // Host memory standing in for the arena: nothing is launched, addresses are only computed.
    std::vector<char> arena(memory->arena_bytes + 1), staging(memory->input_bytes + 1);
    const capture::StepResources res{.arena = arena.data(), .input_staging = staging.data()};
    auto lowered = capture::LowerPlan(plan, res);
    EXPECT_EQ(lowered.status().code(), absl::StatusCode::kUnimplemented) << c.node;
    EXPECT_THAT(lowered.status().message(),
                AllOf(HasSubstr("node '" + c.node + "'"), HasSubstr("has no GPU lowering for")))
        << c.node;
  }
}

}  // namespace
}  // namespace reprise
