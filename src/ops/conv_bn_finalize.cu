// The finalize kernel of conv_bn_finalize.h. Compiled by nvcc apart from the library's C++ (see
// CMakeLists.txt), so it includes nothing of Abseil.
#include "src/ops/conv_bn_finalize.h"

namespace reprise::ops {
namespace {

constexpr int kThreads = 128;

// One thread per channel. The sums arrive in float (cuDNN's epilogue accumulates them so); the
// variance is formed in double, as our own batch norm's finalize forms it from its double sums.
__global__ void __launch_bounds__(kThreads) BatchNormFinalizeKernel(BatchNormFinalizeArgs a) {
  const int64_t c = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  if (c >= a.channels) return;
  const double m = static_cast<double>(a.rows);
  const double mean = static_cast<double>(a.sum[c]) / m;
  const double var = fmax(static_cast<double>(a.sq_sum[c]) / m - mean * mean, 0.0);
  a.saved_mean[c] = static_cast<float>(mean);
  a.saved_invstd[c] = static_cast<float>(1.0 / sqrt(var + a.epsilon));
  a.running_mean[c] =
      static_cast<float>((1.0 - a.momentum) * a.running_mean[c] + a.momentum * mean);
  a.running_var[c] =
      static_cast<float>((1.0 - a.momentum) * a.running_var[c] + a.momentum * var * m / (m - 1.0));
}

}  // namespace

cudaError_t LaunchBatchNormFinalize(const BatchNormFinalizeArgs& args, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((args.channels + kThreads - 1) / kThreads);
  BatchNormFinalizeKernel<<<blocks, kThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace reprise::ops
