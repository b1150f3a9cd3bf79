// CUDA C++ for the weight gradient of a 3x3 convolution (pad 1, stride 1, NHWC, float32 data on
// TF32 tensor cores) over wide images, where alone it beat cuDNN's (0.145 against 0.235 ms for
// ResNet-50's layer1 at batch 64 on an H200, docs/results/history/2026-11-29_fb169a8.md, in its
// earlier form of two blocks per SM; inside the whole step it does not yet, in either form, so
// TrainOptions::kernels.own_weight_gradients is off by default).
//
// An implicit GEMM on mma.sync m16n8k8: dw[k][r][s][c] = sum over output positions of
// dy[pos][k] x[pos shifted by (r - 1, s - 1)][c]. Block (k tile, c tile, filter row r, split) sums
// 64 k x (3 s x 64 c) over its split's output rows, a few rows per stage: the dy rows by
// cp.async, the input rows through registers, both double-buffered in shared memory; the three
// s taps read one input row at three offsets. Each block writes its partial to the lane's
// workspace, and a second kernel adds the partials in split order: the summation order, hence the
// bits, come from the shape alone.
//
// Sizes are compiled in (one kernel per shape; the kernel store caches it by its source).
#ifndef REPRISE_SRC_CODEGEN_WGRAD3X3_KERNELS_H_
#define REPRISE_SRC_CODEGEN_WGRAD3X3_KERNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// x [n, h, w, c], dy [n, p, q, k], dw [k, 3, 3, c]; pad 1, stride 1 (so p = h, q = w).
struct Wgrad3x3Shape {
  int64_t n = 0, h = 0, w = 0, c = 0, k = 0;
};

// OK where the kernels handle `shape`: c and k multiples of 64, an image width of 28 to 64
// (narrower images run better on cuDNN even alone; wider ones would not fit shared memory), and
// every tensor under 2^31 elements. Else kUnimplemented saying which limit.
absl::Status Wgrad3x3Supports(const Wgrad3x3Shape& shape);

inline constexpr int kWgrad3x3Threads = 256;

struct Wgrad3x3Launch {
  int rows_per_stage = 0;  // Output rows each stage of a block sums.
  int rows_per_split = 0;  // A multiple of rows_per_stage.
  int splits = 0;
  int blocks = 0;  // (k / 64) x (c / 64) x 3 x splits.
  int64_t shared_bytes = 0;
  int64_t partial_floats = 0;  // blocks x 64 x 192: the workspace the partials take.
};
// From the shape alone (never the device): about 264 blocks where the rows allow, two waves of
// one block per multiprocessor of an H100 (the kernel keeps room beside it for the other lanes'
// kernels, src/codegen/wgrad3x3_kernels.cc).
Wgrad3x3Launch Wgrad3x3LaunchFor(const Wgrad3x3Shape& shape);

// reprise_wgrad3x3_tf32: (const float* x, const float* dy, float* partial), exactly `blocks`
// blocks of kWgrad3x3Threads threads with `shared_bytes` of dynamic shared memory.
GeneratedKernel Wgrad3x3Tf32(const Wgrad3x3Shape& shape);
// reprise_wgrad3x3_sum: (const float* partial, float* dw): each element of dw the sum of its
// partials in split order. One thread per element, grid-stride.
GeneratedKernel Wgrad3x3Sum(const Wgrad3x3Shape& shape);

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_WGRAD3X3_KERNELS_H_
