// CUDA C++ source for the batched ops of ensemble batching (src/ops/batched.h): K models' tensors
// stacked along a leading model dimension, one launch for all K. Each kernel runs, per model, the
// same arithmetic in the same order as the unbatched kernel it replaces (bias add, column sum), so
// a batched step computes each model's values with the same bits as that model's own step would.
// float32 only. Softmax cross-entropy has no kernel here: an ensemble's loss takes one model's row
// kernels over its K·B rows (src/codegen/loss_kernels.h).
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
