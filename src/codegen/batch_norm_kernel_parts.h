// Source pieces shared by the tiled batch-norm kernels (batch_norm_kernels.h): each kernel's source
// is a Prelude, a few of these defines and device helpers, and its own body.
#ifndef REPRISE_SRC_CODEGEN_BATCH_NORM_KERNEL_PARTS_H_
#define REPRISE_SRC_CODEGEN_BATCH_NORM_KERNEL_PARTS_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "reprise/tensor.h"

namespace reprise::codegen::bn_parts {

// The tiled kernels' helpers for one element type, vector width and plane (0: channels-last):
// loads that widen to float and stores that round from it, the row walk, the block's fixed-order
// reduction and the keep bits' store.
std::string Prelude(int vec, DType dtype, int64_t plane);

// The finalize kernels' sum of the partial arrays over chunks (blocks of 32x32 threads).
extern const char kSumChunks[];

// BnFinishForward and BnFinishBackward: a channel's totals to its statistics, running statistics,
// gradients and the apply pass's coefficients.
extern const char kFinish[];

// BnFinalizeTile: the statistics kernels' finalize in their column tiles' last blocks (after the
// Prelude).
extern const char kTileFinalize[];
// What a statistics kernel that finalizes needs after its Prelude: kFinish and kTileFinalize.
std::string TileFinalizeSource();

// `base` with the vector width, the plane and the element type: one kernel-store entry each.
std::string KernelName(absl::string_view base, int vec, DType dtype, int64_t plane);

// The backward kernels' ReLU keep mask: from the stored output, recomputed from x, or from the
// forward's keep bits, as MaskDefine's constants choose.
extern const char kReluMask[];
std::string MaskDefine(bool mask_from_x, bool mask_from_bits = false);

// BnLoadBits: a row's BN_VEC keep bits from the forward's mask.
extern const char kLoadBits[];

// The forward's apply body, y = act((x - mean)·scale + shift (+ residual)), which the recompute
// runs too, so that a recomputed y has the forward's bits.
extern const char kApplyBody[];

}  // namespace reprise::codegen::bn_parts

#endif  // REPRISE_SRC_CODEGEN_BATCH_NORM_KERNEL_PARTS_H_
