// The batched loss of an ensemble: each model's mean softmax cross-entropy ([K] losses), its
// gradient, and the sum of the models' losses (model_sum) with its gradient (model_broadcast).
// Per model, the references and kernels compute what softmax_cross_entropy's do.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "src/codegen/batched_kernels.h"
#include "src/ops/batched.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/loss_checks.h"
#include "src/ops/multi_tensor.h"
#include "src/ops/op_helpers.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

absl::StatusOr<std::vector<TensorSpec>> InferXent(const Attrs&, absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  RETURN_IF_ERROR(CheckLogitsAndLabels(in, /*label_rank=*/2));
  return std::vector<TensorSpec>{{Shape{in[0].shape.dim(0)}, in[0].dtype}};
}

absl::StatusOr<std::vector<TensorSpec>> InferXentGrad(const Attrs&,
                                                      absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  RETURN_IF_ERROR(CheckLogitsAndLabels(in, /*label_rank=*/2));
  if (in[2].shape != Shape{in[0].shape.dim(0)} || in[2].dtype != in[0].dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dloss must hold one value per model of the logits' dtype, got ", in[2].ToString()));
  }
  return std::vector<TensorSpec>{in[0]};
}

absl::StatusOr<std::vector<TensorSpec>> InferXentWithGrad(const Attrs&,
                                                          absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  RETURN_IF_ERROR(CheckLogitsAndLabels(in, /*label_rank=*/2));
  if (in[2].shape.rank() != 0 || in[2].dtype != in[0].dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtotal must be a scalar of the logits' dtype, got ", in[2].ToString()));
  }
  return std::vector<TensorSpec>{
      {Shape{in[0].shape.dim(0)}, in[0].dtype}, {Shape{}, in[0].dtype}, in[0]};
}

absl::StatusOr<std::vector<Value>> GradXent(Graph& g, const Node& node,
                                            absl::Span<const Value> dout,
                                            const std::vector<bool>& needs) {
  std::vector<Value> grads(2);  // Labels get none.
  if (needs[0]) {
    ASSIGN_OR_RETURN(grads[0],
                     g.AddOp1(BatchedSoftmaxCrossEntropyGradOp(), absl::StrCat(node.name, ".grad"),
                              {node.inputs[0], node.inputs[1], dout[0]}));
  }
  return grads;
}

// softmax_cross_entropy's reference per model: for each row, m = max z, s = Σ exp(z - m), the
// loss log s + m - z[label] and the gradient scale · (exp(z - m) / s - [c == label]), with
// scale = in[2][k] / rows, or in[2][0] / rows for every model when `shared_dloss`.
template <typename T>
absl::Status XentModels(absl::Span<ir::HostTensor* const> in, T* loss, T* dz,
                        bool shared_dloss = false) {
  const Shape& shape = in[0]->spec().shape;
  const int64_t models = shape.dim(0), rows = shape.dim(1), cols = shape.dim(2);
  auto zs = in[0]->data<T>();
  auto ls = in[1]->data<int32_t>();
  for (int64_t k = 0; k < models; ++k) {
    const T scale =
        dz == nullptr ? T(0) : in[2]->data<T>()[shared_dloss ? 0 : k] / static_cast<T>(rows);
    T total = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = k * rows + r;
      const int32_t label = ls[row];
      if (label < 0 || label >= cols) {
        return absl::InvalidArgumentError(absl::StrCat("label ", label, " of model ", k, " row ", r,
                                                       " is outside [0, ", cols, ")"));
      }
      const T* zr = zs.data() + row * cols;
      T m = zr[0];
      for (int64_t c = 1; c < cols; ++c) m = std::max(m, zr[c]);
      T s = 0;
      for (int64_t c = 0; c < cols; ++c) s += std::exp(zr[c] - m);
      total += std::log(s) + m - zr[label];
      if (dz == nullptr) continue;
      for (int64_t c = 0; c < cols; ++c) {
        dz[row * cols + c] = scale * (std::exp(zr[c] - m) / s - (c == label ? T(1) : T(0)));
      }
    }
    if (loss != nullptr) loss[k] = total / static_cast<T>(rows);
  }
  return absl::OkStatus();
}

absl::Status CpuXent(const Node&, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    return XentModels<T>(in, out[0]->data<T>().data(), nullptr);
  });
}

absl::Status CpuXentGrad(const Node&, absl::Span<ir::HostTensor* const> in,
                         absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    return XentModels<T>(in, nullptr, out[0]->data<T>().data());
  });
}

// The unfused references in sequence: the losses and the gradient of their sum, then the sum.
absl::Status CpuXentWithGrad(const Node&, absl::Span<ir::HostTensor* const> in,
                             absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    RETURN_IF_ERROR(XentModels<T>(in, out[0]->data<T>().data(), out[2]->data<T>().data(),
                                  /*shared_dloss=*/true));
    return ModelSumOp().cpu(Node(), out.subspan(0, 1), out.subspan(1, 1));
  });
}

absl::Status CheckF32Loss(const Node& node, absl::Span<const TensorSpec> in) {
  if (in[0].dtype != DType::kFloat32) {
    return absl::UnimplementedError(absl::StrCat("node '", node.name, "' (", node.op_name(),
                                                 "): logits must be float32 on the GPU, got ",
                                                 in[0].ToString()));
  }
  return absl::OkStatus();
}

// One block per model holds a float per row in shared memory, as the unbatched loss kernel does.
absl::StatusOr<unsigned> RowLossBytes(int rows, const Node& node) {
  const unsigned shared = static_cast<unsigned>(rows) * sizeof(float);
  if (shared > 48 * 1024) {
    return absl::UnimplementedError(absl::StrCat("node '", node.name, "': batch ", rows,
                                                 " exceeds the loss kernel's limit of 12288 rows"));
  }
  return shared;
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerXent(const LoweringContext& ctx, const Node& node) {
  RETURN_IF_ERROR(CheckF32Loss(node, ctx.input_specs));
  const Shape& shape = ctx.input_specs[0].shape;
  const int rows = static_cast<int>(shape.dim(1)), cols = static_cast<int>(shape.dim(2));
  ASSIGN_OR_RETURN(const unsigned shared, RowLossBytes(rows, node));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.outputs[0]).Add(rows).Add(cols);
  return NvrtcKernel::Create(ctx, node.name, codegen::BatchedSoftmaxCrossEntropy(),
                             dim3(static_cast<unsigned>(shape.dim(0))), dim3(512), shared,
                             std::move(args));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerXentGrad(const LoweringContext& ctx,
                                                         const Node& node) {
  RETURN_IF_ERROR(CheckF32Loss(node, ctx.input_specs));
  const Shape& shape = ctx.input_specs[0].shape;
  const int rows = static_cast<int>(shape.dim(1)), cols = static_cast<int>(shape.dim(2));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.inputs[2]).Add(ctx.outputs[0]);
  args.Add(rows).Add(cols);
  const int warps_per_block = 8;
  return NvrtcKernel::Create(
      ctx, node.name, codegen::BatchedSoftmaxCrossEntropyGrad(),
      dim3((rows + warps_per_block - 1) / warps_per_block, static_cast<unsigned>(shape.dim(0))),
      dim3(32 * warps_per_block), 0, std::move(args));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerXentWithGrad(const LoweringContext& ctx,
                                                             const Node& node) {
  RETURN_IF_ERROR(CheckF32Loss(node, ctx.input_specs));
  const Shape& shape = ctx.input_specs[0].shape;
  const int models = static_cast<int>(shape.dim(0));
  const int rows = static_cast<int>(shape.dim(1)), cols = static_cast<int>(shape.dim(2));
  ASSIGN_OR_RETURN(const unsigned shared, RowLossBytes(rows, node));
  KernelArgs loss_args;
  loss_args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.inputs[2]);
  loss_args.Add(ctx.outputs[0]).Add(ctx.outputs[2]).Add(rows).Add(cols);
  std::vector<std::unique_ptr<GpuKernel>> parts;
  ASSIGN_OR_RETURN(
      parts.emplace_back(),
      NvrtcKernel::Create(ctx, node.name, codegen::BatchedSoftmaxCrossEntropyWithGrad(),
                          dim3(static_cast<unsigned>(models)), dim3(512), shared,
                          std::move(loss_args)));
  KernelArgs sum_args;
  sum_args.Add(ctx.outputs[0]).Add(ctx.outputs[1]).Add(models);
  ASSIGN_OR_RETURN(parts.emplace_back(),
                   NvrtcKernel::Create(ctx, node.name, codegen::ModelSum(), dim3(1), dim3(32), 0,
                                       std::move(sum_args)));
  return Sequence(std::move(parts));
}

// model_sum and model_broadcast -----------------------------------------------------------------

absl::StatusOr<std::vector<TensorSpec>> InferModelSum(const Attrs&,
                                                      absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  RETURN_IF_ERROR(CheckRank(in[0], 1, "x"));
  RETURN_IF_ERROR(CheckFloat(in[0], "x"));
  return std::vector<TensorSpec>{{Shape{}, in[0].dtype}};
}

absl::StatusOr<std::vector<Value>> GradModelSum(Graph& g, const Node& node,
                                                absl::Span<const Value> dout,
                                                const std::vector<bool>& needs) {
  std::vector<Value> grads(1);
  if (needs[0]) {
    const int64_t models = g.spec(node.inputs[0]).shape.dim(0);
    ASSIGN_OR_RETURN(grads[0], g.AddOp1(ModelBroadcastOp(), absl::StrCat(node.name, ".grad"),
                                        {dout[0]}, {{"models", models}}));
  }
  return grads;
}

// In index order, as a chain of adds over the models' losses sums them.
absl::Status CpuModelSum(const Node&, absl::Span<ir::HostTensor* const> in,
                         absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto x = in[0]->data<T>();
    T total = x[0];
    for (size_t k = 1; k < x.size(); ++k) total += x[k];
    out[0]->data<T>()[0] = total;
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerModelSum(const LoweringContext& ctx,
                                                         const Node& node) {
  RETURN_IF_ERROR(CheckF32Loss(node, ctx.input_specs));
  KernelArgs args;
  args.Add(ctx.inputs[0])
      .Add(ctx.outputs[0])
      .Add(static_cast<int>(ctx.input_specs[0].shape.dim(0)));
  return NvrtcKernel::Create(ctx, node.name, codegen::ModelSum(), dim3(1), dim3(32), 0,
                             std::move(args));
}

absl::StatusOr<std::vector<TensorSpec>> InferModelBroadcast(const Attrs& attrs,
                                                            absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  RETURN_IF_ERROR(CheckRank(in[0], 0, "x"));
  RETURN_IF_ERROR(CheckFloat(in[0], "x"));
  ASSIGN_OR_RETURN(const int64_t models, ir::IntAttr(attrs, "models"));
  if (models <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute models must be positive, got ", models));
  }
  return std::vector<TensorSpec>{{Shape{models}, in[0].dtype}};
}

absl::Status CpuModelBroadcast(const Node&, absl::Span<ir::HostTensor* const> in,
                               absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto y = out[0]->data<T>();
    std::fill(y.begin(), y.end(), in[0]->data<T>()[0]);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerModelBroadcast(const LoweringContext& ctx,
                                                               const Node& node) {
  RETURN_IF_ERROR(CheckF32Loss(node, ctx.input_specs));
  const int models = static_cast<int>(node.outputs[0].shape.dim(0));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.outputs[0]).Add(models);
  return NvrtcKernel::Create(ctx, node.name, codegen::ModelBroadcast(),
                             dim3(static_cast<unsigned>((models + 255) / 256)), dim3(256), 0,
                             std::move(args));
}

}  // namespace

const ir::OpDef& BatchedSoftmaxCrossEntropyOp() {
  static const ir::OpDef op{.name = "batched_softmax_cross_entropy",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferXent,
                            .grad = GradXent,
                            .cpu = CpuXent,
                            .lower = LowerXent};
  return op;
}

const ir::OpDef& BatchedSoftmaxCrossEntropyGradOp() {
  static const ir::OpDef op{.name = "batched_softmax_cross_entropy_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferXentGrad,
                            .cpu = CpuXentGrad,
                            .lower = LowerXentGrad};
  return op;
}

const ir::OpDef& BatchedSoftmaxCrossEntropyWithGradOp() {
  static const ir::OpDef op{.name = "batched_softmax_cross_entropy_with_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferXentWithGrad,
                            .cpu = CpuXentWithGrad,
                            .lower = LowerXentWithGrad};
  return op;
}

const ir::OpDef& ModelSumOp() {
  static const ir::OpDef op{.name = "model_sum",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferModelSum,
                            .grad = GradModelSum,
                            .cpu = CpuModelSum,
                            .lower = LowerModelSum};
  return op;
}

const ir::OpDef& ModelBroadcastOp() {
  static const ir::OpDef op{.name = "model_broadcast",
                            .infer = InferModelBroadcast,
                            .cpu = CpuModelBroadcast,
                            .lower = LowerModelBroadcast};
  return op;
}

}  // namespace reprise::ops
