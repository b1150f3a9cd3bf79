// Counter-based random numbers for dropout: Philox4x32-10 (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3"), the same function on the CPU and in generated kernels, so a
// mask drawn on the GPU is bit for bit the one the CPU reference draws.
//
// Element i of a dropout at device step s uses counter (i_lo, i_hi, s_lo, s_hi) and key
// (seed_lo ^ stream, seed_hi); it is dropped when the top 24 bits of the first output word are
// below threshold = floor(rate * 2^24), and kept elements are scaled by 1 / (1 - rate) (float).
#ifndef REPRISE_SRC_CODEGEN_RANDOM_KERNELS_H_
#define REPRISE_SRC_CODEGEN_RANDOM_KERNELS_H_

#include <array>
#include <cstdint>

#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Whether dropout drops element `index` at device step `step`.
bool DropoutDrops(uint64_t index, uint64_t step, uint32_t key_lo, uint32_t key_hi,
                  uint32_t threshold);

// y[i] = drops(i) ? 0 : x[i] * scale, float32. Signature: (const float* x, const int* step,
// float* y, long long n, unsigned key_lo, unsigned key_hi, unsigned threshold, float scale);
// `step` holds the device step counter as two 32-bit words (low, high). Dropout's gradient is
// the same kernel applied to dy.
GeneratedKernel Dropout();

// Adds one to the 64-bit device step counter (two 32-bit words), unless `check` (loss scaling's
// f32[2] [1 / scale, found non-finite], or null) says the step's update was skipped. One thread.
// Signature: (int* step, const float* check).
GeneratedKernel AdvanceStep();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_RANDOM_KERNELS_H_
