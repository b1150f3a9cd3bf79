// causal_attention and its gradient on the GPU against the CPU reference: bfloat16 and float16
// through cuDNN's fused flash attention (at GPT-2's shapes and a small odd one), float32 through
// our own kernels; the same bits on every run when deterministic; and the op inside a captured
// Trainer step agreeing bit for bit with eager execution.
//
// The CPU reference widens 16-bit inputs and computes in float (double sums), rounding only y and
// the gradients; cuDNN rounds the probabilities to 16 bits before multiplying by v (and dS before
// the dQ, dK products), so its results differ by a few 16-bit roundings: relative L2 errors of a
// few 2^-8 for bfloat16, a few 2^-11 for float16.
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/nn_attention.h"
#include "reprise/reprise.h"
#include "src/ir/reference_executor.h"
#include "src/ops/attention.h"
#include "tests/gpu/gpu_graph_run.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

struct AttentionCase {
  std::string name;
  int64_t batch, heads, seq, head_dim;
  bool packed;
  DType dtype;
  double tolerance;  // Relative L2 error of every output against the CPU reference.
  const char* runs;  // What Describe() of the launches names.
};

// A forward node and its gradient node reading the forward's outputs and a random dy.
struct AttentionGraph {
  Graph g;
  std::vector<Value> forward;  // y, stats
  std::vector<Value> grads;    // dqkv, or dq, dk, dv
};

AttentionGraph Build(const AttentionCase& c) {
  AttentionGraph a;
  Graph& g = a.g;
  const int64_t width = c.heads * c.head_dim;
  const Initializer random = Initializer::Uniform(-1, 1);
  std::vector<Value> inputs;
  if (c.packed) {
    inputs.push_back(*g.AddConstant("qkv", {Shape{c.batch, c.seq, 3 * width}, c.dtype}, random));
  } else {
    for (const char* name : {"q", "k", "v"}) {
      inputs.push_back(*g.AddConstant(name, {Shape{c.batch, c.seq, width}, c.dtype}, random));
    }
  }
  const Attrs attrs{{"heads", c.heads}};
  a.forward = *g.AddOp(ops::CausalAttentionOp(), "attn", inputs, attrs);
  Value dy = *g.AddConstant("dy", {Shape{c.batch, c.seq, width}, c.dtype}, random);
  inputs.push_back(a.forward[0]);
  inputs.push_back(a.forward[1]);
  inputs.push_back(dy);
  a.grads = *g.AddOp(ops::CausalAttentionGradOp(), "attn.grad", inputs, attrs);
  return a;
}

class AttentionGpuTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionGpuTest, ForwardAndBackwardMatchCpuReference) {
  REPRISE_REQUIRE_GPU();
  const AttentionCase& c = GetParam();
  AttentionGraph a = Build(c);
  ir::ReferenceExecutor cpu(a.g, false, 81);
  for (bool deterministic : {false, true}) {
    std::vector<std::string> described;
    ExpectGpuMatchesCpu(a.g, cpu, c.tolerance, {}, deterministic, false, &described);
    ASSERT_EQ(described.size(), 3u);  // The input copy, then the two nodes.
    EXPECT_THAT(described[1], HasSubstr(c.runs));
    EXPECT_THAT(described[2], HasSubstr(c.runs));
  }
}

TEST_P(AttentionGpuTest, DeterministicRunsGiveTheSameBits) {
  REPRISE_REQUIRE_GPU();
  const AttentionCase& c = GetParam();
  AttentionGraph a = Build(c);
  ir::ReferenceExecutor leaves(a.g, false, 82);
  std::vector<Value> fetch = a.forward;
  fetch.insert(fetch.end(), a.grads.begin(), a.grads.end());
  REPRISE_ASSERT_OK_AND_ASSIGN(auto first, RunOnGpu(a.g, leaves, fetch, /*deterministic=*/true));
  REPRISE_ASSERT_OK_AND_ASSIGN(auto second, RunOnGpu(a.g, leaves, fetch, /*deterministic=*/true));
  for (size_t i = 0; i < fetch.size(); ++i) {
    ASSERT_EQ(first[i].size(), second[i].size());
    EXPECT_EQ(std::memcmp(first[i].raw(), second[i].raw(), first[i].spec().bytes()), 0)
        << "output " << i << " differs between two runs";
  }
}

// A few roundings of the type (bfloat16: 8 significant bits, 2^-8 = 3.9e-3; float16: 11,
// 4.9e-4), and float32 sums against double ones.
constexpr double kBf16Tolerance = 3e-2;
constexpr double kF16Tolerance = 1e-2;
constexpr double kF32Tolerance = 1e-5;

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionGpuTest,
    ::testing::Values(
        AttentionCase{"Gpt2Bf16", 2, 12, 256, 64, true, DType::kBFloat16, kBf16Tolerance,
                      "cudnn sdpa"},
        AttentionCase{"Gpt2F16", 2, 12, 256, 64, true, DType::kFloat16, kF16Tolerance,
                      "cudnn sdpa"},
        // 37 positions: no multiple of any tile; separate q, k and v.
        AttentionCase{"OddBf16", 1, 3, 37, 32, false, DType::kBFloat16, kBf16Tolerance,
                      "cudnn sdpa"},
        AttentionCase{"OddPackedF16", 3, 2, 45, 16, true, DType::kFloat16, kF16Tolerance,
                      "cudnn sdpa"},
        // A head width cuDNN does not take (not a multiple of 8): our kernels, in bfloat16.
        AttentionCase{"NarrowHeadBf16", 2, 3, 19, 6, true, DType::kBFloat16, kBf16Tolerance,
                      "reprise_attention"},
        AttentionCase{"OddF32", 2, 3, 37, 24, true, DType::kFloat32, kF32Tolerance,
                      "reprise_attention"},
        AttentionCase{"Gpt2F32", 2, 12, 128, 64, false, DType::kFloat32, kF32Tolerance,
                      "reprise_attention"}),
    [](const ::testing::TestParamInfo<AttentionCase>& info) { return info.param.name; });

// A GPT-2-like block in miniature: c_attn (Linear to 3·C), attention on the packed output (rank
// 2, attr seq), c_proj, a classifier. Mixed precision puts the attention in bfloat16.
struct TinyTransformer {
  Graph graph;
  Value loss;
  int64_t rows;  // batch · seq
  int64_t features;
};

TinyTransformer BuildTinyTransformer() {
  TinyTransformer m;
  const int64_t batch = 2, seq = 64, width = 128, heads = 2, classes = 10;
  m.rows = batch * seq;
  m.features = width;
  Graph& g = m.graph;
  Value x = *g.AddInput("features", {Shape{m.rows, width}, DType::kFloat32});
  Value labels = *g.AddInput("labels", {Shape{m.rows}, DType::kInt32});
  Value qkv = *nn::Linear(g, x, 3 * width, "c_attn");
  Value y = *nn::CausalAttention(g, qkv, heads, "attn", seq);
  Value proj = *nn::Linear(g, y, width, "c_proj");
  Value logits = *nn::Linear(g, *nn::Add(g, x, proj, "residual"), classes, "head");
  m.loss = *nn::SoftmaxCrossEntropy(g, logits, labels, "loss");
  return m;
}

TEST(AttentionTrainerGpuTest, CapturedStepsAgreeWithEagerBitForBit) {
  REPRISE_REQUIRE_GPU();
  TinyTransformer m = BuildTinyTransformer();
  TrainOptions options;
  options.numerics.compute_dtype = DType::kBFloat16;
  options.numerics.deterministic = true;
  options.optimizer = OptimizerOptions{.kind = OptimizerKind::kAdamW, .learning_rate = 1e-3f};
  REPRISE_ASSERT_OK_AND_ASSIGN(auto trainer, Trainer::Create(m.graph, m.loss, options));
  std::vector<float> x(m.rows * m.features);
  std::vector<int32_t> labels(m.rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919 % 2001) / 1000.0 - 1);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i * 31 % 10);
  REPRISE_ASSERT_OK(trainer->SetInput("features", x));
  REPRISE_ASSERT_OK(trainer->SetInput("labels", labels));
  for (int s = 0; s < 3; ++s) REPRISE_ASSERT_OK(trainer->Step());
  REPRISE_ASSERT_OK_AND_ASSIGN(const VerifyResult result, trainer->Verify(10));
  EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(result.steps, 10);
  // The loss falls: the gradients through the attention are used.
  REPRISE_ASSERT_OK_AND_ASSIGN(const float first, trainer->Loss());
  for (int s = 0; s < 30; ++s) REPRISE_ASSERT_OK(trainer->Step());
  REPRISE_ASSERT_OK_AND_ASSIGN(const float later, trainer->Loss());
  EXPECT_LT(later, first);
}

}  // namespace
}  // namespace reprise
