// layer_norm_grad_column_sum: a layer norm's backward (with or without the residual stream's
// gradient) and the column sums of the dx it writes, the bias gradient of the linear layer whose
// output gradient that dx is. In a pre-norm transformer each projection back into the residual
// stream (attn.c_proj, mlp.c_proj) has such a bias, whose column_sum would otherwise read dx again
// from memory on another lane. Written by the fuse pass (src/passes/fuse_layer_norm_rules.cc).
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/layer_norm_residual.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/ops/transformer_ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

// Six inputs: layer_norm_grad_add's; five: layer_norm_grad's.
const ir::OpDef& GradOpFor(size_t inputs) {
  return inputs == 6 ? LayerNormGradAddOp() : LayerNormGradOp();
}

absl::StatusOr<std::vector<TensorSpec>> Infer(const Attrs& attrs, absl::Span<const TensorSpec> in) {
  if (in.size() != 5 && in.size() != 6) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected layer_norm_grad's 5 inputs or layer_norm_grad_add's 6, got ", in.size()));
  }
  ASSIGN_OR_RETURN(std::vector<TensorSpec> out, GradOpFor(in.size()).infer(attrs, in));
  const Attrs none;
  ASSIGN_OR_RETURN(std::vector<TensorSpec> sum,
                   ColumnSumOp().infer(none, absl::MakeConstSpan(&out[0], 1)));
  out.push_back(sum[0]);
  return out;
}

// The reference: the layer norm's backward, then column_sum's of its dx.
absl::Status Cpu(const Node& node, absl::Span<ir::HostTensor* const> in,
                 absl::Span<ir::HostTensor* const> out) {
  RETURN_IF_ERROR(GradOpFor(in.size()).cpu(node, in, out.subspan(0, 3)));
  const Node stub;
  return ColumnSumOp().cpu(stub, out.subspan(0, 1), out.subspan(3, 1));
}

// One pass where the warp-per-row kernel applies; else the layer norm's own lowering, then a
// column sum of its dx (one after another on the lane, so they may share its workspace).
absl::StatusOr<std::unique_ptr<GpuKernel>> Lower(const LoweringContext& ctx, const Node& node) {
  const bool add = ctx.inputs.size() == 6;
  ASSIGN_OR_RETURN(std::unique_ptr<GpuKernel> one_pass,
                   LowerLayerNormGradWithSumInOnePass(ctx, node, add));
  if (one_pass != nullptr) return one_pass;
  Node grad = node;
  grad.op = &GradOpFor(ctx.inputs.size());
  grad.outputs.resize(3);
  LoweringContext grad_ctx = ctx;
  grad_ctx.outputs.resize(3);
  std::vector<std::unique_ptr<GpuKernel>> kernels;
  ASSIGN_OR_RETURN(kernels.emplace_back(), grad.op->lower(grad_ctx, grad));
  Node sum = node;
  sum.op = &ColumnSumOp();
  sum.inputs.clear();
  sum.outputs = {node.outputs[3]};
  LoweringContext sum_ctx = ctx;
  sum_ctx.input_specs = {node.outputs[0]};
  sum_ctx.inputs = {ctx.outputs[0]};
  sum_ctx.outputs = {ctx.outputs[3]};
  ASSIGN_OR_RETURN(kernels.emplace_back(), sum.op->lower(sum_ctx, sum));
  const size_t workspace = std::max(kernels[0]->WorkspaceBytes(), kernels[1]->WorkspaceBytes());
  return std::unique_ptr<GpuKernel>(new KernelSequence(std::move(kernels), workspace));
}

}  // namespace

const ir::OpDef& LayerNormGradColumnSumOp() {
  static const ir::OpDef op{.name = "layer_norm_grad_column_sum",
                            .kind = ir::OpKind::kReduction,
                            .infer = Infer,
                            .cpu = Cpu,
                            .lower = Lower,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
