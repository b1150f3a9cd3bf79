// CUDA C++ source for the optimizer kernels beyond plain SGD (Nesterov and clipped SGD, Adam and
// AdamW, the global gradient norm, the learning-rate schedule), with the host arithmetic their
// CPU references share. Per-step scalars (the scheduled rate, Adam's bias corrections) are
// computed in double from the 64-bit device step counter with correctly rounded operations only,
// and element updates use explicitly rounded float operations (no contraction into FMAs), so the
// CPU reference computes the GPU's bits, and single-tensor and multi-tensor kernels agree.
#ifndef REPRISE_SRC_CODEGEN_OPTIMIZER_KERNELS_H_
#define REPRISE_SRC_CODEGEN_OPTIMIZER_KERNELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// base^exponent by repeated squaring: only multiplications, the same bits on host and device.
// Relative error about `exponent` ulps.
double PowInt(double base, uint64_t exponent);

// The learning-rate schedule of reprise/optimizer.h, as kernel arguments.
enum class ScheduleDecay : int { kConstant = 0, kCosine = 1, kStep = 2 };
struct ScheduleParams {
  int64_t warmup_steps = 0;
  ScheduleDecay decay = ScheduleDecay::kConstant;
  int64_t total_steps = 0;
  double min_factor = 0;
  int64_t step_size = 1;
  double gamma = 1;
};
// The factor the base rate is multiplied by at update `step` (0-based).
double LrFactor(const ScheduleParams& p, uint64_t step);

// Adam's per-step scalars for the update at device step `step` (the first update has step 0).
struct AdamStep {
  double step_size = 0;  // lr / (1 - beta1^t), t = step + 1
  double bc2_sqrt = 0;   // sqrt(1 - beta2^t)
  double decay = 1;      // AdamW: 1 - lr·weight_decay; Adam: 1.
};
AdamStep AdamStepOf(double lr, double beta1, double beta2, double weight_decay, bool decoupled,
                    uint64_t step);

// The global-norm reduction works in chunks of kNormChunk elements, one block of kNormBlock
// threads at a time: thread j sums, in order, the squares of the elements of quads (four
// consecutive elements, one 16-byte load) j, j + kNormBlock, ... of its chunk, then the block adds
// its threads' sums in a fixed tree (lane j adds lane j + s, for s = kNormBlock / 2, ..., 1).
// ChunkSumSquares is that order on the host. Each element is first multiplied by `unscale` (loss
// scaling's 1 / scale; exact for 1).
inline constexpr int kNormBlock = 256;
inline constexpr int kNormChunk = 16 * kNormBlock;
template <typename T>
T ChunkSumSquares(const T* x, int64_t n, T unscale = T(1)) {  // n <= kNormChunk
  T lanes[kNormBlock] = {};
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i] * unscale;
    lanes[(i / 4) % kNormBlock] += v * v;
  }
  for (int s = kNormBlock / 2; s > 0; s /= 2) {
    for (int j = 0; j < s; ++j) lanes[j] += lanes[j + s];
  }
  return lanes[0];
}
// Σ partials in double, in the order of every kernel that reduces them (the clip coefficient's,
// and each block of adam_multi's): kNormBlock strided sums, then the same tree.
template <typename T>
double SumPartials(const T* partials, int64_t count) {
  double lanes[kNormBlock] = {};
  for (int64_t p = 0; p < count; ++p) lanes[p % kNormBlock] += static_cast<double>(partials[p]);
  for (int s = kNormBlock / 2; s > 0; s /= 2) {
    for (int j = 0; j < s; ++j) lanes[j] += lanes[j + s];
  }
  return lanes[0];
}
// min(1, max_norm / (norm + 1e-6)); NaN stays NaN.
double ClipCoefficient(double norm, double max_norm);

// Tensors per launch of the SGD and loss-scaling multi-tensor kernels (their tables travel as
// kernel arguments, blockIdx.y picking a tensor).
inline constexpr int kOptimizerTableSize = 32;

// The chunked multi-tensor kernels (GradSumSquares, AdamMulti) see all their tensors as one list
// of chunks of kNormChunk elements (tensor by tensor, each tensor's last chunk shorter), and a
// grid sized for the device strides over it; so one launch serves any number of tensors of any
// sizes, with no idle blocks. Their tables travel by value in the kernel parameters (up to 32 KiB
// from CUDA 12.1 on Volta and later), sized for a capacity that MultiTensorCapacity picks: the
// smallest power of two from 32 up to kMaxMultiTensorCapacity that holds the tensors. Beyond
// that, a node takes one launch per kMaxMultiTensorCapacity tensors.
//
// Their gradients may be float32, bfloat16 or float16, tensor by tensor, as GradKinds { unsigned
// char kind[C]; } (GradientKind: 0, 1, 2) says, a second by-value argument: a 16-bit gradient is
// widened exactly on load, so its update (or sum of squares) has the bits of its float32 cast's,
// and mixed precision needs no widening cast (a launch and a float32 pass each) per parameter.
inline constexpr int kMaxMultiTensorCapacity = 512;
int MultiTensorCapacity(int64_t tensors);
// Resident blocks per multiprocessor that the kernels' launch bounds promise, so that a grid of
// this many blocks per multiprocessor runs in one wave.
inline constexpr int kNormBlocksPerSm = 8;
inline constexpr int kAdamBlocksPerSm = 4;
// GradSumSquares' blocks (kNormBlock threads, a warp a chunk, each lane's loads in registers).
inline constexpr int kSumSquaresBlocksPerSm = 2;

// out[0] = lr[0] · LrFactor(step). One thread. Signature: (const float* lr, const int* step,
// float* out, long long warmup_steps, int decay, long long total_steps, double min_factor,
// long long step_size, double gamma).
GeneratedKernel LrSchedule();

// Loss scaling: the update kernels below take `unscale`, loss scaling's check f32[2] = [1 / scale,
// found non-finite] (src/codegen/loss_scale_kernels.h), or null. With it, each gradient is
// multiplied by 1 / scale before anything else, and a set flag makes the kernel write nothing.

// SGD with momentum, optionally Nesterov and clipped: g' = clip·(unscale·g) + wd·w; v = μ·v + g';
// w -= lr·(nesterov ? g' + μ·v : v). clip may be null (1). Signature: (float* w, const float* g,
// float* v, const float* lr, const float* mu, const float* wd, const float* clip,
// const float* unscale, int nesterov, long long n).
GeneratedKernel SgdUpdate();
// The same over a table of tensors, blockIdx.y picking one. Signature: (SgdTable table, lr, mu,
// wd, clip, unscale, int nesterov), SgdTable as in fused_kernels.h with kOptimizerTableSize
// entries, its gradients of type `gradient`: float32, or bfloat16 / float16 read and widened
// exactly (the same bits as the update of their float32 casts); kernel name
// ElementKernelName("reprise_sgd_update_multi", gradient).
GeneratedKernel SgdUpdateMulti(DType gradient = DType::kFloat32);

// Adam / AdamW (decoupled != 0) in place: g' = clip·(unscale·g) (+ wd·w for Adam); w *= decay
// (AdamW); m = β1·m + (1-β1)·g'; v = β2·v + (1-β2)·g'²; w -= step_size·m / (sqrt(v) / bc2_sqrt +
// ε). Signature: (float* w, const float* g, float* m, float* v, const float* lr, const int* step,
// const float* beta1, const float* beta2, const float* eps, const float* wd, const float* clip,
// const float* unscale, int decoupled, long long n); clip and unscale may be null.
GeneratedKernel Adam();
// Every tensor of a table in one launch, with the step's scalars computed by every block from
// device memory, so that none needs a launch of its own: the rate (scheduled: lr[0] ·
// LrFactor(step), rounded to float as LrSchedule does), and the clip coefficient, given or (with
// `partials`) reduced from the global norm's partial sums by each block as ClipCoefficientKernel
// does. Each tensor has its own weight decay. Blocks of kNormBlock threads walk the chunks from
// the last to the first, so that the gradients GradSumSquares read last, which may still be in
// L2, come first. Signature: (AdamMultiTable table, GradKinds kinds, int count, const float* lr,
// const int* step, const float* beta1, const float* beta2, const float* eps, const float* clip,
// const float* partials, long long partial_count, const float* max_norm, const float* unscale, int
// decoupled, int scheduled, long long warmup_steps, int decay, long long total_steps, double
// min_factor, long long step_size, double gamma); clip, partials (with max_norm) and unscale may be
// null, AdamMultiTable { float* w[C]; const void* g[C]; float* m[C]; float* v[C]; const float*
// weight_decay[C]; long long n[C]; int first[C + 1]; } with C = capacity, count tensors, first[t]
// the first chunk of tensor t and first[count] the chunk count. With `copies` (kernel
// "reprise_adam_multi_copies"): the table also holds `unsigned short* copy[C]` after
// weight_decay (ops::ChunkTable(C, 6)), a tensor's GradKinds byte says its copy's type in bits 2-3
// (1 bfloat16, 2 float16; its gradient's in bits 0-1), each updated weight is also written there
// rounded as cast rounds it, and a last argument `int* stale` is set to 0, skipped step or not.
GeneratedKernel AdamMulti(int capacity, bool copies = false);

// SGD's updates of every tensor of a table in one launch, walked as AdamMulti walks them (blocks of
// kNormBlock threads over every chunk, from the last to the first), each element as SgdUpdate
// computes it (the same bits), each tensor with its own weight decay and its gradient of its own
// type. Signature: (SgdMultiTable table, GradKinds kinds, int count, const float* lr,
// const float* mu, const float* clip, const float* unscale, int nesterov); clip and unscale may
// be null; SgdMultiTable { float* w[C]; const void* g[C]; float* v[C]; const float*
// weight_decay[C]; long long n[C]; int first[C + 1]; } (ops::ChunkTable(C, 4)). With `copies`
// (kernel "reprise_sgd_multi_copies"): `unsigned short* copy[C]` after weight_decay (null for a
// tensor without one; ops::ChunkTable(C, 5)), the copies' types in GradKinds' bits 2-3, and a
// last argument `int* stale` set to 0, as AdamMulti's. With `checks` (kernel
// "reprise_sgd_multi_checked[_copies]", launched cooperatively; unscale null): the non-finite
// guard's check and verdict in the launch, before any update (grad_nonfinite and loss_scale_check
// with attr count): last arguments (const void* extra, long long extra_n, int extra_kind,
// int* skipped_steps, int* record, int sticky, unsigned* words, float* check): an extra tensor
// checked too (the loss; may be null; kind as GradKinds'), the guard's counters, moved on as
// loss_scale_check moves them, three barrier words (zero before the first launch, left consistent
// by every launch) and the check [1, found] written for the step's other readers.
GeneratedKernel SgdMulti(int capacity, bool copies = false, bool checks = false);
// The i32 words the checked kernel takes: the barrier, two verdicts, one spare.
inline constexpr int64_t kSgdCheckWords = 4;

// Stage 1 of the global norm: partials[first_partial + c] = ChunkSumSquares(chunk c, unscale[0])
// for every chunk c of the table with first_partial + c < partial_count, a warp a chunk, the
// warps of blocks of kNormBlock threads striding over the chunks. Where `flags` is not null, also
// the non-finite guard's check in the same pass: flags[first_partial + c] = 1 where chunk c holds
// an inf or a NaN, else 0 (grad_nonfinite's flags; the table's tensors past the gradients, the
// loss, only have flags). Signature: (NormTable table, GradKinds kinds, int count, float* partials,
// long long first_partial, const float* unscale, float* flags, long long partial_count),
// NormTable { const void* g[C]; long long n[C]; int first[C + 1]; } as AdamMulti's; unscale may
// be null (1).
GeneratedKernel GradSumSquares(int capacity);
// Stage 2, one block of kNormBlock threads: norm[0] = sqrt(SumPartials), coef[0] =
// ClipCoefficient(norm, max_norm[0]). Signature: (const float* partials, long long count,
// const float* max_norm, float* norm, float* coef).
GeneratedKernel ClipCoefficientKernel();

// The device helpers every optimizer kernel's source starts with (gradient_loads.h's, the step's
// scalars, the block tree sum, the element updates).
std::string OptimizerHelpers();

// Every kernel above, for compile checks and prefetching; the chunked ones at the smallest
// capacity (a larger one compiles when a node needs it).
std::vector<GeneratedKernel> OptimizerKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_OPTIMIZER_KERNELS_H_
