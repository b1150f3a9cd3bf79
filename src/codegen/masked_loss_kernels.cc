#include "src/codegen/masked_loss_kernels.h"

#include "absl/strings/str_cat.h"

namespace reprise::codegen {
namespace {

// Row max and sum of exp(z - max), by one thread; labels outside [0, cols) mark padded rows.
constexpr char kRowHelpers[] = R"(
__device__ bool Counted(int label, int cols) { return label >= 0 && label < cols; }
__device__ void RowMaxSum(const float* zr, int cols, float& m, float& s) {
  m = zr[0];
  for (int c = 1; c < cols; ++c) m = fmaxf(m, zr[c]);
  s = 0.f;
  for (int c = 0; c < cols; ++c) s += expf(zr[c] - m);
}
)";

}  // namespace

GeneratedKernel MaskedSoftmaxCrossEntropy() {
  return {"reprise_masked_xent", absl::StrCat(kRowHelpers, R"(
extern "C" __global__ void reprise_masked_xent(const float* __restrict__ z,
                                               const int* __restrict__ labels,
                                               float* __restrict__ loss, int rows, int cols) {
  __shared__ float sums[)",
                                              kMaskedLossThreads, R"(];
  __shared__ int counts[)",
                                              kMaskedLossThreads, R"(];
  float sum = 0.f;
  int count = 0;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    const int label = labels[r];
    if (!Counted(label, cols)) continue;
    const float* zr = z + (long long)r * cols;
    float m, s;
    RowMaxSum(zr, cols, m, s);
    sum += logf(s) + m - zr[label];
    ++count;
  }
  sums[threadIdx.x] = sum;
  counts[threadIdx.x] = count;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      sums[threadIdx.x] += sums[threadIdx.x + half];
      counts[threadIdx.x] += counts[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[0] = sums[0] / (float)max(counts[0], 1);
}
)")};
}

GeneratedKernel MaskedSoftmaxCrossEntropyGrad() {
  return {"reprise_masked_xent_grad", absl::StrCat(kRowHelpers, R"(
extern "C" __global__ void reprise_masked_xent_grad(const float* __restrict__ z,
                                                    const int* __restrict__ labels,
                                                    const float* __restrict__ dloss,
                                                    float* __restrict__ dz, int rows, int cols) {
  __shared__ int counts[)",
                                                   kMaskedLossThreads, R"(];
  __shared__ float row_max, row_sum;
  const int r = blockIdx.x;
  int count = 0;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) count += Counted(labels[i], cols) ? 1 : 0;
  counts[threadIdx.x] = count;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) counts[threadIdx.x] += counts[threadIdx.x + half];
    __syncthreads();
  }
  const float* zr = z + (long long)r * cols;
  float* dzr = dz + (long long)r * cols;
  const int label = labels[r];
  if (!Counted(label, cols)) {
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dzr[c] = 0.f;
    return;
  }
  if (threadIdx.x == 0) RowMaxSum(zr, cols, row_max, row_sum);
  __syncthreads();
  const float scale = dloss[0] / (float)counts[0];
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    dzr[c] = scale * (expf(zr[c] - row_max) / row_sum - (c == label ? 1.f : 0.f));
  }
}
)")};
}

}  // namespace reprise::codegen
