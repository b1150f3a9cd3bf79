// column_sum: the bias gradient, a sum over the batch dimension.
#include "src/codegen/generated_kernel.h"
#include "src/ops/column_sum_launch.h"
#include "src/ops/gpu_element_type.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

absl::StatusOr<std::vector<TensorSpec>> InferColumnSum(const Attrs&,
                                                       absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  RETURN_IF_ERROR(CheckRank(in[0], 2, "dy"));
  RETURN_IF_ERROR(CheckFloat(in[0], "dy"));
  return std::vector<TensorSpec>{{Shape{in[0].shape.dim(1)}, in[0].dtype}};
}

absl::Status CpuColumnSum(const Node&, absl::Span<ir::HostTensor* const> in,
                          absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto dy = in[0]->data<T>();
    auto db = out[0]->data<T>();
    const int64_t cols = db.size(), rows = dy.size() / cols;
    for (int64_t c = 0; c < cols; ++c) {
      T sum = 0;
      for (int64_t r = 0; r < rows; ++r) sum += dy[r * cols + c];
      db[c] = sum;
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerColumnSum(const LoweringContext& ctx,
                                                          const Node& node) {
  ASSIGN_OR_RETURN(const DType dtype, GpuElementType(node, ctx.input_specs));
  KernelArgs args;
  args.Add(ctx.inputs[0]);
  ASSIGN_OR_RETURN(
      ColumnSumLaunches launches,
      LowerColumnSums(ctx, node.name, codegen::ColumnSum(dtype), dtype, std::move(args),
                      {ctx.inputs[0]}, ctx.outputs[0], ctx.input_specs[0].shape.dim(0),
                      ctx.input_specs[0].shape.dim(1)));
  return AsKernel(std::move(launches));
}

}  // namespace

const ir::OpDef& ColumnSumOp() {
  static const ir::OpDef op{.name = "column_sum",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferColumnSum,
                            .cpu = CpuColumnSum,
                            .lower = LowerColumnSum,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
