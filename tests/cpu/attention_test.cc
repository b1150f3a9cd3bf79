// causal_attention and causal_attention_grad on the CPU: shape rules, the reference against a case
// worked by hand, and gradients against central finite differences in float64.
#include "src/ops/attention.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/nn.h"
#include "reprise/nn_attention.h"
#include "src/autodiff/autodiff.h"
#include "src/codegen/attention_kernels.h"
#include "src/ir/reference_executor.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/ops.h"
#include "src/ops/pooling.h"
#include "src/passes/mixed_precision.h"
#include "src/runtime/cudnn_sdpa.h"
#include "src/runtime/kernel_store.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using testing::ExpectGradientsMatchFiniteDifferences;
using ::testing::HasSubstr;
using testing::TestInit;

constexpr DType kF32 = DType::kFloat32;

absl::Status AddStatus(Graph& g, std::vector<Value> inputs, Attrs attrs) {
  return g.AddOp(ops::CausalAttentionOp(), "h0.attn", std::move(inputs), std::move(attrs)).status();
}

TEST(AttentionShapeTest, PackedGivesOutputAndFloat32Statistics) {
  Graph g;
  Value qkv = *g.AddInput("qkv", {Shape{2, 7, 3 * 12}, DType::kBFloat16});
  auto out = g.AddOp(ops::CausalAttentionOp(), "attn", {qkv}, {{"heads", int64_t{3}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(g.spec((*out)[0]), (TensorSpec{Shape{2, 7, 12}, DType::kBFloat16}));
  EXPECT_EQ(g.spec((*out)[1]), (TensorSpec{Shape{2, 3, 7}, kF32}));
}

TEST(AttentionShapeTest, FlatInputsNeedSeqAndGiveAFlatOutput) {
  Graph g;
  Value q = *g.AddInput("q", {Shape{14, 8}, kF32});
  auto out = g.AddOp(ops::CausalAttentionOp(), "attn", {q, q, q},
                     {{"heads", int64_t{2}}, {"seq", int64_t{7}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(g.spec((*out)[0]), (TensorSpec{Shape{14, 8}, kF32}));
  EXPECT_EQ(g.spec((*out)[1]), (TensorSpec{Shape{2, 2, 7}, kF32}));
  const absl::Status no_seq = AddStatus(g, {q}, {{"heads", int64_t{2}}});
  EXPECT_EQ(no_seq.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_seq.message(), AllOf(HasSubstr("h0.attn"), HasSubstr("seq")));
}

TEST(AttentionShapeTest, ErrorsNameTheNodeAndTheShapes) {
  Graph g;
  Value qkv = *g.AddInput("qkv", {Shape{2, 7, 30}, kF32});
  Value q = *g.AddInput("q", {Shape{2, 7, 12}, kF32});
  Value k = *g.AddInput("k", {Shape{2, 8, 12}, kF32});
  Value x4 = *g.AddInput("x4", {Shape{2, 7, 3, 12}, kF32});
  Value ids = *g.AddInput("ids", {Shape{2, 7, 12}, DType::kInt32});
  const struct {
    std::vector<Value> inputs;
    Attrs attrs;
    std::string says;
  } cases[] = {
      {{qkv}, {{"heads", int64_t{4}}}, "[2, 7, 30]"},  // 30 is not 3 x 4 heads of equal width.
      {{q, k, q}, {{"heads", int64_t{2}}}, "[2, 8, 12]"},
      {{x4}, {{"heads", int64_t{2}}}, "[2, 7, 3, 12]"},
      {{ids}, {{"heads", int64_t{2}}}, "float"},
      {{q}, {}, "heads"},
      {{q}, {{"heads", int64_t{0}}}, "heads"},
      {{q, k}, {{"heads", int64_t{2}}}, "1 or 3 inputs"},
  };
  for (const auto& c : cases) {
    const absl::Status status = AddStatus(g, c.inputs, c.attrs);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_THAT(status.message(), AllOf(HasSubstr("h0.attn"), HasSubstr(c.says)));
  }
}

TEST(AttentionShapeTest, GradChecksTheSavedStatistics) {
  Graph g;
  Value qkv = *g.AddInput("qkv", {Shape{2, 5, 18}, kF32});
  Value y = *g.AddInput("y", {Shape{2, 5, 6}, kF32});
  Value stats = *g.AddInput("stats", {Shape{2, 2, 5}, kF32});
  Value bad_stats = *g.AddInput("bad_stats", {Shape{2, 5, 2}, kF32});
  auto d = g.AddOp(ops::CausalAttentionGradOp(), "g", {qkv, y, stats, y}, {{"heads", int64_t{2}}});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(g.spec((*d)[0]), g.spec(qkv));
  const absl::Status bad = g.AddOp(ops::CausalAttentionGradOp(), "h0.attn.grad",
                                   {qkv, y, bad_stats, y}, {{"heads", int64_t{2}}})
                               .status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), AllOf(HasSubstr("h0.attn.grad"), HasSubstr("stats"),
                                   HasSubstr("[2, 5, 2]"), HasSubstr("[2, 2, 5]")));
}

// One batch, two positions, two heads of width 4 (scale 1/2). Head 0: k0 = 0, q1 = (2, 0, 0, 0)
// and k1 = (ln 3, 0, 0, 0), so position 1 scores s10 = 0 and s11 = ln 3: softmax (1/4, 3/4),
// y1 = v0 / 4 + 3 v1 / 4, stats1 = log(1 + 3). Position 0 sees only itself: y0 = v0 and
// stats0 = s00 = 0. Head 1 scores all zero: y1 is the mean of v0 and v1, stats1 = log 2.
class AttentionReferenceTest : public ::testing::TestWithParam<bool> {};

TEST_P(AttentionReferenceTest, MatchesAHandWorkedCase) {
  const bool packed = GetParam();
  const double ln3 = std::log(3.0);
  // [T = 2][C = 8]: head 0 in columns 0-3, head 1 in 4-7.
  const std::vector<double> q = {5, 1, 1, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0};
  const std::vector<double> k = {0, 0, 0, 0, 0, 0, 0, 0, ln3, 0, 0, 0, 0, 0, 0, 0};
  const std::vector<double> v = {2, 0, 1, 0, 1, 2, 3, 4, 6, 4, 1, 0, 3, 2, 1, 0};
  Graph g;
  std::vector<Value> inputs;
  if (packed) {
    inputs.push_back(*g.AddInput("qkv", {Shape{1, 2, 24}, kF32}));
  } else {
    for (const char* name : {"q", "k", "v"}) {
      inputs.push_back(*g.AddInput(name, {Shape{1, 2, 8}, kF32}));
    }
  }
  auto out = g.AddOp(ops::CausalAttentionOp(), "attn", inputs, {{"heads", int64_t{2}}});
  ASSERT_TRUE(out.ok()) << out.status();
  ir::ReferenceExecutor cpu(g, /*float64=*/false, 1);
  if (packed) {
    std::vector<double> qkv;
    for (int t = 0; t < 2; ++t) {
      for (const std::vector<double>* part : {&q, &k, &v}) {
        qkv.insert(qkv.end(), part->begin() + 8 * t, part->begin() + 8 * (t + 1));
      }
    }
    ASSERT_TRUE(cpu.SetLeaf("qkv", qkv).ok());
  } else {
    ASSERT_TRUE(cpu.SetLeaf("q", q).ok());
    ASSERT_TRUE(cpu.SetLeaf("k", k).ok());
    ASSERT_TRUE(cpu.SetLeaf("v", v).ok());
  }
  ASSERT_TRUE(cpu.Run().ok());
  const std::vector<float> y_expected = {2, 0, 1, 0, 1, 2, 3, 4,   // Position 0 sees v0 only.
                                         5, 3, 1, 0, 2, 2, 2, 2};  // (1/4, 3/4) and (1/2, 1/2).
  const std::vector<float> stats_expected = {0, static_cast<float>(std::log(4.0)),  // Head 0.
                                             0, static_cast<float>(std::log(2.0))};
  auto y = (*cpu.Tensor((*out)[0]))->data<float>();
  auto stats = (*cpu.Tensor((*out)[1]))->data<float>();
  for (size_t i = 0; i < y_expected.size(); ++i) EXPECT_NEAR(y[i], y_expected[i], 1e-5) << i;
  for (size_t i = 0; i < stats_expected.size(); ++i) {
    EXPECT_NEAR(stats[i], stats_expected[i], 1e-6) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(PackedAndSeparate, AttentionReferenceTest, ::testing::Bool());

// Gradients through a [4, 3] loss (softmax cross-entropy over 4 rows): the attention's output goes
// through a projection to 3 classes, so every element of every head reaches the loss.
const std::vector<int32_t> kLabels = {2, 0, 1, 2};

Value Loss(Graph& g, Value y) {
  Value w = *g.AddParameter("proj", {Shape{g.spec(y).shape.dim(1), 3}}, TestInit());
  Value logits = *g.AddOp1(ops::MatmulOp(), "logits", {y, w});
  Value labels = *g.AddInput("labels", {Shape{4}, DType::kInt32});
  return *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {logits, labels});
}

// Scores of ±1-ranged inputs stay in softmax's curved middle, where differences are informative.
TEST(AttentionGradientTest, PackedFlatMatchesFiniteDifferences) {
  Graph g;  // One sequence of 4 positions, 2 heads of width 3.
  Value qkv = *g.AddParameter("qkv", {Shape{4, 18}}, TestInit());
  auto y = nn::CausalAttention(g, qkv, 2, "attn", /*seq=*/4);
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectGradientsMatchFiniteDifferences(g, Loss(g, *y), kLabels, 71);
}

TEST(AttentionGradientTest, SeparateBatchedMatchesFiniteDifferences) {
  Graph g;  // Two sequences of 2 positions, 3 heads of width 2.
  Value q = *g.AddParameter("q", {Shape{2, 2, 6}}, TestInit());
  Value k = *g.AddParameter("k", {Shape{2, 2, 6}}, TestInit());
  Value v = *g.AddParameter("v", {Shape{2, 2, 6}}, TestInit());
  auto y = nn::CausalAttention(g, q, k, v, 3, "attn");
  ASSERT_TRUE(y.ok()) << y.status();
  Value flat = *g.AddOp1(ops::ReshapeOp(), "flat", {*y}, {{"shape", std::string("4,6")}});
  ExpectGradientsMatchFiniteDifferences(g, Loss(g, flat), kLabels, 72);
}

TEST(AttentionGradientTest, NoGradientFlowsIntoTheStatistics) {
  Graph g;
  Value qkv = *g.AddParameter("qkv", {Shape{1, 4, 9}}, TestInit());
  auto out = g.AddOp(ops::CausalAttentionOp(), "attn", {qkv}, {{"heads", int64_t{1}}});
  ASSERT_TRUE(out.ok());
  std::vector<bool> needs = {true};
  const absl::Status status = ops::CausalAttentionOp()
                                  .grad(g, g.node((*out)[0].node), {(*out)[0], (*out)[1]}, needs)
                                  .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("attn"), HasSubstr("statistics")));
}

// Mixed precision runs the attention in bfloat16 (its GPU lowering reads 16-bit data) with float32
// statistics, and autodiff's gradient node follows; the reference runs the whole step.
TEST(AttentionMixedPrecisionTest, RunsInBf16WithFloat32StatisticsAndABf16Gradient) {
  Graph g;
  Value x = *g.AddInput("features", {Shape{8, 16}, kF32});
  Value qkv = *nn::Linear(g, x, 48, "c_attn");
  auto y = nn::CausalAttention(g, qkv, 2, "attn", /*seq=*/4);
  ASSERT_TRUE(y.ok()) << y.status();
  Value logits = *nn::Linear(g, *y, 3, "head");
  Value labels = *g.AddInput("labels", {Shape{8}, DType::kInt32});
  Value loss = *nn::SoftmaxCrossEntropy(g, logits, labels, "loss");
  auto mixed = passes::ConvertToMixedPrecision(g, loss, {}, DType::kBFloat16);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  const Graph& m = mixed->graph;
  const Node& attn = m.node(*m.FindNode("attn"));
  EXPECT_EQ(m.spec(attn.inputs[0]).dtype, DType::kBFloat16);
  EXPECT_EQ(attn.outputs[0].dtype, DType::kBFloat16);
  EXPECT_EQ(attn.outputs[1].dtype, kF32);
  EXPECT_TRUE(attn.op->low_precision_lowering);
  auto training = autodiff::BuildBackward(m, mixed->loss);
  ASSERT_TRUE(training.ok()) << training.status();
  auto grad = training->graph.FindNode("attn.grad");
  ASSERT_TRUE(grad.ok()) << grad.status();
  EXPECT_EQ(training->graph.node(*grad).outputs[0], (TensorSpec{Shape{8, 48}, DType::kBFloat16}));
  ir::ReferenceExecutor cpu(training->graph, /*float64=*/false, 5);
  EXPECT_TRUE(cpu.Run().ok());
}

TEST(AttentionWorkspaceTest, BoundCoversTheBackwardAtGpt2Shapes) {
  Graph g;
  Value qkv = *g.AddInput("qkv", {Shape{16, 1024, 3 * 768}, DType::kBFloat16});
  Value y = *g.AddInput("y", {Shape{16, 1024, 768}, DType::kBFloat16});
  Value stats = *g.AddInput("stats", {Shape{16, 12, 1024}, kF32});
  EXPECT_EQ(ops::AttentionWorkspaceBound(g), 0u);
  ASSERT_TRUE(
      g.AddOp(ops::CausalAttentionGradOp(), "g", {qkv, y, stats, y}, {{"heads", int64_t{12}}})
          .ok());
  // At least the float32 dQ accumulator and the deterministic algorithm's [B, H, T, T] bf16
  // scratch.
  const size_t accumulator = size_t{16} * 12 * 1024 * 64 * 4;
  const size_t scratch = size_t{16} * 12 * 1024 * 1024 * 2;
  EXPECT_GE(ops::AttentionWorkspaceBound(g), accumulator + scratch);
}

TEST(SdpaShapeTest, CudnnTakesGpt2AndRefusesWhatItCannotRun) {
  runtime::SdpaShape gpt2{.batch = 16,
                          .heads = 12,
                          .seq = 1024,
                          .head_dim = 64,
                          .dtype = DType::kBFloat16,
                          .row_stride = 3 * 768};
  EXPECT_TRUE(runtime::SdpaShapeSupported(gpt2).ok());
  runtime::SdpaShape f32 = gpt2;
  f32.dtype = DType::kFloat32;
  EXPECT_EQ(runtime::SdpaShapeSupported(f32).code(), absl::StatusCode::kUnimplemented);
  runtime::SdpaShape narrow = gpt2;
  narrow.head_dim = 12;
  narrow.row_stride = 3 * 12 * 12;
  const absl::Status status = runtime::SdpaShapeSupported(narrow);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(), HasSubstr("multiple of 8"));
}

// Lowering refuses, naming the node, before it touches a device.
TEST(AttentionLoweringTest, RefusesFloat64AndCudnnWithoutAHandle) {
  for (DType dtype : {DType::kFloat64, DType::kBFloat16}) {
    Graph g;
    Value qkv = *g.AddInput("qkv", {Shape{2, 8, 48}, dtype});
    auto out = g.AddOp(ops::CausalAttentionOp(), "h3.attn", {qkv}, {{"heads", int64_t{2}}});
    ASSERT_TRUE(out.ok()) << out.status();
    ops::LoweringContext ctx;
    ctx.input_specs = {g.spec(qkv)};
    ctx.inputs = {nullptr};
    ctx.outputs = {nullptr, nullptr};
    const absl::Status status =
        ops::CausalAttentionOp().lower(ctx, g.node((*out)[0].node)).status();
    EXPECT_EQ(status.code(), dtype == DType::kFloat64 ? absl::StatusCode::kUnimplemented
                                                      : absl::StatusCode::kFailedPrecondition)
        << status;
    EXPECT_THAT(status.message(), HasSubstr("h3.attn"));
  }
}

// The float32 path's kernels (and their 16-bit forms) compile with NVRTC, no GPU needed.
TEST(AttentionKernelsTest, CompileForSm90InEveryElementType) {
  const std::vector<codegen::GeneratedKernel> kernels = codegen::AttentionKernels();
  ASSERT_EQ(kernels.size(), 9u);
  for (const codegen::GeneratedKernel& kernel : kernels) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
    EXPECT_NE(kernel.code.find(kernel.name), std::string::npos) << kernel.name;
  }
}

}  // namespace
}  // namespace reprise
