// 2-D convolution ops: the forward, its data gradient (dgrad) and filter gradient (wgrad) as
// separate nodes (like matmul, so that nothing but their data orders them), and the per-channel
// bias of a convolution with its gradient. CPU references are direct loops with double
// accumulators; GPU lowerings call cuDNN (src/runtime/cudnn_conv.h), except forwards and weight
// gradients of inputs with a few channels (src/ops/narrow_conv.h), and, for the channel ops,
// NVRTC kernels (src/codegen/conv_kernels.h).
//
// Attributes of the three convolution ops (int64 unless noted; missing ones take the default):
//   stride_h, stride_w (1), pad_h, pad_w (0), dilation_h, dilation_w (1), groups (1),
//   layout (string, "NCHW"): "NCHW" | "NHWC".
// NCHW: x [N, C, H, W], w [K, C/groups, R, S] (PyTorch's), y [N, K, P, Q].
// NHWC: x [N, H, W, C], w [K, R, S, C/groups],             y [N, P, Q, K].
// P = (H + 2·pad_h - dilation_h·(R - 1) - 1) / stride_h + 1, and Q likewise.
//
//   ASSIGN_OR_RETURN(Value y, g.AddOp1(ops::Conv2dOp(), "conv1", {x, w},
//                                      {{"stride_h", int64_t{2}}, {"stride_w", int64_t{2}},
//                                       {"pad_h", int64_t{3}}, {"pad_w", int64_t{3}}}));
#ifndef REPRISE_SRC_OPS_CONV_H_
#define REPRISE_SRC_OPS_CONV_H_

#include "src/ir/op_def.h"

namespace reprise::ops {

// conv2d: (x, w) -> y. Shape errors (InvalidArgument) name the shapes: rank other than 4, a
// channel mismatch (C != w's C/groups · groups), K or C not divisible by groups, an empty output
// ("zero output size"), a non-float dtype, an unknown layout. Gradient: conv2d_dgrad for x,
// conv2d_wgrad for w.
const ir::OpDef& Conv2dOp();
// conv2d_dgrad: (dy, w) -> dx. The forward's attributes plus input_h, input_w (x's H and W, which
// dy does not determine when stride > 1); attr role "dgrad".
const ir::OpDef& Conv2dDgradOp();
// conv2d_dgrad_accumulate: (dy, w, acc) -> acc + conv2d_dgrad(dy, w), written over acc (cuDNN's
// beta = 1): a residual block's input gradient without a separate add. conv2d_dgrad's attributes;
// acc has dx's spec. The fuse pass makes it from conv2d_dgrad + add where acc has no later reader.
// In 16 bits the sum rounds once (the unfused ops round the data gradient, then the sum).
const ir::OpDef& Conv2dDgradAccumulateOp();
// conv2d_dgrad_add: (dy, w, acc) -> acc + conv2d_dgrad(dy, w) into an output of its own: the same
// sum for cuDNN's graph API, whose fused add reads acc as an operand and does not promise to read
// every element of it before writing an output that aliases it. The fuse pass makes it instead of
// conv2d_dgrad_accumulate with the graph API unless TrainOptions::kernels.conv_sums_in_place.
// Where cuDNN has no fused plan (strict float32 NCHW), its plain plan writes the data gradient and
// our kernel adds acc into it (in 16 bits a second rounding, as the unfused ops'); with the legacy
// API, acc is copied to the output and the legacy call adds into it (beta = 1). The plan dump
// says which ran.
const ir::OpDef& Conv2dDgradAddOp();
// conv2d_wgrad: (x, dy) -> dw. The forward's attributes plus kernel_h, kernel_w (R and S); attr
// role "wgrad", which the scheduler puts on the second lane.
const ir::OpDef& Conv2dWgradOp();
// channel_bias_add: (x, b [C]) -> x + b broadcast along the channel dimension of a 4-D x; attr
// layout. Gradient: dy for x, channel_sum(dy) for b.
const ir::OpDef& ChannelBiasAddOp();
// channel_sum: (dy) -> db [C], the sum over N, H and W of a 4-D dy; attr layout. Deterministic on
// the GPU (fixed summation order, no atomics).
const ir::OpDef& ChannelSumOp();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_CONV_H_
