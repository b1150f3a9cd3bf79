// The chunked multi-tensor kernels' table (ChunkTable): the layout the kernels' structs declare,
// each tensor's first chunk, the errors of a full table, and the largest tables within CUDA's
// 32 KiB of kernel parameters; and the kernels a node's lowering compiles.
#include "src/ops/multi_tensor.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/codegen/loss_scale_kernels.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/ops/ops.h"

namespace reprise {
namespace {

using ::testing::ElementsAre;

TEST(ChunkTableTest, LaysOutPointersThenSizesThenFirstChunks) {
  ops::ChunkTable table(32, 2);
  int a[1], b[1], c[1], d[1], e[1], f[1];
  ASSERT_TRUE(table.Add({a, b}, 4096).ok());
  ASSERT_TRUE(table.Add({c, d}, 0).ok());
  ASSERT_TRUE(table.Add({e, f}, 4097).ok());
  EXPECT_EQ(table.count(), 3);
  EXPECT_EQ(table.chunks(), 3);
  // struct { void* p0[32]; void* p1[32]; long long n[32]; int first[33]; }, 8-byte aligned.
  ASSERT_EQ(table.bytes(), 3 * 32 * 8 + 136u);
  const char* bytes = static_cast<const char*>(table.data());
  void* pointers[2][3];
  long long n[3];
  int first[4];
  for (int t = 0; t < 3; ++t) {
    std::memcpy(&pointers[0][t], bytes + 8 * t, 8);
    std::memcpy(&pointers[1][t], bytes + 8 * (32 + t), 8);
    std::memcpy(&n[t], bytes + 8 * (64 + t), 8);
  }
  std::memcpy(first, bytes + 8 * 96, sizeof(first));
  EXPECT_THAT(pointers[0], ElementsAre(a, c, e));
  EXPECT_THAT(pointers[1], ElementsAre(b, d, f));
  EXPECT_THAT(n, ElementsAre(4096, 0, 4097));
  EXPECT_THAT(first, ElementsAre(0, 1, 1, 3));  // The empty tensor has no chunk.
}

TEST(ChunkTableTest, RefusesMoreTensorsThanItHoldsAndWrongPointerCounts) {
  ops::ChunkTable table(32, 1);
  int x[1];
  for (int t = 0; t < 32; ++t) ASSERT_TRUE(table.Add({x}, 10).ok());
  EXPECT_EQ(table.Add({x}, 10).code(), absl::StatusCode::kInvalidArgument);
  ops::ChunkTable pairs(32, 2);
  EXPECT_EQ(pairs.Add({x}, 10).code(), absl::StatusCode::kInvalidArgument);
}

// adam_multi's table and its gradients' kinds (a byte per tensor) with its 19 other arguments,
// each at most 8 bytes (with the parameters' copies: a sixth pointer per tensor and a 20th
// argument, the stale flag); grad_sum_squares' with 4.
TEST(ChunkTableTest, LargestTablesFitTheKernelParameterSpace) {
  constexpr size_t kCudaParameterBytes = 32764;  // CUDA 12.1 and later, Volta and later.
  const int most = codegen::kMaxMultiTensorCapacity;
  EXPECT_LE(ops::ChunkTable(most, 5).bytes() + most + 19 * 8, kCudaParameterBytes);
  EXPECT_LE(ops::ChunkTable(most, 6).bytes() + most + 20 * 8, kCudaParameterBytes);
  EXPECT_LE(ops::ChunkTable(most, 1).bytes() + most + 4 * 8, kCudaParameterBytes);
  // grad_nonfinite's: the table, a byte of kind per tensor, then three more arguments.
  EXPECT_LE(ops::ChunkTable(most, 1).bytes() + most + 3 * 8, kCudaParameterBytes);
}

TEST(ChunkTableTest, NormChunksRoundUp) {
  EXPECT_EQ(ops::NormChunks(0), 0);
  EXPECT_EQ(ops::NormChunks(1), 1);
  EXPECT_EQ(ops::NormChunks(codegen::kNormChunk), 1);
  EXPECT_EQ(ops::NormChunks(codegen::kNormChunk + 1), 2);
}

// What the lowerings compile, for prefetching: a table of 512 and one for the rest.
TEST(ChunkedKernelsOfTest, OneKernelPerTableCapacity) {
  Graph g;
  const TensorSpec scalar{Shape{}, DType::kFloat32};
  std::vector<Value> grads, per_tensor;
  const Value wd = *g.AddInput("wd", scalar, Initializer::Zeros());
  for (int t = 0; t < 600; ++t) {
    const std::string name = "w" + std::to_string(t);
    const Shape shape{3 + t};
    grads.push_back(*g.AddConstant(name + ".g", {shape}, Initializer::Zeros()));
    per_tensor.insert(per_tensor.end(),
                      {*g.AddParameter(name, {shape}, Initializer::Zeros()), grads.back(),
                       *g.AddState(name + ".m", {shape}, Initializer::Zeros()),
                       *g.AddState(name + ".v", {shape}, Initializer::Zeros()), wd});
  }
  for (const char* name : {"lr", "beta1", "beta2", "eps"}) {
    per_tensor.push_back(*g.AddInput(name, scalar, Initializer::Zeros()));
  }
  per_tensor.insert(per_tensor.begin() + 5 * 600 + 1,
                    *g.AddState("step", {Shape{2}, DType::kInt32}, Initializer::Zeros()));
  ASSERT_TRUE(
      g.AddOp(ops::AdamMultiOp(), "adam.all", per_tensor, {{"tensors", int64_t{600}}}).ok());
  const Node& adam = g.node(g.num_nodes() - 1);
  const std::vector<Value> few(grads.begin(), grads.begin() + 33);
  ASSERT_TRUE(g.AddOp1(ops::GradSumSquaresOp(), "partials", few).ok());
  const Node& norm = g.node(g.num_nodes() - 1);
  ASSERT_TRUE(g.AddOp1(ops::GradNonfiniteOp(), "flags", grads).ok());
  const Node& flags = g.node(g.num_nodes() - 1);
  auto sources = [](const std::vector<codegen::GeneratedKernel>& kernels) {
    std::vector<std::string> codes;
    for (const codegen::GeneratedKernel& k : kernels) codes.push_back(k.code);
    return codes;
  };
  EXPECT_EQ(sources(ops::ChunkedKernelsOf(adam)),
            sources({codegen::AdamMulti(512), codegen::AdamMulti(128)}));
  EXPECT_EQ(sources(ops::ChunkedKernelsOf(norm)), sources({codegen::GradSumSquares(64)}));
  EXPECT_EQ(sources(ops::ChunkedKernelsOf(flags)),
            sources({codegen::GradNonfinite(512), codegen::GradNonfinite(128)}));
  EXPECT_TRUE(ops::ChunkedKernelsOf(g.node(grads[0].node)).empty());
}

}  // namespace
}  // namespace reprise
