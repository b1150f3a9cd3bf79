// The batch-norm kernels, channels-last and NCHW, float32 and bfloat16, compile with NVRTC for
// sm_90 with no GPU present, and the tiling rule gives the launch shapes and scratch sizes worked
// out by hand below.
#include "src/codegen/batch_norm_kernels.h"

#include <set>

#include "gtest/gtest.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/kernel_store.h"

namespace reprise {
namespace {

using codegen::BatchNormTiling;
using codegen::BatchNormTilingFor;

TEST(BatchNormKernelsTest, EveryKernelCompilesForSm90) {
  const std::vector<codegen::GeneratedKernel> kernels = codegen::BatchNormKernels();
  // Two finalize kernels, and ten tiled ones (the two gradient kernels also with the ReLU mask
  // from x, the gradient statistics also writing the masked gradient, and the apply chain) in
  // three forms (two channels-last widths, NCHW) and three element types; in the two
  // channels-last forms also the apply writing the ReLU's keep bits and the three gradient
  // kernels reading them; and the statistics kernels that finalize in their tiles' last blocks,
  // in every form, and in the two channels-last ones also the gradient statistics reading the keep
  // bits and writing the masked gradient (8 per element type); and the gradient statistics that
  // add dy's two summands as they load them, in the two channels-last residual-block forms
  // (plain and finalizing) and in NCHW with the mask from the ReLU's output (5 per element type).
  ASSERT_EQ(kernels.size(), 155u);
  std::set<std::string> names;
  for (const codegen::GeneratedKernel& kernel : kernels) {
    EXPECT_TRUE(names.insert(kernel.name).second) << "two kernels named " << kernel.name;
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    EXPECT_FALSE(compiled->cubin.empty()) << kernel.name;
    EXPECT_NE(kernel.code.find(kernel.name), std::string::npos) << kernel.name;
  }
}

// Float32 kernels keep the names they had before bfloat16 (dumps and kernel caches know them);
// bfloat16 ones differ, so both live in one kernel store.
TEST(BatchNormKernelsTest, VectorWidthsAndElementTypesHaveDistinctNames) {
  EXPECT_EQ(codegen::BatchNormStats(4, DType::kFloat32).name, "reprise_bn_stats_v4");
  EXPECT_EQ(codegen::BatchNormStats(1, DType::kFloat32).name, "reprise_bn_stats_v1");
  EXPECT_EQ(codegen::BatchNormGradApply(4, DType::kFloat32).name, "reprise_bn_grad_apply_v4");
  EXPECT_EQ(codegen::BatchNormStats(4, DType::kBFloat16).name, "reprise_bn_stats_v4_bf16");
  EXPECT_EQ(codegen::BatchNormApply(1, DType::kBFloat16).name, "reprise_bn_apply_v1_bf16");
  EXPECT_EQ(codegen::BatchNormApplySaved(4, DType::kBFloat16).name,
            "reprise_bn_apply_saved_v4_bf16");
  EXPECT_EQ(codegen::BatchNormGradStats(4, DType::kBFloat16).name, "reprise_bn_grad_stats_v4_bf16");
  EXPECT_EQ(codegen::BatchNormGradApply(1, DType::kBFloat16).name, "reprise_bn_grad_apply_v1_bf16");
  EXPECT_EQ(codegen::BatchNormStats(1, DType::kFloat32, 49).name, "reprise_bn_stats_v1_nchw49");
  EXPECT_EQ(codegen::BatchNormGradApply(1, DType::kBFloat16, 16).name,
            "reprise_bn_grad_apply_v1_nchw16_bf16");
  EXPECT_EQ(codegen::BatchNormGradStats(4, DType::kFloat32, 0, {.mask_from_x = true}).name,
            "reprise_bn_grad_stats_xmask_v4");
  EXPECT_EQ(codegen::BatchNormGradApply(1, DType::kBFloat16, 49, /*mask_from_x=*/true).name,
            "reprise_bn_grad_apply_xmask_v1_nchw49_bf16");
  EXPECT_EQ(codegen::BatchNormGradStats(4, DType::kBFloat16, 0, {.write_masked = true}).name,
            "reprise_bn_grad_stats_mdy_v4_bf16");
  EXPECT_EQ(codegen::BatchNormStats(4, DType::kBFloat16, 0, /*finalize=*/true).name,
            "reprise_bn_stats_fin_v4_bf16");
  const codegen::BatchNormGradStatsForm residual_block = {
      .write_masked = true, .mask_from_bits = true, .finalize = true};
  EXPECT_EQ(codegen::BatchNormGradStats(4, DType::kBFloat16, 0, residual_block).name,
            "reprise_bn_grad_stats_bmask_mdy_fin_v4_bf16");
  codegen::BatchNormGradStatsForm summed = residual_block;
  summed.dy_addend = true;
  EXPECT_EQ(codegen::BatchNormGradStats(4, DType::kBFloat16, 0, summed).name,
            "reprise_bn_grad_stats_bmask_dsum_mdy_fin_v4_bf16");
}

// The statistics kernels that finalize differ from the plain ones only by their own names, their
// extra arguments and the tail after the block's partial sums: the plain ones are those the
// three-launch path has always run.
TEST(BatchNormKernelsTest, FinalizingStatisticsKernelsAreKernelsOfTheirOwn) {
  const codegen::GeneratedKernel plain = codegen::BatchNormStats(4, DType::kBFloat16);
  const codegen::GeneratedKernel fin = codegen::BatchNormStats(4, DType::kBFloat16, 0, true);
  EXPECT_EQ(plain.code.find("tickets"), std::string::npos);
  EXPECT_EQ(plain.code.find("BnFinalizeTile"), std::string::npos);
  EXPECT_NE(fin.code.find("unsigned* __restrict__ tickets"), std::string::npos);
  EXPECT_NE(fin.code.find("BnFinalizeTile(tickets, partial, lane_sums"), std::string::npos);
  const codegen::GeneratedKernel grad = codegen::BatchNormGradStats(4, DType::kFloat32);
  EXPECT_EQ(grad.code.find("BnSumLanes"), std::string::npos);
  EXPECT_NE(codegen::BatchNormGradStats(4, DType::kFloat32, 0, {.finalize = true})
                .code.find("BnFinishBackward(c, sum, dot"),
            std::string::npos);
}

// NCHW kernels index the [rows, channels] view through the plane as a compile-time constant;
// channels-last ones keep plain row-major indexing.
TEST(BatchNormKernelsTest, NchwKernelsIndexThroughTheirPlane) {
  const codegen::GeneratedKernel nchw = codegen::BatchNormGradStats(1, DType::kFloat32, 196);
  EXPECT_NE(nchw.code.find("#define BN_PLANE 196LL"), std::string::npos);
  const codegen::GeneratedKernel nhwc = codegen::BatchNormGradStats(1, DType::kFloat32);
  EXPECT_NE(nhwc.code.find("#define BN_PLANE 0LL"), std::string::npos);
}

// The bfloat16 kernels read and write 16-bit elements through element_type.h's helpers; the
// float32 ones hold no bfloat16 conversion at all.
TEST(BatchNormKernelsTest, BFloat16KernelsConvertAtLoadsAndStores) {
  const codegen::GeneratedKernel bf16 = codegen::BatchNormGradApply(4, DType::kBFloat16);
  EXPECT_NE(bf16.code.find("typedef unsigned short elem_t;"), std::string::npos);
  EXPECT_NE(bf16.code.find("cvt.rn.bf16"), std::string::npos);
  const codegen::GeneratedKernel f32 = codegen::BatchNormGradApply(4, DType::kFloat32);
  EXPECT_NE(f32.code.find("typedef float elem_t;"), std::string::npos);
  EXPECT_EQ(f32.code.find("bf16"), std::string::npos);
}

// ResNet-50's 56x56 layers at batch 32: 64 float4 columns fill one 32-wide block row twice; 528
// target blocks over 2 column tiles give 264 chunks of 381 rows.
TEST(BatchNormTilingTest, LargeTensorAimsAtFourBlocksPerSm) {
  const BatchNormTiling t = BatchNormTilingFor(32 * 56 * 56, 256, 4);
  EXPECT_EQ(t.block_x, 32);
  EXPECT_EQ(t.block_y, 8);
  EXPECT_EQ(t.column_tiles, 2);
  EXPECT_EQ(t.chunks, 264);
  EXPECT_EQ(t.rows_per_chunk, 381);
  EXPECT_EQ(t.scratch_bytes, 264 * 256 * 16 + 3 * 256 * 4);
  EXPECT_EQ(codegen::BatchNormCoefficientOffset(t.chunks, 256), 264 * 256 * 16);
}

// 64 channels as float4 need 16 threads across, so blocks are 16x16; chunks stop at 512.
TEST(BatchNormTilingTest, ChunksAreCapped) {
  const BatchNormTiling t = BatchNormTilingFor(32 * 112 * 112, 64, 4);
  EXPECT_EQ(t.block_x, 16);
  EXPECT_EQ(t.block_y, 16);
  EXPECT_EQ(t.column_tiles, 1);
  EXPECT_EQ(t.chunks, 512);
  EXPECT_EQ(t.rows_per_chunk, 784);
}

// 7x7 at batch 2 with 2048 channels: 98 rows, and each of the 8 row threads walks at least 4
// rows, so 4 chunks of 25 rows.
TEST(BatchNormTilingTest, FewRowsGiveFewChunks) {
  const BatchNormTiling t = BatchNormTilingFor(98, 2048, 4);
  EXPECT_EQ(t.column_tiles, 16);
  EXPECT_EQ(t.chunks, 4);
  EXPECT_EQ(t.rows_per_chunk, 25);
  EXPECT_EQ(t.scratch_bytes, 4 * 2048 * 16 + 3 * 2048 * 4);
}

TEST(BatchNormTilingTest, ScalarColumnsAndTinyTensors) {
  const BatchNormTiling odd = BatchNormTilingFor(1000, 10, 1);
  EXPECT_EQ(odd.block_x, 16);
  EXPECT_EQ(odd.block_y, 16);
  EXPECT_EQ(odd.column_tiles, 1);
  EXPECT_EQ(odd.chunks, 16);
  EXPECT_EQ(odd.rows_per_chunk, 63);
  const BatchNormTiling one = BatchNormTilingFor(2, 1, 1);
  EXPECT_EQ(one.block_x, 1);
  EXPECT_EQ(one.block_y, 256);
  EXPECT_EQ(one.chunks, 1);
  EXPECT_EQ(one.rows_per_chunk, 2);
}

// NCHW: one channel per block column and all 256 threads down the rows (consecutive pixels of a
// plane), so ResNet-50's 56x56 layer at batch 32 with 256 channels gets 256 columns of 3 chunks.
TEST(BatchNormTilingTest, PlanarTilingPutsEveryThreadOnRows) {
  const BatchNormTiling t = BatchNormTilingFor(32 * 56 * 56, 256, 1, /*planar=*/true);
  EXPECT_EQ(t.block_x, 1);
  EXPECT_EQ(t.block_y, 256);
  EXPECT_EQ(t.column_tiles, 256);
  EXPECT_EQ(t.chunks, 3);
  EXPECT_EQ(t.rows_per_chunk, 33451);
}

// Every row belongs to exactly one chunk, and no chunk is empty.
TEST(BatchNormTilingTest, ChunksCoverTheRowsExactly) {
  for (int64_t rows : {2, 3, 97, 1568, 6272, 25088, 100352, 401408, 1000003}) {
    for (int64_t channels : {1, 3, 64, 1000, 2048}) {
      for (const bool planar : {false, true}) {
        const BatchNormTiling t =
            BatchNormTilingFor(rows, channels, !planar && channels % 4 == 0 ? 4 : 1, planar);
        EXPECT_GE(t.chunks, 1);
        EXPECT_LE(t.chunks, codegen::kBatchNormMaxChunks);
        EXPECT_GE(t.chunks * t.rows_per_chunk, rows);
        EXPECT_LT((t.chunks - 1) * t.rows_per_chunk, rows);
        EXPECT_EQ(t.block_x * t.block_y, codegen::kBatchNormThreads);
        EXPECT_GE(t.column_tiles * t.block_x * t.vec, channels);
      }
    }
  }
}

}  // namespace
}  // namespace reprise
