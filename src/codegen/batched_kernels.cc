#include "src/codegen/batched_kernels.h"

#include <string>

namespace reprise::codegen {

GeneratedKernel BatchedBiasAdd() {
  return {"reprise_batched_bias_add", R"(
extern "C" __global__ void reprise_batched_bias_add(const float* __restrict__ x,
                                                    const float* __restrict__ b,
                                                    float* __restrict__ y, long long n,
                                                    long long rows, long long cols) {
  const long long per_model = rows * cols;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    y[i] = x[i] + b[(i / per_model) * cols + i % cols];
  }
}
)"};
}

GeneratedKernel BatchedColumnSum() {
  // ColumnSum()'s 32 columns by 32 row slices per block, with blockIdx.y the model.
  return {"reprise_batched_column_sum", R"(
extern "C" __global__ void reprise_batched_column_sum(const float* __restrict__ dy,
                                                      float* __restrict__ db, long long rows,
                                                      long long cols) {
  __shared__ float partial[32][33];
  const float* dyk = dy + blockIdx.y * rows * cols;
  float* dbk = db + blockIdx.y * cols;
  const long long c = blockIdx.x * 32LL + threadIdx.x;
  float sum = 0.0f;
  if (c < cols) {
    for (long long r = threadIdx.y; r < rows; r += 32) sum += dyk[r * cols + c];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.0f;
    for (int s = 0; s < 32; ++s) total += partial[s][threadIdx.x];
    dbk[c] = total;
  }
}
)"};
}

GeneratedKernel BatchedReluGradColumnSum() {
  // BatchedColumnSum()'s grid and order, summing the ReLU's gradient as it is stored.
  return {"reprise_batched_relu_grad_column_sum", R"(
extern "C" __global__ void reprise_batched_relu_grad_column_sum(const float* __restrict__ dy,
                                                                const float* __restrict__ y,
                                                                float* __restrict__ dx,
                                                                float* __restrict__ db,
                                                                long long rows, long long cols) {
  __shared__ float partial[32][33];
  const long long base = blockIdx.y * rows * cols;
  const long long c = blockIdx.x * 32LL + threadIdx.x;
  float sum = 0.0f;
  if (c < cols) {
    for (long long r = threadIdx.y; r < rows; r += 32) {
      const long long i = base + r * cols + c;
      const float v = y[i] > 0.0f ? dy[i] : 0.0f;
      dx[i] = v;
      sum += v;
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.0f;
    for (int s = 0; s < 32; ++s) total += partial[s][threadIdx.x];
    db[blockIdx.y * cols + c] = total;
  }
}
)"};
}

GeneratedKernel ModelSum() {
  return {"reprise_model_sum", R"(
extern "C" __global__ void reprise_model_sum(const float* __restrict__ x, float* __restrict__ out,
                                             int models) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  float total = 0.0f;
  for (int k = 0; k < models; ++k) total += x[k];
  out[0] = total;
}
)"};
}

GeneratedKernel ModelBroadcast() {
  return {"reprise_model_broadcast", R"(
extern "C" __global__ void reprise_model_broadcast(const float* __restrict__ x,
                                                   float* __restrict__ out, int models) {
  const float v = x[0];
  for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < models; k += gridDim.x * blockDim.x) {
    out[k] = v;
  }
}
)"};
}

GeneratedKernel ModelTile() {
  return {"reprise_model_tile", R"(
extern "C" __global__ void reprise_model_tile(const unsigned* __restrict__ x,
                                              unsigned* __restrict__ y, long long per_model,
                                              long long total) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    y[i] = x[i % per_model];
  }
}
)"};
}

std::vector<GeneratedKernel> BatchedKernels() {
  return {BatchedBiasAdd(), BatchedColumnSum(), BatchedReluGradColumnSum(),
          ModelSum(),       ModelBroadcast(),   ModelTile()};
}

}  // namespace reprise::codegen
