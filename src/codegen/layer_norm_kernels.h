// CUDA C++ source for layer normalization over the last dimension (src/ops/transformer_ops.h's
// layer_norm and layer_norm_grad). x is viewed as a row-major [rows, cols] matrix; each row is
// normalised on its own.
//
// Element types: x, y, dy and dx hold the `dtype` a kernel is generated for (float32, bfloat16
// or float16; src/codegen/element_type.h names the 16-bit kernels with a suffix); weight, bias,
// the saved statistics and the parameter gradients are float32 for every type (as mixed
// precision keeps them). Arithmetic is float; only loads widen and stores round.
//
// Determinism: no atomics. Row sums are one warp's, each lane summing a fixed stride and the lanes
// combined by a fixed shuffle tree; the parameter gradients sum fixed chunks of rows into
// partials and the chunks in order. The orders depend on the shapes only, so every run and every
// GPU gives the same bits.
#ifndef REPRISE_SRC_CODEGEN_LAYER_NORM_KERNELS_H_
#define REPRISE_SRC_CODEGEN_LAYER_NORM_KERNELS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// Rows per block of the row kernels (one warp each, blocks of 32·kLayerNormRowsPerBlock threads).
inline constexpr int kLayerNormRowsPerBlock = 8;

// How the parameter-gradient kernel splits the rows: `chunks` blocks down the rows, each summing
// `rows_per_chunk` consecutive rows. From the shapes alone.
struct LayerNormChunking {
  int64_t chunks = 0;
  int64_t rows_per_chunk = 0;
  int64_t partial_bytes = 0;  // float partial[2][chunks][cols] in the lane's workspace.
};
LayerNormChunking LayerNormChunkingFor(int64_t rows, int64_t cols);

// Forward, one warp per row: mean, rstd = 1/sqrt(biased var + eps) (two passes over the row),
// y = (x - mean)·rstd·weight + bias. Name reprise_layer_norm. Signature: (const elem_t* x,
// const float* weight, const float* bias, elem_t* y, float* mean, float* rstd, long long rows,
// int cols, float eps). Grid ceil(rows / kLayerNormRowsPerBlock).
GeneratedKernel LayerNormForward(DType dtype);
// The forward of x = a + b (rounded once to elem_t, as add's kernel does, and stored), then as
// LayerNormForward over that x. Name reprise_add_layer_norm. Signature: (const elem_t* a,
// const elem_t* b, const float* weight, const float* bias, elem_t* x, elem_t* y, float* mean,
// float* rstd, long long rows, int cols, float eps).
GeneratedKernel LayerNormAddForward(DType dtype);

// dx, one warp per row: with g = dy·weight and x̂ = (x - mean)·rstd,
// dx = rstd·(g - mean(g) - x̂·mean(g·x̂)). Name reprise_layer_norm_dx. Signature:
// (const elem_t* dy, const elem_t* x, const float* weight, const float* mean, const float* rstd,
// elem_t* dx, long long rows, int cols). Grid as the forward.
GeneratedKernel LayerNormDx(DType dtype);
// As LayerNormDx, plus another gradient of x added before the one rounding: dx = that + dres.
// Name reprise_layer_norm_dx_add. Signature: (dy, x, weight, mean, rstd, const elem_t* dres,
// elem_t* dx, long long rows, int cols).
GeneratedKernel LayerNormDxAdd(DType dtype);

// The four row kernels above, each lane walking its row four elements at a time (8-byte loads of
// 16-bit types, 16-byte loads of float32 and of the weight and bias): names with "_vec" before
// the type suffix (reprise_layer_norm_vec_bf16, ...), the same signatures and grids. Only for a
// width that LayerNormVectorizes.
GeneratedKernel LayerNormForwardVec(DType dtype);
GeneratedKernel LayerNormAddForwardVec(DType dtype);
GeneratedKernel LayerNormDxVec(DType dtype);
GeneratedKernel LayerNormDxAddVec(DType dtype);
// True when the vectorized kernels apply: cols a multiple of 4 and each of `pointers` (the
// tensors they read or write four at a time) 16-byte aligned.
bool LayerNormVectorizes(int64_t cols, absl::Span<const void* const> pointers);

// partial[0][k][c] = Σ dy·x̂ and partial[1][k][c] = Σ dy over chunk k's rows. Blocks of 32x8
// threads, grid (ceil(cols / 32), chunks). Name reprise_layer_norm_dparams_partial. Signature:
// (const elem_t* dy, const elem_t* x, const float* mean, const float* rstd, float* partial,
// long long rows, int cols, long long rows_per_chunk).
GeneratedKernel LayerNormParamPartials(DType dtype);

// dweight[c] = Σ_k partial[0][k][c], dbias[c] = Σ_k partial[1][k][c], k in order; float32 for
// every element type. Blocks of 256 threads, ceil(cols / 256) of them. Name
// reprise_layer_norm_dparams_finalize. Signature: (const float* partial, int chunks, int cols,
// float* dweight, float* dbias).
GeneratedKernel LayerNormParamFinalize();

// Every kernel above for every kernel element type, for compile checks and the kernel store.
std::vector<GeneratedKernel> LayerNormKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_LAYER_NORM_KERNELS_H_
