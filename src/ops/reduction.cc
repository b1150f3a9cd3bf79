// column_sum: the bias gradient, a sum over the batch dimension; and its ensemble forms
// (batched.h), batched_column_sum over dy [K, R, C] per model (db [K, C]) and
// batched_relu_grad_bias_grad, the same rules with a leading model dimension (kLead = 1).
#include "absl/strings/str_cat.h"
#include "src/codegen/batched_kernels.h"
#include "src/codegen/generated_kernel.h"
#include "src/ops/batched.h"
#include "src/ops/column_sum_launch.h"
#include "src/ops/gpu_element_type.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

template <int kLead>
absl::StatusOr<std::vector<TensorSpec>> InferColumnSum(const Attrs&,
                                                       absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  RETURN_IF_ERROR(CheckRank(in[0], 2 + kLead, "dy"));
  RETURN_IF_ERROR(CheckFloat(in[0], "dy"));
  const Shape& dy = in[0].shape;
  return std::vector<TensorSpec>{
      {kLead == 1 ? Shape{dy.dim(0), dy.dim(2)} : Shape{dy.dim(1)}, in[0].dtype}};
}

// Per model, db[c] = Σ_r dy[r, c] in T, row by row.
absl::Status CpuColumnSum(const Node&, absl::Span<ir::HostTensor* const> in,
                          absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto dy = in[0]->data<T>();
    auto db = out[0]->data<T>();
    const Shape& shape = in[0]->spec().shape;
    const int64_t cols = shape.dim(shape.rank() - 1), rows = shape.dim(shape.rank() - 2);
    const int64_t models = shape.rank() == 3 ? shape.dim(0) : 1;
    for (int64_t k = 0; k < models; ++k) {
      for (int64_t c = 0; c < cols; ++c) {
        T sum = 0;
        for (int64_t r = 0; r < rows; ++r) sum += dy[(k * rows + r) * cols + c];
        db[k * cols + c] = sum;
      }
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

// The ensemble kernels: blocks of 32x32 threads, grid (ceil(cols / 32), K); arguments
// (inputs..., outputs..., rows, cols).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerBatchedColumnSums(
    const LoweringContext& ctx, const Node& node, const codegen::GeneratedKernel& kernel) {
  RETURN_IF_ERROR(RequireFloat32(node, ctx.input_specs));
  const Shape& shape = ctx.input_specs[0].shape;
  const long long rows = shape.dim(1), cols = shape.dim(2);
  KernelArgs args;
  for (void* p : ctx.inputs) args.Add(p);
  for (void* p : ctx.outputs) args.Add(p);
  args.Add(rows).Add(cols);
  return NvrtcKernel::Create(
      ctx, node.name, kernel,
      dim3(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(shape.dim(0))),
      dim3(32, 32), 0, std::move(args));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerBatchedColumnSum(const LoweringContext& ctx,
                                                                 const Node& node) {
  return LowerBatchedColumnSums(ctx, node, codegen::BatchedColumnSum());
}

// batched_relu_grad_bias_grad: (dy, y) -> (dx, db).
absl::StatusOr<std::vector<TensorSpec>> InferReluGradBiasGrad(const Attrs& attrs,
                                                              absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  if (!(in[0] == in[1])) {
    return absl::InvalidArgumentError(
        absl::StrCat("dy ", in[0].ToString(), " and y ", in[1].ToString(), " must have one spec"));
  }
  ASSIGN_OR_RETURN(std::vector<TensorSpec> db, InferColumnSum<1>(attrs, in.subspan(0, 1)));
  return std::vector<TensorSpec>{in[0], db[0]};
}

// relu_grad's reference, then the column sums of its result.
absl::Status CpuReluGradBiasGrad(const Node& node, absl::Span<ir::HostTensor* const> in,
                                 absl::Span<ir::HostTensor* const> out) {
  RETURN_IF_ERROR(ReluGradOp().cpu(node, in, out.subspan(0, 1)));
  return CpuColumnSum(node, out.subspan(0, 1), out.subspan(1, 1));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerReluGradBiasGrad(const LoweringContext& ctx,
                                                                 const Node& node) {
  return LowerBatchedColumnSums(ctx, node, codegen::BatchedReluGradColumnSum());
}

}  // namespace

const ir::OpDef& ColumnSumOp() {
  static const ir::OpDef op{.name = "column_sum",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferColumnSum<0>,
                            .cpu = CpuColumnSum,
                            .lower = LowerColumnSum,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& BatchedColumnSumOp() {
  static const ir::OpDef op{.name = "batched_column_sum",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferColumnSum<1>,
                            .cpu = CpuColumnSum,
                            .lower = LowerBatchedColumnSum};
  return op;
}

const ir::OpDef& BatchedReluGradBiasGradOp() {
  static const ir::OpDef op{.name = "batched_relu_grad_bias_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferReluGradBiasGrad,
                            .cpu = CpuReluGradBiasGrad,
                            .lower = LowerReluGradBiasGrad};
  return op;
}

}  // namespace reprise::ops
