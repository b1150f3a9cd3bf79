// Channels-last batch normalization on our own NVRTC kernels (src/codegen/batch_norm_kernels.h)
// rather than cuDNN's legacy NHWC batch norm, which runs ~100x below memory bandwidth. x is
// [rows = N·H·W, channels] row-major, float32. Each lowering is three launches (partial sums,
// per-channel finalize, pointwise apply) with the lane's workspace as scratch; results are
// deterministic and depend on the shapes only, not on the GPU.
//
// The optional residual, ReLU and masked gradient let a fuse pass fold
// relu(batch_norm(x) + residual) and its backward into these kernels. No output may overlap an
// input (the kernels read through __restrict__ pointers), except running statistics, which are
// updated in place.
#ifndef REPRISE_SRC_OPS_BATCH_NORM_NHWC_H_
#define REPRISE_SRC_OPS_BATCH_NORM_NHWC_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/ops/gpu_kernel.h"

namespace reprise::ops {

// Device addresses and sizes of one training forward. Per-channel arrays hold `channels` floats.
// y = act((x - mean)·invstd·gamma + beta + residual), act = max(·, 0) when relu; saved_mean and
// saved_invstd = 1/sqrt(biased var + epsilon) as batch_norm_train (src/ops/batch_norm.h) defines
// them; running_mean and running_var are updated in place (unbiased variance).
struct NhwcBatchNormForward {
  const float* x;
  const float* gamma;
  const float* beta;
  float* running_mean;
  float* running_var;
  const float* residual = nullptr;  // Added before the activation when set.
  float* y;
  float* saved_mean;
  float* saved_invstd;
  int64_t rows = 0, channels = 0;
  double epsilon = 1e-5, momentum = 0.1;
  bool relu = false;
};

// The three launches of one forward. Errors name `node_name`: kInvalidArgument for rows < 2,
// channels < 1 or a missing address; kResourceExhausted when the scratch does not fit in
// ctx.workspace_bytes; kFailedPrecondition without a kernel store; compile errors as the kernel
// store reports them.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerNhwcBatchNormTrain(
    const LoweringContext& ctx, const std::string& node_name, const NhwcBatchNormForward& args);

// Device addresses and sizes of one backward, batch_norm_grad's with g in place of dy:
// g = act_out ? (act_out > 0 ? dy : 0) : dy, dbeta = Σg, dgamma = Σg·x̂,
// dx = gamma·invstd·(g - (dbeta + x̂·dgamma)/rows).
struct NhwcBatchNormBackward {
  const float* dy;
  const float* act_out = nullptr;  // ReLU output: gradient masked by act_out > 0.
  const float* x;
  const float* gamma;
  const float* saved_mean;
  const float* saved_invstd;
  float* dx;
  float* dgamma;
  float* dbeta;
  float* masked_dy = nullptr;  // When set, receives the masked gradient g.
  int64_t rows = 0, channels = 0;
};

// The three launches of one backward; errors as LowerNhwcBatchNormTrain's (rows >= 1 suffices).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerNhwcBatchNormGrad(
    const LoweringContext& ctx, const std::string& node_name, const NhwcBatchNormBackward& args);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_BATCH_NORM_NHWC_H_
