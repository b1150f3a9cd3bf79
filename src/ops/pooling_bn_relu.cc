// max_pool2d_bn_relu and max_pool2d_grad_bn_relu: shape rules, CPU references (batch_norm_apply's
// and the pooling ops' references in turn) and GPU lowerings (codegen::BnReluMaxPool2dNhwc4 and
// its argmax form).
#include "src/ops/pooling_bn_relu.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/pooling_kernels.h"
#include "src/ir/low_precision.h"
#include "src/ops/batch_norm_apply.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/pooling.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

constexpr int kBatchNormInputs = 5;  // x, gamma, beta, saved_mean, saved_invstd.

// batch_norm_apply's attrs for the recomputed ReLU output: the node's layout, ReLU, no residual.
Attrs ApplyAttrs(const Attrs& attrs) {
  Attrs apply = attrs;
  apply["relu"] = true;
  apply["residual"] = false;
  return apply;
}

// The pooled tensor's spec, checking the batch-norm inputs as batch_norm_apply checks them.
absl::StatusOr<TensorSpec> PooledSpec(const Attrs& attrs, absl::Span<const TensorSpec> bn) {
  ASSIGN_OR_RETURN(const std::vector<TensorSpec> a,
                   BatchNormApplyOp().infer(ApplyAttrs(attrs), bn));
  ASSIGN_OR_RETURN(const std::vector<TensorSpec> y, MaxPool2dOp().infer(attrs, a));
  return y[0];
}

absl::StatusOr<std::vector<TensorSpec>> InferPool(const Attrs& attrs,
                                                  absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, kBatchNormInputs));
  ASSIGN_OR_RETURN(TensorSpec y, PooledSpec(attrs, in));
  return std::vector<TensorSpec>{y};
}

absl::StatusOr<std::vector<TensorSpec>> InferPoolGrad(const Attrs& attrs,
                                                      absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, kBatchNormInputs + 1));
  ASSIGN_OR_RETURN(TensorSpec y, PooledSpec(attrs, in.subspan(1)));
  if (!(in[0] == y)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dy ", in[0].ToString(), " must be ", y.ToString(), ", the pooled x ", in[1].ToString()));
  }
  return std::vector<TensorSpec>{in[1]};
}

// The ReLU output as the separate batch_norm_apply would store it: its reference, rounded to the
// node's element type where the reference executor runs a 16-bit graph in float32.
absl::StatusOr<ir::HostTensor> ReluOutput(const Node& node, absl::Span<ir::HostTensor* const> bn) {
  Node apply = node;
  apply.attrs = ApplyAttrs(node.attrs);
  ir::HostTensor a(bn[0]->spec());
  ir::HostTensor* out[] = {&a};
  RETURN_IF_ERROR(BatchNormApplyOp().cpu(apply, bn, absl::MakeSpan(out)));
  const DType stored = node.outputs[0].dtype;
  if (a.dtype() == DType::kFloat32 && IsLowPrecision(stored)) {
    for (float& v : a.data<float>()) {
      v = stored == DType::kBFloat16 ? ir::BFloat16ToFloat(ir::FloatToBFloat16(v))
                                     : ir::HalfToFloat(ir::FloatToHalf(v));
    }
  }
  return a;
}

absl::StatusOr<ir::HostTensor> Pooled(const Node& node, ir::HostTensor& a) {
  ASSIGN_OR_RETURN(const std::vector<TensorSpec> spec, MaxPool2dOp().infer(node.attrs, {a.spec()}));
  ir::HostTensor y(spec[0]);
  ir::HostTensor* in[] = {&a};
  ir::HostTensor* out[] = {&y};
  RETURN_IF_ERROR(MaxPool2dOp().cpu(node, absl::MakeSpan(in), absl::MakeSpan(out)));
  return y;
}

absl::Status CpuPool(const Node& node, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(ir::HostTensor a, ReluOutput(node, in));
  ir::HostTensor* pool_in[] = {&a};
  return MaxPool2dOp().cpu(node, absl::MakeSpan(pool_in), out);
}

absl::Status CpuPoolGrad(const Node& node, absl::Span<ir::HostTensor* const> in,
                         absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(ir::HostTensor a, ReluOutput(node, in.subspan(1)));
  ASSIGN_OR_RETURN(ir::HostTensor y, Pooled(node, a));
  ir::HostTensor* grad_in[] = {in[0], &a, &y};
  return MaxPool2dGradOp().cpu(node, absl::MakeSpan(grad_in), out);
}

// What the GPU kernel needs, checked: float32 tensors, channels-last with a channel count that
// is a multiple of 4, every tensor aligned for 4-element loads. `x` is the batch norm's input.
struct GpuPool {
  PoolParams p;
  ImageDims x, y;
};

absl::StatusOr<GpuPool> GpuPoolOf(const LoweringContext& ctx, const Node& node, int x) {
  RETURN_IF_ERROR(CheckGpuFloat32(node, ctx.input_specs));
  GpuPool pool;
  ASSIGN_OR_RETURN(pool.p, PoolParamsOf(node.attrs));
  ASSIGN_OR_RETURN(pool.x, ImageDimsOf(ctx.input_specs[x], pool.p.layout, "x"));
  ASSIGN_OR_RETURN(pool.y, PooledDims(pool.x, pool.p, ctx.input_specs[x]));
  if (pool.p.layout != Layout::kNHWC || pool.x.c % 4 != 0) {
    return absl::UnimplementedError(
        absl::StrCat("node '", node.name, "': ", node.op_name(),
                     " runs on the GPU for channels-last x with a multiple of 4 channels, got ",
                     ctx.input_specs[x].ToString(), " in ", LayoutName(pool.p.layout)));
  }
  for (const std::vector<void*>* pointers : {&ctx.inputs, &ctx.outputs}) {
    for (void* p : *pointers) {
      if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
        return absl::InvalidArgumentError(absl::StrCat("node '", node.name, "': ", node.op_name(),
                                                       " needs 16-byte aligned tensors"));
      }
    }
  }
  return pool;
}

// The kernel's arguments: x and the per-channel tensors (gamma, beta, saved_mean, saved_invstd in
// the op's order, from input `x` on), then its output (y or the argmax) and the sizes.
KernelArgs PoolArgs(const LoweringContext& ctx, int x, void* out, const GpuPool& pool) {
  KernelArgs args;
  args.Add(ctx.inputs[x]).Add(ctx.inputs[x + 3]).Add(ctx.inputs[x + 1]).Add(ctx.inputs[x + 4]);
  args.Add(ctx.inputs[x + 2]).Add(out);
  AddPoolShape(args, pool.x, pool.y, pool.p);
  return args;
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerPool(const LoweringContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(const GpuPool pool, GpuPoolOf(ctx, node, 0));
  return NvrtcKernel::Create(ctx, node.name, codegen::BnReluMaxPool2dNhwc4(DType::kFloat32),
                             GridFor(pool.y.NumElements() / 4, 256, *ctx.device), dim3(256), 0,
                             PoolArgs(ctx, 0, ctx.outputs[0], pool));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerPoolGrad(const LoweringContext& ctx,
                                                         const Node& node) {
  ASSIGN_OR_RETURN(const GpuPool pool, GpuPoolOf(ctx, node, 1));
  const size_t argmax_bytes = static_cast<size_t>(pool.y.NumElements());
  if (pool.p.kh * pool.p.kw > 255) {
    return absl::UnimplementedError(absl::StrCat("node '", node.name, "': ", node.op_name(),
                                                 " indexes windows in a byte; a ", pool.p.kh, "x",
                                                 pool.p.kw, " window has more than 255 elements"));
  }
  if (ctx.workspace == nullptr || argmax_bytes > ctx.workspace_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("node '", node.name, "': ", node.op_name(), " needs ", argmax_bytes,
                     " bytes of its lane's workspace for the windows' argmax, ",
                     ctx.workspace == nullptr ? 0 : ctx.workspace_bytes, " available"));
  }
  KernelArgs gather;
  gather.Add(ctx.inputs[0]).Add(static_cast<const void*>(ctx.workspace)).Add(ctx.outputs[0]);
  AddPoolShape(gather, pool.x, pool.y, pool.p);
  std::vector<std::unique_ptr<GpuKernel>> kernels(2);
  ASSIGN_OR_RETURN(
      kernels[0],
      NvrtcKernel::Create(ctx, node.name, codegen::BnReluMaxPool2dArgmaxNhwc4(DType::kFloat32),
                          GridFor(pool.y.NumElements() / 4, 256, *ctx.device), dim3(256), 0,
                          PoolArgs(ctx, 1, ctx.workspace, pool)));
  ASSIGN_OR_RETURN(
      kernels[1],
      NvrtcKernel::Create(ctx, node.name, codegen::MaxPool2dGradFromArgmaxNhwc4(DType::kFloat32),
                          GridFor(pool.x.NumElements() / 4, 256, *ctx.device), dim3(256), 0,
                          std::move(gather)));
  return std::unique_ptr<GpuKernel>(new KernelSequence(std::move(kernels), argmax_bytes));
}

}  // namespace

const ir::OpDef& MaxPool2dBnReluOp() {
  static const ir::OpDef op{.name = "max_pool2d_bn_relu",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferPool,
                            .cpu = CpuPool,
                            .lower = LowerPool};
  return op;
}

const ir::OpDef& MaxPool2dGradBnReluOp() {
  static const ir::OpDef op{.name = "max_pool2d_grad_bn_relu",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferPoolGrad,
                            .cpu = CpuPoolGrad,
                            .lower = LowerPoolGrad};
  return op;
}

}  // namespace reprise::ops
