// CUDA C++ source for channels-last batch normalization (src/ops/batch_norm_nhwc.h): x is viewed as
// a row-major [rows = N·H·W, C] matrix, and every kernel works on 2-D tiles of it.
//
// Element types: the [rows, C] arrays (x, residual, y, dy, act_out, dx, masked_dy) hold the
// `dtype` a kernel is generated for, float32 or bfloat16 (src/codegen/element_type.h: the
// bfloat16 kernels are named with a "_bf16" suffix). Per-channel arrays (gamma, beta, statistics,
// dgamma, dbeta, coef) are float32 for both. Arithmetic is float, sums double, whatever the type;
// only loads widen and stores round.
//
// Launch shape, shared by the row-walking kernels (stats and apply, forward and backward):
// blocks of kBatchNormThreads threads shaped (block_x, block_y); thread x covers `vec` adjacent
// channels (consecutive threads read consecutive channels, so loads coalesce), thread y walks the
// rows of its block's chunk with stride block_y. grid = (column_tiles, chunks). All of it comes
// from BatchNormTilingFor(rows, C, vec), i.e. from the shapes alone, never from the device: the
// summation order, hence the bits, are the same on every run and every GPU.
//
// Scratch (the lane's workspace), for chunks k and channels c:
//   double partial[2][chunks][C]  at byte 0: per-chunk sums (Σx, Σx² forward; Σg, Σg·(x - mean)
//                                 backward), each a fixed-order tree within its block
//   float  coef[3][C]             at BatchNormCoefficientOffset: per-channel factors that the
//                                 finalize kernel hands to the apply kernel
// No sum takes an atomic (the tickets of (a)'s own finalize only count arrivals); sums run in
// double (fp64 is plentiful next to the memory traffic, and Σx² - M·mean² then loses nothing that
// matters in float32).
#ifndef REPRISE_SRC_CODEGEN_BATCH_NORM_KERNELS_H_
#define REPRISE_SRC_CODEGEN_BATCH_NORM_KERNELS_H_

#include <cstdint>
#include <vector>

#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

inline constexpr int kBatchNormThreads = 256;
// Four resident blocks (the tiled kernels' launch bounds) on each of an H100's 132
// multiprocessors: one wave. A constant, not the device's SM count, so that chunking (and the
// bits) do not depend on the GPU.
inline constexpr int64_t kBatchNormTargetBlocks = 4 * 132;
inline constexpr int64_t kBatchNormMaxChunks = 512;
// Rows each thread walks at least (the tiled kernels unroll by up to this), unless the tensor
// is smaller.
inline constexpr int64_t kBatchNormMinRowsPerThread = 4;

struct BatchNormTiling {
  int vec = 1;      // Channels per thread: 4 (one 16- or 8-byte load) or 1.
  int block_x = 0;  // Threads across channels: a power of two <= 32.
  int block_y = 0;  // Threads across rows: kBatchNormThreads / block_x.
  int64_t column_tiles = 0;
  int64_t chunks = 0;
  int64_t rows_per_chunk = 0;
  int64_t scratch_bytes = 0;  // Partials and coefficients, laid out as above.
};

// The launch shape for x [rows, channels] read `vec` (4 or 1) channels per thread; rows,
// channels >= 1, and channels % vec == 0. `planar` (NCHW, vec 1): one channel per block column,
// all 256 threads across rows, so that consecutive threads read consecutive pixels of a plane.
BatchNormTiling BatchNormTilingFor(int64_t rows, int64_t channels, int vec, bool planar = false);

// Byte offset of coef[3][C] in the scratch.
int64_t BatchNormCoefficientOffset(int64_t chunks, int64_t channels);
// The statistics kernels that finalize (below) also keep double lane_sums[2][32][C] in the
// scratch, after the coefficients, and count on kBatchNormTileTickets of the lane's tickets a
// column tile.
inline constexpr int64_t kBatchNormTileTickets = 33;
int64_t BatchNormLaneSumsOffset(int64_t chunks, int64_t channels);
int64_t BatchNormFinalizeScratchBytes(int64_t chunks, int64_t channels);

// The tiled kernels below take `vec` (4 or 1) and the element type `dtype` (kFloat32 or
// kBFloat16); `elem_t` in a signature is float or bfloat16's 16 bits accordingly. `plane` is 0
// for channels-last data, or H·W for NCHW data, which they read as the same [rows = N·H·W,
// channels] view (vec 1 only, with the planar tiling); either way each sum runs in a fixed
// order that depends on the shapes alone. Names: reprise_bn_<kernel>_v<vec>, plus "_nchw<plane>"
// for NCHW and
// "_bf16" for bfloat16.
//
// Forward pass, three launches, or two where (a) finalizes:
// (a) partial[0][k][c] = Σ x, partial[1][k][c] = Σ x² over chunk k's rows. Tiled launch.
//     Signature: (const elem_t* x, double* partial, long long rows, int channels,
//     long long rows_per_chunk). With `finalize` (named reprise_bn_stats_fin...) the signature
//     goes on with unsigned* tickets, double* lane_sums (the scratch at BatchNormLaneSumsOffset)
//     and (b)'s arguments from epsilon on: the tickets hold kBatchNormTileTickets zero words a
//     column tile (and are left zero), and the blocks that finish last do (b) for the tile's
//     channels, with (b)'s sums and bits (batch_norm_kernel_parts.cc, kTileFinalize), so that (b)
//     is not launched.
GeneratedKernel BatchNormStats(int vec, DType dtype, int64_t plane = 0, bool finalize = false);
// (b) Per channel, one kernel for every element type: sums the chunks (blocks of 32x32 threads,
//     32 channels each, ceil(C/32) of them; 32 lanes per channel in a fixed order), then mean,
//     biased var, saved_mean = mean, saved_invstd = 1/sqrt(var + eps), coef[0][c] =
//     gamma·saved_invstd (in float, as batch_norm_apply recomputes it), and the running
//     statistics in place (running_var with the unbiased var·M/(M-1)). Signature: (const double*
//     partial, int chunks, int channels, long long rows, double epsilon, double momentum,
//     const float* gamma, float* running_mean, float* running_var, float* saved_mean,
//     float* saved_invstd, float* coef).
GeneratedKernel BatchNormFinalize();
// (c) y = act((x - mean)·coef[0] + beta (+ residual)), act = relu when `relu` != 0; residual may
//     be null. Tiled launch. Signature: (const elem_t* x, const elem_t* residual,
//     const float* mean, const float* coef, const float* beta, elem_t* y, long long rows,
//     int channels, long long rows_per_chunk, int relu).
//     With `write_bits` (channels-last, channels % 16 == 0; named reprise_bn_apply_bits...) it
//     also writes the ReLU's keep mask: bit e % 4 of byte e / 4 of keep_bits set where element e
//     of the stored y is > 0 (each byte's upper half zero), so that the backward reads 2 bits per
//     element instead of y. The signature ends with unsigned char* keep_bits (null without
//     write_bits).
GeneratedKernel BatchNormApply(int vec, DType dtype, int64_t plane = 0, bool write_bits = false);

// batch_norm_apply in NHWC: (c) with coef[0] formed in the kernel as gamma·saved_invstd in float,
// as (b) forms it, so a recomputed y has the forward's bits. One tiled launch, no scratch.
// Signature: (const elem_t* x, const elem_t* residual, const float* gamma, const float* beta,
// const float* saved_mean, const float* saved_invstd, elem_t* y, long long rows, int channels,
// long long rows_per_chunk, int relu).
GeneratedKernel BatchNormApplySaved(int vec, DType dtype, int64_t plane = 0);

// A chain of batch_norm_apply steps in one pass (src/ops/batch_norm_apply.h's
// batch_norm_apply_chain): step 0 is (c) without residual or ReLU; each later step s is (c) with
// the previous step's value (rounded to the element type) as residual and the ReLU, and is stored
// where its y is set. Up to kBatchNormChainMaxSteps steps; tiled launch, no scratch. Signature:
// (BnChain chain, long long rows, int channels, long long rows_per_chunk), BnChain holding, per
// step, {x, gamma, beta, saved_mean, saved_invstd, y} device addresses, then int steps.
inline constexpr int kBatchNormChainMaxSteps = 8;
GeneratedKernel BatchNormApplyChain(int vec, DType dtype, int64_t plane = 0);

// Backward pass, three launches (or two, as the forward's), with g = act_out ? (act_out > 0 ? dy :
// 0) : dy, or with `mask_from_x` (kernels named ..._xmask) g = y > 0 ? dy : 0 for y = relu((x -
// mean)·(gamma·invstd)
// + beta) rounded to the element type, the forward's apply: a ReLU's mask with no pass over its
// output (act_out is then ignored; gamma, invstd and beta are read only then):
// (a) partial[0][k][c] = Σ g, partial[1][k][c] = Σ g·(x - mean); with `write_masked` (kernels
//     named ..._mdy) also masked_dy = g, so that (c) can read g alone instead of dy and the mask's
//     source again. Tiled launch. Signature:
//     (const elem_t* dy, const elem_t* act_out, const elem_t* x, const float* mean,
//     const float* gamma, const float* invstd, const float* beta, double* partial,
//     elem_t* masked_dy, long long rows, int channels, long long rows_per_chunk,
//     const unsigned char* act_bits). With `finalize` (named ..._fin) the signature goes on with
//     unsigned* tickets, double* lane_sums, float* dgamma, float* dbeta, float* coef, and the
//     blocks that finish last do (b) for the tile's channels, as the forward's (a) does.
// With `mask_from_bits` (kernels named ..._bmask; channels-last, channels % 16 == 0) g takes its
// mask from the forward's keep bits (BatchNormApply's write_bits) instead of act_out or x
// (act_bits, null without mask_from_bits; (c)'s signature ends with it too).
// With `dy_addend` (named ..._dsum; with write_masked) dy is the sum of two tensors, dy and
// dy_addend, added as they are loaded and rounded to the element type as an add node's output
// would be (a residual block's input gradient: its data gradient and the skip's), so the sum is
// never written; the signature goes on, after act_bits, with const elem_t* dy_addend (passed,
// null, to every form).
struct BatchNormGradStatsForm {
  bool mask_from_x = false;
  bool write_masked = false;
  bool mask_from_bits = false;
  bool finalize = false;
  bool dy_addend = false;
};
GeneratedKernel BatchNormGradStats(int vec, DType dtype, int64_t plane = 0,
                                   const BatchNormGradStatsForm& form = {});
// (b) Launched as (b) above: dbeta = Σg, dgamma = invstd·Σg·(x - mean), and the dx factors
//     coef[0] = gamma·invstd, coef[1] = coef[0]·dbeta/M, coef[2] = coef[0]·invstd·dgamma/M.
//     Signature: (const double* partial, int chunks, int channels, long long rows,
//     const float* gamma, const float* invstd, float* dgamma, float* dbeta, float* coef).
GeneratedKernel BatchNormGradFinalize();
// (c) dx = coef[0]·g - coef[1] - coef[2]·(x - mean). Tiled launch. Signature:
//     (const elem_t* dy, const elem_t* act_out, const elem_t* x, const float* mean,
//     const float* coef, const float* gamma, const float* invstd, const float* beta, elem_t* dx,
//     long long rows, int channels, long long rows_per_chunk).
GeneratedKernel BatchNormGradApply(int vec, DType dtype, int64_t plane = 0,
                                   bool mask_from_x = false, bool mask_from_bits = false);

// Every kernel above in both vector widths and every element type, and the NCHW form for plane
// 49: the 2 finalize kernels and the tiled ones (the gradient statistics with and without the
// mask from x or the keep bits and the masked output, the gradient apply likewise, the apply
// chain, and the statistics kernels that finalize in ResNet's forms), for compile checks and for
// warming the kernel store.
std::vector<GeneratedKernel> BatchNormKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_BATCH_NORM_KERNELS_H_
