#include "src/ops/narrow_conv.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/codegen/narrow_conv_kernels.h"
#include "src/ops/partial_sum_wgrad.h"

namespace reprise::ops {
namespace {

using runtime::ConvKind;

codegen::NarrowConvShape NarrowShapeOf(const runtime::ConvShape& s) {
  return {.n = s.n,
          .h = s.h,
          .w = s.w,
          .c = s.c,
          .k = s.k,
          .r = s.r,
          .s = s.s,
          .stride_h = s.stride_h,
          .stride_w = s.stride_w,
          .pad_h = s.pad_h,
          .pad_w = s.pad_w,
          .p = s.p,
          .q = s.q,
          .dtype = s.dtype};
}

// Blocks of the forward and of the weight gradient's first kernel: two per multiprocessor (their
// launch bounds), looping over the tiles.
int BlocksFor(int tiles, const runtime::DeviceInfo& device) {
  return std::max(1, std::min(tiles, 2 * device.sm_count));
}

}  // namespace

absl::Status NarrowConvApplies(const runtime::ConvShape& shape, bool allow_tf32) {
  auto no = [](auto... why) { return absl::UnimplementedError(absl::StrCat(why...)); };
  if (shape.layout != Layout::kNHWC) return no("narrow convolutions are NHWC");
  if (shape.groups != 1) return no("narrow convolutions have one group");
  if (shape.dilation_h != 1 || shape.dilation_w != 1) return no("narrow convolutions are dense");
  if (shape.dtype == DType::kFloat32 && !allow_tf32) {
    return no("float32 narrow convolutions run on TF32 tensor cores, and TF32 is not allowed");
  }
  return codegen::NarrowConvSupports(NarrowShapeOf(shape));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerNarrowConv(const LoweringContext& ctx,
                                                           const std::string& node_name,
                                                           ConvKind kind,
                                                           const runtime::ConvShape& shape) {
  const codegen::NarrowConvShape s = NarrowShapeOf(shape);
  if (ctx.device == nullptr || ctx.kernels == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("node '", node_name, "': a narrow convolution needs a device to lower"));
  }
  const dim3 block(codegen::kNarrowConvThreads);
  if (kind == ConvKind::kForward) {
    const codegen::NarrowConvLaunch launch = codegen::NarrowConvForwardLaunch(s);
    KernelArgs args;
    args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.outputs[0]);
    return NvrtcKernel::Create(ctx, node_name, codegen::NarrowConvForward(s),
                               dim3(BlocksFor(launch.tiles, *ctx.device)), block,
                               static_cast<unsigned>(launch.shared_bytes), std::move(args));
  }
  if (kind != ConvKind::kBackwardFilter) {
    return absl::InternalError(absl::StrCat("node '", node_name,
                                            "': narrow convolutions lower forwards and weight "
                                            "gradients only"));
  }
  const codegen::NarrowConvLaunch launch = codegen::NarrowConvWgradLaunch(s);
  const int blocks = BlocksFor(launch.tiles, *ctx.device);
  const int64_t elements = s.k * s.c * s.r * s.s;
  return LowerPartialSumWgrad(
      ctx, node_name, "a narrow weight gradient",
      sizeof(float) * static_cast<size_t>(codegen::NarrowConvWgradPartialFloats(s, blocks)),
      {codegen::NarrowConvWgrad(s), dim3(blocks), block,
       static_cast<unsigned>(launch.shared_bytes)},
      {codegen::NarrowConvWgradSum(s, blocks), dim3(static_cast<unsigned>((elements + 31) / 32)),
       dim3(32 * codegen::kNarrowConvSumSlices)});
}

}  // namespace reprise::ops
