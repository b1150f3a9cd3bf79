// The add-into kernel (add_into_kernel.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "src/runtime/add_into_kernel.h"

namespace reprise::runtime {
namespace {

constexpr int kThreads = 256;

__device__ float ToFloat(float x) { return x; }
__device__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ float ToFloat(__half x) { return __half2float(x); }
template <typename T>
__device__ T FromFloat(float x);
template <>
__device__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}

template <typename T>
__device__ void AddInto(T* out, const T* acc, uint64_t count) {
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride) {
    out[i] = FromFloat<T>(ToFloat(out[i]) + ToFloat(acc[i]));
  }
}

}  // namespace

// Named as our other kernels are ("reprise_..."), which graph dumps and tests tell from a
// library's by that prefix.
extern "C" __global__ void reprise_add_into_f32(float* out, const float* acc, uint64_t count) {
  AddInto(out, acc, count);
}
extern "C" __global__ void reprise_add_into_bf16(__nv_bfloat16* out, const __nv_bfloat16* acc,
                                                 uint64_t count) {
  AddInto(out, acc, count);
}
extern "C" __global__ void reprise_add_into_f16(__half* out, const __half* acc, uint64_t count) {
  AddInto(out, acc, count);
}

namespace {

template <typename T>
cudaError_t Launch(void (*kernel)(T*, const T*, uint64_t), void* out, const void* acc,
                   uint64_t count, cudaStream_t stream) {
  // A grid-stride loop over at most 8 blocks a multiprocessor of an H100 or H200 (132 of them):
  // the sums it serves are a few MB, so more blocks would only add waves.
  const uint64_t blocks = std::clamp<uint64_t>((count + kThreads - 1) / kThreads, 1, 8 * 132);
  kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<T*>(out),
                                                                 static_cast<const T*>(acc), count);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchAddInto(void* out, const void* acc, uint64_t count, AddIntoType type,
                          cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (type) {
    case AddIntoType::kFloat32:
      return Launch(reprise_add_into_f32, out, acc, count, stream);
    case AddIntoType::kBFloat16:
      return Launch(reprise_add_into_bf16, out, acc, count, stream);
    case AddIntoType::kFloat16:
      return Launch(reprise_add_into_f16, out, acc, count, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace reprise::runtime
