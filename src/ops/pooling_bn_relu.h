// Max pooling of a recomputed batch norm + ReLU output, for the mirror pass's twins: a network's
// stem (batch norm, ReLU, max pooling) keeps the ReLU output alive only for the pooling gradient,
// which finds each window's first maximum in it. Where the mirror pass recomputes that output
// and the pooled one, the fuse pass (src/passes/fuse.h) replaces the twins with these ops: the
// pooling recomputes each window's values from the batch norm's input as it reads them and notes
// each window's argmax on the way, and the gradient sends dy to those elements. The ReLU output is
// never stored, and the batch norm's input is read once in the backward pass instead of twice.
// Without mirroring, the forward pooling notes the argmax itself (max_pool2d_with_argmax), for the
// same gradient: the ReLU output then dies in the forward pass too.
#ifndef REPRISE_SRC_OPS_POOLING_BN_RELU_H_
#define REPRISE_SRC_OPS_POOLING_BN_RELU_H_

#include "src/ir/op_def.h"

namespace reprise::ops {

// max_pool2d_bn_relu: (x, gamma, beta, saved_mean, saved_invstd)
//   -> (y = max_pool2d(a), argmax), a = batch_norm_apply(x, ...) with relu
//   (src/ops/batch_norm_apply.h). Attrs: max_pool2d's (window and layout). argmax holds, for each
// element of y, the row-major index within its kh x kw window of the window's first maximum (the
// element max_pool2d_grad sends its gradient to), a byte per element of y, four channels packed
// little-endian into each int32: int32 [N, OH, OW, C/4]. So layout NHWC, C a multiple of 4 and
// windows of at most 255 elements, else InvalidArgument. No gradient rule: it only appears in
// the backward pass. CPU: the two references in turn, so y has their bits (in 16 bits too: a is
// rounded as the separate op's output would be). GPU: float32 with 16-byte aligned tensors, one
// NVRTC kernel (codegen::BnReluMaxPool2dNhwc4) computing a as batch_norm_apply stores it; other
// types are kUnimplemented, naming the node (the fuse pass forms the op only where it runs; a
// bfloat16 stem keeps the separate twins).
const ir::OpDef& MaxPool2dBnReluOp();

// max_pool2d_with_argmax: x -> (y = max_pool2d(x), argmax), argmax as above, for a forward pooling
// whose gradient would read x only to find each window's maximum (the fuse pass forms it there,
// src/passes/fuse.h): the gradient gathers from the argmax instead, so x need not be kept for the
// backward pass and is not scanned again. Same layout, channel and window limits as above. CPU:
// max_pool2d's reference, then the window scan. GPU: float32, bfloat16 or float16 tensors aligned
// to 4 elements, max_pool2d's kernel (codegen::MaxPool2dNhwc4) with its argmax output; other types
// are kUnimplemented.
const ir::OpDef& MaxPool2dWithArgmaxOp();

// max_pool2d_grad_from_argmax: (dy, argmax, x) -> dx = max_pool2d_grad(dy, a, max_pool2d(a)) for
// the `argmax` that max_pool2d_bn_relu makes from x, or max_pool2d_with_argmax from a (x gives
// dx's spec and is not read, so any tensor of a's spec that is kept anyway will do). Each
// element of dx sums the dy of the windows whose argmax it is, in y's row-major order as
// max_pool2d_grad does, so dx has its bits. Attrs and GPU types as max_pool2d_with_argmax's; one
// kernel (codegen::MaxPool2dGradFromArgmaxNhwc4). The CPU reference refuses an argmax outside its
// window.
const ir::OpDef& MaxPool2dGradFromArgmaxOp();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_POOLING_BN_RELU_H_
