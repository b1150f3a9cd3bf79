#include "src/ops/wgrad3x3.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/codegen/wgrad3x3_kernels.h"
#include "src/ops/partial_sum_wgrad.h"

namespace reprise::ops {
namespace {

codegen::Wgrad3x3Shape ShapeOf(const runtime::ConvShape& s) {
  return {.n = s.n, .h = s.h, .w = s.w, .c = s.c, .k = s.k};
}

}  // namespace

absl::Status Wgrad3x3Applies(const runtime::ConvShape& shape, bool allow_tf32) {
  auto no = [](auto... why) { return absl::UnimplementedError(absl::StrCat(why...)); };
  if (shape.layout != Layout::kNHWC) return no("our 3x3 weight gradients are NHWC");
  if (shape.dtype != DType::kFloat32 || !allow_tf32) {
    return no("our 3x3 weight gradients run float32 on TF32 tensor cores");
  }
  if (shape.groups != 1 || shape.dilation_h != 1 || shape.dilation_w != 1) {
    return no("our 3x3 weight gradients are dense, with one group");
  }
  if (shape.r != 3 || shape.s != 3 || shape.pad_h != 1 || shape.pad_w != 1 || shape.stride_h != 1 ||
      shape.stride_w != 1) {
    return no("our weight gradients are 3x3 with pad 1 and stride 1");
  }
  return codegen::Wgrad3x3Supports(ShapeOf(shape));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerWgrad3x3(const LoweringContext& ctx,
                                                         const std::string& node_name,
                                                         const runtime::ConvShape& shape) {
  if (ctx.device == nullptr || ctx.kernels == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("node '", node_name, "': a 3x3 weight gradient needs a device to lower"));
  }
  const codegen::Wgrad3x3Shape s = ShapeOf(shape);
  const codegen::Wgrad3x3Launch launch = codegen::Wgrad3x3LaunchFor(s);
  const int64_t elements = s.k * 9 * s.c;
  return LowerPartialSumWgrad(
      ctx, node_name, "a 3x3 weight gradient",
      sizeof(float) * static_cast<size_t>(launch.partial_floats),
      {codegen::Wgrad3x3Tf32(s), dim3(launch.blocks), dim3(codegen::kWgrad3x3Threads),
       static_cast<unsigned>(launch.shared_bytes)},
      {codegen::Wgrad3x3Sum(s),
       dim3(static_cast<unsigned>(
           std::min<int64_t>((elements + 255) / 256, 8 * ctx.device->sm_count))),
       dim3(256)});
}

}  // namespace reprise::ops
