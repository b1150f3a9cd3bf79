#include "src/ops/loss_rows.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/batched_kernels.h"
#include "src/codegen/element_type.h"
#include "src/ops/loss_checks.h"
#include "src/ops/row_kernel_choice.h"
#include "src/util/status_macros.h"

namespace reprise::ops {

namespace {

// What every row kernel of `node` checks first: a kernel element type and a kernel store.
absl::Status CheckRowKernelsApply(const LoweringContext& ctx, const Node& node) {
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
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerXentRowRange(const LoweringContext& ctx,
                                                             const Node& node,
                                                             codegen::XentOutputs outputs,
                                                             const XentRowRange& range) {
  RETURN_IF_ERROR(CheckRowKernelsApply(ctx, node));
  const TensorSpec& logits = ctx.input_specs[0];
  const int lead = logits.shape.rank() - 2;
  const int64_t models = lead == 1 ? logits.shape.dim(0) : 1;
  const int64_t rows = logits.shape.dim(lead), cols = logits.shape.dim(lead + 1);
  ASSIGN_OR_RETURN(const int64_t classes, LossClasses(node.attrs, logits));
  if (models * rows > (int64_t{1} << 31) - 1 || cols > (int64_t{1} << 31) - 1) {
    return absl::UnimplementedError(absl::StrCat(
        "node '", node.name, "': logits ", logits.ToString(), " exceed 2^31 rows or columns"));
  }
  const int64_t count = range.count < 0 ? models * rows : range.count;
  if (range.first < 0 || count < 1 || range.first + count > models * rows ||
      (models > 1 && (range.first != 0 || count != models * rows))) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", node.name, "': rows [", range.first, ", ", range.first + count,
                     ") are not a range of the ", models * rows, " rows of ", logits.ToString()));
  }
  const bool loss = outputs != codegen::XentOutputs::kGradient;
  const bool grad = outputs != codegen::XentOutputs::kLoss;
  const size_t element = codegen::ElementBytes(logits.dtype);
  const auto at = [&](void* p, size_t bytes_per_row) -> void* {
    return p == nullptr ? nullptr : static_cast<char*>(p) + range.first * bytes_per_row;
  };
  void* z = at(ctx.inputs[0], cols * element);
  void* dz = grad ? at(ctx.outputs.back(), cols * element) : nullptr;
  void* dloss = grad ? ctx.inputs[2] : nullptr;
  void* row_loss = loss ? at(range.row_loss, sizeof(float)) : nullptr;
  // A dloss per model ([K]) or one for every model: one model's, and the ensemble's fused pair's
  // dtotal (the gradient of the models' summed loss is dtotal for each).
  const int dloss_stride = grad && ctx.input_specs[2].shape.rank() == 1 ? 1 : 0;
  KernelArgs args;
  args.Add(z).Add(at(ctx.inputs[1], sizeof(int32_t))).Add(dloss).Add(row_loss).Add(dz);
  // `rows` is the whole model's: the gradient's 1/rows.
  args.Add(static_cast<int>(rows)).Add(static_cast<int>(cols)).Add(static_cast<int>(classes));
  args.Add(dloss_stride);
  // The one-pass kernel reads the logits once; the loss, the gradient and the fused pair of the
  // same logits take the same form (their alignment is the arena's), so they share bits.
  const bool one_pass =
      !TwoPassRowKernelsForced() && codegen::XentOnePassApplies(cols, logits.dtype, {z, dz});
  return NvrtcKernel::Create(ctx, node.name,
                             one_pass ? codegen::XentRowsOnePass(logits.dtype, outputs, cols)
                                      : codegen::XentRows(logits.dtype, outputs),
                             dim3(static_cast<unsigned>(count)),
                             dim3(one_pass ? codegen::XentOnePassThreads(cols, logits.dtype)
                                           : codegen::XentRowThreads(cols)),
                             one_pass ? static_cast<unsigned>(cols * element) : 0, std::move(args));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerRowPerBlockLoss(const LoweringContext& ctx,
                                                                const Node& node,
                                                                codegen::XentOutputs outputs) {
  RETURN_IF_ERROR(CheckRowKernelsApply(ctx, node));
  const TensorSpec& logits = ctx.input_specs[0];
  const int lead = logits.shape.rank() - 2;
  const int64_t models = lead == 1 ? logits.shape.dim(0) : 1;
  const int64_t rows = logits.shape.dim(lead);
  const bool loss = outputs != codegen::XentOutputs::kGradient;
  const size_t row_bytes = loss ? static_cast<size_t>(models * rows) * sizeof(float) : 0;
  if (loss && (ctx.workspace == nullptr || row_bytes > ctx.workspace_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "node '", node.name, "': ", node.op_name(), " of ", models * rows, " rows needs ",
        row_bytes, " bytes of the lane's workspace for its row losses, which has ",
        ctx.workspace == nullptr ? 0 : ctx.workspace_bytes));
  }
  void* row_loss = loss ? ctx.workspace : nullptr;
  std::vector<std::unique_ptr<GpuKernel>> kernels;
  ASSIGN_OR_RETURN(kernels.emplace_back(),
                   LowerXentRowRange(ctx, node, outputs, {.row_loss = row_loss}));
  if (loss) {
    KernelArgs mean_args;
    mean_args.Add(row_loss).Add(ctx.outputs[0]).Add(static_cast<int>(rows));
    ASSIGN_OR_RETURN(kernels.emplace_back(),
                     NvrtcKernel::Create(ctx, node.name, codegen::XentMean(),
                                         dim3(static_cast<unsigned>(models)),
                                         dim3(codegen::kXentMeanThreads), 0, std::move(mean_args)));
  }
  if (ctx.outputs.size() == 3) {  // The ensemble's fused pair: (loss [K], total [], dz).
    KernelArgs sum_args;
    sum_args.Add(ctx.outputs[0]).Add(ctx.outputs[1]).Add(static_cast<int>(models));
    ASSIGN_OR_RETURN(kernels.emplace_back(),
                     NvrtcKernel::Create(ctx, node.name, codegen::ModelSum(), dim3(1), dim3(32), 0,
                                         std::move(sum_args)));
  }
  return std::unique_ptr<GpuKernel>(new KernelSequence(std::move(kernels), row_bytes));
}

}  // namespace reprise::ops
