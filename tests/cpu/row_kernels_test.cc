// The one-pass row kernels' host side: which shapes and pointers take them, the loss kernels'
// threads a row, how the layer-norm backward covers the rows (every row in exactly one block, from
// the shapes alone), and that every kernel compiles for sm_90 under a distinct name.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/codegen/layer_norm_backward_kernels.h"
#include "src/codegen/loss_kernels.h"
#include "src/codegen/vector16.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/kernel_store.h"

namespace reprise {
namespace {

constexpr DType kBf16 = DType::kBFloat16;

alignas(16) char buffer[64];

TEST(Vector16Test, ElementsAndAlignment) {
  EXPECT_EQ(codegen::Vector16Elements(kBf16), 8);
  EXPECT_EQ(codegen::Vector16Elements(DType::kFloat16), 8);
  EXPECT_EQ(codegen::Vector16Elements(DType::kFloat32), 4);
  EXPECT_TRUE(codegen::Aligned16({buffer, buffer + 16, nullptr}));
  EXPECT_FALSE(codegen::Aligned16({buffer, buffer + 8}));
}

TEST(XentOnePassTest, AppliesToWholeVectorsOfRowsThatFitSharedMemory) {
  EXPECT_TRUE(codegen::XentOnePassApplies(50304, kBf16, {buffer, buffer + 32}));
  EXPECT_FALSE(codegen::XentOnePassApplies(50257, kBf16, {buffer}));  // Not whole vectors.
  EXPECT_FALSE(codegen::XentOnePassApplies(50304, kBf16, {buffer, buffer + 2}));
  EXPECT_TRUE(codegen::XentOnePassApplies(96 * 1024, kBf16, {buffer}));
  EXPECT_FALSE(codegen::XentOnePassApplies(96 * 1024 + 8, kBf16, {buffer}));
  EXPECT_TRUE(codegen::XentOnePassApplies(48 * 1024, DType::kFloat32, {buffer}));
  EXPECT_FALSE(codegen::XentOnePassApplies(48 * 1024 + 4, DType::kFloat32, {buffer}));
  EXPECT_FALSE(codegen::XentOnePassApplies(50304, DType::kInt32, {buffer}));
}

// The width is part of the source: one function (and shared-memory limit) per width.
TEST(XentOnePassTest, SourceCarriesTheWidth) {
  const auto outputs = codegen::XentOutputs::kLossAndGradient;
  EXPECT_NE(codegen::XentRowsOnePass(kBf16, outputs, 50304).code,
            codegen::XentRowsOnePass(kBf16, outputs, 5120).code);
  EXPECT_EQ(codegen::XentRowsOnePass(kBf16, outputs, 50304).name,
            "reprise_xent_onepass_loss_grad_bf16");
}

// A thread per quad (two-pass) or 16-byte vector (one-pass) in whole warps, capped: no idle warp
// on a narrow row, the wide rows' counts as before.
TEST(XentRowThreadsTest, NarrowRowsTakeWholeWarpsWithoutIdleOnes) {
  EXPECT_EQ(codegen::XentRowThreads(5), 32);
  EXPECT_EQ(codegen::XentRowThreads(128), 32);
  EXPECT_EQ(codegen::XentRowThreads(129), 64);
  EXPECT_EQ(codegen::XentRowThreads(1000), 256);
  EXPECT_EQ(codegen::XentRowThreads(4092), 1024);
  EXPECT_EQ(codegen::XentRowThreads(50257), codegen::kXentRowThreads);
  EXPECT_EQ(codegen::XentOnePassThreads(8, DType::kFloat32), 32);
  EXPECT_EQ(codegen::XentOnePassThreads(1024, DType::kFloat32), 256);
  EXPECT_EQ(codegen::XentOnePassThreads(1024, kBf16), 128);
  EXPECT_EQ(codegen::XentOnePassThreads(50304, kBf16), codegen::kXentOnePassThreads);
  // The count is in the one-pass source.
  EXPECT_NE(codegen::XentRowsOnePass(DType::kFloat32, codegen::XentOutputs::kLoss, 8)
                .code.find("#define XENT_THREADS 32\n"),
            std::string::npos);
}

TEST(LayerNormBackwardTest, LaunchCoversEveryRowOnceFromTheShapes) {
  for (DType dtype : {kBf16, DType::kFloat32}) {
    const int vec = codegen::Vector16Elements(dtype);
    for (int64_t rows : {1, 5, 37, 1001, 2048, 16384, 100000}) {
      for (int64_t cols : {8, 52, 768, 1000, 1024, 2048, 4096, 4104}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << rows << "x" << cols);
        const codegen::LayerNormBackwardLaunch l =
            codegen::LayerNormBackwardLaunchFor(rows, cols, dtype);
        if (cols % vec != 0 || cols > vec * codegen::kLayerNormBackwardThreads) {
          EXPECT_EQ(l.team, 0);
          continue;
        }
        ASSERT_GT(l.team, 0);
        EXPECT_EQ(l.team % 32, 0);
        if (cols <= 32 * codegen::kLayerNormBackwardMaxLaneVectors * vec) {
          // A warp a row, each lane holding as few vectors as cover the row.
          EXPECT_EQ(l.team, 32);
          EXPECT_EQ(l.slots, codegen::kLayerNormBackwardWarps);
          EXPECT_GE(int64_t{32} * l.lane_vectors * vec, cols);
          EXPECT_LT(int64_t{32} * (l.lane_vectors - 1) * vec, cols);
        } else {
          EXPECT_EQ(l.lane_vectors, 0);
          EXPECT_GE(int64_t{l.team} * vec, cols);
          EXPECT_LT(int64_t{l.team - 32} * vec, cols);  // No idle warp.
        }
        EXPECT_GE(l.slots, 1);
        EXPECT_LE(l.block(), codegen::kLayerNormBackwardThreads);
        EXPECT_EQ(l.rows_per_chunk % l.slots, 0);
        EXPECT_GE(l.chunks * l.rows_per_chunk, rows);
        EXPECT_LT((l.chunks - 1) * l.rows_per_chunk, rows);
        EXPECT_EQ(l.partial_bytes, 2 * l.chunks * cols * 4);
        // The partials' total reads them with 16 threads per column: keep them few.
        EXPECT_LE(l.chunks, 512);
      }
    }
  }
  // GPT-2 124M at B=16, T=1024: a warp a row, three vectors a lane, 256 blocks of 64 rows; at
  // B=4, T=256 a row a warp, 128 blocks.
  const codegen::LayerNormBackwardLaunch gpt2 =
      codegen::LayerNormBackwardLaunchFor(16384, 768, kBf16);
  EXPECT_EQ(gpt2.team, 32);
  EXPECT_EQ(gpt2.lane_vectors, 3);
  EXPECT_EQ(gpt2.slots, 8);
  EXPECT_EQ(gpt2.rows_per_chunk, 64);
  EXPECT_EQ(gpt2.chunks, 256);
  const codegen::LayerNormBackwardLaunch small =
      codegen::LayerNormBackwardLaunchFor(1024, 768, kBf16);
  EXPECT_EQ(small.rows_per_chunk, 8);
  EXPECT_EQ(small.chunks, 128);
  // Past the warp form: 4096 columns in teams of 512 threads.
  const codegen::LayerNormBackwardLaunch wide =
      codegen::LayerNormBackwardLaunchFor(16384, 4096, kBf16);
  EXPECT_EQ(wide.team, 512);
  EXPECT_EQ(wide.lane_vectors, 0);
}

TEST(RowKernelsTest, EveryOnePassKernelCompilesForSm90WithDistinctNames) {
  std::vector<codegen::GeneratedKernel> kernels = codegen::LayerNormBackwardKernels();
  for (DType dtype : {DType::kFloat32, kBf16, DType::kFloat16}) {
    for (codegen::XentOutputs outputs :
         {codegen::XentOutputs::kLoss, codegen::XentOutputs::kGradient,
          codegen::XentOutputs::kLossAndGradient}) {
      kernels.push_back(codegen::XentRowsOnePass(dtype, outputs, 50304));
    }
  }
  // The total, then per type the team form's two and the total with the column sums.
  EXPECT_EQ(kernels.size(), 1u + 3u * 3u + 3u * 3u);
  for (DType dtype : {DType::kFloat32, kBf16, DType::kFloat16}) {  // The warp form's widths.
    for (int lane_vectors = 1; lane_vectors <= codegen::kLayerNormBackwardMaxLaneVectors;
         ++lane_vectors) {
      for (bool add : {false, true}) {
        kernels.push_back(codegen::LayerNormBackwardWith(dtype, add, lane_vectors));
        kernels.push_back(codegen::LayerNormBackwardWithSum(dtype, add, lane_vectors));
      }
    }
  }
  std::set<std::string> names;
  for (const codegen::GeneratedKernel& kernel : kernels) {
    EXPECT_TRUE(names.insert(kernel.name).second) << "two kernels named " << kernel.name;
  }
  // A narrow row's block of one warp.
  kernels.push_back(
      codegen::XentRowsOnePass(DType::kFloat32, codegen::XentOutputs::kLossAndGradient, 8));
  for (const codegen::GeneratedKernel& kernel : kernels) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
    EXPECT_FALSE(compiled->cubin.empty()) << kernel.name;
  }
}

}  // namespace
}  // namespace reprise
