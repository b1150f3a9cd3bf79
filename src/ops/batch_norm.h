// Batch normalization over (N, H, W) per channel, as PyTorch's BatchNorm2d computes it, for
// training (batch statistics, running statistics updated in place) and inference (running
// statistics). Layout attr (string) "NCHW" (x [N,C,H,W], the default) or "NHWC" (x [N,H,W,C]).
//
// GPU lowerings: training (forward and gradient) runs on our own NVRTC kernels in both layouts
// (src/ops/batch_norm_nhwc.h), with float32 or bfloat16 x, y, dy, dx and float32 per-channel
// tensors (mixed precision's), sums in double; inference calls cuDNN's legacy batch-norm API in
// CUDNN_BATCHNORM_SPATIAL mode, float32 only (bfloat16 is refused as kUnimplemented, naming the
// node).
#ifndef REPRISE_SRC_OPS_BATCH_NORM_H_
#define REPRISE_SRC_OPS_BATCH_NORM_H_

#include "src/ir/op_def.h"

namespace reprise::ops {

// batch_norm_train: (x, gamma [C], beta [C], running_mean [C], running_var [C])
//   -> (y, saved_mean [C], saved_invstd [C]).
// Attrs (double) epsilon (default 1e-5, >= 0), momentum (default 0.1, in [0, 1]), layout.
// y = (x - mean) · invstd · gamma + beta with the batch mean and invstd = 1 / sqrt(var + epsilon),
// var the biased batch variance; saved_mean and saved_invstd are those two. Updates in place
// (inputs 3 and 4 must be state):
//   running_mean = (1 - momentum) · running_mean + momentum · mean
//   running_var  = (1 - momentum) · running_var  + momentum · var · M / (M - 1),  M = N·H·W > 1.
// Gradient: one batch_norm_grad node; running statistics get none, and no gradient may flow into
// saved_mean or saved_invstd (Unimplemented otherwise).
const ir::OpDef& BatchNormTrainOp();

// batch_norm_grad: (dy, x, gamma, saved_mean, saved_invstd) -> (dx, dgamma, dbeta), attrs as the
// forward. With x̂ = (x - saved_mean) · saved_invstd per channel:
//   dbeta = Σ dy,  dgamma = Σ dy · x̂,  dx = gamma · saved_invstd · (dy - (dbeta + x̂ · dgamma) / M).
const ir::OpDef& BatchNormGradOp();

// batch_norm_infer: (x, gamma, beta, running_mean, running_var) -> y, with
// y = (x - running_mean) / sqrt(running_var + epsilon) · gamma + beta; attrs epsilon, layout.
// No gradient rule.
const ir::OpDef& BatchNormInferOp();

// One element of batch_norm_train's y from the statistics as saved: (x - mean) · (invstd · gamma)
// + beta in double, rounded once. batch_norm_apply computes the same, so both give the same bits.
template <typename T>
T BatchNormOutput(T x, T saved_mean, T saved_invstd, T gamma, T beta) {
  const double scale = static_cast<double>(saved_invstd) * static_cast<double>(gamma);
  return static_cast<T>((static_cast<double>(x) - static_cast<double>(saved_mean)) * scale +
                        static_cast<double>(beta));
}

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_BATCH_NORM_H_
