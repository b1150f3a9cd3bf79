// model_sum and model_broadcast: the sum of an ensemble's losses (its models' losses [K], as a
// chain of adds in model order) and that sum's gradient, handed to every model.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/codegen/batched_kernels.h"
#include "src/ops/batched.h"
#include "src/ops/gpu_element_type.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

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
  RETURN_IF_ERROR(RequireFloat32(node, ctx.input_specs));
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
  RETURN_IF_ERROR(RequireFloat32(node, ctx.input_specs));
  const int models = static_cast<int>(node.outputs[0].shape.dim(0));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.outputs[0]).Add(models);
  return NvrtcKernel::Create(ctx, node.name, codegen::ModelBroadcast(),
                             dim3(static_cast<unsigned>((models + 255) / 256)), dim3(256), 0,
                             std::move(args));
}

}  // namespace

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
