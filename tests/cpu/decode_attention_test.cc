// decode_attention, add_position_at and advance_position: shape rules with messages naming the
// node, the CPU reference of decoding token by token against causal attention over the whole
// sequence (float64 and float32), positions outside the cache refused, and the kernels compiling
// for sm_90.
#include "src/ops/decode_attention.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/codegen/decode_kernels.h"
#include "src/ir/reference_executor.h"
#include "src/ops/attention.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/kernel_store.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kBatch = 2, kHeads = 2, kHeadDim = 3, kWidth = kHeads * kHeadDim, kPositions = 5;

const Attrs kHeadsAttr = {{"heads", kHeads}};

double At(ir::ReferenceExecutor& exec, Value v, int64_t i) {
  ir::HostTensor* t = *exec.Tensor(v);
  return t->dtype() == DType::kFloat64 ? t->data<double>()[i] : t->data<float>()[i];
}

// One decode step: the caches and the position counter are state, advanced after every reader.
struct DecodeGraph {
  Graph g;
  Value qkv, y, next;
};
DecodeGraph BuildDecodeGraph(DType dtype) {
  DecodeGraph d;
  d.qkv = *d.g.AddInput("qkv", {Shape{kBatch, 3 * kWidth}, dtype});
  const TensorSpec cache{Shape{kBatch, kPositions, kWidth}, dtype};
  Value k = *d.g.AddState("k_cache", cache, Initializer::Zeros());
  Value v = *d.g.AddState("v_cache", cache, Initializer::Zeros());
  Value position = *d.g.AddState("position", {Shape{1}, DType::kInt32}, Initializer::Zeros());
  d.y = *d.g.AddOp1(ops::DecodeAttentionOp(), "attn", {d.qkv, k, v, position}, kHeadsAttr);
  d.next = *d.g.AddOp1(ops::AdvancePositionOp(), "advance", {position});
  EXPECT_TRUE(d.g.AddControlEdge(d.y.node, d.next.node).ok());
  return d;
}

TEST(DecodeAttentionTest, ShapeErrorsNameTheNode) {
  Graph g;
  Value qkv = *g.AddInput("qkv", {Shape{kBatch, 3 * kWidth}});
  Value odd = *g.AddInput("odd", {Shape{kBatch, 3 * kWidth + 1}});
  const TensorSpec cache{Shape{kBatch, kPositions, kWidth}};
  Value k = *g.AddState("k", cache, Initializer::Zeros());
  Value v = *g.AddState("v", cache, Initializer::Zeros());
  Value narrow =
      *g.AddState("narrow", {Shape{kBatch, kPositions, kWidth - 1}}, Initializer::Zeros());
  Value half = *g.AddState("half", {Shape{kBatch, kPositions, kWidth}, DType::kBFloat16},
                           Initializer::Zeros());
  Value position = *g.AddState("position", {Shape{1}, DType::kInt32}, Initializer::Zeros());
  Value wide_position = *g.AddState("pos2", {Shape{2}, DType::kInt32}, Initializer::Zeros());
  auto message = [&](const char* name, std::vector<Value> in) {
    return std::string(g.AddOp(ops::DecodeAttentionOp(), name, in, kHeadsAttr).status().message());
  };
  EXPECT_THAT(message("a0", {odd, k, v, position}),
              AllOf(HasSubstr("node 'a0'"), HasSubstr("split into 3 x 2 heads")));
  EXPECT_THAT(message("a1", {qkv, narrow, v, position}),
              AllOf(HasSubstr("node 'a1'"), HasSubstr("k_cache is f32[2, 5, 5]")));
  EXPECT_THAT(message("a2", {qkv, k, half, position}),
              AllOf(HasSubstr("node 'a2'"), HasSubstr("v_cache is bf16[2, 5, 6]")));
  EXPECT_THAT(message("a3", {qkv, k, v, wide_position}),
              AllOf(HasSubstr("node 'a3'"), HasSubstr("position must be i32[1]")));
  EXPECT_THAT(message("a4", {qkv, k, v}), HasSubstr("node 'a4'"));
  auto y = g.AddOp1(ops::DecodeAttentionOp(), "attn", {qkv, k, v, position}, kHeadsAttr);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(g.spec(*y).ToString(), "f32[2, 6]");

  Value x = *g.AddInput("x", {Shape{kBatch, kWidth}});
  Value table = *g.AddParameter("wpe", {Shape{kPositions, kWidth}}, Initializer::Zeros());
  Value bad_table = *g.AddParameter("bad", {Shape{kPositions, kWidth + 1}}, Initializer::Zeros());
  EXPECT_THAT(g.AddOp1(ops::AddPositionAtOp(), "p0", {x, bad_table, position}).status().message(),
              AllOf(HasSubstr("node 'p0'"), HasSubstr("must have x's dtype and last dimension")));
  EXPECT_THAT(g.AddOp1(ops::AddPositionAtOp(), "p1", {x, table, wide_position}).status().message(),
              AllOf(HasSubstr("node 'p1'"), HasSubstr("position must be i32[1]")));
  EXPECT_THAT(g.AddOp1(ops::AdvancePositionOp(), "adv", {wide_position}).status().message(),
              AllOf(HasSubstr("node 'adv'"), HasSubstr("position must be i32[1]")));
}

// Decoding a sequence one token at a time through the cache gives, at every position, what causal
// attention over the whole sequence gives there.
void ExpectDecodeMatchesCausalAttention(bool float64, double tolerance) {
  DecodeGraph d = BuildDecodeGraph(DType::kFloat32);
  Graph full;
  Value all = *full.AddInput("qkv", {Shape{kBatch, kPositions, 3 * kWidth}}, testing::TestInit());
  Value y_full = (*full.AddOp(ops::CausalAttentionOp(), "attn", {all}, kHeadsAttr))[0];
  ir::ReferenceExecutor full_exec(full, float64, 7);
  ASSERT_TRUE(full_exec.Run().ok());
  std::vector<double> qkv_all;
  for (int64_t i = 0; i < kBatch * kPositions * 3 * kWidth; ++i) {
    qkv_all.push_back(At(full_exec, all, i));
  }
  ir::ReferenceExecutor exec(d.g, float64, 7);
  for (int64_t t = 0; t < kPositions; ++t) {
    std::vector<double> token;
    for (int64_t b = 0; b < kBatch; ++b) {
      for (int64_t i = 0; i < 3 * kWidth; ++i) {
        token.push_back(qkv_all[(b * kPositions + t) * 3 * kWidth + i]);
      }
    }
    ASSERT_TRUE(exec.SetLeaf("qkv", token).ok());
    ASSERT_TRUE(exec.Run().ok());
    EXPECT_EQ((*exec.Tensor(d.next))->data<int32_t>()[0], t + 1);
    for (int64_t b = 0; b < kBatch; ++b) {
      for (int64_t c = 0; c < kWidth; ++c) {
        EXPECT_NEAR(At(exec, d.y, b * kWidth + c),
                    At(full_exec, y_full, (b * kPositions + t) * kWidth + c), tolerance)
            << "sequence " << b << " position " << t << " column " << c;
      }
    }
  }
}

TEST(DecodeAttentionTest, TokenByTokenEqualsCausalAttentionFloat64) {
  ExpectDecodeMatchesCausalAttention(/*float64=*/true, 1e-12);
}

TEST(DecodeAttentionTest, TokenByTokenEqualsCausalAttentionFloat32) {
  ExpectDecodeMatchesCausalAttention(/*float64=*/false, 1e-5);
}

TEST(DecodeAttentionTest, APositionPastTheCacheIsOutOfRange) {
  DecodeGraph d = BuildDecodeGraph(DType::kFloat32);
  ir::ReferenceExecutor exec(d.g, false, 1);
  ASSERT_TRUE(
      exec.SetLeaf("position", std::vector<int32_t>{static_cast<int32_t>(kPositions)}).ok());
  const absl::Status status = exec.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << status;
  EXPECT_THAT(status.message(), AllOf(HasSubstr("'attn'"), HasSubstr("position 5")));
  ASSERT_TRUE(exec.SetLeaf("position", std::vector<int32_t>{-1}).ok());
  EXPECT_EQ(exec.Run().code(), absl::StatusCode::kOutOfRange);
}

TEST(AddPositionAtTest, AddsTheTableRowAtThePosition) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{kBatch, kWidth}}, testing::TestInit());
  Value table = *g.AddParameter("wpe", {Shape{kPositions, kWidth}}, testing::TestInit());
  Value position = *g.AddState("position", {Shape{1}, DType::kInt32}, Initializer::Zeros());
  Value y = *g.AddOp1(ops::AddPositionAtOp(), "wpe_at", {x, table, position});
  for (bool float64 : {false, true}) {
    ir::ReferenceExecutor exec(g, float64, 3);
    for (int32_t p : {0, 3, static_cast<int>(kPositions) - 1}) {
      ASSERT_TRUE(exec.SetLeaf("position", std::vector<int32_t>{p}).ok());
      ASSERT_TRUE(exec.Run().ok());
      for (int64_t i = 0; i < kBatch * kWidth; ++i) {
        EXPECT_NEAR(At(exec, y, i), At(exec, x, i) + At(exec, table, p * kWidth + i % kWidth),
                    1e-6);
      }
    }
    ASSERT_TRUE(
        exec.SetLeaf("position", std::vector<int32_t>{static_cast<int32_t>(kPositions)}).ok());
    const absl::Status status = exec.Run();
    EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << status;
    EXPECT_THAT(status.message(), HasSubstr("'wpe_at'"));
  }
}

TEST(DecodeKernelsTest, CompileForSm90InEveryElementType) {
  const std::vector<codegen::GeneratedKernel> kernels = codegen::DecodeKernels();
  ASSERT_EQ(kernels.size(), 7u);
  for (const codegen::GeneratedKernel& kernel : kernels) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
  }
}

}  // namespace
}  // namespace reprise
