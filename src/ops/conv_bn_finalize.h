// Batch norm's per-channel finalize from sums that a convolution's epilogue produced (cuDNN's
// genstats, src/runtime/cudnn_conv_graph.h): the saved statistics batch_norm_train defines
// (src/ops/batch_norm.h) and PyTorch's running update. A CUDA kernel compiled by nvcc into
// reprise_kernels (CMakeLists.txt), so this header includes nothing of Abseil.
#ifndef REPRISE_SRC_OPS_CONV_BN_FINALIZE_H_
#define REPRISE_SRC_OPS_CONV_BN_FINALIZE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace reprise::ops {

// sum and sq_sum: float32 [channels], Σ y and Σ y² over `rows` = N·H·W values per channel.
//   mean = sum / rows, var = max(sq_sum / rows - mean², 0) (biased; in double),
//   saved_mean = mean, saved_invstd = 1 / sqrt(var + epsilon),
//   running_mean = (1 - momentum)·running_mean + momentum·mean,
//   running_var = (1 - momentum)·running_var + momentum·var·rows / (rows - 1).
struct BatchNormFinalizeArgs {
  const float* sum;
  const float* sq_sum;
  float* saved_mean;
  float* saved_invstd;
  float* running_mean;
  float* running_var;
  int64_t channels = 0;
  int64_t rows = 0;  // At least 2.
  double epsilon = 1e-5, momentum = 0.1;
};

// Enqueues the kernel on `stream`; the launch's own error code.
cudaError_t LaunchBatchNormFinalize(const BatchNormFinalizeArgs& args, cudaStream_t stream);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_CONV_BN_FINALIZE_H_
