// The transformer ops on the GPU: layer_norm (and its gradient), gelu, embedding and add_positions
// against their CPU references in float32 and bfloat16 (relative L2 error 1e-5 and 1e-2: a
// bfloat16 result is within one rounding of the reference), the embedding gradient giving the same
// bits on every run, and a tiny model trained by Trainer (graph replay) against the CPU reference.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"
#include "src/ops/transformer_ops.h"
#include "tests/gpu/gpu_graph_run.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

double Tolerance(DType dtype) { return dtype == DType::kFloat32 ? 1e-5 : 1e-2; }

class TransformerOpsGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(TransformerOpsGpuTest, LayerNormAndGradientMatchCpuReference) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  // Odd widths (a partial warp stride; the scalar kernels), a narrow width of the vectorized
  // kernels (13 lanes of 32), GPT-2's width over many chunks of rows (the forward holding the row
  // in registers), and a width past what the forward holds (its three passes over memory).
  for (auto [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{{37, 50}, {37, 52}, {2048, 768}, {64, 1100}}) {
    Graph g;
    Value x = *g.AddConstant("x", {Shape{rows, cols}, dtype}, Initializer::Uniform(-2, 3));
    Value dy = *g.AddConstant("dy", {Shape{rows, cols}, dtype}, Initializer::Uniform(-1, 1));
    Value w = *g.AddConstant("w", {Shape{cols}}, Initializer::Uniform(0.5, 1.5));
    Value b = *g.AddConstant("b", {Shape{cols}}, Initializer::Uniform(-1, 1));
    auto ln = g.AddOp(ops::LayerNormOp(), "ln", {x, w, b});
    ASSERT_TRUE(ln.ok()) << ln.status();
    ASSERT_TRUE(
        g.AddOp(ops::LayerNormGradOp(), "ln_grad", {dy, x, w, (*ln)[1], (*ln)[2]}).status().ok());
    ir::ReferenceExecutor cpu(g, false, 1);
    ExpectGpuMatchesCpu(g, cpu, Tolerance(dtype));
  }
}

TEST_P(TransformerOpsGpuTest, GeluAndGradientMatchCpuReference) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  Graph g;
  Value x = *g.AddConstant("x", {Shape{75, 41}, dtype}, Initializer::Uniform(-4, 4));
  Value dy = *g.AddConstant("dy", {Shape{75, 41}, dtype}, Initializer::Uniform(-1, 1));
  ASSERT_TRUE(g.AddOp1(ops::GeluOp(), "gelu", {x}).ok());
  ASSERT_TRUE(g.AddOp1(ops::GeluGradOp(), "gelu_grad", {dy, x}).ok());
  ir::ReferenceExecutor cpu(g, false, 2);
  ExpectGpuMatchesCpu(g, cpu, Tolerance(dtype));
}

// Ids with heavy repeats (a third of them one token) across several sorted chunks, the last one
// partial; the table's rows no token names get zeros.
std::vector<int32_t> SkewedIds(int64_t n, int32_t vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> any(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i % 3 == 0 ? 7 : any(rng);
  return ids;
}

// A vocabulary that is not a multiple of the gradient's rows per block; a width of four-column
// loads and one of single columns.
TEST_P(TransformerOpsGpuTest, EmbeddingAndGradientMatchCpuReference) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  constexpr int64_t kB = 3, kT = 700, kVocab = 301;
  for (const int64_t width : {96, 50}) {
    SCOPED_TRACE(width);
    Graph g;
    Value ids = *g.AddInput("ids", {Shape{kB, kT}, DType::kInt32});
    Value table =
        *g.AddConstant("table", {Shape{kVocab, width}, dtype}, Initializer::Uniform(-1, 1));
    Value dy = *g.AddConstant("dy", {Shape{kB, kT, width}, dtype}, Initializer::Uniform(-1, 1));
    ASSERT_TRUE(g.AddOp1(ops::EmbeddingOp(), "wte", {ids, table}).ok());
    ASSERT_TRUE(g.AddOp1(ops::EmbeddingGradOp(), "wte_grad", {dy, ids}, {{"vocab", kVocab}}).ok());
    ir::ReferenceExecutor cpu(g, false, 3);
    ASSERT_TRUE(cpu.SetLeaf("ids", SkewedIds(kB * kT, kVocab, 4)).ok());
    std::vector<std::string> described;
    ExpectGpuMatchesCpu(g, cpu, Tolerance(dtype), {}, false, false, &described);
    // The forward copies 16-byte vectors where the width is whole vectors.
    bool vector_forward = false;
    for (const std::string& d : described) {
      vector_forward = vector_forward || d.find("reprise_embedding_vec") != std::string::npos;
    }
    EXPECT_EQ(vector_forward, width == 96);
  }
}

// A tied embedding's gradient sum: the base has more rows than the table (a padded output
// product's gradient), of which the kernel reads the first; both widths' loads.
TEST_P(TransformerOpsGpuTest, EmbeddingGradAddMatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  constexpr int64_t kTokens = 1500, kVocab = 301, kPadded = 384;
  for (const int64_t width : {96, 50}) {
    SCOPED_TRACE(width);
    Graph g;
    Value ids = *g.AddInput("ids", {Shape{kTokens}, DType::kInt32});
    Value dy = *g.AddConstant("dy", {Shape{kTokens, width}, dtype}, Initializer::Uniform(-1, 1));
    Value base =
        *g.AddConstant("base", {Shape{kPadded, width}, dtype}, Initializer::Uniform(-1, 1));
    ASSERT_TRUE(
        g.AddOp1(ops::EmbeddingGradAddOp(), "tied_grad", {dy, ids, base}, {{"vocab", kVocab}})
            .ok());
    ir::ReferenceExecutor cpu(g, false, 8);
    ASSERT_TRUE(cpu.SetLeaf("ids", SkewedIds(kTokens, kVocab, 9)).ok());
    ExpectGpuMatchesCpu(g, cpu, Tolerance(dtype));
  }
}

// The sum written over its base (embedding_grad_accumulate; the base a transient add of two
// tables, as a product's gradient is): the same bits as embedding_grad_add's table of its own, and
// the CPU reference's values (both read through the sum's exact double), with a vocabulary most of
// whose rows no token names (they keep the base's values), over one, three and sixteen sorted
// chunks (rows in several of them).
TEST_P(TransformerOpsGpuTest, EmbeddingGradAccumulateGivesEmbeddingGradAddsBits) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  constexpr int64_t kVocab = 3001, kPadded = 3072;
  for (const int64_t tokens : {int64_t{700}, int64_t{2500}, int64_t{16384}}) {
    for (const int64_t width : {96, 50}) {
      SCOPED_TRACE(absl::StrCat(tokens, " tokens, width ", width));
      std::vector<ir::HostTensor> sums;
      for (const bool in_place : {true, false}) {
        Graph g;
        Value ids = *g.AddInput("ids", {Shape{tokens}, DType::kInt32});
        Value dy = *g.AddConstant("dy", {Shape{tokens, width}, dtype}, Initializer::Uniform(-1, 1));
        const TensorSpec padded{Shape{kPadded, width}, dtype};
        Value a = *g.AddConstant("a", padded, Initializer::Uniform(-1, 1));
        Value b = *g.AddConstant("b", padded, Initializer::Uniform(-1, 1));
        Value base = *g.AddOp1(ops::AddOp(), "base", {a, b});
        auto sum = g.AddOp1(in_place ? ops::EmbeddingGradAccumulateOp() : ops::EmbeddingGradAddOp(),
                            "tied_grad", {dy, ids, base}, {{"vocab", kVocab}});
        ASSERT_TRUE(sum.ok()) << sum.status();
        // Written over the base, the sum is transient too (it cannot be kept): it is read through
        // its double, which is exact.
        Value doubled = *g.AddOp1(ops::AddOp(), "doubled", {*sum, *sum});
        ir::ReferenceExecutor cpu(g, false, 8);
        ASSERT_TRUE(cpu.SetLeaf("ids", SkewedIds(tokens, kVocab / 4, 9)).ok());
        auto run = RunOnGpu(g, cpu, {doubled});
        ASSERT_TRUE(run.ok()) << run.status();
        sums.push_back(std::move((*run)[0]));
        if (in_place) ExpectGpuMatchesCpu(g, cpu, Tolerance(dtype), {base, *sum});
      }
      ASSERT_EQ(sums[0].spec(), sums[1].spec());
      EXPECT_EQ(std::memcmp(sums[0].raw(), sums[1].raw(), sums[0].spec().bytes()), 0);
    }
  }
}

TEST_P(TransformerOpsGpuTest, EmbeddingGradientIsBitIdenticalAcrossRuns) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  constexpr int64_t kTokens = 8 * 1024, kVocab = 50257, kWidth = 64;
  Graph g;
  Value ids = *g.AddInput("ids", {Shape{kTokens}, DType::kInt32});
  Value dy = *g.AddConstant("dy", {Shape{kTokens, kWidth}, dtype}, Initializer::Uniform(-1, 1));
  Value dt = *g.AddOp1(ops::EmbeddingGradOp(), "wte_grad", {dy, ids}, {{"vocab", kVocab}});
  ir::ReferenceExecutor cpu(g, false, 5);
  ASSERT_TRUE(cpu.SetLeaf("ids", SkewedIds(kTokens, kVocab, 6)).ok());
  auto first = RunOnGpu(g, cpu, {dt});
  auto second = RunOnGpu(g, cpu, {dt});
  ASSERT_TRUE(first.ok() && second.ok()) << first.status() << second.status();
  const ir::HostTensor& a = (*first)[0];
  const ir::HostTensor& b = (*second)[0];
  ASSERT_EQ(a.spec(), b.spec());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.spec().bytes()), 0);
  ASSERT_TRUE(cpu.Run().ok());
  EXPECT_LT(RelativeL2(a, **cpu.Tensor(dt)), Tolerance(dtype));
}

// A width of whole 16-byte vectors (the vector kernels) and one that is not (the scalar ones).
TEST_P(TransformerOpsGpuTest, AddPositionsAndGradientMatchCpuReference) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  for (const int64_t width : {40, 42}) {
    SCOPED_TRACE(width);
    Graph g;
    Value x = *g.AddConstant("x", {Shape{6 * 5, width}, dtype}, Initializer::Uniform(-1, 1));
    Value table = *g.AddConstant("table", {Shape{8, width}, dtype}, Initializer::Uniform(-1, 1));
    Value dy = *g.AddConstant("dy", {Shape{6 * 5, width}, dtype}, Initializer::Uniform(-1, 1));
    ASSERT_TRUE(
        g.AddOp1(ops::AddPositionsOp(), "wpe", {x, table}, {{"positions", int64_t{5}}}).ok());
    ASSERT_TRUE(g.AddOp1(ops::AddPositionsGradOp(), "wpe_grad", {dy},
                         {{"positions", int64_t{5}}, {"table_rows", int64_t{8}}})
                    .ok());
    ir::ReferenceExecutor cpu(g, false, 7);
    std::vector<std::string> described;
    ExpectGpuMatchesCpu(g, cpu, Tolerance(dtype), {}, false, false, &described);
    const bool vectors = width % (dtype == DType::kFloat32 ? 4 : 8) == 0;
    int vector_kernels = 0;
    for (const std::string& d : described) vector_kernels += d.find("_vec") != std::string::npos;
    EXPECT_EQ(vector_kernels, vectors ? 2 : 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Float32AndBFloat16, TransformerOpsGpuTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// embedding + positions -> layer_norm -> linear -> gelu -> linear -> softmax cross-entropy.
constexpr int64_t kBatch = 4, kT = 16, kVocab = 50, kWidth = 32;
constexpr float kLearningRate = 0.1f;
struct Tiny {
  Graph graph;
  Value loss;
};
Tiny BuildTiny() {
  Tiny m;
  Graph& g = m.graph;
  Value ids = *g.AddInput("ids", {Shape{kBatch * kT}, DType::kInt32});
  Value labels = *g.AddInput("labels", {Shape{kBatch * kT}, DType::kInt32});
  Value x = *nn::Embedding(g, ids, kVocab, kWidth, "wte", 0.5);
  x = *nn::PositionEmbedding(g, x, kT, kT, "wpe", 0.5);
  x = *nn::LayerNorm(g, x, "ln");
  x = *nn::Gelu(g, *nn::Linear(g, x, 2 * kWidth, "fc"), "gelu");
  m.loss = *nn::SoftmaxCrossEntropy(g, *nn::Linear(g, x, kVocab, "proj"), labels, "loss");
  return m;
}
// Two batches in turn, each label a fixed function of its token and position: on the CPU
// reference the loss falls from 3.98 to 1.59 in 30 steps.
void MakeBatch(int step, std::vector<int32_t>& ids, std::vector<int32_t>& labels) {
  for (int64_t i = 0; i < kBatch * kT; ++i) {
    ids[i] = static_cast<int32_t>((i * 7 + (step % 2) * 11) % kVocab);
    labels[i] = static_cast<int32_t>((ids[i] * 3 + i % kT) % kVocab);
  }
}

std::unique_ptr<Trainer> MakeTrainer(const Tiny& m, ExecMode mode, DType compute) {
  TrainOptions options;
  options.launch.mode = mode;
  options.seed = 42;
  options.numerics.compute_dtype = compute;
  options.optimizer.learning_rate = kLearningRate;
  auto trainer = Trainer::Create(m.graph, m.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

class TransformerTrainerGpuTest : public ::testing::TestWithParam<DType> {};

// Five steps replayed as one captured graph each against the CPU reference of the same training
// graph (float32 statistics and sums in double there): losses and parameters agree to 1e-4 in
// float32, to 3e-2 in bfloat16; a replayed step gives the bulked step's bits.
TEST_P(TransformerTrainerGpuTest, GraphReplayMatchesCpuReferenceAndBulkedBits) {
  REPRISE_REQUIRE_GPU();
  const DType compute = GetParam();
  const double tol = compute == DType::kFloat32 ? 1e-4 : 3e-2;
  Tiny m = BuildTiny();
  auto gpu = MakeTrainer(m, ExecMode::kGraph, compute);
  auto bulked = MakeTrainer(m, ExecMode::kBulked, compute);
  ASSERT_TRUE(gpu && bulked);
  auto training = autodiff::BuildTrainingGraph(m.graph, m.loss, {.learning_rate = kLearningRate});
  ASSERT_TRUE(training.ok()) << training.status();
  ir::ReferenceExecutor cpu(training->graph, /*float64=*/false, /*seed=*/42);
  std::vector<int32_t> ids(kBatch * kT), labels(kBatch * kT);
  std::vector<float> losses;
  for (int s = 0; s < 30; ++s) {
    MakeBatch(s, ids, labels);
    for (Trainer* t : {gpu.get(), bulked.get()}) {
      ASSERT_TRUE(t->SetInput("ids", ids).ok());
      ASSERT_TRUE(t->SetInput("labels", labels).ok());
      ASSERT_TRUE(t->Step().ok());
    }
    EXPECT_EQ(*gpu->Loss(), *bulked->Loss()) << "step " << s;
    losses.push_back(*gpu->Loss());
    if (s >= 5) continue;
    ASSERT_TRUE(cpu.SetLeaf("ids", ids).ok());
    ASSERT_TRUE(cpu.SetLeaf("labels", labels).ok());
    ASSERT_TRUE(cpu.Run().ok());
    const float cpu_loss = (*cpu.Tensor(m.loss))->data<float>()[0];
    EXPECT_NEAR(*gpu->Loss(), cpu_loss, tol * std::max(1.0f, std::abs(cpu_loss))) << "step " << s;
    if (s != 4) continue;
    for (const std::string& name : gpu->ParameterNames()) {
      std::vector<float> p = *gpu->GetParameter(name);
      auto c = (*cpu.Leaf(name))->data<float>();
      double err = 0, norm = 0;
      for (size_t i = 0; i < p.size(); ++i)
        err += (p[i] - c[i]) * (p[i] - c[i]), norm += c[i] * c[i];
      EXPECT_LT(std::sqrt(err / norm), tol) << name;
    }
  }
  EXPECT_LT(losses.back(), 0.6f * losses.front()) << ::testing::PrintToString(losses);
}

INSTANTIATE_TEST_SUITE_P(Float32AndBFloat16, TransformerTrainerGpuTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(TransformerInputsGpuTest, TokenIdOutsideTheVocabularyIsRefusedAtSetInput) {
  REPRISE_REQUIRE_GPU();
  Tiny m = BuildTiny();
  auto t = MakeTrainer(m, ExecMode::kGraph, DType::kFloat32);
  ASSERT_TRUE(t);
  std::vector<int32_t> ids(kBatch * kT, 0);
  ids[5] = kVocab;
  EXPECT_THAT(t->SetInput("ids", ids).message(),
              AllOf(HasSubstr("input 'ids'"), HasSubstr("outside [0, 50)"), HasSubstr("wte")));
  ids[5] = -2;
  EXPECT_EQ(t->SetInput("ids", ids).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace reprise
