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

// batch_norm_apply_chain: a residual stage's block outputs recomputed in one pass, where the
// mirror pass recomputes each of them from the one before (the fuse pass forms it from those
// batch_norm_apply, add and relu nodes). Inputs: steps of (x, gamma, beta, saved_mean,
// saved_invstd), 2 to codegen::kBatchNormChainMaxSteps of them, every x of one spec. Step 0 is
// batch_norm_apply of its x alone (a downsampling shortcut's batch norm), not stored; each later
// step s is batch_norm_apply with residual = step s - 1's value and relu, output s - 1. Each
// value is the separate ops' bits: the CPU reference runs batch_norm_apply's step by step, the
// GPU kernel its expression with each carried value rounded to the element type as a stored one.
// One NVRTC launch reads every x once and writes every output once, where the separate launches
// read each previous output back and write and read step 0's. Attrs as batch_norm_apply's (layout).
const ir::OpDef& BatchNormApplyChainOp();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_BATCH_NORM_APPLY_H_
