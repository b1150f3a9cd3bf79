// CUDA C++ source for softmax cross-entropy over wide rows (a language model's vocabulary) and
// over 16-bit logits: one block per row, the logits read in their own type and widened on load,
// the row's max and Σ exp(z - max) accumulated in float, the loss written in float32 and the
// gradient in the logits' type. No float32 copy of the logits exists. Two forms: XentRows reads a
// row twice (statistics online, then the gradient); XentRowsOnePass, where a row fits shared
// memory in whole 16-byte vectors, reads it once.
//
// The small-vocabulary float32 losses of one model of at most kOneBlockLossMaxRows rows keep the
// one-block kernels of generated_kernel.h; UseRowPerBlockLoss says which family a shape takes.
// An ensemble's losses (src/ops/batched.h: logits [K, B, C]) always take these kernels: its K·B
// rows are rows like any other, each model's gradient scaled by its own dloss[k] / B, and the mean
// taken per model. So model k of an ensemble gets the bits a single model's row kernels give its
// [B, C] slice, where that slice starts on a 4-element boundary (XentRows splits a row at such
// boundaries, counted from the tensor's start, and the split orders the row's sums).
//
// Determinism: each row's statistics combine the threads' partial (max, sum) pairs in a fixed
// tree, and the mean adds the row losses in a fixed order, so every run gives the same bits. The
// loss, the gradient and the fused pair share the row code: the fused kernel's loss has the loss
// kernel's bits and its gradient the gradient kernel's.
#ifndef REPRISE_SRC_CODEGEN_LOSS_KERNELS_H_
#define REPRISE_SRC_CODEGEN_LOSS_KERNELS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// Threads per block of XentRows (one row per block) for rows of 3969 columns and more: 1024 keeps
// at most two wide rows per multiprocessor in flight, so a row's second read (for the gradient)
// mostly hits L2. Narrower rows take fewer (XentRowThreads).
inline constexpr int kXentRowThreads = 1024;
// Threads of the one-block mean kernel.
inline constexpr int kXentMeanThreads = 1024;

// The most rows a float32 loss of one model takes the one-block kernels for (generated_kernel.h):
// their 16 warps take the rows in turn, a row's dependent loads and reductions after another's,
// and thread 0 then adds every row's loss, so past a few rows a warp the row-per-block kernels
// below, with the mean in a launch of its own, finish first.
inline constexpr int64_t kOneBlockLossMaxRows = 64;

// Whether a [rows, cols] loss of `dtype` logits runs on the row-per-block kernels below: 16-bit
// logits always, float32 ones from 1024 classes or past kOneBlockLossMaxRows rows.
bool UseRowPerBlockLoss(int64_t rows, int64_t cols, DType dtype);

// What a row kernel writes.
enum class XentOutputs { kLoss, kGradient, kLossAndGradient };

// Threads of a row kernel's block for rows of `cols` columns: one per 4-element quad (XentRows) or
// 16-byte vector (XentRowsOnePass), in whole warps, at most kXentRowThreads or
// kXentOnePassThreads, so that a narrow row (a classifier's ten classes, K·B of them in an
// ensemble) does not hold a block of idle threads. The combining tree of a row's statistics
// follows the count, which follows the width alone, so one model's rows and an ensemble's of the
// same width combine alike.
int XentRowThreads(int64_t cols);
int XentOnePassThreads(int64_t cols, DType dtype);

// One block of XentRowThreads(cols) per row r of `cols` columns, the first `classes` of them real
// (the rest pad the row: no part in the softmax, a gradient of exactly 0), over models·rows rows:
// the grid is models·rows, `rows` each model's (one model: all of them), and row r is model k = r /
// rows's:
//   kLoss:     row_loss[r] = log Σ_{c<classes} exp(z[r, c] - m) + m - z[r, label[r]]  (m the
//              max over the classes; NaN for a label outside [0, classes));
//   kGradient: dz[r, c] = dloss[k·dloss_stride] / rows · (softmax(z[r, :classes])[c] -
//              (c == label[r])) for c < classes, rounded once to the logits' type; 0 for
//              c >= classes. dloss_stride is 1 for a dloss per model, 0 for one dloss for all.
// Named ElementKernelName("reprise_xent_rows_loss" | "_grad" | "_loss_grad", dtype). Signature:
// (const elem_t* z, const int* labels, const float* dloss, float* row_loss, elem_t* dz, int rows,
// int cols, int classes, int dloss_stride); the pointers a variant does not use may be null.
GeneratedKernel XentRows(DType dtype, XentOutputs outputs);

// The one-pass form of XentRows for rows of exactly `cols` columns (fixed in the source): the
// same outputs, signature (its cols argument unused), grid (one block per row) and determinism,
// but each block of XentOnePassThreads(cols, dtype) copies its row once into shared memory (16-byte
// asynchronous copies, cols·ElementBytes(dtype) bytes of dynamic shared memory, the launch's
// shared_bytes) and takes the statistics and the gradient from there, so the logits are read from
// memory once, not twice (GPT-2's [16384, 50304] bfloat16 logits: 1.65 GB read and 1.65 GB
// written instead of 3.3 GB read). Two blocks fit a multiprocessor up to about 113 KB a row, so
// one block's arithmetic overlaps the other's copy.
//
// Bits: each thread's (m, s) is the exact max of its elements and its sum of exp(x - m) in
// column order; the pairs combine in XentRows's tree. exp is the hardware's base-2 exponential of
// (x - m)·log2(e) (a relative error of a few 1e-7 where a term matters, against expf's 2 ulp), and
// the gradient is p·(scale / s) - scale at the label. So the loss and gradient agree with
// XentRows's to float32 rounding but not bit for bit; every run, and the loss, gradient and fused
// kernels of one width, give the same bits. Named ElementKernelName("reprise_xent_onepass" +
// "_loss" | "_grad" | "_loss_grad", dtype). Only where XentOnePassApplies.
inline constexpr int kXentOnePassThreads = 512;
inline constexpr int64_t kXentOnePassMaxRowBytes = 192 * 1024;
GeneratedKernel XentRowsOnePass(DType dtype, XentOutputs outputs, int64_t cols);
// True when a row of `cols` `dtype` elements splits into whole 16-byte vectors and fits
// kXentOnePassMaxRowBytes (98,304 16-bit or 49,152 float32 columns), and every one of `pointers`
// (the logits and the gradient) is 16-byte aligned.
bool XentOnePassApplies(int64_t cols, DType dtype, absl::Span<const void* const> pointers);

// loss[k] = (Σ_{r<rows} row_loss[k·rows + r]) / rows, each model's mean of its rows: one block
// of kXentMeanThreads per model (grid = models, 1 for one model), each adding its rows in the same
// fixed order, so model k's mean has the bits of a one-model mean of the same row losses. Name
// reprise_xent_mean. Signature: (const float* row_loss, float* loss, int rows).
GeneratedKernel XentMean();

// Every kernel above, for every kernel element type (the one-pass form at GPT-2's 50,304 columns).
std::vector<GeneratedKernel> LossKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_LOSS_KERNELS_H_
