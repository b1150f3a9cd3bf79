// CUDA C++ for convolutions whose input has only a few channels (a network's stem: 7x7, stride 2,
// 3 -> 64 channels), where cuDNN's implicit GEMMs run at a few percent of the tensor cores' rate
// (0.21 ms forward and 0.24 ms weight gradient for ResNet-50's stem at batch 32 on an H200, TF32,
// whatever the padding of its input channels: docs/results/history/2026-11-28_00b8c8f.md). NHWC
// only, groups 1, dilation 1; float32 data on TF32 tensor cores, or bfloat16 / float16 data on
// 16-bit tensor cores, accumulating in float.
//
// Both kernels are implicit GEMMs whose reduction runs over the filter taps j = (r, s, c) in the
// NHWC filter's own order (so w[k][j] is the filter as stored), padded to the MMA step with taps
// that the forward weighs by zero and whose columns the weight gradient drops. A block stages one
// tile of output positions (kTileRows x 16) at a time: the input patch that tile reads (zeros where
// the window leaves the image) goes to shared memory, and each operand fragment is gathered from it
// through a table of tap offsets.
//
//   forward:        y[pos][k] = sum over j of patch(pos, j) w[k][j]. The filter stays in shared
//                   memory for the block's life; each warp owns two rows of 16 positions and all
//                   K output channels.
//   weight grad.:   dw[k][j] = sum over pos of dy[pos][k] patch(pos, j): each block sums its
//                   tiles into registers and writes one partial [K][KP]; a second kernel adds
//                   the blocks' partials in a fixed order (the same bits every run).
//
// Sizes are compiled in (one kernel per shape; the kernel store caches it by its source).
#ifndef REPRISE_SRC_CODEGEN_NARROW_CONV_KERNELS_H_
#define REPRISE_SRC_CODEGEN_NARROW_CONV_KERNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// An NHWC convolution: x [n, h, w, c], w [k, r, s, c], y [n, p, q, k].
struct NarrowConvShape {
  int64_t n = 0, h = 0, w = 0, c = 0, k = 0, r = 0, s = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int64_t p = 0, q = 0;
  DType dtype = DType::kFloat32;
};

// The most input channels a narrow convolution has (cuDNN is fast from 8 on).
inline constexpr int64_t kNarrowConvMaxChannels = 4;

// OK where the kernels below handle `shape`: at most kNarrowConvMaxChannels input channels,
// output channels a multiple of 16 up to 64, taps (c r s) at most 256, strides at most 4, padding
// below the kernel extent, float32 / bfloat16 / float16 data, and every tensor under 2^31
// elements. Else kUnimplemented saying which limit.
absl::Status NarrowConvSupports(const NarrowConvShape& shape);

// Launch geometry: 256 threads per block; blocks loop over the tiles (grid-stride).
inline constexpr int kNarrowConvThreads = 256;

struct NarrowConvLaunch {
  int tiles = 0;  // Tiles of output positions.
  int64_t shared_bytes = 0;
};
NarrowConvLaunch NarrowConvForwardLaunch(const NarrowConvShape& shape);
NarrowConvLaunch NarrowConvWgradLaunch(const NarrowConvShape& shape);

// f32 elements of the weight gradient's partials for `blocks` blocks: blocks x k x KP.
int64_t NarrowConvWgradPartialFloats(const NarrowConvShape& shape, int blocks);

// reprise_narrow_conv_fwd[_bf16|_f16]: (const elem_t* x, const elem_t* w, elem_t* y).
GeneratedKernel NarrowConvForward(const NarrowConvShape& shape);
// reprise_narrow_conv_wgrad[...]: (const elem_t* x, const elem_t* dy, float* partial), launched
// with exactly `blocks` blocks (each writes its partial, zeros if it had no tile).
GeneratedKernel NarrowConvWgrad(const NarrowConvShape& shape);
// reprise_narrow_conv_wgrad_sum[...]: (const float* partial, elem_t* dw): dw[k][j] = the sum over
// the `blocks` partials, in a fixed order (kNarrowConvSumSlices interleaved slices, each in block
// order, then the slices in order). Launch blocks of 32 x kNarrowConvSumSlices threads, one per 32
// elements of dw: ceil(k c r s / 32) of them.
inline constexpr int kNarrowConvSumSlices = 8;
GeneratedKernel NarrowConvWgradSum(const NarrowConvShape& shape, int blocks);

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_NARROW_CONV_KERNELS_H_
