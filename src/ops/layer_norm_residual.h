// A layer norm fused with the residual add before it, and its backward with the residual
// stream's gradient added in its kernel: in a
// pre-norm transformer the gradient of x is the layer norm's dx plus the gradient that reaches x
// along the residual path, which an add would otherwise read and write once more. Written by the
// fuse pass (src/passes/fuse_layer_norm_rules.cc).
#ifndef REPRISE_SRC_OPS_LAYER_NORM_RESIDUAL_H_
#define REPRISE_SRC_OPS_LAYER_NORM_RESIDUAL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "src/ir/op_def.h"
#include "src/ops/gpu_kernel.h"

namespace reprise::ops {

// add_layer_norm: (a, b, weight, bias) -> (x, y, mean, rstd): x = a + b (add's rounding) and
// layer_norm(x, weight, bias), both written in one pass; attrs as layer_norm's. Where the residual
// add has no product epilogue to ride in (src/passes/fuse_gelu_rules.cc takes those first).
const ir::OpDef& AddLayerNormOp();

// layer_norm_grad_add: (dy, x, weight, mean, rstd, dres) -> (dx + dres, dweight, dbias), the
// first five inputs, the attrs and the last two outputs as layer_norm_grad's
// (src/ops/transformer_ops.h); dres has x's spec. The reference runs layer_norm_grad's, then add's.
const ir::OpDef& LayerNormGradAddOp();

// layer_norm_grad_column_sum: layer_norm_grad's five inputs or layer_norm_grad_add's six -> that
// op's three outputs and dsum, column_sum of the first (dx [R, C] -> [C], dx's dtype): the bias
// gradient of the linear layer whose output gradient dx is, summed as the kernel writes dx
// instead of read again by a column_sum launch (src/ops/layer_norm_column_sum.cc). The reference
// runs the layer norm's, then column_sum's.
const ir::OpDef& LayerNormGradColumnSumOp();

// The one-pass, warp-per-row lowering of layer_norm_grad_column_sum (with the residual gradient,
// input 5, where `add`), or null where that kernel does not apply (a width past the warp form, a
// tensor not 16-byte aligned, the two-pass kernels forced).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerLayerNormGradWithSumInOnePass(
    const LoweringContext& ctx, const Node& node, bool add);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_LAYER_NORM_RESIDUAL_H_
