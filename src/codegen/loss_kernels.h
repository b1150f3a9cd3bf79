// CUDA C++ source for softmax cross-entropy over wide rows (a language model's vocabulary) and
// over 16-bit logits: one block per row, the logits read in their own type and widened on load,
// the row's max and Σ exp(z - max) accumulated online in float in one pass, the loss written in
// float32 and the gradient in the logits' type. No float32 copy of the logits exists.
//
// The small-vocabulary float32 losses keep the one-block kernels of generated_kernel.h (whose bits
// the batched ensemble kernels share); UseRowPerBlockLoss says which family a shape takes.
//
// Determinism: each row's statistics combine the threads' partial (max, sum) pairs in a fixed
// tree, and the mean adds the row losses in a fixed order, so every run gives the same bits. The
// loss, the gradient and the fused pair share the row code: the fused kernel's loss has the loss
// kernel's bits and its gradient the gradient kernel's.
#ifndef REPRISE_SRC_CODEGEN_LOSS_KERNELS_H_
#define REPRISE_SRC_CODEGEN_LOSS_KERNELS_H_

#include <cstdint>
#include <vector>

#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// Threads per block of the row kernels (one row per block). 1024 keeps at most two rows per
// multiprocessor in flight, so a row's second read (for the gradient) mostly hits L2.
inline constexpr int kXentRowThreads = 1024;
// Threads of the one-block mean kernel.
inline constexpr int kXentMeanThreads = 1024;

// Whether a [rows, cols] loss of `dtype` logits runs on the row-per-block kernels below: 16-bit
// logits always, float32 ones from 1024 classes, or past the one-block kernels' 12288 rows.
bool UseRowPerBlockLoss(int64_t rows, int64_t cols, DType dtype);

// What a row kernel writes.
enum class XentOutputs { kLoss, kGradient, kLossAndGradient };

// One block of kXentRowThreads per row r (grid = rows) of `cols` columns, the first `classes` of
// them real (the rest pad the row: no part in the softmax, a gradient of exactly 0):
//   kLoss:     row_loss[r] = log Σ_{c<classes} exp(z[r, c] - m) + m - z[r, label[r]]  (m the
//              max over the classes; NaN for a label outside [0, classes));
//   kGradient: dz[r, c] = dloss[0] / rows · (softmax(z[r, :classes])[c] - (c == label[r])) for
//              c < classes, rounded once to the logits' type; 0 for c >= classes.
// Named ElementKernelName("reprise_xent_rows_loss" | "_grad" | "_loss_grad", dtype). Signature:
// (const elem_t* z, const int* labels, const float* dloss, float* row_loss, elem_t* dz, int rows,
// int cols, int classes); the pointers a variant does not use may be null.
GeneratedKernel XentRows(DType dtype, XentOutputs outputs);

// loss[0] = (Σ_r row_loss[r]) / rows in a fixed order: one block of kXentMeanThreads. Name
// reprise_xent_mean. Signature: (const float* row_loss, float* loss, int rows).
GeneratedKernel XentMean();

// Every kernel above, for every kernel element type.
std::vector<GeneratedKernel> LossKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_LOSS_KERNELS_H_
