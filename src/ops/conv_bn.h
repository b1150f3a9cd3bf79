// A convolution and the training batch norm of its output as one node, so that cuDNN's graph API
// can produce the batch norm's statistics (per-channel sum and sum of squares) in the
// convolution's epilogue (genstats, src/runtime/cudnn_conv_graph.h) instead of our batch norm
// reading the convolution's output once more to sum it. The fuse pass writes it
// (src/passes/fuse_batch_norm_rules.cc) where TrainOptions::kernels.conv_batch_norm_stats asks.
//
// GPU, where cuDNN has a plan for the fused graph at the node's shape (float16 NHWC data, see
// ConvBatchNormStatsSupport; float32 per-channel tensors) and training is not deterministic
// (cuDNN's epilogue sums differ run to run): the convolution with its statistics, a
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

#include <cstdint>

#include "absl/status/status.h"
#include "reprise/tensor.h"
#include "src/ir/op_def.h"

namespace reprise::ops {

// Whether cuDNN's graph API can sum a forward convolution's batch-norm statistics in its epilogue
// for this data: OK, or Unimplemented saying why not. cuDNN 9 fuses genstats (its runtime-fusion
// engines, the pattern of cudnn-frontend's scale-bias-ReLU-conv-genstats sample) for float16 NHWC
// data on Ampere and Hopper; on an H200 with cuDNN 9.19 no engine takes bfloat16 or float32
// ("No valid engine configs", tests/gpu/cudnn_conv_graph_fusion_gpu_test.cc). Both channel counts
// must also be multiples of 8 here (the fused kernels load 16-byte vectors of channels), which
// leaves a stem's 3 channels to the unfused path (our narrow-input kernel). The fuse pass groups
// only such convolutions; cuDNN still has the last word when the node is lowered.
absl::Status ConvBatchNormStatsSupport(Layout layout, DType dtype, int64_t input_channels,
                                       int64_t output_channels);

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
