// CUDA C++ source for the one-pass layer-norm backward (layer_norm_grad and layer_norm_grad_add of
// src/ops/layer_norm.cc): dx, with the residual stream's gradient added where asked, and the
// parameter gradients' per-block partial sums, reading dy, x (and dres) once with 16-byte loads
// (src/codegen/vector16.h); then a second launch adds the partials in a fixed order.
//
// Rows of up to 32·kLayerNormBackwardMaxLaneVectors vectors (1024 16-bit or 512 float32 columns,
// GPT-2's 768 among them) are taken a warp a row: lane l holds the vectors l, l + 32, ... of the
// row (lane_vectors of them) and its dweight and dbias sums over every row the warp takes, in
// registers; the weight sits in shared memory. A row's two sums go through a warp butterfly, with
// no block barrier; block k of kLayerNormBackwardWarps warps takes rows [k·rows_per_chunk, (k +
// 1)·rows_per_chunk), warp w the rows w, w + warps, ... of it; at the end the block adds its warps'
// parameter sums in warp order into partial[0][k][c] and partial[1][k][c].
//
// Wider rows are taken by a team of `team` threads (ceil(cols / VEC) rounded up to whole warps),
// thread j of the team holding columns [j·VEC, (j + 1)·VEC): its weight, and its dweight and dbias
// sums over every row it takes, stay in registers. A block is `slots` teams (team·slots <= 512
// threads); block k takes rows [k·rows_per_chunk, (k + 1)·rows_per_chunk) in steps of `slots`
// rows, slot s taking row step·slots + s. A row's two sums (Σ g and Σ g·x̂, g = dy·weight) go
// through a warp shuffle tree, then the team's warps in order through shared memory, one barrier
// per step. At the end the block adds its slots' parameter sums in slot order into
// partial[0][k][c] (dweight) and partial[1][k][c] (dbias).
//
// Compared with the three-launch path of layer_norm_kernels.h (dx, partials, total): dy and x are
// read once rather than twice, every load is 16 bytes, the parameter sums build up in registers
// rather than through a second kernel's column walk, and the total reads the partials with 16
// threads per column rather than one. Arithmetic is that path's formulas; the sums run in other
// (fixed) orders, so the bits differ from it in the last places, and every run and replay gives
// the same bits: the orders depend on the shapes alone.
#ifndef REPRISE_SRC_CODEGEN_LAYER_NORM_BACKWARD_KERNELS_H_
#define REPRISE_SRC_CODEGEN_LAYER_NORM_BACKWARD_KERNELS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// The most threads of a block (and of a team): 512, two blocks a multiprocessor.
inline constexpr int kLayerNormBackwardThreads = 512;
// The warp-per-row form: warps a block, and the most 16-byte vectors a lane holds of a row.
inline constexpr int kLayerNormBackwardWarps = 8;
inline constexpr int kLayerNormBackwardMaxLaneVectors = 4;
// Threads per column of the total kernel's blocks (blocks of 32 columns x this).
inline constexpr int kLayerNormTotalRowThreads = 16;

// How the one-pass backward covers a [rows, cols] gradient; from the shapes alone. team == 0 when
// it does not apply (cols not a multiple of VEC, or more than kLayerNormBackwardThreads·VEC, or
// rows past an int).
struct LayerNormBackwardLaunch {
  int team = 0;                // Threads per row, a multiple of 32 (32: a warp a row).
  int slots = 0;               // Rows a block takes at once.
  int lane_vectors = 0;        // Vectors a lane holds of a row in the warp form; 0: team form.
  int64_t rows_per_chunk = 0;  // A multiple of slots.
  int64_t chunks = 0;          // Blocks.
  int64_t partial_bytes = 0;   // float partial[2][chunks][cols] in the lane's workspace.
  // With the column sums of dx (LayerNormBackwardWithSum): partial[3][chunks][cols].
  int64_t partial_bytes_with_sum() const { return partial_bytes / 2 * 3; }
  int block() const { return team * slots; }
};
LayerNormBackwardLaunch LayerNormBackwardLaunchFor(int64_t rows, int64_t cols, DType dtype);

// The kernel. Names reprise_layer_norm_bwd and reprise_layer_norm_bwd_add (+ the type suffix of
// element_type.h). Signature: (const elem_t* dy, const elem_t* x, const float* weight,
// const float* mean, const float* rstd, [const elem_t* dres,] elem_t* dx, float* partial,
// long long rows, int cols, int team, long long rows_per_chunk). Grid: chunks blocks of
// team·slots threads. dy, x, weight, dres and dx must be 16-byte aligned (Aligned16).
GeneratedKernel LayerNormBackward(DType dtype, bool add);
// The kernel of either form: LayerNormBackward for lane_vectors 0, else the warp form with that
// many vectors a lane (named reprise_layer_norm_bwd_w<lane_vectors>[_add]); same signature (team
// unused by the warp form). Grid: chunks blocks of 32·kLayerNormBackwardWarps threads.
GeneratedKernel LayerNormBackwardWith(DType dtype, bool add, int lane_vectors);

// The warp form (lane_vectors >= 1) that also sums dx's columns as stored (each element rounded
// to elem_t, then widened), for a linear layer's bias gradient that reads this dx
// (ops::LayerNormGradColumnSumOp): each warp adds its rows into its own row of shared memory,
// and the block adds its warps' in warp order into partial[2][k][c]. Named
// reprise_layer_norm_bwd_w<lane_vectors>[_add]_sum; the signature and grid as above, with
// partial[3][chunks][cols].
GeneratedKernel LayerNormBackwardWithSum(DType dtype, bool add, int lane_vectors);

// dweight[c] = Σ_k partial[0][k][c] and dbias[c] = Σ_k partial[1][k][c]: thread y of a column
// sums k = y, y + 16, ... in order, then the 16 sums add in order. Grid (ceil(cols / 32), 2),
// blocks (32, kLayerNormTotalRowThreads). Name reprise_layer_norm_dparams_total. Signature:
// (const float* partial, int chunks, int cols, float* dweight, float* dbias).
GeneratedKernel LayerNormParamTotal();
// The same totals and dsum[c] = Σ_k partial[2][k][c] rounded to elem_t, over grid (ceil(cols /
// 32), 3). Name reprise_layer_norm_dparams_total_sum (+ the type suffix). Signature: (const float*
// partial, int chunks, int cols, float* dweight, float* dbias, elem_t* dsum).
GeneratedKernel LayerNormParamTotalWithSum(DType dtype);

// Every kernel above for every kernel element type, but the warp form's (one per width: see
// ops::SizedLayerNormKernelsOf).
std::vector<GeneratedKernel> LayerNormBackwardKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_LAYER_NORM_BACKWARD_KERNELS_H_
