// channel_bias_add and channel_sum: a convolution's bias, added along the channel dimension of a
// 4-D tensor, and its gradient, the sum over everything but the channel. On the GPU in float32,
// bfloat16 or float16 (computed in float; the sum rounds once, to the output's type).
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/conv_kernels.h"
#include "src/codegen/generated_kernel.h"
#include "src/ops/cast.h"
#include "src/ops/column_sum_launch.h"
#include "src/ops/conv.h"
#include "src/ops/conv_shape.h"
#include "src/ops/gpu_element_type.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/pooling.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

// Element i of a 4-D tensor is in channel (i / inner) % channels; `outer` is N for NCHW (and
// N·H·W for NHWC, where inner is 1).
struct ChannelSplit {
  int64_t outer, channels, inner;
};

ChannelSplit SplitOf(const Shape& shape, Layout layout) {
  const ActivationDims d = ActivationDimsOf(shape, layout);
  if (layout == Layout::kNHWC) return {d.n * d.h * d.w, d.c, 1};
  return {d.n, d.c, d.h * d.w};
}

// channel_bias_add ------------------------------------------------------------------------------

absl::StatusOr<std::vector<TensorSpec>> InferChannelBiasAdd(const Attrs& attrs,
                                                            absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  RETURN_IF_ERROR(CheckRank(in[0], 4, "x"));
  RETURN_IF_ERROR(CheckRank(in[1], 1, "bias"));
  RETURN_IF_ERROR(CheckFloat(in[0], "x"));
  ASSIGN_OR_RETURN(const Layout layout, LayoutAttr(attrs));
  const int64_t channels = ActivationDimsOf(in[0].shape, layout).c;
  if (in[1].dtype != in[0].dtype || in[1].shape.dim(0) != channels) {
    return absl::InvalidArgumentError(
        absl::StrCat("bias ", in[1].ToString(), " must hold one value per channel of x ",
                     in[0].ToString(), " (", LayoutName(layout), ", C = ", channels, ")"));
  }
  return std::vector<TensorSpec>{in[0]};
}

absl::StatusOr<std::vector<Value>> GradChannelBiasAdd(Graph& g, const Node& node,
                                                      absl::Span<const Value> dout,
                                                      const std::vector<bool>& needs) {
  std::vector<Value> grads(2);
  if (needs[0]) grads[0] = dout[0];
  if (needs[1]) {
    ASSIGN_OR_RETURN(const Layout layout, LayoutAttr(node.attrs));
    Attrs attrs = {{"layout", std::string(LayoutName(layout))}};
    // A parameter's bias gradient runs on the weight-gradient lane (see GradBiasAdd).
    if (IsParameterOrItsCast(g, node.inputs[1])) attrs["role"] = std::string("wgrad");
    ASSIGN_OR_RETURN(grads[1], g.AddOp1(ChannelSumOp(), absl::StrCat(node.name, ".bias_grad"),
                                        {dout[0]}, std::move(attrs)));
  }
  return grads;
}

absl::Status CpuChannelBiasAdd(const Node& node, absl::Span<ir::HostTensor* const> in,
                               absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(const Layout layout, LayoutAttr(node.attrs));
  const ChannelSplit split = SplitOf(in[0]->spec().shape, layout);
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto x = in[0]->data<T>(), b = in[1]->data<T>();
    auto y = out[0]->data<T>();
    for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
      y[i] = x[i] + b[(i / split.inner) % split.channels];
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerChannelBiasAdd(const LoweringContext& ctx,
                                                               const Node& node) {
  const TensorSpec& x = ctx.input_specs[0];
  ASSIGN_OR_RETURN(const DType dtype, GpuElementType(node, ctx.input_specs));
  ASSIGN_OR_RETURN(const Layout layout, LayoutAttr(node.attrs));
  const ChannelSplit split = SplitOf(x.shape, layout);
  const int64_t n = x.NumElements();
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.outputs[0]);
  args.Add(static_cast<long long>(n))
      .Add(static_cast<long long>(split.channels))
      .Add(static_cast<long long>(split.inner));
  return NvrtcKernel::Create(ctx, node.name, codegen::ChannelBiasAdd(dtype),
                             GridFor(n, 256, *ctx.device), dim3(256), 0, std::move(args));
}

// channel_sum -----------------------------------------------------------------------------------

absl::StatusOr<std::vector<TensorSpec>> InferChannelSum(const Attrs& attrs,
                                                        absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  RETURN_IF_ERROR(CheckRank(in[0], 4, "dy"));
  RETURN_IF_ERROR(CheckFloat(in[0], "dy"));
  ASSIGN_OR_RETURN(const Layout layout, LayoutAttr(attrs));
  return std::vector<TensorSpec>{{Shape{ActivationDimsOf(in[0].shape, layout).c}, in[0].dtype}};
}

absl::Status CpuChannelSum(const Node& node, absl::Span<ir::HostTensor* const> in,
                           absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(const Layout layout, LayoutAttr(node.attrs));
  const ChannelSplit split = SplitOf(in[0]->spec().shape, layout);
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto dy = in[0]->data<T>();
    auto db = out[0]->data<T>();
    std::vector<double> sum(split.channels, 0.0);
    for (int64_t i = 0; i < static_cast<int64_t>(dy.size()); ++i) {
      sum[(i / split.inner) % split.channels] += dy[i];
    }
    for (int64_t c = 0; c < split.channels; ++c) db[c] = static_cast<T>(sum[c]);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerChannelSum(const LoweringContext& ctx,
                                                           const Node& node) {
  const TensorSpec& dy = ctx.input_specs[0];
  // The output has dy's type (the shape rule): the kernels read and write one element type.
  ASSIGN_OR_RETURN(const DType dtype, GpuElementType(node, ctx.input_specs));
  ASSIGN_OR_RETURN(const Layout layout, LayoutAttr(node.attrs));
  const ChannelSplit split = SplitOf(dy.shape, layout);
  KernelArgs args;
  if (layout == Layout::kNHWC) {
    // Channels last is a row-major [N·H·W, C] matrix: the bias gradient of a linear layer.
    args.Add(ctx.inputs[0]);
    ASSIGN_OR_RETURN(
        ColumnSumLaunches launches,
        LowerColumnSums(ctx, node.name, codegen::ColumnSum(dtype), dtype, std::move(args),
                        {ctx.inputs[0]}, ctx.outputs[0], split.outer, split.channels));
    return AsKernel(std::move(launches));
  }
  args.Add(ctx.inputs[0]).Add(ctx.outputs[0]);
  args.Add(static_cast<long long>(split.outer))
      .Add(static_cast<long long>(split.channels))
      .Add(static_cast<long long>(split.inner));
  return NvrtcKernel::Create(ctx, node.name, codegen::ChannelSum(dtype),
                             dim3(static_cast<unsigned>(split.channels)),
                             dim3(codegen::kChannelSumBlock), 0, std::move(args));
}

}  // namespace

const ir::OpDef& ChannelBiasAddOp() {
  static const ir::OpDef op{.name = "channel_bias_add",
                            .kind = ir::OpKind::kPointwise,
                            .infer = InferChannelBiasAdd,
                            .grad = GradChannelBiasAdd,
                            .cpu = CpuChannelBiasAdd,
                            .lower = LowerChannelBiasAdd,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& ChannelSumOp() {
  static const ir::OpDef op{.name = "channel_sum",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferChannelSum,
                            .cpu = CpuChannelSum,
                            .lower = LowerChannelSum,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
