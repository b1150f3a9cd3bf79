// The GPU lowering of conv2d_wgrad to reprise's own 3x3 weight-gradient kernel
// (src/codegen/wgrad3x3_kernels.h): wide NHWC images, float32 on TF32 tensor cores. With
// TrainOptions::kernels.own_weight_gradients, conv.cc asks here first and lowers to cuDNN where it
// does not apply.
#ifndef REPRISE_SRC_OPS_WGRAD3X3_H_
#define REPRISE_SRC_OPS_WGRAD3X3_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/cudnn_conv.h"

namespace reprise::ops {

// OK where the weight gradient of `shape` runs as our kernel: NHWC, float32 with TF32 allowed,
// groups 1, dilation 1, a 3x3 filter with pad 1 and stride 1, and codegen::Wgrad3x3Supports.
// Else kUnimplemented saying why (the weight gradient then runs on cuDNN).
absl::Status Wgrad3x3Applies(const runtime::ConvShape& shape, bool allow_tf32);

// The two launches (the blocks' partials into the lane's workspace, then their sum into dw) for
// a conv2d_wgrad node that Wgrad3x3Applies to. kResourceExhausted where the partials do not fit
// the lane's workspace.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerWgrad3x3(const LoweringContext& ctx,
                                                         const std::string& node_name,
                                                         const runtime::ConvShape& shape);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_WGRAD3X3_H_
