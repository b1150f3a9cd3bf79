// The column-sum kernels' split of the rows over blocks (enough blocks to fill the device, each
// with rows enough to keep its loads in flight, every row in exactly one block), and their sources
// in every element type: the plain sum, a fused chain with a row input and two stored outputs, and
// the finalize, all compiling for sm_90 and walking the rows the same way.
#include "src/codegen/column_sum_kernels.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/codegen/element_type.h"
#include "src/codegen/fused_kernels.h"
#include "src/codegen/generated_kernel.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/kernel_store.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

// Every row in one block, no block past the last row.
void ExpectCovers(const codegen::ColumnSumSplit& s, int64_t rows) {
  EXPECT_GE(s.row_blocks * s.rows_per_block, rows);
  EXPECT_LT((s.row_blocks - 1) * s.rows_per_block, std::max<int64_t>(rows, 1));
}

TEST(ColumnSumSplitTest, GptBiasGradientsFillAnH200) {
  // [16384, 768]: 6 column blocks, rows split until about kColumnSumBlocksPerSm blocks per
  // multiprocessor.
  const codegen::ColumnSumSplit s = codegen::ColumnSumSplitFor(16384, 768, 132);
  EXPECT_EQ(s.column_blocks, 6);
  EXPECT_GT(s.row_blocks, 80);
  EXPECT_LE(s.column_blocks * s.row_blocks, 132 * codegen::kColumnSumBlocksPerSm);
  EXPECT_GE(s.rows_per_block, codegen::kColumnSumMinRowsPerBlock);
  ExpectCovers(s, 16384);
  EXPECT_EQ(s.PartialBytes(768), s.row_blocks * 768 * 4);
  // [16384, 3072] (the MLP's first bias): 24 column blocks.
  const codegen::ColumnSumSplit wide = codegen::ColumnSumSplitFor(16384, 3072, 132);
  EXPECT_EQ(wide.column_blocks, 24);
  EXPECT_GT(wide.row_blocks, 20);
  ExpectCovers(wide, 16384);
}

TEST(ColumnSumSplitTest, TheMlpsBatchOf256FillsMoreThanSixteenBlocks) {
  // [256, 1024]: 8 column blocks; rows split down to kColumnSumMinRowsPerBlock.
  const codegen::ColumnSumSplit s = codegen::ColumnSumSplitFor(256, 1024, 132);
  EXPECT_EQ(s.column_blocks, 8);
  EXPECT_EQ(s.row_blocks, 256 / codegen::kColumnSumMinRowsPerBlock);
  ExpectCovers(s, 256);
}

TEST(ColumnSumSplitTest, RaggedRowsAreCoveredOnce) {
  for (int64_t rows : {257, 1000, 4099, 100003}) {
    for (int64_t cols : {1, 41, 771, 5000}) {
      const codegen::ColumnSumSplit s = codegen::ColumnSumSplitFor(rows, cols, 132);
      ExpectCovers(s, rows);
      EXPECT_EQ(s.column_blocks, (cols + 127) / 128);
      if (s.row_blocks > 1) EXPECT_GE(s.rows_per_block, codegen::kColumnSumMinRowsPerBlock);
    }
  }
}

TEST(ColumnSumSplitTest, FewRowsOrManyColumnsStayInOneRowBlock) {
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 768}, {1, 768}, {63, 768}, {40, 41}, {4096, 200000}}) {
    const codegen::ColumnSumSplit s = codegen::ColumnSumSplitFor(rows, cols, 132);
    EXPECT_EQ(s.row_blocks, 1) << rows << "x" << cols;
    EXPECT_EQ(s.PartialBytes(cols), 0);
    ExpectCovers(s, rows);
  }
  const codegen::ColumnSumSplit one = codegen::UnsplitColumnSum(16384, 768);
  EXPECT_EQ(one.row_blocks, 1);
  EXPECT_EQ(one.rows_per_block, 16384);
  EXPECT_EQ(one.column_blocks, 6);
}

TEST(ColumnSumKernelsTest, CompileForSm90InEveryElementType) {
  for (DType dtype : codegen::kKernelElementTypes) {
    const codegen::FusedPointwiseSpec chain{
        .inputs = {codegen::Broadcast::kFull, codegen::Broadcast::kRow},
        .expressions = {"in0 + in1", "(s0 > 0.0f ? s0 : 0.0f)"},
        .outputs = {0, 1},
        .column_sum = 1,
        .dtype = dtype};
    for (const codegen::GeneratedKernel& kernel :
         {codegen::ColumnSum(dtype), codegen::ColumnSumFinalize(dtype),
          codegen::FusedPointwise(chain)}) {
      auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
      ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
      EXPECT_NE(compiled->ptx.find(".entry " + kernel.name), std::string::npos) << kernel.name;
    }
  }
}

// The unfused sum is the fused kernel of the one-step chain: the same walk, the same adds.
TEST(ColumnSumKernelsTest, UnfusedAndFusedSumsShareTheWalk) {
  const codegen::GeneratedKernel plain = codegen::ColumnSum(DType::kBFloat16);
  EXPECT_EQ(plain.name, "reprise_column_sum_bf16");
  const codegen::GeneratedKernel fused =
      codegen::FusedPointwise({.inputs = {codegen::Broadcast::kFull},
                               .expressions = {"in0"},
                               .column_sum = 0,
                               .dtype = DType::kBFloat16});
  EXPECT_EQ(fused.name, "reprise_fused_pointwise_colsum_bf16");
  std::string renamed = fused.code;
  renamed.replace(renamed.find(fused.name), fused.name.size(), plain.name);
  EXPECT_EQ(renamed, plain.code);
  EXPECT_THAT(plain.code, HasSubstr("long long rows_per_block, int vector"));
  EXPECT_EQ(codegen::ColumnSumFinalize(DType::kFloat16).name, "reprise_column_sum_finalize_f16");
}

}  // namespace
}  // namespace reprise
