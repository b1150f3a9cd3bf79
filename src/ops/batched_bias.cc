// batched_bias_add and its gradient batched_column_sum: K linear layers' biases [K, C] added to
// (and summed from) their stacked outputs [K, R, C].
#include "absl/strings/str_cat.h"
#include "src/codegen/batched_kernels.h"
#include "src/ops/batched.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

absl::Status CheckF32(const Node& node, absl::Span<const TensorSpec> in) {
  for (const TensorSpec& spec : in) {
    if (spec.dtype != DType::kFloat32) {
      return absl::UnimplementedError(absl::StrCat("node '", node.name, "' (", node.op_name(),
                                                   "): the GPU lowering takes float32, got ",
                                                   spec.ToString()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorSpec>> InferBatchedBiasAdd(const Attrs&,
                                                            absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  RETURN_IF_ERROR(CheckRank(in[0], 3, "x"));
  RETURN_IF_ERROR(CheckRank(in[1], 2, "bias"));
  RETURN_IF_ERROR(CheckFloat(in[0], "x"));
  if (in[1].dtype != in[0].dtype || in[1].shape.dim(0) != in[0].shape.dim(0) ||
      in[1].shape.dim(1) != in[0].shape.dim(2)) {
    return absl::InvalidArgumentError(absl::StrCat("bias ", in[1].ToString(),
                                                   " must be [models, columns] of x ",
                                                   in[0].ToString(), " and of its dtype"));
  }
  return std::vector<TensorSpec>{in[0]};
}

absl::StatusOr<std::vector<Value>> GradBatchedBiasAdd(Graph& g, const Node& node,
                                                      absl::Span<const Value> dout,
                                                      const std::vector<bool>& needs) {
  std::vector<Value> grads(2);
  if (needs[0]) grads[0] = dout[0];
  if (needs[1]) {
    ASSIGN_OR_RETURN(
        grads[1], g.AddOp1(BatchedColumnSumOp(), absl::StrCat(node.name, ".bias_grad"), {dout[0]}));
  }
  return grads;
}

absl::Status CpuBatchedBiasAdd(const Node&, absl::Span<ir::HostTensor* const> in,
                               absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto x = in[0]->data<T>(), b = in[1]->data<T>();
    auto y = out[0]->data<T>();
    const Shape& shape = in[0]->spec().shape;
    const int64_t per_model = shape.dim(1) * shape.dim(2), cols = shape.dim(2);
    for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
      y[i] = x[i] + b[(i / per_model) * cols + i % cols];
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerBatchedBiasAdd(const LoweringContext& ctx,
                                                               const Node& node) {
  RETURN_IF_ERROR(CheckF32(node, ctx.input_specs));
  const Shape& shape = ctx.input_specs[0].shape;
  const long long n = shape.NumElements();
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.outputs[0]);
  args.Add(n).Add(static_cast<long long>(shape.dim(1))).Add(static_cast<long long>(shape.dim(2)));
  return NvrtcKernel::Create(ctx, node.name, codegen::BatchedBiasAdd(),
                             GridFor(n, 256, *ctx.device), dim3(256), 0, std::move(args));
}

absl::StatusOr<std::vector<TensorSpec>> InferBatchedColumnSum(const Attrs&,
                                                              absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  RETURN_IF_ERROR(CheckRank(in[0], 3, "dy"));
  RETURN_IF_ERROR(CheckFloat(in[0], "dy"));
  return std::vector<TensorSpec>{{Shape{in[0].shape.dim(0), in[0].shape.dim(2)}, in[0].dtype}};
}

// column_sum's reference per model (a sum in T, row by row).
absl::Status CpuBatchedColumnSum(const Node&, absl::Span<ir::HostTensor* const> in,
                                 absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto dy = in[0]->data<T>();
    auto db = out[0]->data<T>();
    const Shape& shape = in[0]->spec().shape;
    const int64_t models = shape.dim(0), rows = shape.dim(1), cols = shape.dim(2);
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

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerBatchedColumnSum(const LoweringContext& ctx,
                                                                 const Node& node) {
  RETURN_IF_ERROR(CheckF32(node, ctx.input_specs));
  const Shape& shape = ctx.input_specs[0].shape;
  const long long rows = shape.dim(1), cols = shape.dim(2);
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.outputs[0]).Add(rows).Add(cols);
  return NvrtcKernel::Create(
      ctx, node.name, codegen::BatchedColumnSum(),
      dim3(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(shape.dim(0))),
      dim3(32, 32), 0, std::move(args));
}

// batched_relu_grad_bias_grad: (dy, y) -> (dx, db) ----------------------------------------------

absl::StatusOr<std::vector<TensorSpec>> InferReluGradBiasGrad(const Attrs& attrs,
                                                              absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  if (!(in[0] == in[1])) {
    return absl::InvalidArgumentError(
        absl::StrCat("dy ", in[0].ToString(), " and y ", in[1].ToString(), " must have one spec"));
  }
  ASSIGN_OR_RETURN(std::vector<TensorSpec> db, InferBatchedColumnSum(attrs, in.subspan(0, 1)));
  return std::vector<TensorSpec>{in[0], db[0]};
}

// relu_grad's reference, then batched_column_sum's over its result.
absl::Status CpuReluGradBiasGrad(const Node& node, absl::Span<ir::HostTensor* const> in,
                                 absl::Span<ir::HostTensor* const> out) {
  RETURN_IF_ERROR(ReluGradOp().cpu(node, in, out.subspan(0, 1)));
  return CpuBatchedColumnSum(node, out.subspan(0, 1), out.subspan(1, 1));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerReluGradBiasGrad(const LoweringContext& ctx,
                                                                 const Node& node) {
  RETURN_IF_ERROR(CheckF32(node, ctx.input_specs));
  const Shape& shape = ctx.input_specs[0].shape;
  const long long rows = shape.dim(1), cols = shape.dim(2);
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.outputs[0]).Add(ctx.outputs[1]);
  args.Add(rows).Add(cols);
  return NvrtcKernel::Create(
      ctx, node.name, codegen::BatchedReluGradColumnSum(),
      dim3(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(shape.dim(0))),
      dim3(32, 32), 0, std::move(args));
}

}  // namespace

const ir::OpDef& BatchedReluGradBiasGradOp() {
  static const ir::OpDef op{.name = "batched_relu_grad_bias_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferReluGradBiasGrad,
                            .cpu = CpuReluGradBiasGrad,
                            .lower = LowerReluGradBiasGrad};
  return op;
}

// Pointwise by kind (cheap to recompute), but with no chainable expression: its bias operand is
// indexed by model and column, which fused pointwise kernels do not express.
const ir::OpDef& BatchedBiasAddOp() {
  static const ir::OpDef op{.name = "batched_bias_add",
                            .infer = InferBatchedBiasAdd,
                            .grad = GradBatchedBiasAdd,
                            .cpu = CpuBatchedBiasAdd,
                            .lower = LowerBatchedBiasAdd};
  return op;
}

const ir::OpDef& BatchedColumnSumOp() {
  static const ir::OpDef op{.name = "batched_column_sum",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferBatchedColumnSum,
                            .cpu = CpuBatchedColumnSum,
                            .lower = LowerBatchedColumnSum};
  return op;
}

}  // namespace reprise::ops
