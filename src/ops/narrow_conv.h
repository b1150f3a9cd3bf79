// The GPU lowering of conv2d and conv2d_wgrad to reprise's own narrow-convolution kernels
// (src/codegen/narrow_conv_kernels.h) for inputs of at most 4 channels, where cuDNN is slow.
// conv.cc asks here first and lowers to cuDNN where these do not apply.
#ifndef REPRISE_SRC_OPS_NARROW_CONV_H_
#define REPRISE_SRC_OPS_NARROW_CONV_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/cudnn_conv.h"

namespace reprise::ops {

// OK where a forward (or weight gradient) of `shape` runs as a narrow convolution: NHWC, groups 1,
// dilation 1, float32 with TF32 allowed or 16-bit data, and codegen::NarrowConvSupports.
// Else kUnimplemented saying why (the convolution then runs on cuDNN).
absl::Status NarrowConvApplies(const runtime::ConvShape& shape, bool allow_tf32);

// The launches of a narrow forward (kForward: one kernel) or weight gradient (kBackwardFilter: the
// per-block partials into the lane's workspace, then their sum), for a node that
// NarrowConvApplies to. kResourceExhausted where the partials do not fit the workspace.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerNarrowConv(const LoweringContext& ctx,
                                                           const std::string& node_name,
                                                           runtime::ConvKind kind,
                                                           const runtime::ConvShape& shape);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_NARROW_CONV_H_
