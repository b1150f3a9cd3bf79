// CUDA source of masked_softmax_cross_entropy (src/ops/masked_loss.cc): the mean over the rows
// whose label is not the padding label of -log softmax(logits)[label], and its gradient, which is
// zero on padded rows.
#ifndef REPRISE_SRC_CODEGEN_MASKED_LOSS_KERNELS_H_
#define REPRISE_SRC_CODEGEN_MASKED_LOSS_KERNELS_H_

#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

inline constexpr int kMaskedLossThreads = 256;  // One block; a power of two for the tree sums.

// (z f32[rows, cols], labels i32[rows], loss f32[1], rows, cols), one block of kMaskedLossThreads:
// thread t sums rows t, t + blockDim.x, ... in order, then a tree sum: a fixed order every run.
GeneratedKernel MaskedSoftmaxCrossEntropy();
// (z, labels, dloss f32[1], dz f32[rows, cols], rows, cols), one block of kMaskedLossThreads per
// row: each block counts the unpadded rows, then writes its row of dz.
GeneratedKernel MaskedSoftmaxCrossEntropyGrad();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_MASKED_LOSS_KERNELS_H_
