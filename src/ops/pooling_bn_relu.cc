// max_pool2d_bn_relu, max_pool2d_with_argmax and max_pool2d_grad_from_argmax: shape rules, CPU
// references (batch_norm_apply's and max_pool2d's references, then the window scan that
// max_pool2d_grad makes) and GPU lowerings (codegen::BnReluMaxPool2dNhwc4,
// codegen::MaxPool2dNhwc4 with its argmax, codegen::MaxPool2dGradFromArgmaxNhwc4).
#include "src/ops/pooling_bn_relu.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
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

// The argmax's spec for the pooled `y`: a byte per element, four channels to an int32; needs
// channels-last y with a multiple of 4 channels and windows of at most 255 elements.
absl::StatusOr<TensorSpec> ArgmaxSpec(const Attrs& attrs, const TensorSpec& y) {
  ASSIGN_OR_RETURN(const PoolParams p, PoolParamsOf(attrs));
  if (p.layout != Layout::kNHWC || y.shape.dim(3) % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the windows' argmax packs four channels to an int32: it needs channels-last "
                     "data with a multiple of 4 channels, got ",
                     y.ToString(), " in ", LayoutName(p.layout)));
  }
  if (p.kh * p.kw > 255) {
    return absl::InvalidArgumentError(absl::StrCat("the windows' argmax is a byte: a ", p.kh, "x",
                                                   p.kw, " window has more than 255 elements"));
  }
  return TensorSpec{Shape{y.shape.dim(0), y.shape.dim(1), y.shape.dim(2), y.shape.dim(3) / 4},
                    DType::kInt32};
}

absl::StatusOr<std::vector<TensorSpec>> InferPool(const Attrs& attrs,
                                                  absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, kBatchNormInputs));
  ASSIGN_OR_RETURN(TensorSpec y, PooledSpec(attrs, in));
  ASSIGN_OR_RETURN(TensorSpec argmax, ArgmaxSpec(attrs, y));
  return std::vector<TensorSpec>{y, argmax};
}

// (x) -> (y, argmax): max_pool2d's y.
absl::StatusOr<std::vector<TensorSpec>> InferPoolWithArgmax(const Attrs& attrs,
                                                            absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(const std::vector<TensorSpec> y, MaxPool2dOp().infer(attrs, in));
  ASSIGN_OR_RETURN(TensorSpec argmax, ArgmaxSpec(attrs, y[0]));
  return std::vector<TensorSpec>{y[0], argmax};
}

// (dy, argmax, x): dy and argmax as max_pool2d_bn_relu makes them from x.
absl::StatusOr<std::vector<TensorSpec>> InferPoolGrad(const Attrs& attrs,
                                                      absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  ASSIGN_OR_RETURN(const PoolParams p, PoolParamsOf(attrs));
  ASSIGN_OR_RETURN(const ImageDims xd, ImageDimsOf(in[2], p.layout, "x"));
  ASSIGN_OR_RETURN(const ImageDims yd, PooledDims(xd, p, in[2]));
  const TensorSpec y{yd.ToShape(), in[2].dtype};
  ASSIGN_OR_RETURN(const TensorSpec argmax, ArgmaxSpec(attrs, y));
  if (!(in[0] == y) || !(in[1] == argmax)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dy ", in[0].ToString(), " and argmax ", in[1].ToString(), " must be ", y.ToString(),
        " and ", argmax.ToString(), ", the pooled x ", in[2].ToString()));
  }
  return std::vector<TensorSpec>{in[2]};
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

// The window element (row-major index within the kh x kw window) of the first maximum of each
// output of `y` (NaN matching NaN), NHWC: the element max_pool2d_grad sends that window's gradient
// to.
template <typename T>
void FindArgmax(absl::Span<const T> a, absl::Span<const T> y, const ImageDims& xd,
                const ImageDims& yd, const PoolParams& p, unsigned char* argmax) {
  for (int64_t b = 0; b < yd.n; ++b) {
    for (int64_t r = 0; r < yd.h; ++r) {
      for (int64_t q = 0; q < yd.w; ++q) {
        for (int64_t ch = 0; ch < yd.c; ++ch) {
          const int64_t yi = yd.Index(b, ch, r, q);
          int64_t first = -1;
          for (int64_t k = 0; k < p.kh * p.kw && first < 0; ++k) {
            const int64_t row = r * p.sh - p.ph + k / p.kw, col = q * p.sw - p.pw + k % p.kw;
            if (row < 0 || row >= xd.h || col < 0 || col >= xd.w) continue;
            const T v = a[xd.Index(b, ch, row, col)];
            if (v == y[yi] || (v != v && y[yi] != y[yi])) first = k;  // NaN matches NaN.
          }
          argmax[yi] = static_cast<unsigned char>(first);
        }
      }
    }
  }
}

absl::Status CpuPool(const Node& node, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(ir::HostTensor a, ReluOutput(node, in));
  ir::HostTensor* pool_in[] = {&a};
  RETURN_IF_ERROR(MaxPool2dOp().cpu(node, absl::MakeSpan(pool_in), out.subspan(0, 1)));
  ASSIGN_OR_RETURN(const PoolParams p, PoolParamsOf(node.attrs));
  ASSIGN_OR_RETURN(const ImageDims xd, ImageDimsOf(a.spec(), p.layout, "x"));
  ASSIGN_OR_RETURN(const ImageDims yd, PooledDims(xd, p, a.spec()));
  auto* argmax = static_cast<unsigned char*>(out[1]->raw());
  return DispatchFloat(a.dtype(), [&]<typename T>() {
    FindArgmax<T>(a.data<T>(), out[0]->data<T>(), xd, yd, p, argmax);
    return absl::OkStatus();
  });
}

absl::Status CpuPoolWithArgmax(const Node& node, absl::Span<ir::HostTensor* const> in,
                               absl::Span<ir::HostTensor* const> out) {
  RETURN_IF_ERROR(MaxPool2dOp().cpu(node, in, out.subspan(0, 1)));
  ASSIGN_OR_RETURN(const PoolParams p, PoolParamsOf(node.attrs));
  ASSIGN_OR_RETURN(const ImageDims xd, ImageDimsOf(in[0]->spec(), p.layout, "x"));
  ASSIGN_OR_RETURN(const ImageDims yd, PooledDims(xd, p, in[0]->spec()));
  auto* argmax = static_cast<unsigned char*>(out[1]->raw());
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    FindArgmax<T>(in[0]->data<T>(), out[0]->data<T>(), xd, yd, p, argmax);
    return absl::OkStatus();
  });
}

// Each window's dy to its argmax element, windows in y's row-major order as max_pool2d_grad's
// reference visits them, so every dx element sums its windows in the same order.
absl::Status CpuPoolGrad(const Node& node, absl::Span<ir::HostTensor* const> in,
                         absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(const PoolParams p, PoolParamsOf(node.attrs));
  ASSIGN_OR_RETURN(const ImageDims xd, ImageDimsOf(in[2]->spec(), p.layout, "x"));
  ASSIGN_OR_RETURN(const ImageDims yd, PooledDims(xd, p, in[2]->spec()));
  const auto* argmax = static_cast<const unsigned char*>(in[1]->raw());
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    absl::Span<const T> dy = in[0]->data<T>();
    absl::Span<T> dx = out[0]->data<T>();
    std::fill(dx.begin(), dx.end(), T(0));
    for (int64_t b = 0; b < yd.n; ++b) {
      for (int64_t ch = 0; ch < yd.c; ++ch) {
        for (int64_t r = 0; r < yd.h; ++r) {
          for (int64_t q = 0; q < yd.w; ++q) {
            const int64_t yi = yd.Index(b, ch, r, q), k = argmax[yi];
            const int64_t row = r * p.sh - p.ph + k / p.kw, col = q * p.sw - p.pw + k % p.kw;
            if (k >= p.kh * p.kw || row < 0 || row >= xd.h || col < 0 || col >= xd.w) {
              return absl::InvalidArgumentError(
                  absl::StrCat("node '", node.name, "': argmax ", k, " of window (", r, ", ", q,
                               ") is no element of x inside its ", p.kh, "x", p.kw, " window"));
            }
            dx[xd.Index(b, ch, row, col)] += dy[yi];
          }
        }
      }
    }
    return absl::OkStatus();
  });
}

// What the GPU kernels need, checked: `data` all of one element type (float32 where
// `float32_only`, else float32, bfloat16 or float16), channels-last with a channel count that is a
// multiple of 4, every tensor aligned for 4-element loads. `x` is the input whose extents are the
// pooling's input (the batch norm's input).
struct GpuPool {
  PoolParams p;
  ImageDims x, y;
  DType dtype = DType::kFloat32;
  codegen::PoolSizes sizes;  // Compiled into the kernels.
};

absl::StatusOr<GpuPool> GpuPoolOf(const LoweringContext& ctx, const Node& node, int x,
                                  absl::Span<const TensorSpec> data, bool float32_only) {
  GpuPool pool;
  pool.dtype = data[0].dtype;
  if (float32_only) {
    RETURN_IF_ERROR(CheckGpuFloat32(node, data));
  } else {
    for (const TensorSpec& spec : data) {
      if (spec.dtype != pool.dtype ||
          (pool.dtype != DType::kFloat32 && !IsLowPrecision(pool.dtype))) {
        return absl::UnimplementedError(
            absl::StrCat("node '", node.name, "': ", node.op_name(),
                         " runs on the GPU for float32, bfloat16 or float16 data of one type, got ",
                         data[0].ToString(), " and ", spec.ToString()));
      }
    }
  }
  ASSIGN_OR_RETURN(pool.p, PoolParamsOf(node.attrs));
  ASSIGN_OR_RETURN(pool.x, ImageDimsOf(ctx.input_specs[x], pool.p.layout, "x"));
  ASSIGN_OR_RETURN(pool.y, PooledDims(pool.x, pool.p, ctx.input_specs[x]));
  if (pool.p.layout != Layout::kNHWC || pool.x.c % 4 != 0) {
    return absl::UnimplementedError(
        absl::StrCat("node '", node.name, "': ", node.op_name(),
                     " runs on the GPU for channels-last x with a multiple of 4 channels, got ",
                     ctx.input_specs[x].ToString(), " in ", LayoutName(pool.p.layout)));
  }
  pool.sizes = PoolSizesOf(pool.x, pool.y, pool.p);
  const int64_t alignment = 4 * DTypeSize(pool.dtype);
  for (const std::vector<void*>* pointers : {&ctx.inputs, &ctx.outputs}) {
    for (void* p : *pointers) {
      if (reinterpret_cast<uintptr_t>(p) % alignment != 0) {
        return absl::InvalidArgumentError(absl::StrCat("node '", node.name, "': ", node.op_name(),
                                                       " needs ", alignment,
                                                       "-byte aligned tensors"));
      }
    }
  }
  return pool;
}

// Inputs (x, gamma, beta, saved_mean, saved_invstd); outputs (y, argmax).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerPool(const LoweringContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(const GpuPool pool,
                   GpuPoolOf(ctx, node, 0, ctx.input_specs, /*float32_only=*/true));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[3]).Add(ctx.inputs[1]).Add(ctx.inputs[4]);
  args.Add(ctx.inputs[2]).Add(ctx.outputs[0]).Add(ctx.outputs[1]);
  AddPoolShape(args, pool.x, pool.y, pool.p);
  return NvrtcKernel::Create(
      ctx, node.name, codegen::BnReluMaxPool2dNhwc4(DType::kFloat32, pool.sizes),
      GridFor(pool.y.NumElements() / 4, 256, *ctx.device), dim3(256), 0, std::move(args));
}

// Input x; outputs (y, argmax): max_pool2d's kernel, told to note the argmax.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerPoolWithArgmax(const LoweringContext& ctx,
                                                               const Node& node) {
  ASSIGN_OR_RETURN(const GpuPool pool,
                   GpuPoolOf(ctx, node, 0, ctx.input_specs, /*float32_only=*/false));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.outputs[0]).Add(ctx.outputs[1]);
  AddPoolShape(args, pool.x, pool.y, pool.p);
  return NvrtcKernel::Create(ctx, node.name, codegen::MaxPool2dNhwc4(pool.dtype, pool.sizes),
                             GridFor(pool.y.NumElements() / 4, 256, *ctx.device), dim3(256), 0,
                             std::move(args));
}

// Inputs (dy, argmax, x); output dx.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerPoolGrad(const LoweringContext& ctx,
                                                         const Node& node) {
  ASSIGN_OR_RETURN(const GpuPool pool,
                   GpuPoolOf(ctx, node, 2, {ctx.input_specs[0], ctx.input_specs[2]},
                             /*float32_only=*/false));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.outputs[0]);
  AddPoolShape(args, pool.x, pool.y, pool.p);
  return NvrtcKernel::Create(
      ctx, node.name, codegen::MaxPool2dGradFromArgmaxNhwc4(pool.dtype, pool.sizes),
      GridFor(pool.x.NumElements() / 4, 256, *ctx.device), dim3(256), 0, std::move(args));
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

const ir::OpDef& MaxPool2dWithArgmaxOp() {
  static const ir::OpDef op{.name = "max_pool2d_with_argmax",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferPoolWithArgmax,
                            .cpu = CpuPoolWithArgmax,
                            .lower = LowerPoolWithArgmax,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& MaxPool2dGradFromArgmaxOp() {
  static const ir::OpDef op{.name = "max_pool2d_grad_from_argmax",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferPoolGrad,
                            .cpu = CpuPoolGrad,
                            .lower = LowerPoolGrad,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
