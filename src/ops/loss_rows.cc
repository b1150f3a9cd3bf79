#include "src/ops/loss_rows.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/element_type.h"
#include "src/ops/loss_checks.h"
#include "src/ops/row_kernel_choice.h"
#include "src/util/status_macros.h"

namespace reprise::ops {

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerRowPerBlockLoss(const LoweringContext& ctx,
                                                                const Node& node,
                                                                codegen::XentOutputs outputs) {
  const TensorSpec& logits = ctx.input_specs[0];
  if (!codegen::IsKernelElementType(logits.dtype)) {
    return absl::UnimplementedError(
        absl::StrCat("node '", node.name, "': ", node.op_name(), " has no GPU kernel for logits ",
                     logits.ToString(), " (float32, bfloat16 and float16 only)"));
  }
  if (ctx.kernels == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("node '", node.name, "': ", node.op_name(),
                     " needs a kernel store, and the plan has none"));
  }
  const int64_t rows = logits.shape.dim(0), cols = logits.shape.dim(1);
  ASSIGN_OR_RETURN(const int64_t classes, LossClasses(node.attrs, logits));
  if (rows > (int64_t{1} << 31) - 1 || cols > (int64_t{1} << 31) - 1) {
    return absl::UnimplementedError(absl::StrCat(
        "node '", node.name, "': logits ", logits.ToString(), " exceed 2^31 rows or columns"));
  }
  const bool loss = outputs != codegen::XentOutputs::kGradient;
  const bool grad = outputs != codegen::XentOutputs::kLoss;
  const size_t row_bytes = loss ? static_cast<size_t>(rows) * sizeof(float) : 0;
  if (loss && (ctx.workspace == nullptr || row_bytes > ctx.workspace_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("node '", node.name, "': ", node.op_name(), " of ", rows, " rows needs ",
                     row_bytes, " bytes of the lane's workspace for its row losses, which has ",
                     ctx.workspace == nullptr ? 0 : ctx.workspace_bytes));
  }
  void* row_loss = loss ? ctx.workspace : nullptr;
  void* dz = grad ? ctx.outputs[loss ? 1 : 0] : nullptr;
  void* dloss = grad ? ctx.inputs[2] : nullptr;
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(dloss).Add(row_loss).Add(dz);
  args.Add(static_cast<int>(rows)).Add(static_cast<int>(cols)).Add(static_cast<int>(classes));
  // The one-pass kernel reads the logits once; the loss, the gradient and the fused pair of the
  // same logits take the same form (their alignment is the arena's), so they share bits.
  const bool one_pass = !TwoPassRowKernelsForced() &&
                        codegen::XentOnePassApplies(cols, logits.dtype, {ctx.inputs[0], dz});
  std::vector<std::unique_ptr<GpuKernel>> kernels;
  ASSIGN_OR_RETURN(
      kernels.emplace_back(),
      NvrtcKernel::Create(
          ctx, node.name,
          one_pass ? codegen::XentRowsOnePass(logits.dtype, outputs, cols)
                   : codegen::XentRows(logits.dtype, outputs),
          dim3(static_cast<unsigned>(rows)),
          dim3(one_pass ? codegen::kXentOnePassThreads : codegen::kXentRowThreads),
          one_pass ? static_cast<unsigned>(cols * codegen::ElementBytes(logits.dtype)) : 0,
          std::move(args)));
  if (loss) {
    KernelArgs mean_args;
    mean_args.Add(row_loss).Add(ctx.outputs[0]).Add(static_cast<int>(rows));
    ASSIGN_OR_RETURN(kernels.emplace_back(),
                     NvrtcKernel::Create(ctx, node.name, codegen::XentMean(), dim3(1),
                                         dim3(codegen::kXentMeanThreads), 0, std::move(mean_args)));
  }
  return std::unique_ptr<GpuKernel>(new KernelSequence(std::move(kernels), row_bytes));
}

}  // namespace reprise::ops
