#include "src/ops/cast.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/cast_kernels.h"
#include "src/ir/low_precision.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/util/status_macros.h"

namespace reprise::ops {

absl::StatusOr<DType> CastTargetOf(const Attrs& attrs) {
  auto it = attrs.find("dtype");
  if (it == attrs.end() || !std::holds_alternative<std::string>(it->second)) {
    return absl::InvalidArgumentError("cast needs a string attribute dtype");
  }
  return ParseFloatDType(std::get<std::string>(it->second));
}

namespace {

absl::StatusOr<std::vector<TensorSpec>> InferCast(const Attrs& attrs,
                                                  absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  RETURN_IF_ERROR(CheckFloat(in[0], "x"));
  ASSIGN_OR_RETURN(DType to, CastTargetOf(attrs));
  return std::vector<TensorSpec>{{in[0].shape, to}};
}

absl::StatusOr<std::vector<Value>> GradCast(Graph& g, const Node& node,
                                            absl::Span<const Value> dout,
                                            const std::vector<bool>& needs) {
  std::vector<Value> grads(1);
  if (needs[0]) {
    ASSIGN_OR_RETURN(grads[0], g.AddOp1(CastOp(), absl::StrCat(node.name, ".grad"), {dout[0]},
                                        {{"dtype", DTypeAttr(g.spec(node.inputs[0]).dtype)}}));
  }
  return grads;
}

absl::Status CpuCast(const Node&, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  return ir::ConvertFloats(*in[0], *out[0]);
}

absl::StatusOr<int> KernelCode(DType dtype, const Node& node) {
  switch (dtype) {
    case DType::kFloat32:
      return codegen::kCastFloat32;
    case DType::kBFloat16:
      return codegen::kCastBFloat16;
    case DType::kFloat16:
      return codegen::kCastFloat16;
    default:
      return absl::UnimplementedError(absl::StrCat("node '", node.name, "': cast of ",
                                                   DTypeName(dtype), " has no GPU lowering"));
  }
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerCast(const LoweringContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(const int from, KernelCode(ctx.input_specs[0].dtype, node));
  ASSIGN_OR_RETURN(const int to, KernelCode(node.outputs[0].dtype, node));
  const int64_t n = node.outputs[0].NumElements();
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.outputs[0]).Add(static_cast<long long>(n)).Add(from).Add(to);
  return NvrtcKernel::Create(ctx, node.name, codegen::Cast(), GridFor(n, 256, *ctx.device),
                             dim3(256), 0, std::move(args));
}

}  // namespace

std::string DTypeAttr(DType dtype) { return std::string(DTypeName(dtype)); }

absl::StatusOr<DType> ParseFloatDType(absl::string_view name) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    if (name == DTypeName(d)) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("dtype must be f32, f64, bf16 or f16, got '", name, "'"));
}

const ir::OpDef& CastOp() {
  static const ir::OpDef op{.name = "cast",
                            .kind = ir::OpKind::kPointwise,
                            .infer = InferCast,
                            .grad = GradCast,
                            .cpu = CpuCast,
                            .lower = LowerCast,
                            .low_precision = true};
  return op;
}

bool IsParameterOrItsCast(const Graph& g, Value v) {
  const Node* node = &g.node(v.node);
  while (node->op == &CastOp() && node->inputs.size() == 1) node = &g.node(node->inputs[0].node);
  return node->op == &ir::ParameterOp();
}

}  // namespace reprise::ops
