// Every op the engine knows, one accessor per OpDef. Each family's file holds its ops' shape rule,
// gradient rule, CPU reference and GPU lowering side by side.
#ifndef REPRISE_SRC_OPS_OPS_H_
#define REPRISE_SRC_OPS_OPS_H_

#include <vector>

#include "src/ir/op_def.h"

namespace reprise::ops {

// matmul.cc. C = op(A)·op(B), attrs transpose_a, transpose_b (bool), role ("dgrad"/"wgrad").
const ir::OpDef& MatmulOp();

// pointwise.cc
const ir::OpDef& BiasAddOp();   // y[r, c] = x[r, c] + b[c]
const ir::OpDef& ReluOp();      // y = max(x, 0); a NaN stays NaN (torch.relu)
const ir::OpDef& ReluGradOp();  // dx = y > 0 ? dy : 0, inputs (dy, y)
const ir::OpDef& AddOp();       // y = a + b, same shapes

// reduction.cc
const ir::OpDef& ColumnSumOp();  // db[c] = Σ_r dy[r, c]: the bias gradient

// loss.cc
const ir::OpDef& SoftmaxCrossEntropyOp();      // (logits f32 [B, C], labels i32 [B]) -> f32 []
const ir::OpDef& SoftmaxCrossEntropyGradOp();  // (logits, labels, dloss f32 []) -> f32 [B, C]

// optimizer.cc
// (w, g, v, lr, momentum, weight_decay[, clip][, check]) -> nothing; writes w and v in place. Attr
// nesterov (bool). clip: a clip coefficient the gradient is multiplied by first. check (attr
// loss_scaled): loss_scale_check's [1 / scale, found]; the gradient is unscaled before clipping,
// and a found non-finite gradient skips the update.
const ir::OpDef& SgdMomentumOp();

// adam.cc. (w, g, m, v, lr, step i32[2], beta1, beta2, epsilon, weight_decay[, clip][, check])
// -> nothing (clip and check as sgd_momentum's); writes w, m and v in place. Attr decoupled
// (bool): AdamW's weight decay instead of Adam's.
const ir::OpDef& AdamOp();
// adam_multi.cc. (w0, g0, m0, v0, weight_decay0, w1, ..., lr, step, beta1, beta2, epsilon
// [, clip | , partials, max_norm][, check]) -> nothing; every tensor updated as adam does, with its
// own weight decay, in one launch. Attrs tensors, decoupled, loss_scaled; clip_norm (bool): the
// clip coefficient is clip_coefficient's of (partials, max_norm), computed in the launch; and,
// when the update schedules its rate (attr decay present), lr_schedule's attributes: lr is the
// base rate and the update uses lr_schedule's rate of it. Attr copies = K: after those inputs,
// the first K tensors' 16-bit copies and the stale flag, written too (refresh_copies, cast.h).
const ir::OpDef& AdamMultiOp();
inline constexpr int kAdamMultiInputsPerTensor = 5;  // w, g, m, v, weight_decay

// grad_norm.cc. (g0, g1, ...[, check]) -> f32[P]: sums of squares of the gradients' chunks (P
// chunks of codegen::kNormChunk elements), in a fixed order; with attr loss_scaled, of the
// gradients times check[0] (1 / scale).
const ir::OpDef& GradSumSquaresOp();
// (g0, g1, ..., loss) -> (f32[P], flags): grad_sum_squares of the gradients (no loss scaling) and
// grad_nonfinite of them all, the loss last, in one pass (written by the fuse pass).
const ir::OpDef& GradSumSquaresNonfiniteOp();
// (partials f32[P], max_norm f32[]) -> (norm f32[], coefficient f32[]): the 2-norm over all
// gradients and min(1, max_norm / (norm + 1e-6)).
const ir::OpDef& ClipCoefficientOp();

// loss_scale.cc: dynamic loss scaling on the device (src/codegen/loss_scale_kernels.h).
// (g0, g1, ...) -> f32[P]: 1 for each chunk (codegen::kNormChunk elements) holding an inf or NaN.
const ir::OpDef& GradNonfiniteOp();
// (flags f32[P], scale f32[]) -> check f32[2] = [1 / scale, 1 if any flag is set else 0]: what
// the updates read (attr loss_scaled) to unscale the gradients or skip. Without the scale
// (the non-finite guard, src/autodiff/non_finite_guard.h) check[0] = 1; attr sticky adds a last
// input, the guard's record i32[2], and check[1] is also 1 once record[1] != 0.
const ir::OpDef& LossScaleCheckOp();
// (scale f32[], growth_tracker i32[], skipped_steps i32[], check f32[2]) -> nothing; moves the
// first three on in place (codegen::NextLossScale). Attrs growth_factor, backoff_factor,
// growth_interval.
const ir::OpDef& LossScaleUpdateOp();

// lr_schedule.cc. (base lr f32[], step i32[2]) -> lr f32[]: the rate of this step. Attrs
// warmup_steps, decay ("constant", "cosine", "step"), total_steps and min_factor (cosine),
// step_size and gamma (step).
const ir::OpDef& LrScheduleOp();

// dropout.cc. Counter-based dropout (src/codegen/random_kernels.h); attrs rate, seed, stream.
// (x, step i32[2]) -> x with dropped elements zero and kept ones scaled by 1 / (1 - rate).
const ir::OpDef& DropoutOp();
const ir::OpDef& DropoutGradOp();  // (dy, step) -> dx, the same mask: same attrs as the forward.
// (step i32[2][, check]) -> nothing; step += 1 in place, unless loss scaling's check says the
// update was skipped. Runs after every reader of the counter.
const ir::OpDef& AdvanceStepOp();

// Fused ops: the fuse pass (src/passes/fuse.h) writes them; each one's reference runs the
// references of the ops it replaces. Attribute "fused_nodes" lists the nodes it replaced.
// matmul.cc. (A, B, bias) -> op(A)·op(B) + bias, then max(·, 0) when attr relu: cuBLASLt
// epilogue. Attrs transpose_a, transpose_b, relu.
const ir::OpDef& MatmulBiasOp();
// matmul.cc, a hidden ReLU layer whose backward is fused into the product before it:
// (A, B, bias) -> (relu(op(A)·op(B) + bias), mask i32 [m, ReluMaskWords(n)]), the mask of the
// positive outputs (src/runtime/lt_matmul.h), and (A, B, mask) -> (dz, db): dz = op(A)·op(B)
// where the mask is set, else 0 (relu_grad), db its column sums (column_sum). cuBLASLt's
// RELU_AUX_BIAS and DRELU_BGRAD epilogues. Attrs transpose_a, transpose_b.
const ir::OpDef& MatmulBiasReluMaskOp();
const ir::OpDef& MatmulDReluBiasGradOp();
// loss.cc. (logits, labels, dloss) -> (loss, dlogits): both loss kernels in one.
const ir::OpDef& SoftmaxCrossEntropyWithGradOp();
// head_loss_chunks.cc. (x [R, C], w [V, C], labels, dloss) -> (loss, dz [R, V], dx [R, C]): the
// output layer's product x·wᵀ, the loss with its gradient and the data gradient dz·w, in row
// slices whose loss passes run on a second stream beside the other slices' products. Attrs
// chunks (the slices), classes (as the loss's). Written by the fuse pass.
inline constexpr char kHeadLossChunksAttr[] = "chunks";
const ir::OpDef& HeadLossChunksOp();
// optimizer.cc. (w0, g0, v0, w1, g1, v1, ..., lr, momentum, weight_decay[, clip][, check]) ->
// nothing; every (w, v) updated in place as sgd_momentum does, in one launch per kSgdTableSize
// tensors. Attrs tensors, nesterov, loss_scaled.
const ir::OpDef& SgdMomentumMultiOp();
// sgd_multi.cc. (w0, g0, v0, wd0, w1, g1, v1, wd1, ..., lr, momentum[, clip][, check]) ->
// nothing; every (w, v) updated as sgd_momentum does, each tensor with its own weight decay and
// its gradient of its own type (float32 or a 16-bit float), in one launch per
// codegen::kMaxMultiTensorCapacity tensors. Attrs tensors, nesterov, loss_scaled; attr copies = K:
// after those inputs, the first K tensors' 16-bit copies and the stale flag, written too.
// Attr checks = E (the non-finite guard's check in the launch, written by the fuse pass; no clip,
// not loss_scaled): after momentum, E more tensors checked with the gradients (the loss), the
// guard's skipped_steps i32[] and record i32[2] (moved on as loss_scale_check with attr count
// moves them; attr sticky as its) and its barrier words i32[4] (state, zero at first); one
// output, the check f32[2] = [1, found], and a found step updates nothing. One launch.
const ir::OpDef& SgdMultiOp();
inline constexpr int kSgdMultiInputsPerTensor = 4;  // w, g, v, weight_decay
// fused_pointwise.h: a chain of pointwise ops in one kernel.

// All non-leaf ops, for tests that sweep over every op.
std::vector<const ir::OpDef*> AllOps();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_OPS_H_
