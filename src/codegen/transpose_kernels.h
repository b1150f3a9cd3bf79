// CUDA C++ source for the transpose op (src/ops/transpose.h). Elements are moved as raw words
// (word_t below): 32-bit for DType::kFloat32, which serves every 4-byte type (float32 and int32),
// and 16-bit for DType::kBFloat16. Kernels are named ElementKernelName(base, dtype), base the name
// given with each. Pure copies: deterministic, no atomics.
//
// Two kernels: a shared-memory tiled transpose for the permutations that are, once extents of 1
// are dropped and adjacent dimensions merged, a batched 2-D transpose ([B, R, S] -> [B, S, R]:
// NCHW <-> NHWC, conv weights), and a gather for any other permutation.
#ifndef REPRISE_SRC_CODEGEN_TRANSPOSE_KERNELS_H_
#define REPRISE_SRC_CODEGEN_TRANSPOSE_KERNELS_H_

#include <vector>

#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// Threads per block of TransposeTiled: 32 × 8 threads move one 32 × 32 tile at a time through
// shared memory, so that both the reads of x and the writes of y are coalesced.
inline constexpr int kTransposeTile = 32;
inline constexpr int kTransposeTileRows = 8;

// reprise_transpose_tiled: y[b, s, r] = x[b, r, s] for x [batches, rows, cols] (s < cols,
// r < rows). Blocks of (kTransposeTile, kTransposeTileRows) threads loop over tiles (grid-stride).
// Signature: (const word_t* x, word_t* y, long long batches, long long rows, long long cols).
GeneratedKernel TransposeTiled(DType dtype = DType::kFloat32);

// reprise_transpose_gather: y[i] = x[Σ_j coord_j(i) · stride_j], coord_j(i) the index of the flat
// output position i along output dimension j of extents (d0, d1, d2, d3), and stride_j x's element
// stride along the input dimension that output dimension j reads. One thread per output element
// (grid-stride); writes coalesced. Signature: (const word_t* x, word_t* y, long long d0,
// long long d1, long long d2, long long d3, long long s0, long long s1, long long s2,
// long long s3).
GeneratedKernel TransposeGather(DType dtype = DType::kFloat32);

// Both kernels for both word widths, for compile checks and for warming the kernel store.
std::vector<GeneratedKernel> TransposeKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_TRANSPOSE_KERNELS_H_
