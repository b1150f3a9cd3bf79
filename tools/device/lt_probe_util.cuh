// What the standalone cuBLASLt probes (tools/device/*_probe.cu) share: LT(call), which prints
// where a cuBLASLt call failed and exits, and FillBf16, which fills bfloat16 values in
// [-scale, scale) from a hash of each index and a seed (the same values on every run).
#ifndef REPRISE_TOOLS_DEVICE_LT_PROBE_UTIL_CUH_
#define REPRISE_TOOLS_DEVICE_LT_PROBE_UTIL_CUH_

#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define LT(x)                                                                          \
  do {                                                                                 \
    cublasStatus_t st_ = (x);                                                          \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                \
      printf("%s:%d cublasLt status %d\n", __FILE__, __LINE__, static_cast<int>(st_)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

__global__ void FillBf16(__nv_bfloat16* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u + seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = __float2bfloat16(scale * (static_cast<float>(x & 0xffff) / 32768.0f - 1.0f));
  }
}

#endif  // REPRISE_TOOLS_DEVICE_LT_PROBE_UTIL_CUH_
