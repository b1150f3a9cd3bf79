// Linear layers with their activation, residual or bias gradient folded into cuBLASLt epilogues
// (src/runtime/lt_matmul.h), written by the fuse pass (src/passes/fuse_gelu_rules.cc). Each
// one's CPU reference runs the references of the ops it replaces, in order.
#ifndef REPRISE_SRC_OPS_MATMUL_GELU_H_
#define REPRISE_SRC_OPS_MATMUL_GELU_H_

#include "src/ir/op_def.h"

namespace reprise::ops {

// matmul_bias_gelu_aux: (A, B, bias) -> (gelu(pre), pre) with pre = op(A)·op(B) + bias, GELU the
// tanh form (src/ops/transformer_ops.h): a hidden layer whose pre-activation the backward reads.
// cuBLASLt's GELU_AUX_BIAS. Attrs transpose_a, transpose_b; n (the output width) a multiple of 8.
const ir::OpDef& MatmulBiasGeluAuxOp();

// matmul_dgelu: (A, B, pre) -> dz, that layer's backward fused into the data-gradient product
// dh = op(A)·op(B) feeding it: dz = gelu_grad(dh, pre) = dh·gelu'(pre), cuBLASLt's DGELU epilogue.
// The bias gradient (dz's column sums) stays a column_sum node of its own, which the schedule runs
// on the weight-gradient lane beside the next data gradient. Attrs transpose_a, transpose_b.
const ir::OpDef& MatmulDGeluOp();

// matmul_bgrad: (A, B) -> (Aᵀ·op(B), column sums of A): a layer's weight gradient dW = dYᵀ·X (A =
// dY stored [k, m], read transposed: attr transpose_a must be true) and its bias gradient, the
// column_sum of the same dY, in cuBLASLt's BGRADB epilogue, which sums dY as the product reads it.
// Attr transpose_b; role "wgrad" keeps it on the weight-gradient lane.
const ir::OpDef& MatmulBiasGradOp();

// matmul_bias_residual: (A, B, bias, residual) -> op(A)·op(B) + bias + residual: a projection
// added to the residual stream (bias_add then add), cuBLASLt's BIAS epilogue reading the residual
// as its C with beta = 1. Attrs transpose_a, transpose_b.
const ir::OpDef& MatmulBiasResidualOp();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_MATMUL_GELU_H_
