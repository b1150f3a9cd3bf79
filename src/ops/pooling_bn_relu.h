// Max pooling of a recomputed batch norm + ReLU output, for the mirror pass's twins: a network's
// stem (batch norm, ReLU, max pooling) keeps the ReLU output alive only for the pooling gradient,
// which finds each window's first maximum in it. Where the mirror pass recomputes that output
// and the pooled one, the fuse pass (src/passes/fuse.h) replaces the twins with these ops, which
// recompute each window's values from the batch norm's input as they read them: the ReLU output
// is never stored, and the pooling gradient reads the batch norm's input in its place.
#ifndef REPRISE_SRC_OPS_POOLING_BN_RELU_H_
#define REPRISE_SRC_OPS_POOLING_BN_RELU_H_

#include "src/ir/op_def.h"

namespace reprise::ops {

// max_pool2d_bn_relu: (x, gamma, beta, saved_mean, saved_invstd)
//   -> y = max_pool2d(a), a = batch_norm_apply(x, ...) with relu (src/ops/batch_norm_apply.h).
// Attrs: max_pool2d's (window and layout). No gradient rule: it only appears in the backward
// pass. CPU: the two references in turn, so y has their bits (in 16 bits too: a is rounded as
// the separate op's output would be). GPU: float32, NHWC with a channel count that is a multiple
// of 4, one NVRTC kernel (codegen::BnReluMaxPool2dNhwc4) computing a as batch_norm_apply stores
// it; other cases are kUnimplemented, naming the node (the fuse pass forms the op only where it
// runs; a bfloat16 stem keeps the separate twins).
const ir::OpDef& MaxPool2dBnReluOp();

// max_pool2d_grad_bn_relu: (dy, x, gamma, beta, saved_mean, saved_invstd)
//   -> dx = max_pool2d_grad(dy, a, max_pool2d(a)), a as above. Attrs and GPU cases as above; two
// kernels: each window's argmax from the recomputed values (codegen::BnReluMaxPool2dArgmaxNhwc4
// into a byte per element of y of the lane's workspace), then max_pool2d_grad's gather, so dx has
// max_pool2d_grad's bits. Windows must hold at most 255 elements.
const ir::OpDef& MaxPool2dGradBnReluOp();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_POOLING_BN_RELU_H_
