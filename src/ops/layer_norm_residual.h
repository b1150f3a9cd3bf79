// A layer norm's backward with the residual stream's gradient added in its kernel: in a
// pre-norm transformer the gradient of x is the layer norm's dx plus the gradient that reaches x
// along the residual path, which an add would otherwise read and write once more. Written by the
// fuse pass (src/passes/fuse_layer_norm_rules.cc).
#ifndef REPRISE_SRC_OPS_LAYER_NORM_RESIDUAL_H_
#define REPRISE_SRC_OPS_LAYER_NORM_RESIDUAL_H_

#include "src/ir/op_def.h"

namespace reprise::ops {

// layer_norm_grad_add: (dy, x, weight, mean, rstd, dres) -> (dx + dres, dweight, dbias), the
// first five inputs, the attrs and the last two outputs as layer_norm_grad's
// (src/ops/transformer_ops.h); dres has x's spec. The reference runs layer_norm_grad's, then add's.
const ir::OpDef& LayerNormGradAddOp();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_LAYER_NORM_RESIDUAL_H_
