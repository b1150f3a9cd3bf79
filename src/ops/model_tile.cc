// model_tile: one tensor repeated for each model of an ensemble, so that the batched ops of
// models that share an input (the same batch for every model) read it stacked like their own.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/codegen/batched_kernels.h"
#include "src/ops/batched.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

absl::StatusOr<std::vector<TensorSpec>> InferModelTile(const Attrs& attrs,
                                                       absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  ASSIGN_OR_RETURN(const int64_t models, ir::IntAttr(attrs, "models"));
  if (models <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute models must be positive, got ", models));
  }
  std::vector<int64_t> dims = {models};
  dims.insert(dims.end(), in[0].shape.dims().begin(), in[0].shape.dims().end());
  return std::vector<TensorSpec>{{Shape(std::move(dims)), in[0].dtype}};
}

absl::Status CpuModelTile(const Node&, absl::Span<ir::HostTensor* const> in,
                          absl::Span<ir::HostTensor* const> out) {
  const int64_t bytes = in[0]->spec().bytes();
  const int64_t models = out[0]->spec().shape.dim(0);
  for (int64_t k = 0; k < models; ++k) {
    std::memcpy(static_cast<char*>(out[0]->raw()) + k * bytes, in[0]->raw(), bytes);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerModelTile(const LoweringContext& ctx,
                                                          const Node& node) {
  const TensorSpec& in = ctx.input_specs[0];
  if (in.dtype != DType::kFloat32 && in.dtype != DType::kInt32) {
    return absl::UnimplementedError(absl::StrCat("node '", node.name,
                                                 "' (model_tile): the GPU lowering copies float32 "
                                                 "or int32, got ",
                                                 in.ToString()));
  }
  const long long per_model = in.NumElements();
  const long long total = node.outputs[0].NumElements();
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.outputs[0]).Add(per_model).Add(total);
  return NvrtcKernel::Create(ctx, node.name, codegen::ModelTile(), GridFor(total, 256, *ctx.device),
                             dim3(256), 0, std::move(args));
}

}  // namespace

const ir::OpDef& ModelTileOp() {
  static const ir::OpDef op{
      .name = "model_tile", .infer = InferModelTile, .cpu = CpuModelTile, .lower = LowerModelTile};
  return op;
}

}  // namespace reprise::ops
