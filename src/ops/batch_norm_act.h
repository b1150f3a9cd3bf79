// Fused batch norm with its activation, written by the fuse pass (src/passes/fuse.h) in either
// layout, where the batch norm runs as our own kernels (src/ops/batch_norm_nhwc.h; float32 or
// bfloat16 data, float32 per-channel tensors): the
// residual add and ReLU ride in the kernel that writes y, and the ReLU's gradient in the kernels
// that read dy, so neither costs a pass over memory of its own. Each reference runs the
// references of the ops it replaces.
#ifndef REPRISE_SRC_OPS_BATCH_NORM_ACT_H_
#define REPRISE_SRC_OPS_BATCH_NORM_ACT_H_

#include "absl/status/statusor.h"
#include "reprise/tensor.h"
#include "src/ir/op_def.h"

namespace reprise::ops {

// batch_norm_act_train: (x, gamma, beta, running_mean, running_var[, residual])
//   -> (relu(batch_norm(x) [+ residual]), saved_mean, saved_invstd).
// Attrs: batch_norm_train's (epsilon, momentum, layout) and bool residual (a sixth input, added
// before the ReLU). Writes the running statistics in place as batch_norm_train does.
const ir::OpDef& BatchNormActTrainOp();

// batch_norm_act_grad: (dy, act_out, x, gamma, saved_mean, saved_invstd)
//   -> (dx, dgamma, dbeta[, g]) where g = act_out > 0 ? dy : 0 (relu_grad) is the gradient that
// batch_norm_grad receives. Attrs: batch_norm_grad's and bool masked_output (the fourth output,
// for a residual branch that reads g too). With bool relu_from_x the second input is the batch
// norm's beta [C] instead of act_out, for a ReLU right after the batch norm: act_out is recomputed
// from x as the forward wrote it (batch_norm_apply), inside the kernels that read x anyway, so the
// ReLU's output is never read in the backward pass (two passes over it fewer). With bool
// dy_addend (and masked_output) a seventh input, of dy's spec, is added to dy first, rounded as
// add's output (a residual block's input gradient, whose sum is then never written).
const ir::OpDef& BatchNormActGradOp();

// The ReLU's keep bits of a batch norm's x (batch_norm_act_train's attr keep_bits, its fourth
// output; batch_norm_act_grad's relu_from_bits, its second input): int32 [N, H, W, C / 16] for
// channels-last x [N, H, W, C] with C % 16 == 0, a byte per four elements. kInvalidArgument for
// any other x or layout.
absl::StatusOr<TensorSpec> BatchNormKeepBitsSpec(const Attrs& attrs, const TensorSpec& x);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_BATCH_NORM_ACT_H_
