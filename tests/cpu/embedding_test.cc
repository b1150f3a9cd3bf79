// embedding, embedding_grad, add_positions and add_positions_grad: shape and dtype rules with
// messages naming the node, CPU references against hand-computed values (float32 and float64),
// ids outside the table refused, gradients against central finite differences in float64, and
// the kernels compiling for sm_90.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/nn.h"
#include "src/codegen/embedding_kernels.h"
#include "src/codegen/layer_norm_kernels.h"
#include "src/ir/reference_executor.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/ops.h"
#include "src/ops/transformer_ops.h"
#include "src/runtime/kernel_store.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using testing::ExpectGradientsMatchFiniteDifferences;
using ::testing::HasSubstr;
using testing::TestInit;

double Read(ir::ReferenceExecutor& exec, Value v, int64_t i) {
  ir::HostTensor* t = *exec.Tensor(v);
  return t->dtype() == DType::kFloat64 ? t->data<double>()[i] : t->data<float>()[i];
}

TEST(EmbeddingTest, ShapeAndDTypeErrorsNameTheNode) {
  Graph g;
  Value ids = *g.AddInput("ids", {Shape{2, 3}, DType::kInt32});
  Value fids = *g.AddInput("fids", {Shape{2, 3}});
  Value table = *g.AddParameter("table", {Shape{5, 4}}, Initializer::Zeros());
  Value flat = *g.AddParameter("flat", {Shape{20}}, Initializer::Zeros());
  EXPECT_THAT(g.AddOp1(ops::EmbeddingOp(), "wte_a", {fids, table}).status().message(),
              AllOf(HasSubstr("node 'wte_a'"), HasSubstr("ids must be i32")));
  EXPECT_THAT(g.AddOp1(ops::EmbeddingOp(), "wte_b", {ids, flat}).status().message(),
              AllOf(HasSubstr("node 'wte_b'"), HasSubstr("table must have rank 2")));
  auto y = g.AddOp1(ops::EmbeddingOp(), "wte", {ids, table});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(g.spec(*y).ToString(), "f32[2, 3, 4]");
  Value dy_bad = *g.AddInput("dy_bad", {Shape{3, 2, 4}});
  EXPECT_THAT(
      g.AddOp1(ops::EmbeddingGradOp(), "wte_grad", {dy_bad, ids}, {{"vocab", int64_t{5}}})
          .status()
          .message(),
      AllOf(HasSubstr("node 'wte_grad'"), HasSubstr("must be ids' shape and one more dimension")));
  EXPECT_THAT(g.AddOp1(ops::EmbeddingGradOp(), "wte_grad2", {*y, ids}, {{"vocab", int64_t{0}}})
                  .status()
                  .message(),
              AllOf(HasSubstr("node 'wte_grad2'"), HasSubstr("vocab must be positive")));
  EXPECT_THAT(nn::Embedding(g, ids, 0, 4, "emb").status().message(),
              HasSubstr("Embedding 'emb': vocab must be positive"));
}

TEST(EmbeddingTest, GatherAndScatterAddMatchHandComputedValues) {
  for (bool float64 : {false, true}) {
    Graph g;
    Value ids = *g.AddInput("ids", {Shape{2, 2}, DType::kInt32});
    Value table = *g.AddParameter("table", {Shape{3, 2}}, Initializer::Zeros());
    Value dy = *g.AddInput("dy", {Shape{2, 2, 2}});
    Value y = *g.AddOp1(ops::EmbeddingOp(), "wte", {ids, table});
    Value dt = *g.AddOp1(ops::EmbeddingGradOp(), "wte_grad", {dy, ids}, {{"vocab", int64_t{3}}});
    ir::ReferenceExecutor exec(g, float64, 1);
    ASSERT_TRUE(exec.SetLeaf("ids", std::vector<int32_t>{2, 0, 2, 2}).ok());
    ASSERT_TRUE(exec.SetLeaf("table", std::vector<double>{1, 2, 3, 4, 5, 6}).ok());
    ASSERT_TRUE(exec.SetLeaf("dy", std::vector<double>{1, 10, 2, 20, 3, 30, 4, 40}).ok());
    ASSERT_TRUE(exec.Run().ok());
    const std::vector<double> want_y = {5, 6, 1, 2, 5, 6, 5, 6};
    for (int i = 0; i < 8; ++i) EXPECT_EQ(Read(exec, y, i), want_y[i]) << i;
    // Row 0 from token 1; row 1 unused; row 2 from tokens 0, 2 and 3.
    const std::vector<double> want_dt = {2, 20, 0, 0, 8, 80};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(Read(exec, dt, i), want_dt[i]) << i;
  }
}

TEST(EmbeddingTest, IdOutsideTheTableIsAnErrorNamingTheNodeAndTheId) {
  Graph g;
  Value ids = *g.AddInput("ids", {Shape{3}, DType::kInt32});
  ASSERT_TRUE(nn::Embedding(g, ids, 4, 2, "wte").ok());
  ir::ReferenceExecutor exec(g, false, 1);
  for (int32_t bad : {4, -1}) {
    ASSERT_TRUE(exec.SetLeaf("ids", std::vector<int32_t>{0, bad, 1}).ok());
    const absl::Status s = exec.Run();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("node 'wte'"), HasSubstr(absl::StrCat("id ", bad,
                                                                      " at index 1 is outside "
                                                                      "[0, 4)"))));
  }
}

TEST(EmbeddingTest, BuilderAddsAVocabByWidthTable) {
  Graph g;
  Value ids = *g.AddInput("ids", {Shape{4, 3}, DType::kInt32});
  auto y = nn::Embedding(g, ids, 50, 8, "transformer.wte");
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(g.spec(*y).ToString(), "f32[4, 3, 8]");
  EXPECT_EQ(g.node(*g.FindNode("transformer.wte.weight")).outputs[0].ToString(), "f32[50, 8]");
}

// The labels double as ids: token ids {2, 0, 1, 2} in a 5-row table, rows 3 and 4 unused.
TEST(EmbeddingTest, GradientMatchesFiniteDifferences) {
  Graph g;
  Value labels = *g.AddInput("labels", {Shape{4}, DType::kInt32});
  Value table = *g.AddParameter("table", {Shape{5, 3}}, TestInit());
  Value y = *g.AddOp1(ops::EmbeddingOp(), "wte", {labels, table});
  Value loss = *nn::SoftmaxCrossEntropy(g, y, labels, "loss");
  ExpectGradientsMatchFiniteDifferences(g, loss, {2, 0, 1, 2}, 13);
}

// What the GPU lowering cannot run is refused before it touches a device, naming the node.
TEST(EmbeddingTest, GpuLoweringRefusesWhatItCannotRunNamingTheNode) {
  auto lower = [](int64_t vocab, DType dtype, void* workspace) {
    Graph g;
    Value ids = *g.AddInput("ids", {Shape{4}, DType::kInt32});
    Value dy = *g.AddInput("dy", {Shape{4, 8}, dtype});
    Value dt = *g.AddOp1(ops::EmbeddingGradOp(), "wte_grad", {dy, ids}, {{"vocab", vocab}});
    const Node& node = g.node(dt.node);
    ops::LoweringContext ctx;
    ctx.input_specs = {g.spec(dy), g.spec(ids)};
    ctx.inputs = {nullptr, nullptr};
    ctx.outputs = {nullptr};
    ctx.workspace = workspace;
    ctx.workspace_bytes = workspace == nullptr ? 0 : 1 << 20;
    return node.op->lower(ctx, node).status();
  };
  absl::Status s = lower(codegen::kEmbeddingMaxVocab + 1, DType::kFloat32, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("wte_grad"), HasSubstr("4194303 table rows")));
  s = lower(10, DType::kFloat64, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("wte_grad"), HasSubstr("float32, bfloat16 or float16")));
  s = lower(10, DType::kFloat32, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("wte_grad"), HasSubstr("4096 bytes of scratch")));
}

TEST(AddPositionsTest, ShapeErrorsNameTheNode) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{6, 4}});
  Value table = *g.AddParameter("table", {Shape{3, 4}}, Initializer::Zeros());
  Value narrow = *g.AddParameter("narrow", {Shape{3, 2}}, Initializer::Zeros());
  EXPECT_THAT(g.AddOp1(ops::AddPositionsOp(), "wpe_a", {x, table}, {{"positions", int64_t{4}}})
                  .status()
                  .message(),
              AllOf(HasSubstr("node 'wpe_a'"), HasSubstr("positions 4 must be in [1, 3]")));
  EXPECT_TRUE(
      g.AddOp1(ops::AddPositionsOp(), "wpe_b", {x, table}, {{"positions", int64_t{2}}}).ok());
  EXPECT_THAT(g.AddOp1(ops::AddPositionsOp(), "wpe_c", {x, narrow}, {{"positions", int64_t{3}}})
                  .status()
                  .message(),
              AllOf(HasSubstr("node 'wpe_c'"), HasSubstr("must have x's dtype and last dim")));
  Value odd = *g.AddInput("odd", {Shape{5, 4}});
  EXPECT_THAT(g.AddOp1(ops::AddPositionsOp(), "wpe_d", {odd, table}, {{"positions", int64_t{3}}})
                  .status()
                  .message(),
              AllOf(HasSubstr("node 'wpe_d'"), HasSubstr("divide the 5 rows")));
  EXPECT_THAT(nn::PositionEmbedding(g, odd, 8, 3, "wpe").status().message(),
              AllOf(HasSubstr("wpe"), HasSubstr("divide the 5 rows")));
}

// Two sequences of T = 2 rows, a table of 3 positions: row r gets table[r % 2]; the table's
// gradient sums the sequences, and its unused third row gets zeros.
TEST(AddPositionsTest, MatchesHandComputedValues) {
  for (bool float64 : {false, true}) {
    Graph g;
    Value x = *g.AddInput("x", {Shape{4, 2}});
    Value dy = *g.AddInput("dy", {Shape{4, 2}});
    Value table = *g.AddParameter("table", {Shape{3, 2}}, Initializer::Zeros());
    Value y = *g.AddOp1(ops::AddPositionsOp(), "wpe", {x, table}, {{"positions", int64_t{2}}});
    Value dt = *g.AddOp1(ops::AddPositionsGradOp(), "wpe_grad", {dy},
                         {{"positions", int64_t{2}}, {"table_rows", int64_t{3}}});
    ir::ReferenceExecutor exec(g, float64, 1);
    ASSERT_TRUE(exec.SetLeaf("x", std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}).ok());
    ASSERT_TRUE(exec.SetLeaf("table", std::vector<double>{10, 20, 30, 40, 50, 60}).ok());
    ASSERT_TRUE(exec.SetLeaf("dy", std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}).ok());
    ASSERT_TRUE(exec.Run().ok());
    const std::vector<double> want_y = {11, 22, 33, 44, 15, 26, 37, 48};
    for (int i = 0; i < 8; ++i) EXPECT_EQ(Read(exec, y, i), want_y[i]) << i;
    const std::vector<double> want_dt = {6, 8, 10, 12, 0, 0};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(Read(exec, dt, i), want_dt[i]) << i;
  }
}

TEST(AddPositionsTest, GradientsMatchFiniteDifferences) {
  Graph g;
  Value x = *g.AddParameter("x", {Shape{4, 3}}, TestInit());
  Value y = *nn::PositionEmbedding(g, x, 3, 2, "wpe", 0.5);
  Value labels = *g.AddInput("labels", {Shape{4}, DType::kInt32});
  ExpectGradientsMatchFiniteDifferences(g, *nn::SoftmaxCrossEntropy(g, y, labels, "loss"),
                                        {2, 0, 1, 2}, 14);
}

TEST(TransformerKernelsTest, EveryKernelCompilesForSm90WithDistinctNames) {
  std::vector<codegen::GeneratedKernel> kernels = codegen::EmbeddingKernels();
  for (codegen::GeneratedKernel& k : codegen::LayerNormKernels()) kernels.push_back(std::move(k));
  // Embedding: 1 + 8 per type (5 scalar, 3 in 16-byte vectors); layer norm: the finalize +
  // forward, add forward, dx, dx_add, partials and the vectorized forward, add forward, dx, dx_add
  // per type.
  EXPECT_EQ(kernels.size(), 1u + 8u * 3u + 1u + 9u * 3u);
  std::set<std::string> names;
  for (const codegen::GeneratedKernel& kernel : kernels) {
    EXPECT_TRUE(names.insert(kernel.name).second) << "two kernels named " << kernel.name;
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
    EXPECT_FALSE(compiled->cubin.empty()) << kernel.name;
  }
}

// The layer-norm parameter gradient's chunking depends on the shapes alone.
TEST(TransformerKernelsTest, LayerNormChunkingCoversEveryRowOnce) {
  for (int64_t rows : {1, 31, 32, 33, 1000, 16384, 100000}) {
    const codegen::LayerNormChunking k = codegen::LayerNormChunkingFor(rows, 768);
    EXPECT_GE(k.chunks, 1);
    EXPECT_LE(k.chunks, 256);
    EXPECT_GE(k.chunks * k.rows_per_chunk, rows) << rows;
    EXPECT_LT((k.chunks - 1) * k.rows_per_chunk, rows) << rows;
    EXPECT_EQ(k.partial_bytes, 2 * k.chunks * 768 * 4);
  }
}

}  // namespace
}  // namespace reprise
