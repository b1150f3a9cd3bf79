// CUDA C++ source for column sums of a row-major [rows, cols] matrix (a linear layer's bias
// gradient), alone (ColumnSum in generated_kernel.h) or at the end of a fused pointwise chain
// (FusedPointwise with a column sum), that fill the device however few the columns: a GPT-2 bias
// gradient is [16384, 768], which one block per 32 columns (24 blocks) read at a tenth of the
// bandwidth.
//
// Blocks of kColumnSumBlock threads (8 warps) each take kColumnSumBlockColumns adjacent columns
// (four per lane: one 16-byte float32 or 8-byte 16-bit load where the columns are a multiple of
// four and every array aligned, else element by element) and a range of rows_per_block rows, warp
// w summing rows w, w + 8, ... of the range in order, in float; the block then adds its warps'
// sums in warp order. With one row block that is the column sum; with several, each block writes
// its sums to partial[row_block][cols] (float32) and a second launch (ColumnSumFinalize) adds them
// in row-block order. The order depends only on (rows, cols, the split), so a plan gives the same
// bits eagerly and in replay, run after run; and the unfused and fused kernels add the same values
// (explicitly rounded adds, never contracted into the chain's products) in the same order.
#ifndef REPRISE_SRC_CODEGEN_COLUMN_SUM_KERNELS_H_
#define REPRISE_SRC_CODEGEN_COLUMN_SUM_KERNELS_H_

#include <cstdint>
#include <string>

#include "reprise/tensor.h"
#include "src/codegen/fused_kernels.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

inline constexpr int kColumnSumBlock = 256;
inline constexpr int kColumnSumWarps = kColumnSumBlock / 32;
inline constexpr int kColumnSumBlockColumns = 4 * 32;
// Blocks per multiprocessor the split aims at, and the fewest rows a block of a split takes (so
// that its warps have a few loads each in flight). Four blocks of 256 threads fit on a
// multiprocessor for any kernel of up to 64 registers, so the split runs as one wave: at eight,
// GPT-2's GELU backward chain (40 registers, six blocks a multiprocessor) ran 1.33 waves at 47% of
// an H200's memory bandwidth.
inline constexpr int kColumnSumBlocksPerSm = 4;
// At 128 a [256, 1024] gradient (MLP 4x1024 b256) split into 2 row blocks, 16 blocks in all, and
// each of its four ReLU-gradient chains with their bias sums took 8 to 13 µs of the critical path.
inline constexpr int kColumnSumMinRowsPerBlock = 32;

// How a column sum's rows are split over blocks: grid (column_blocks, row_blocks).
struct ColumnSumSplit {
  int64_t column_blocks = 1;
  int64_t row_blocks = 1;
  int64_t rows_per_block = 0;
  // Bytes of float32 partial sums a split over several row blocks needs (0 for one).
  int64_t PartialBytes(int64_t cols) const { return row_blocks > 1 ? row_blocks * cols * 4 : 0; }
};
// About kColumnSumBlocksPerSm blocks per multiprocessor of `sm_count`, each row block at least
// kColumnSumMinRowsPerBlock rows (one row block for few rows).
ColumnSumSplit ColumnSumSplitFor(int64_t rows, int64_t cols, int sm_count);
// Every row in one block per column slice: no partial sums (where there is no workspace for them).
ColumnSumSplit UnsplitColumnSum(int64_t rows, int64_t cols);

// The summing kernel of `spec` (which must have a column sum), named `name`: for each element
// (r, c) the chain's steps, its stored outputs, and the column sum of step spec.column_sum.
// Signature: (const elem_t* in..., elem_t* out..., elem_t* column_sum, float* partial,
// long long rows, long long cols, long long rows_per_block, int vector); partial null for one row
// block (the sums go to column_sum), else [row_blocks, cols]; vector != 0 only where cols % 4 == 0
// and every input and output is aligned to four elements. Grid (column_blocks, row_blocks), block
// kColumnSumBlock.
GeneratedKernel ColumnSumKernel(const std::string& name, const FusedPointwiseSpec& spec);

// column_sum[c] = the sum over b of partial[b, c], b in order, rounded once to the element type.
// Named ElementKernelName("reprise_column_sum_finalize", dtype). Signature: (const float* partial,
// elem_t* column_sum, int row_blocks, long long cols); blocks of kColumnSumBlock threads, one
// column each.
GeneratedKernel ColumnSumFinalize(DType dtype);

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_COLUMN_SUM_KERNELS_H_
