// Host mirrors of the fused MLP step's device layout rules (mlp_step_device.inc), shared by its
// planner (mlp_step_kernel.cc) and its source generator (mlp_step_source.cc); the generated
// static_asserts catch any drift.
#ifndef REPRISE_SRC_CODEGEN_MLP_STEP_LAYOUT_H_
#define REPRISE_SRC_CODEGEN_MLP_STEP_LAYOUT_H_

#include <algorithm>
#include <cstdint>

namespace reprise::codegen::mlp_layout {

enum Kind { kFwd = 0, kDgrad = 1, kWgrad = 2 };  // The device library's GEMM kinds.

inline int64_t Ceil4(int64_t x) { return (x + 3) / 4 * 4; }
inline int64_t Ceil8(int64_t x) { return (x + 7) / 8 * 8; }
inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t Align32(int64_t x) { return (x + 31) / 32 * 32; }
// Floats of loss scratch after the tasks' shared memory: one per model, at least 32.
inline int64_t LossScratch(int64_t models) { return std::max<int64_t>(32, Ceil4(models)); }
// Floats after the loss scratch for the guard's flag word (GuardScratch in the device library).
inline constexpr int64_t kGuardScratch = 4;
// Floats after the guard's word for a phase's GEMM and head arguments (GemmArgs: 120 bytes,
// HeadArgs: 104; kArgFloatsEach each), which thread 0 writes there before the phase and every
// thread reads (measured on an H200 with ncu, each thread building its own copy on its stack made
// the stores to local memory 8% of the MLP 8x256 step's stall samples). A layer phase has at most
// two; the row chain's first phase 2L - 2 (every forward and data-gradient GEMM and the head), its
// second L.
inline constexpr int64_t kArgFloatsEach = 32;
inline int64_t ArgFloats(int64_t layers, bool row_chain) {
  return kArgFloatsEach * (row_chain ? std::max<int64_t>({2, 2 * layers - 2, layers}) : 2);
}

// Whether wgrad of layer l reads a dz written in the phase just before it (kLayerPhases): dz_{L-1}
// comes from the head, dz_0 from the phase before the last; every other dz is two phases old.
inline bool WgradLate(int l, int layers) { return l == layers - 1 || l == 0; }

}  // namespace reprise::codegen::mlp_layout

#endif  // REPRISE_SRC_CODEGEN_MLP_STEP_LAYOUT_H_
