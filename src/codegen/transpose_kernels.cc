#include "src/codegen/transpose_kernels.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/element_type.h"

namespace reprise::codegen {
namespace {

// The word a kernel moves: one element's bits, unsigned so that no value is ever interpreted.
std::string WordType(DType dtype) {
  return dtype == DType::kBFloat16 ? "typedef unsigned short word_t;\n"
                                   : "typedef unsigned word_t;\n";
}

}  // namespace

// Tiles are taken in (batch, row tile, column tile) order, so neighbouring blocks read neighbouring
// stretches of x. Offsets are 64-bit; the divisions are per tile, not per element.
GeneratedKernel TransposeTiled(DType dtype) {
  const std::string name = ElementKernelName("reprise_transpose_tiled", dtype);
  return {name, absl::StrCat(WordType(dtype), "extern \"C\" __global__ void ", name, R"((
    const word_t* __restrict__ x, word_t* __restrict__ y, long long batches, long long rows,
    long long cols) {
  // One padding column: a warp reading a column of the tile touches 32 different banks. The tile
  // holds 32-bit words whatever the element width, so that stays true for 16-bit elements.
  __shared__ unsigned tile[32][33];
  const long long tiles_r = (rows + 31) / 32, tiles_c = (cols + 31) / 32;
  const long long per_batch = tiles_r * tiles_c, total = batches * per_batch;
  for (long long t = blockIdx.x; t < total; t += gridDim.x) {
    const long long b = t / per_batch, in_batch = t - b * per_batch;
    const long long r0 = (in_batch / tiles_c) * 32, c0 = (in_batch % tiles_c) * 32;
    const word_t* xb = x + b * rows * cols;
    word_t* yb = y + b * rows * cols;
    // Read: lanes along a row of x (contiguous).
    const long long c = c0 + threadIdx.x;
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
      const long long r = r0 + i;
      if (r < rows && c < cols) tile[i][threadIdx.x] = xb[r * cols + c];
    }
    __syncthreads();
    // Write: lanes along a row of y, which is a column of the tile.
    const long long r = r0 + threadIdx.x;
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
      const long long yc = c0 + i;
      if (r < rows && yc < cols) yb[yc * rows + r] = (word_t)tile[threadIdx.x][i];
    }
    __syncthreads();  // The next tile overwrites this one.
  }
}
)")};
}

// 32-bit index arithmetic where the tensor allows it: the per-element divisions dominate.
GeneratedKernel TransposeGather(DType dtype) {
  const std::string name = ElementKernelName("reprise_transpose_gather", dtype);
  return {name, absl::StrCat(WordType(dtype), R"(
template <typename I>
__device__ void TransposeGatherBody(const word_t* __restrict__ x, word_t* __restrict__ y,
                                    I d0, I d1, I d2, I d3, I s0, I s1, I s2, I s3) {
  const I total = d0 * d1 * d2 * d3;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
    I rest = i;
    const I a3 = rest % d3;
    rest /= d3;
    const I a2 = rest % d2;
    rest /= d2;
    const I a1 = rest % d1;
    const I a0 = rest / d1;
    y[i] = x[a0 * s0 + a1 * s1 + a2 * s2 + a3 * s3];
  }
}
)",
                             "extern \"C\" __global__ void ", name, R"((
    const word_t* __restrict__ x, word_t* __restrict__ y, long long d0, long long d1, long long d2,
    long long d3, long long s0, long long s1, long long s2, long long s3) {
  // Below 2^30 elements neither an offset nor the grid-stride index can overflow 32 bits.
  if (d0 * d1 * d2 * d3 < (1LL << 30)) {
    TransposeGatherBody<int>(x, y, d0, d1, d2, d3, s0, s1, s2, s3);
  } else {
    TransposeGatherBody<long long>(x, y, d0, d1, d2, d3, s0, s1, s2, s3);
  }
}
)")};
}

std::vector<GeneratedKernel> TransposeKernels() {
  return {TransposeTiled(), TransposeGather(), TransposeTiled(DType::kBFloat16),
          TransposeGather(DType::kBFloat16)};
}

}  // namespace reprise::codegen
