// CUDA C++ source for the batched ops of ensemble batching (src/ops/batched.h): K models' tensors
// stacked along a leading model dimension, one launch for all K. Each kernel runs, per model, the
// same arithmetic in the same order as the unbatched kernel it replaces (bias add, column sum,
// softmax cross-entropy and its gradient), so a batched step computes each model's values with
// the same bits as that model's own step would. float32 only.
#ifndef REPRISE_SRC_CODEGEN_BATCHED_KERNELS_H_
#define REPRISE_SRC_CODEGEN_BATCHED_KERNELS_H_

#include <vector>

#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// y[k, r, c] = x[k, r, c] + b[k, c], grid-stride over n = K·rows·cols elements.
// Signature: (const float* x, const float* b, float* y, long long n, long long rows,
// long long cols).
GeneratedKernel BatchedBiasAdd();

// db[k, c] = Σ_r dy[k, r, c], ColumnSum()'s order per model. Blocks of 32x32 threads, grid
// (ceil(cols / 32), K). Signature: (const float* dy, float* db, long long rows, long long cols).
GeneratedKernel BatchedColumnSum();

// loss[k] = mean over rows of the loss of z[k] and labels[k], as SoftmaxCrossEntropy(); one block
// per model (grid K), rows floats of shared memory. Signature: (const float* z, const int* labels,
// float* loss, int rows, int cols).
GeneratedKernel BatchedSoftmaxCrossEntropy();

// dz[k] as SoftmaxCrossEntropyGrad() with dloss[k]; one warp per row, grid (ceil(rows / warps),
// K). Signature: (const float* z, const int* labels, const float* dloss, float* dz, int rows,
// int cols).
GeneratedKernel BatchedSoftmaxCrossEntropyGrad();

// Both of the above in one launch with every model's dloss the gradient of the models' summed
// loss, dtotal[0]; one block per model. Signature: (const float* z, const int* labels,
// const float* dtotal, float* loss, float* dz, int rows, int cols); shared memory rows floats.
GeneratedKernel BatchedSoftmaxCrossEntropyWithGrad();

// dx = y > 0 ? dy : 0 over [K, rows, cols], and db[k, c] = Σ_r dx[k, r, c] in
// BatchedColumnSum()'s grid and order. Signature: (const float* dy, const float* y, float* dx,
// float* db, long long rows, long long cols).
GeneratedKernel BatchedReluGradColumnSum();

// out[0] = x[0] + x[1] + ... + x[K-1], in that order (one thread). Signature: (const float* x,
// float* out, int models).
GeneratedKernel ModelSum();

// out[k] = x[0] for k < K. Signature: (const float* x, float* out, int models).
GeneratedKernel ModelBroadcast();

// y[i] = x[i % per_model] for i < total: x repeated per model, as 4-byte words (float32 or
// int32). Signature: (const unsigned* x, unsigned* y, long long per_model, long long total).
GeneratedKernel ModelTile();

std::vector<GeneratedKernel> BatchedKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_BATCHED_KERNELS_H_
