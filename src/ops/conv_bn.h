// A convolution and the training batch norm of its output as one node, so that cuDNN's graph API
// can produce the batch norm's statistics (per-channel sum and sum of squares) in the
// convolution's epilogue (genstats, src/runtime/cudnn_conv_graph.h) instead of our batch norm
// reading the convolution's output once more to sum it. The fuse pass writes it
// (src/passes/fuse_batch_norm_rules.cc) where TrainOptions::kernels.conv_batch_norm_stats asks.
//
// GPU, where cuDNN has a plan for the fused graph at the node's shape and dtype (float32 or
// bfloat16 data, float32 per-channel tensors): the convolution with its statistics, a
// per-channel finalize (src/ops/conv_bn_finalize.h) and our batch norm's apply pass
// (src/ops/batch_norm_nhwc.h) with the residual add and ReLU. Elsewhere the node runs the
// separate lowerings (the convolution's, then batch_norm_train's or batch_norm_act_train's), and
// its Describe() says why ("unfused (...)"): the plan dump names what each node runs.
//
// The statistics differ from the unfused ones by where they are summed: cuDNN sums the float
// accumulators in float before the output is rounded to its dtype, our batch norm the stored
// output in double; the variance is E[y²] - E[y]² either way.
#ifndef REPRISE_SRC_OPS_CONV_BN_H_
#define REPRISE_SRC_OPS_CONV_BN_H_

#include "src/ir/op_def.h"

namespace reprise::ops {

// conv2d_bn_train: (x, w, gamma, beta, running_mean, running_var[, residual])
//   -> (out, saved_mean, saved_invstd, conv_out)
// conv_out = conv2d(x, w); (out, saved_mean, saved_invstd) = batch_norm_train(conv_out, gamma,
// beta, running_mean, running_var), or with bool attr relu batch_norm_act_train's (the ReLU, and
// with bool attr residual the add of the seventh input before it). Attrs: conv2d's and
// batch_norm_train's (epsilon, momentum; one layout for both). Running statistics are updated in
// place (inputs 4 and 5). No gradient rule: the fuse pass writes it after autodiff.
const ir::OpDef& Conv2dBatchNormTrainOp();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_CONV_BN_H_
