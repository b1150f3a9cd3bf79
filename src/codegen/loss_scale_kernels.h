// CUDA C++ source for dynamic loss scaling on the device (reprise/optimizer.h, LossScaleOptions),
// with the host arithmetic the CPU references share. Three stages, no atomics and no host sync:
//
//   grad_nonfinite     one flag per chunk of every gradient: does it hold an inf or a NaN?
//   loss_scale_check   check f32[2] = [1 / scale, any flag set]: what the optimizer kernels read
//                      (src/codegen/optimizer_kernels.h) to unscale the gradients or skip;
//   loss_scale_update  after the update: the scale and its counters move on.
//
// The non-finite guard (src/autodiff/non_finite_guard.h) runs the first two without a scale, the
// check also moving the guard's counters on in place of the third.
#ifndef REPRISE_SRC_CODEGEN_LOSS_SCALE_KERNELS_H_
#define REPRISE_SRC_CODEGEN_LOSS_SCALE_KERNELS_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// The scaler's state between steps (the state tensors "loss_scale", "loss_scale.growth_tracker",
// "loss_scale.skipped_steps").
template <typename T>
struct LossScaleState {
  T scale = T(1);
  int32_t growth_tracker = 0;  // Clean steps since the scale last changed.
  int32_t skipped_steps = 0;   // Steps whose update was skipped, over the whole run.
};

// PyTorch's _amp_update_scale_: after an overflow the scale is multiplied by `backoff` and the
// tracker cleared; after a clean step the tracker counts up, and on reaching `interval` (or
// beyond it, as after restoring a checkpoint into a shorter interval) the scale is multiplied by
// `growth` unless that product is not finite, and the tracker cleared. The static scaler is
// growth = backoff = 1. Each product is rounded once to T, as on the device.
template <typename T>
LossScaleState<T> NextLossScale(LossScaleState<T> s, bool found_nonfinite, T growth, T backoff,
                                int64_t interval) {
  if (found_nonfinite) {
    s.scale = s.scale * backoff;
    s.growth_tracker = 0;
    ++s.skipped_steps;
    return s;
  }
  const int64_t clean = int64_t{s.growth_tracker} + 1;
  if (clean >= interval) {
    const T grown = s.scale * growth;
    if (std::isfinite(grown)) s.scale = grown;
    s.growth_tracker = 0;
  } else {
    s.growth_tracker = static_cast<int32_t>(clean);
  }
  return s;
}

// Stage 1: flags[first_flag + c] = 1 if chunk c (kNormChunk elements, src/codegen/
// optimizer_kernels.h) of the table's list of chunks (tensor by tensor, as the chunked optimizer
// kernels walk them) holds an inf or a NaN, else 0. Blocks of kNormBlock threads stride over the
// chunks (grid: at most kNormBlocksPerSm blocks per multiprocessor), reading whole aligned chunks
// with 16-byte loads. Signature: (NonfiniteTable table, NonfiniteKinds kinds, int count,
// float* flags, long long first_flag), NonfiniteTable { const void* g[C]; long long n[C];
// int first[C + 1]; } as ops::ChunkTable lays it out for `capacity` C (MultiTensorCapacity) and
// one pointer array, NonfiniteKinds { unsigned char kind[C]; } (0 float32, 1 bfloat16,
// 2 float16; 16-bit gradients are checked before their widening cast).
GeneratedKernel GradNonfinite(int capacity);
// Stage 2, one block of kNormBlock threads: check[0] = (float)(1 / (double)scale[0]) (1 for a
// null scale: the non-finite guard without loss scaling), check[1] = 1 if any of the `count` flags
// is set or, `sticky` (the guard's NonFinitePolicy::kStop), the record holds a non-finite step
// (record[1] != 0), else 0; with non-null skipped_steps (the guard) it then moves the guard's
// counters on: skipped_steps += found; record = [steps checked, 1 + the first non-finite step
// or 0]. Signature: (const float* flags,
// long long count, const float* scale, int* record, int sticky, int* skipped_steps,
// float* check).
GeneratedKernel LossScaleCheck();
// Stage 3, one thread: NextLossScale in place. Signature: (float* scale, int* growth_tracker,
// int* skipped_steps, const float* check, float growth, float backoff, long long interval).
GeneratedKernel LossScaleUpdate();

// Every kernel above, for compile checks and prefetching.
std::vector<GeneratedKernel> LossScaleKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_LOSS_SCALE_KERNELS_H_
