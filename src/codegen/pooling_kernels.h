// CUDA C++ source for the pooling kernels (src/ops/pooling.h): max pooling and its gradient, global
// average pooling and its gradient. All fp32, deterministic (fixed summation orders, no atomics),
// and written to compute what the CPU references compute: the same window scan and tie rule, the
// same order of gradient sums.
//
// Image tensors are dense [N, C, H, W] (channels_last = 0) or [N, H, W, C] (channels_last = 1).
#ifndef REPRISE_SRC_CODEGEN_POOLING_KERNELS_H_
#define REPRISE_SRC_CODEGEN_POOLING_KERNELS_H_

#include <vector>

#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// y = max over each window, one thread per y element (grid-stride). The window is scanned row by
// row; an element replaces the running max when greater, or when NaN and the max is not.
// Signature: (const float* x, float* y, long long n, long long c, long long h, long long w,
// long long oh, long long ow, int kh, int kw, int sh, int sw, int ph, int pw, int channels_last).
GeneratedKernel MaxPool2d();

// dx, one thread per dx element (grid-stride): the sum, over the windows that cover the element in
// row-major window order, of dy for each window whose first element equal to its y (NaN matching
// NaN) is this one. Signature: (const float* dy, const float* x, const float* y, float* dx,
// long long n, long long c, long long h, long long w, long long oh, long long ow, int kh, int kw,
// int sh, int sw, int ph, int pw, int channels_last).
GeneratedKernel MaxPool2dGrad();

// y[n, c] = mean of x[n, c, :, :] for NCHW: one warp per (n, c) row of h·w contiguous values,
// lane-strided sums joined by a fixed shuffle tree. Launch with blocks of 256 threads (8 rows per
// block, grid-stride over rows). Signature: (const float* x, float* y, long long rows,
// long long hw).
GeneratedKernel GlobalAvgPoolNchw();

// y[n, c] = mean over h·w positions for NHWC: one thread per (n, c), adjacent threads reading
// adjacent channels (coalesced), each summing its positions in order. Signature: (const float* x,
// float* y, long long n, long long c, long long hw).
GeneratedKernel GlobalAvgPoolNhwc();

// dx = dy[n, c] / (h·w) for every element of dx, grid-stride. Signature: (const float* dy,
// float* dx, long long n, long long c, long long hw, int channels_last).
GeneratedKernel GlobalAvgPoolGrad();

// Every kernel above, for compile checks and for warming the kernel store.
std::vector<GeneratedKernel> PoolingKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_POOLING_KERNELS_H_
