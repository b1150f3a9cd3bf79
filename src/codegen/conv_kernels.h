// CUDA C++ source for the per-channel kernels of convolutional layers: the channel bias and its
// gradient (src/ops/conv.h). Sizes are arguments, so one compiled kernel serves every shape and
// both layouts. NHWC bias gradients reuse ColumnSum() (rows N·H·W, columns C).
#ifndef REPRISE_SRC_CODEGEN_CONV_KERNELS_H_
#define REPRISE_SRC_CODEGEN_CONV_KERNELS_H_

#include <vector>

#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// The channel bias and its sum come in float32, bfloat16 and float16 (src/codegen/element_type.h:
// elem_t is what the tensors hold; arithmetic is in float), named ElementKernelName(base, dtype).

// reprise_channel_bias_add: y[i] = x[i] + b[(i / inner) % channels], a grid-stride loop over n
// elements: inner is H·W for NCHW and 1 for NHWC. Signature: (const elem_t* x, const elem_t* b,
// elem_t* y, long long n, long long channels, long long inner).
GeneratedKernel ChannelBiasAdd(DType dtype = DType::kFloat32);

// reprise_channel_sum: db[c] = Σ over o < outer, j < inner of dy[(o·channels + c)·inner + j]: the
// NCHW bias gradient (outer N, inner H·W), summed in float and rounded once at the store. One
// block of kChannelSumBlock threads per channel; each thread sums a fixed strided slice and the
// block adds the slices as a fixed tree, so the bits never depend on scheduling. Signature:
// (const elem_t* dy, elem_t* db, long long outer, long long channels, long long inner).
inline constexpr int kChannelSumBlock = 256;
GeneratedKernel ChannelSum(DType dtype = DType::kFloat32);

// All of them, for compile checks and prefetching.
std::vector<GeneratedKernel> ConvKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_CONV_KERNELS_H_
