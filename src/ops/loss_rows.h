// The GPU lowering of softmax cross-entropy over wide rows and 16-bit logits (the row-per-block
// kernels of src/codegen/loss_kernels.h), shared by loss.cc's six ops: one model's three and the
// ensemble's (logits [K, B, C], a loss per model) three.
#ifndef REPRISE_SRC_OPS_LOSS_ROWS_H_
#define REPRISE_SRC_OPS_LOSS_ROWS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "src/codegen/loss_kernels.h"
#include "src/ir/op_def.h"
#include "src/ops/gpu_kernel.h"

namespace reprise::ops {

// Lowers `node` (inputs logits, labels[, dloss]; outputs loss and/or dlogits in that order, or the
// ensemble's fused pair's loss, total and dlogits) to the row kernel writing `outputs` over the
// node's real classes (loss_checks.h's LossClasses), in its one-pass form where
// XentOnePassApplies and TwoPassRowKernelsForced (row_kernel_choice.h) is not, followed, when it
// writes the loss, by the fixed-order mean per model of the row losses it left in the lane's
// workspace (one float a row), and for the ensemble's fused pair by model_sum's kernel for the
// total. Logits [B, C] are one model's; [K, B, C] are K models' of B rows each, with a dloss [K]
// (one per model) or [] (one for all). Unimplemented for logits other than float32, bfloat16 and
// float16; ResourceExhausted when the workspace cannot hold the row losses. Errors name the node.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerRowPerBlockLoss(const LoweringContext& ctx,
                                                                const Node& node,
                                                                codegen::XentOutputs outputs);

// Which rows one row kernel takes: [first, first + count) of all models' rows (count -1: all of
// them), its row losses written from row_loss + first (one float a row; null unless `outputs`
// has the loss). A range short of all rows is one model's.
struct XentRowRange {
  int64_t first = 0;
  int64_t count = -1;
  void* row_loss = nullptr;
};

// LowerRowPerBlockLoss's row kernel alone, over `range`: no mean. Each row's loss and gradient
// have the bits the whole node's kernel gives that row (the gradient's scale is still dloss over
// all of the model's rows), so a node's rows may run in several launches (head_loss_chunks).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerXentRowRange(const LoweringContext& ctx,
                                                             const Node& node,
                                                             codegen::XentOutputs outputs,
                                                             const XentRowRange& range);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_LOSS_ROWS_H_
