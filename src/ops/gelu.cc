// gelu and gelu_grad: pointwise ops whose expressions (src/codegen/gelu_kernels.h) both the
// stand-alone kernels and fused pointwise chains compute.
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/gelu_kernels.h"
#include "src/ops/gpu_element_type.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/transformer_ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

constexpr double kSqrtTwoOverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;

// gelu(x) and gelu'(x) in double; the float32 reference rounds once, the GPU computes in float.
double GeluOf(double x) {
  return 0.5 * x * (1.0 + std::tanh(kSqrtTwoOverPi * (x + kCubic * x * x * x)));
}
double GeluSlope(double x) {
  const double t = std::tanh(kSqrtTwoOverPi * (x + kCubic * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrtTwoOverPi * (1.0 + 3.0 * kCubic * x * x);
}

absl::StatusOr<std::vector<TensorSpec>> InferGelu(const Attrs&, absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  RETURN_IF_ERROR(CheckFloat(in[0], "x"));
  return std::vector<TensorSpec>{in[0]};
}

absl::StatusOr<std::vector<TensorSpec>> InferGeluGrad(const Attrs&,
                                                      absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  RETURN_IF_ERROR(CheckFloat(in[1], "x"));
  if (!(in[0] == in[1])) {
    return absl::InvalidArgumentError(
        absl::StrCat("dy ", in[0].ToString(), " must match x ", in[1].ToString()));
  }
  return std::vector<TensorSpec>{in[1]};
}

absl::StatusOr<std::vector<Value>> GradGelu(Graph& g, const Node& node,
                                            absl::Span<const Value> dout,
                                            const std::vector<bool>& needs) {
  std::vector<Value> grads(1);
  if (needs[0]) {
    ASSIGN_OR_RETURN(grads[0], g.AddOp1(GeluGradOp(), absl::StrCat(node.name, ".grad"),
                                        {dout[0], node.inputs[0]}));
  }
  return grads;
}

absl::Status CpuGelu(const Node&, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto x = in[0]->data<T>();
    auto y = out[0]->data<T>();
    for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<T>(GeluOf(x[i]));
    return absl::OkStatus();
  });
}

absl::Status CpuGeluGrad(const Node&, absl::Span<ir::HostTensor* const> in,
                         absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto dy = in[0]->data<T>(), x = in[1]->data<T>();
    auto dx = out[0]->data<T>();
    for (size_t i = 0; i < x.size(); ++i) dx[i] = static_cast<T>(dy[i] * GeluSlope(x[i]));
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> Lower(const LoweringContext& ctx, const Node& node,
                                                 codegen::GeneratedKernel (*make)(DType)) {
  ASSIGN_OR_RETURN(const DType dtype, GpuElementType(node, ctx.input_specs));
  const int64_t n = node.outputs[0].NumElements();
  KernelArgs args;
  for (void* p : ctx.inputs) args.Add(p);
  args.Add(ctx.outputs[0]).Add(static_cast<long long>(n)).Add(static_cast<long long>(1));
  return NvrtcKernel::Create(ctx, node.name, make(dtype), GridFor(n, 256, *ctx.device), dim3(256),
                             0, std::move(args));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerGelu(const LoweringContext& ctx, const Node& node) {
  return Lower(ctx, node, codegen::Gelu);
}
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerGeluGrad(const LoweringContext& ctx,
                                                         const Node& node) {
  return Lower(ctx, node, codegen::GeluGrad);
}

}  // namespace

const ir::OpDef& GeluOp() {
  static const ir::OpDef op{.name = "gelu",
                            .infer = InferGelu,
                            .grad = GradGelu,
                            .cpu = CpuGelu,
                            .lower = LowerGelu,
                            .pointwise = {codegen::kGeluExpression, {ir::Operand::kElement}},
                            .low_precision_lowering = true};
  return op;
}
const ir::OpDef& GeluGradOp() {
  static const ir::OpDef op{
      .name = "gelu_grad",
      .infer = InferGeluGrad,
      .cpu = CpuGeluGrad,
      .lower = LowerGeluGrad,
      .pointwise = {codegen::kGeluGradExpression, {ir::Operand::kElement, ir::Operand::kElement}},
      .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
