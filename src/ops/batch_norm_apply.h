// batch_norm_apply: batch_norm_train's output y recomputed from its saved statistics, with no
// reduction and no running-statistics update. The mirror pass (src/passes/mirror.h) writes it to
// recompute a batch norm's output in the backward pass instead of keeping it alive; the fuse pass
// folds a following residual add and ReLU into it.
#ifndef REPRISE_SRC_OPS_BATCH_NORM_APPLY_H_
#define REPRISE_SRC_OPS_BATCH_NORM_APPLY_H_

#include "src/ir/op_def.h"

namespace reprise::ops {

// batch_norm_apply: (x, gamma [C], beta [C], saved_mean [C], saved_invstd [C][, residual])
//   -> y = act(BatchNormOutput(x, saved_mean, saved_invstd, gamma, beta) [+ residual])
// per element (src/ops/batch_norm.h), so y has batch_norm_train's bits on the CPU reference; the
// add and the ReLU round as the add and relu ops do. Attrs: layout ("NCHW" or "NHWC"), bool
// residual (the sixth input), bool relu; batch_norm_train's epsilon and momentum are accepted and
// ignored. No gradient rule: it only appears in the backward pass. GPU: one NVRTC kernel; NHWC
// runs the forward's apply code (src/ops/batch_norm_nhwc.h), so y has the forward's bits, with
// float32 or bfloat16 x, residual and y beside float32 per-channel tensors; NCHW is float32 only
// (bfloat16 is refused as kUnimplemented, naming the node).
const ir::OpDef& BatchNormApplyOp();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_BATCH_NORM_APPLY_H_
