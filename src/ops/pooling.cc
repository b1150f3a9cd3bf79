// max_pool2d and global_avg_pool with their gradients, and the layout helpers of the image ops.
// GPU lowerings are our own NVRTC kernels (src/codegen/pooling_kernels.h) rather than cuDNN's
// pooling: they give the CPU reference's tie rule (first maximal element) bit for bit, with no
// atomics in the backward pass. They run in float32, bfloat16 or float16 (computing in float).
#include "src/ops/pooling.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "src/codegen/pooling_kernels.h"
#include "src/ops/gpu_element_type.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/pooling_bn_relu.h"
#include "src/util/status_macros.h"

namespace reprise::ops {

absl::StatusOr<Layout> LayoutAttr(const Attrs& attrs) {
  auto it = attrs.find("layout");
  if (it == attrs.end()) return Layout::kNCHW;
  const std::string* name = std::get_if<std::string>(&it->second);
  if (name != nullptr && *name == "NCHW") return Layout::kNCHW;
  if (name != nullptr && *name == "NHWC") return Layout::kNHWC;
  return absl::InvalidArgumentError(
      absl::StrCat("attribute 'layout' must be \"NCHW\" or \"NHWC\", got ",
                   name != nullptr ? absl::StrCat("\"", *name, "\"") : "a non-string"));
}

absl::StatusOr<ImageDims> ImageDimsOf(const TensorSpec& x, Layout layout, absl::string_view what) {
  if (x.shape.rank() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must have rank 4 (", LayoutName(layout), "), got ", x.ToString()));
  }
  RETURN_IF_ERROR(CheckFloat(x, what));
  const Shape& s = x.shape;
  ImageDims d;
  d.layout = layout;
  d.n = s.dim(0);
  if (layout == Layout::kNCHW) {
    d.c = s.dim(1), d.h = s.dim(2), d.w = s.dim(3);
  } else {
    d.h = s.dim(1), d.w = s.dim(2), d.c = s.dim(3);
  }
  return d;
}

absl::Status CheckGpuFloat32(const Node& node, absl::Span<const TensorSpec> specs) {
  for (const TensorSpec& spec : specs) {
    if (spec.dtype != DType::kFloat32) {
      return absl::UnimplementedError(absl::StrCat("node '", node.name, "': ", node.op_name(),
                                                   " runs on the GPU in float32 only, got ",
                                                   spec.ToString()));
    }
  }
  return absl::OkStatus();
}

// max_pool2d ------------------------------------------------------------------------------------

absl::StatusOr<PoolParams> PoolParamsOf(const Attrs& attrs) {
  PoolParams p;
  ASSIGN_OR_RETURN(p.kh, ir::IntAttr(attrs, "kernel_h"));
  ASSIGN_OR_RETURN(p.kw, ir::IntAttr(attrs, "kernel_w"));
  ASSIGN_OR_RETURN(p.sh, ir::IntAttr(attrs, "stride_h"));
  ASSIGN_OR_RETURN(p.sw, ir::IntAttr(attrs, "stride_w"));
  ASSIGN_OR_RETURN(p.ph, ir::IntAttr(attrs, "pad_h"));
  ASSIGN_OR_RETURN(p.pw, ir::IntAttr(attrs, "pad_w"));
  ASSIGN_OR_RETURN(p.layout, LayoutAttr(attrs));
  const std::string window = absl::StrCat(p.kh, "x", p.kw, " window with stride ", p.sh, "x", p.sw,
                                          " and padding ", p.ph, "x", p.pw);
  if (p.kh < 1 || p.kw < 1 || p.sh < 1 || p.sw < 1 || p.ph < 0 || p.pw < 0 || p.kh > INT_MAX ||
      p.kw > INT_MAX || p.sh > INT_MAX || p.sw > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", window, ": kernel and stride must be positive, padding non-negative"));
  }
  // Wider padding would make windows of padding alone, whose max (-inf) PyTorch also rejects.
  if (p.ph > p.kh / 2 || p.pw > p.kw / 2) {  // Not 2 * pad: a huge pad would overflow.
    return absl::InvalidArgumentError(
        absl::StrCat("a ", window, ": padding must be at most half the kernel"));
  }
  return p;
}

// The extents of y for x, or InvalidArgument when the window leaves no output.
absl::StatusOr<ImageDims> PooledDims(const ImageDims& x, const PoolParams& p,
                                     const TensorSpec& spec) {
  if (x.h + 2 * p.ph < p.kh || x.w + 2 * p.pw < p.kw) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", p.kh, "x", p.kw, " window with padding ", p.ph, "x", p.pw, " leaves no output for x ",
        spec.ToString(), " (height ", x.h, ", width ", x.w, ")"));
  }
  ImageDims y = x;
  y.h = (x.h + 2 * p.ph - p.kh) / p.sh + 1;
  y.w = (x.w + 2 * p.pw - p.kw) / p.sw + 1;
  if (y.NumElements() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max pooling of x ", spec.ToString(), " would give an empty output"));
  }
  return y;
}

// Kernel arguments every max-pool kernel ends with: extents, window, layout.
void AddPoolShape(KernelArgs& args, const ImageDims& x, const ImageDims& y, const PoolParams& p) {
  args.Add(static_cast<long long>(x.n)).Add(static_cast<long long>(x.c));
  args.Add(static_cast<long long>(x.h)).Add(static_cast<long long>(x.w));
  args.Add(static_cast<long long>(y.h)).Add(static_cast<long long>(y.w));
  for (int64_t v : {p.kh, p.kw, p.sh, p.sw, p.ph, p.pw}) args.Add(static_cast<int>(v));
  args.Add(static_cast<int>(p.layout == Layout::kNHWC));
}

codegen::PoolSizes PoolSizesOf(const ImageDims& x, const ImageDims& y, const PoolParams& p) {
  return {.n = x.n,
          .c = x.c,
          .h = x.h,
          .w = x.w,
          .oh = y.h,
          .ow = y.w,
          .kh = static_cast<int>(p.kh),
          .kw = static_cast<int>(p.kw),
          .sh = static_cast<int>(p.sh),
          .sw = static_cast<int>(p.sw),
          .ph = static_cast<int>(p.ph),
          .pw = static_cast<int>(p.pw)};
}

std::vector<codegen::GeneratedKernel> SizedPoolingKernelsOf(const Graph& graph, const Node& node) {
  // Which input is the pooled x: (x), (dy, x, y), (dy, argmax, x) or (x, batch-norm inputs).
  int x = -1;
  if (node.op == &MaxPool2dOp() || node.op == &MaxPool2dWithArgmaxOp() ||
      node.op == &MaxPool2dBnReluOp()) {
    x = 0;
  } else if (node.op == &MaxPool2dGradOp()) {
    x = 1;
  } else if (node.op == &MaxPool2dGradFromArgmaxOp()) {
    x = 2;
  }
  if (x < 0) return {};
  const TensorSpec& spec = graph.spec(node.inputs[x]);
  const absl::StatusOr<PoolParams> p = PoolParamsOf(node.attrs);
  if (!p.ok() || p->layout != Layout::kNHWC) return {};
  const absl::StatusOr<ImageDims> xd = ImageDimsOf(spec, p->layout, "x");
  if (!xd.ok() || xd->c % 4 != 0) return {};
  const absl::StatusOr<ImageDims> yd = PooledDims(*xd, *p, spec);
  if (!yd.ok() || (spec.dtype != DType::kFloat32 && !IsLowPrecision(spec.dtype))) return {};
  return codegen::PoolingKernels(PoolSizesOf(*xd, *yd, *p), spec.dtype);
}

namespace {

absl::StatusOr<std::vector<TensorSpec>> InferMaxPool(const Attrs& attrs,
                                                     absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  ASSIGN_OR_RETURN(PoolParams p, PoolParamsOf(attrs));
  ASSIGN_OR_RETURN(ImageDims x, ImageDimsOf(in[0], p.layout, "x"));
  ASSIGN_OR_RETURN(ImageDims y, PooledDims(x, p, in[0]));
  return std::vector<TensorSpec>{{y.ToShape(), in[0].dtype}};
}

absl::StatusOr<std::vector<TensorSpec>> InferMaxPoolGrad(const Attrs& attrs,
                                                         absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  ASSIGN_OR_RETURN(std::vector<TensorSpec> y, InferMaxPool(attrs, in.subspan(1, 1)));
  if (!(in[2] == y[0]) || !(in[0] == y[0])) {
    return absl::InvalidArgumentError(
        absl::StrCat("dy ", in[0].ToString(), " and y ", in[2].ToString(), " must both be ",
                     y[0].ToString(), ", the pooled x ", in[1].ToString()));
  }
  return std::vector<TensorSpec>{in[1]};
}

absl::StatusOr<std::vector<Value>> GradMaxPool(Graph& g, const Node& node,
                                               absl::Span<const Value> dout,
                                               const std::vector<bool>& needs) {
  std::vector<Value> grads(1);
  if (needs[0]) {
    ASSIGN_OR_RETURN(grads[0], g.AddOp1(MaxPool2dGradOp(), absl::StrCat(node.name, ".grad"),
                                        {dout[0], node.inputs[0], Value{node.id, 0}}, node.attrs));
  }
  return grads;
}

// Scans window (r, q) of channel plane (b, ch) in row-major order, calling visit(index, value)
// for each element inside x; visit returns false to stop.
template <typename T, typename Visit>
void ScanWindow(absl::Span<const T> x, const ImageDims& d, const PoolParams& p, int64_t b,
                int64_t ch, int64_t r, int64_t q, Visit&& visit) {
  for (int64_t a = 0; a < p.kh; ++a) {
    const int64_t row = r * p.sh - p.ph + a;
    if (row < 0 || row >= d.h) continue;
    for (int64_t e = 0; e < p.kw; ++e) {
      const int64_t col = q * p.sw - p.pw + e;
      if (col < 0 || col >= d.w) continue;
      const int64_t i = d.Index(b, ch, row, col);
      if (!visit(i, x[i])) return;
    }
  }
}

// Calls fn(b, ch, r, q) for every element of y, planes in order, windows row-major.
template <typename Fn>
void ForEachOutput(const ImageDims& y, Fn&& fn) {
  for (int64_t b = 0; b < y.n; ++b) {
    for (int64_t ch = 0; ch < y.c; ++ch) {
      for (int64_t r = 0; r < y.h; ++r) {
        for (int64_t q = 0; q < y.w; ++q) fn(b, ch, r, q);
      }
    }
  }
}

absl::Status CpuMaxPool(const Node& node, absl::Span<ir::HostTensor* const> in,
                        absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(PoolParams p, PoolParamsOf(node.attrs));
  ASSIGN_OR_RETURN(ImageDims xd, ImageDimsOf(in[0]->spec(), p.layout, "x"));
  ASSIGN_OR_RETURN(ImageDims yd, PooledDims(xd, p, in[0]->spec()));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    absl::Span<const T> x = in[0]->data<T>();
    auto y = out[0]->data<T>();
    ForEachOutput(yd, [&](int64_t b, int64_t ch, int64_t r, int64_t q) {
      T best = 0;
      bool found = false;
      ScanWindow(x, xd, p, b, ch, r, q, [&](int64_t, T v) {
        if (!found || v > best || (std::isnan(v) && !std::isnan(best))) best = v;
        found = true;
        return true;
      });
      y[yd.Index(b, ch, r, q)] = best;
    });
    return absl::OkStatus();
  });
}

// Each window's dy goes to its first element equal to its y (NaN matching NaN); windows are
// visited in y's row-major order, so every dx element sums its windows in a fixed order.
absl::Status CpuMaxPoolGrad(const Node& node, absl::Span<ir::HostTensor* const> in,
                            absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(PoolParams p, PoolParamsOf(node.attrs));
  ASSIGN_OR_RETURN(ImageDims xd, ImageDimsOf(in[1]->spec(), p.layout, "x"));
  ASSIGN_OR_RETURN(ImageDims yd, PooledDims(xd, p, in[1]->spec()));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    absl::Span<const T> dy = in[0]->data<T>(), x = in[1]->data<T>(), y = in[2]->data<T>();
    auto dx = out[0]->data<T>();
    std::fill(dx.begin(), dx.end(), T(0));
    ForEachOutput(yd, [&](int64_t b, int64_t ch, int64_t r, int64_t q) {
      const int64_t yi = yd.Index(b, ch, r, q);
      const T m = y[yi];
      ScanWindow(x, xd, p, b, ch, r, q, [&](int64_t i, T v) {
        if (!(v == m || (std::isnan(v) && std::isnan(m)))) return true;
        dx[i] += dy[yi];
        return false;
      });
    });
    return absl::OkStatus();
  });
}

// Whether the channels-last kernels that take 4 channels per thread apply: a channel count that
// is a multiple of 4 and every tensor aligned to 4 elements, for their 4-element loads.
bool FourChannelsPerThread(const LoweringContext& ctx, const ImageDims& x, DType dtype) {
  if (x.layout != Layout::kNHWC || x.c % 4 != 0) return false;
  const uintptr_t alignment = 4 * DTypeSize(dtype);
  for (const std::vector<void*>* pointers : {&ctx.inputs, &ctx.outputs}) {
    for (void* p : *pointers) {
      if (reinterpret_cast<uintptr_t>(p) % alignment != 0) return false;
    }
  }
  return true;
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerMaxPool(const LoweringContext& ctx,
                                                        const Node& node) {
  ASSIGN_OR_RETURN(const DType dtype, GpuElementType(node, ctx.input_specs));
  ASSIGN_OR_RETURN(PoolParams p, PoolParamsOf(node.attrs));
  ASSIGN_OR_RETURN(ImageDims xd, ImageDimsOf(ctx.input_specs[0], p.layout, "x"));
  ASSIGN_OR_RETURN(ImageDims yd, PooledDims(xd, p, ctx.input_specs[0]));
  const bool four = FourChannelsPerThread(ctx, xd, dtype);
  const codegen::PoolSizes sizes = PoolSizesOf(xd, yd, p);
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.outputs[0]);
  if (four) args.Add(static_cast<void*>(nullptr));  // No argmax wanted.
  AddPoolShape(args, xd, yd, p);
  return NvrtcKernel::Create(
      ctx, node.name, four ? codegen::MaxPool2dNhwc4(dtype, sizes) : codegen::MaxPool2d(dtype),
      GridFor(yd.NumElements() / (four ? 4 : 1), 256, *ctx.device), dim3(256), 0, std::move(args));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerMaxPoolGrad(const LoweringContext& ctx,
                                                            const Node& node) {
  ASSIGN_OR_RETURN(const DType dtype, GpuElementType(node, ctx.input_specs));
  ASSIGN_OR_RETURN(PoolParams p, PoolParamsOf(node.attrs));
  ASSIGN_OR_RETURN(ImageDims xd, ImageDimsOf(ctx.input_specs[1], p.layout, "x"));
  ASSIGN_OR_RETURN(ImageDims yd, PooledDims(xd, p, ctx.input_specs[1]));
  const bool four = FourChannelsPerThread(ctx, xd, dtype);
  const codegen::PoolSizes sizes = PoolSizesOf(xd, yd, p);
  // Two passes (each window's argmax, then the gather) where windows index in a byte and the
  // lane's workspace holds a byte per element of y; same bits as the one-pass kernel.
  const size_t argmax_bytes = static_cast<size_t>(yd.NumElements());
  if (four && p.kh * p.kw <= 255 && ctx.workspace != nullptr &&
      argmax_bytes <= ctx.workspace_bytes) {
    KernelArgs find;
    find.Add(ctx.inputs[1]).Add(ctx.inputs[2]).Add(ctx.workspace);
    AddPoolShape(find, xd, yd, p);
    KernelArgs gather;
    gather.Add(ctx.inputs[0]).Add(static_cast<const void*>(ctx.workspace)).Add(ctx.outputs[0]);
    AddPoolShape(gather, xd, yd, p);
    std::vector<std::unique_ptr<GpuKernel>> kernels(2);
    ASSIGN_OR_RETURN(
        kernels[0], NvrtcKernel::Create(ctx, node.name, codegen::MaxPool2dArgmaxNhwc4(dtype, sizes),
                                        GridFor(yd.NumElements() / 4, 256, *ctx.device), dim3(256),
                                        0, std::move(find)));
    ASSIGN_OR_RETURN(
        kernels[1],
        NvrtcKernel::Create(ctx, node.name, codegen::MaxPool2dGradFromArgmaxNhwc4(dtype, sizes),
                            GridFor(xd.NumElements() / 4, 256, *ctx.device), dim3(256), 0,
                            std::move(gather)));
    return std::unique_ptr<GpuKernel>(new KernelSequence(std::move(kernels), argmax_bytes));
  }
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.inputs[2]).Add(ctx.outputs[0]);
  AddPoolShape(args, xd, yd, p);
  return NvrtcKernel::Create(
      ctx, node.name,
      four ? codegen::MaxPool2dGradNhwc4(dtype, sizes) : codegen::MaxPool2dGrad(dtype),
      GridFor(xd.NumElements() / (four ? 4 : 1), 256, *ctx.device), dim3(256), 0, std::move(args));
}

// global_avg_pool -------------------------------------------------------------------------------

absl::StatusOr<std::vector<TensorSpec>> InferGap(const Attrs& attrs,
                                                 absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  ASSIGN_OR_RETURN(Layout layout, LayoutAttr(attrs));
  ASSIGN_OR_RETURN(ImageDims x, ImageDimsOf(in[0], layout, "x"));
  if (x.h * x.w == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("x ", in[0].ToString(), " has no positions to average over"));
  }
  return std::vector<TensorSpec>{{Shape{x.n, x.c}, in[0].dtype}};
}

// The extents of dx from dy [N, C] and the attributes.
absl::StatusOr<ImageDims> GapGradDims(const Attrs& attrs, const TensorSpec& dy) {
  RETURN_IF_ERROR(CheckRank(dy, 2, "dy"));
  RETURN_IF_ERROR(CheckFloat(dy, "dy"));
  ImageDims d;
  ASSIGN_OR_RETURN(d.layout, LayoutAttr(attrs));
  ASSIGN_OR_RETURN(d.h, ir::IntAttr(attrs, "height"));
  ASSIGN_OR_RETURN(d.w, ir::IntAttr(attrs, "width"));
  if (d.h < 1 || d.w < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("height ", d.h, " and width ", d.w, " must be positive"));
  }
  d.n = dy.shape.dim(0);
  d.c = dy.shape.dim(1);
  return d;
}

absl::StatusOr<std::vector<TensorSpec>> InferGapGrad(const Attrs& attrs,
                                                     absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  ASSIGN_OR_RETURN(ImageDims d, GapGradDims(attrs, in[0]));
  return std::vector<TensorSpec>{{d.ToShape(), in[0].dtype}};
}

absl::StatusOr<std::vector<Value>> GradGap(Graph& g, const Node& node, absl::Span<const Value> dout,
                                           const std::vector<bool>& needs) {
  std::vector<Value> grads(1);
  if (!needs[0]) return grads;
  ASSIGN_OR_RETURN(Layout layout, LayoutAttr(node.attrs));
  ASSIGN_OR_RETURN(ImageDims x, ImageDimsOf(g.spec(node.inputs[0]), layout, "x"));
  ASSIGN_OR_RETURN(
      grads[0],
      g.AddOp1(GlobalAvgPoolGradOp(), absl::StrCat(node.name, ".grad"), {dout[0]},
               {{"layout", std::string(LayoutName(layout))}, {"height", x.h}, {"width", x.w}}));
  return grads;
}

absl::Status CpuGap(const Node& node, absl::Span<ir::HostTensor* const> in,
                    absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(Layout layout, LayoutAttr(node.attrs));
  ASSIGN_OR_RETURN(ImageDims d, ImageDimsOf(in[0]->spec(), layout, "x"));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    absl::Span<const T> x = in[0]->data<T>();
    auto y = out[0]->data<T>();
    for (int64_t b = 0; b < d.n; ++b) {
      for (int64_t ch = 0; ch < d.c; ++ch) {
        double sum = 0;
        for (int64_t r = 0; r < d.h; ++r) {
          for (int64_t q = 0; q < d.w; ++q) sum += x[d.Index(b, ch, r, q)];
        }
        y[b * d.c + ch] = static_cast<T>(sum / static_cast<double>(d.h * d.w));
      }
    }
    return absl::OkStatus();
  });
}

absl::Status CpuGapGrad(const Node& node, absl::Span<ir::HostTensor* const> in,
                        absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(ImageDims d, GapGradDims(node.attrs, in[0]->spec()));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    absl::Span<const T> dy = in[0]->data<T>();
    auto dx = out[0]->data<T>();
    const T positions = static_cast<T>(d.h * d.w);
    for (int64_t b = 0; b < d.n; ++b) {
      for (int64_t ch = 0; ch < d.c; ++ch) {
        for (int64_t r = 0; r < d.h; ++r) {
          for (int64_t q = 0; q < d.w; ++q) dx[d.Index(b, ch, r, q)] = dy[b * d.c + ch] / positions;
        }
      }
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerGap(const LoweringContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(const DType dtype, GpuElementType(node, ctx.input_specs));
  ASSIGN_OR_RETURN(Layout layout, LayoutAttr(node.attrs));
  ASSIGN_OR_RETURN(ImageDims d, ImageDimsOf(ctx.input_specs[0], layout, "x"));
  const long long rows = d.n * d.c, hw = d.h * d.w;
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.outputs[0]);
  if (layout == Layout::kNCHW) {
    args.Add(rows).Add(hw);  // One warp per row: 32 threads per output.
    return NvrtcKernel::Create(ctx, node.name, codegen::GlobalAvgPoolNchw(dtype),
                               GridFor(rows * 32, 256, *ctx.device), dim3(256), 0, std::move(args));
  }
  args.Add(static_cast<long long>(d.n)).Add(static_cast<long long>(d.c)).Add(hw);
  return NvrtcKernel::Create(ctx, node.name, codegen::GlobalAvgPoolNhwc(dtype),
                             GridFor(rows, 256, *ctx.device), dim3(256), 0, std::move(args));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerGapGrad(const LoweringContext& ctx,
                                                        const Node& node) {
  ASSIGN_OR_RETURN(const DType dtype, GpuElementType(node, ctx.input_specs));
  ASSIGN_OR_RETURN(ImageDims d, GapGradDims(node.attrs, ctx.input_specs[0]));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.outputs[0]);
  args.Add(static_cast<long long>(d.n)).Add(static_cast<long long>(d.c));
  args.Add(static_cast<long long>(d.h * d.w)).Add(static_cast<int>(d.layout == Layout::kNHWC));
  return NvrtcKernel::Create(ctx, node.name, codegen::GlobalAvgPoolGrad(dtype),
                             GridFor(d.NumElements(), 256, *ctx.device), dim3(256), 0,
                             std::move(args));
}

}  // namespace

const ir::OpDef& MaxPool2dOp() {
  static const ir::OpDef op{.name = "max_pool2d",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferMaxPool,
                            .grad = GradMaxPool,
                            .cpu = CpuMaxPool,
                            .lower = LowerMaxPool,
                            .low_precision_lowering = true};
  return op;
}
const ir::OpDef& MaxPool2dGradOp() {
  static const ir::OpDef op{.name = "max_pool2d_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferMaxPoolGrad,
                            .cpu = CpuMaxPoolGrad,
                            .lower = LowerMaxPoolGrad,
                            .low_precision_lowering = true};
  return op;
}
const ir::OpDef& GlobalAvgPoolOp() {
  static const ir::OpDef op{.name = "global_avg_pool",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferGap,
                            .grad = GradGap,
                            .cpu = CpuGap,
                            .lower = LowerGap,
                            .low_precision_lowering = true};
  return op;
}
const ir::OpDef& GlobalAvgPoolGradOp() {
  static const ir::OpDef op{.name = "global_avg_pool_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferGapGrad,
                            .cpu = CpuGapGrad,
                            .lower = LowerGapGrad,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
