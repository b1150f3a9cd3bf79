// Batched ops: K models' tensors stacked along a leading model dimension, so that the ensemble
// pass (src/passes/batch_ensemble.h) can run K identically shaped layers as one launch. Model k's
// slice of every output is what the unbatched op computes from model k's slices of the inputs:
// each is defined beside its unbatched op, with the same shape rule, reference and gradient rule
// over the leading model dimension.
#ifndef REPRISE_SRC_OPS_BATCHED_H_
#define REPRISE_SRC_OPS_BATCHED_H_

#include "src/ir/op_def.h"

namespace reprise::ops {

// matmul.cc. (A [K, ...], B [K, ...]) -> C [K, m, n]: C[k] = op(A[k])·op(B[k]), attrs
// transpose_a, transpose_b, role as matmul's. One strided-batched cuBLASLt product. Its gradient
// is two batched_matmul nodes, dgrad and wgrad, as matmul's.
const ir::OpDef& BatchedMatmulOp();
// (A, B, bias [K, n]) -> op(A[k])·op(B[k]) + bias[k] [then relu]: the fuse pass's form of a
// batched layer's forward (cuBLASLt bias epilogue with a bias batch stride). Attrs transpose_a,
// transpose_b, relu.
const ir::OpDef& BatchedMatmulBiasOp();

// pointwise.cc. (x [K, R, C], b [K, C]) -> y[k, r, c] = x[k, r, c] + b[k, c].
const ir::OpDef& BatchedBiasAddOp();
// reduction.cc. (dy [K, R, C]) -> db [K, C], db[k, c] = Σ_r dy[k, r, c]: the batched bias gradient.
const ir::OpDef& BatchedColumnSumOp();
// (dy, y [K, R, C]) -> (dx = y > 0 ? dy : 0, db [K, C] = column sums of dx): relu_grad and the
// bias gradient that follows it in one kernel (the fuse pass's).
const ir::OpDef& BatchedReluGradBiasGradOp();

// loss.cc. (logits f32 [K, B, C], labels i32 [K, B]) -> f32 [K]: each model's mean
// softmax cross-entropy. 16-bit logits as softmax_cross_entropy takes them (a float32 loss and
// dloss, the gradient in the logits' type).
const ir::OpDef& BatchedSoftmaxCrossEntropyOp();
// (logits, labels, dloss f32 [K]) -> dlogits [K, B, C].
const ir::OpDef& BatchedSoftmaxCrossEntropyGradOp();
// (logits, labels, dtotal f32 []) -> (loss [K], total f32 [], dlogits): the loss of an ensemble
// trained on the sum of its models' losses, and the gradient of that sum (dtotal per model): the
// fuse pass's form of batched_softmax_cross_entropy, model_sum, model_broadcast and
// batched_softmax_cross_entropy_grad (one model's row loss kernels over the K·B rows, the mean per
// model, then model_sum's).
const ir::OpDef& BatchedSoftmaxCrossEntropyWithGradOp();
// model_sum.cc. (x f32 [K]) -> f32 []: x[0] + ... + x[K-1] in index order; the sum of the models'
// losses.
const ir::OpDef& ModelSumOp();
// (x f32 []) -> f32 [K], every entry x; attr models (K). model_sum's gradient.
const ir::OpDef& ModelBroadcastOp();

// model_tile.cc. (x [...]) -> [K, ...]: x repeated for each of attr models (K) models, any
// 4-byte element type: an input or constant that every model of an ensemble reads. No gradient
// (inputs and constants need none).
const ir::OpDef& ModelTileOp();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_BATCHED_H_
