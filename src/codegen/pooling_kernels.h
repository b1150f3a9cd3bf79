// CUDA C++ source for the pooling kernels (src/ops/pooling.h): max pooling and its gradient, global
// average pooling and its gradient. Deterministic (fixed summation orders, no atomics), and
// written to compute what the CPU references compute: the same window scan and tie rule, the same
// order of gradient sums.
//
// Each kernel comes in float32, bfloat16 and float16 (src/codegen/element_type.h): elem_t below is
// what the tensors hold, arithmetic is in float, and 16-bit types round once per stored element.
// The kernels are named ElementKernelName(base, dtype), base the name given with each.
//
// Image tensors are dense [N, C, H, W] (channels_last = 0) or [N, H, W, C] (channels_last = 1).
#ifndef REPRISE_SRC_CODEGEN_POOLING_KERNELS_H_
#define REPRISE_SRC_CODEGEN_POOLING_KERNELS_H_

#include <cstdint>
#include <vector>

#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// A max pooling's sizes (x [n, h, w, c] pooled to [n, oh, ow, c] by a kh x kw window, strides sh
// and sw, padding ph and pw). The channels-last kernels below compile them in as constants: a
// source serves one shape (the kernel store keeps one module per source), and its window
// arithmetic divides by constants, a multiply and a shift (ResNet-50's stem gradient at batch 64
// on an H200: 0.139 instead of 0.207 ms). They still take their size parameters, which must be
// these sizes.
struct PoolSizes {
  int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  int kh = 0, kw = 0, sh = 0, sw = 0, ph = 0, pw = 0;
};

// reprise_max_pool2d: y = max over each window, one thread per y element (grid-stride). The
// window is scanned row by row; an element replaces the running max when greater, or when NaN and
// the max is not. Signature: (const elem_t* x, elem_t* y, long long n, long long c, long long h,
// long long w, long long oh, long long ow, int kh, int kw, int sh, int sw, int ph, int pw,
// int channels_last).
GeneratedKernel MaxPool2d(DType dtype = DType::kFloat32);

// reprise_max_pool2d_grad: dx, one thread per dx element (grid-stride): the float sum, over the
// windows that cover the element in row-major window order, of dy for each window whose first
// element equal to its y (NaN matching NaN) is this one. Signature: (const elem_t* dy,
// const elem_t* x, const elem_t* y, elem_t* dx, long long n, long long c, long long h,
// long long w, long long oh, long long ow, int kh, int kw, int sh, int sw, int ph, int pw,
// int channels_last).
GeneratedKernel MaxPool2dGrad(DType dtype = DType::kFloat32);

// reprise_max_pool2d_nhwc4 and reprise_max_pool2d_grad_nhwc4: the two kernels above for
// channels-last tensors whose channel count is a multiple of 4 and whose x, y, dy and dx are
// aligned to 4 elements: one thread per 4 adjacent channels of one output (forward) or input
// (gradient) position, so the window arithmetic is shared and the tensors move in 4-element loads
// (ResNet's stem pooling was index-bound). Same results, bit for bit; same signatures (their
// channels_last argument is ignored), except that the forward one takes `unsigned char* argmax`
// after y: where not null, it also writes each window's argmax as reprise_max_pool2d_argmax_nhwc4
// (below) finds it, so that a gradient can gather from it (max_pool2d_with_argmax,
// src/ops/pooling_bn_relu.h).
GeneratedKernel MaxPool2dNhwc4(DType dtype, const PoolSizes& sizes);
GeneratedKernel MaxPool2dGradNhwc4(DType dtype, const PoolSizes& sizes);

// The channels-last gradient in two passes, for windows of at most 255 elements where a workspace
// of one byte per element of y is at hand: each window's gradient goes to one element, so finding
// it once per window (not once per covering window of every element) and then gathering is the
// same sum with fewer reads of x. Same results, bit for bit.
// reprise_max_pool2d_argmax_nhwc4: argmax[i] = the row-major index within its window of the first
// element equal to y[i] (NaN matching NaN), 255 if none; one thread per 4 channels of an output.
// Signature: (const elem_t* x, const elem_t* y, unsigned char* argmax, then MaxPool2d's extents,
// window and channels_last).
GeneratedKernel MaxPool2dArgmaxNhwc4(DType dtype, const PoolSizes& sizes);
// reprise_max_pool2d_grad_from_argmax_nhwc4: dx, one thread per 4 channels of an input position:
// the float sum, over its covering windows in row-major order, of dy for each window whose argmax
// is this element. Signature: (const elem_t* dy, const unsigned char* argmax, elem_t* dx, then
// the extents, window and channels_last).
GeneratedKernel MaxPool2dGradFromArgmaxNhwc4(DType dtype, const PoolSizes& sizes);

// reprise_bn_relu_max_pool2d_nhwc4: max pooling of relu(batch_norm_apply(x)) recomputed on the
// fly (x a batch norm's input, with its saved statistics), for the mirror pass's twins
// (src/ops/pooling_bn_relu.h). Each window element is the value batch_norm_apply with ReLU stores
// (the same float expression, rounded to the element type), scanned in max_pool2d's order; it
// writes y (reprise_max_pool2d_nhwc4's values) and each window's argmax as
// reprise_max_pool2d_argmax_nhwc4 finds it (a byte per element of y), for
// reprise_max_pool2d_grad_from_argmax_nhwc4. One thread per 4 channels of an output. Signature:
// (const elem_t* x, const float* mean, const float* gamma, const float* invstd, const float*
// beta, elem_t* y, unsigned char* argmax, then MaxPool2d's extents, window and channels_last).
GeneratedKernel BnReluMaxPool2dNhwc4(DType dtype, const PoolSizes& sizes);

// reprise_global_avg_pool_nchw: y[n, c] = mean of x[n, c, :, :] for NCHW: one warp per (n, c)
// row of h·w contiguous values, lane-strided float sums joined by a fixed shuffle tree. Launch
// with blocks of 256 threads (8 rows per block, grid-stride over rows). Signature:
// (const elem_t* x, elem_t* y, long long rows, long long hw).
GeneratedKernel GlobalAvgPoolNchw(DType dtype = DType::kFloat32);

// reprise_global_avg_pool_nhwc: y[n, c] = mean over h·w positions for NHWC: one thread per
// (n, c), adjacent threads reading adjacent channels (coalesced), each summing its positions in
// order, in float. Signature: (const elem_t* x, elem_t* y, long long n, long long c,
// long long hw).
GeneratedKernel GlobalAvgPoolNhwc(DType dtype = DType::kFloat32);

// reprise_global_avg_pool_grad: dx = dy[n, c] / (h·w) for every element of dx, grid-stride.
// Signature: (const elem_t* dy, elem_t* dx, long long n, long long c, long long hw,
// int channels_last).
GeneratedKernel GlobalAvgPoolGrad(DType dtype = DType::kFloat32);

// The kernels above whose source is the same for every shape, in every element type: for compile
// checks and for warming the kernel store.
std::vector<GeneratedKernel> PoolingKernels();
// The channels-last max-pooling kernels for one shape (`sizes` compiled in) and element type.
std::vector<GeneratedKernel> PoolingKernels(const PoolSizes& sizes, DType dtype);

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_POOLING_KERNELS_H_
