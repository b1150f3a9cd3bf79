#include "src/codegen/cast_kernels.h"

namespace reprise::codegen {

GeneratedKernel Cast() {
  return {"reprise_cast", R"(
__device__ __forceinline__ float Load(const void* x, long long i, int type) {
  if (type == 0) return static_cast<const float*>(x)[i];
  const unsigned short bits = static_cast<const unsigned short*>(x)[i];
  if (type == 1) return __uint_as_float(static_cast<unsigned int>(bits) << 16);
  float value;
  asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(bits));
  return value;
}
__device__ __forceinline__ void Store(void* y, long long i, int type, float value) {
  if (type == 0) {
    static_cast<float*>(y)[i] = value;
    return;
  }
  unsigned short bits;
  if (type == 1) {
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  } else {
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  }
  static_cast<unsigned short*>(y)[i] = bits;
}
extern "C" __global__ void reprise_cast(const void* __restrict__ x, void* __restrict__ y,
                                        long long n, int from, int to) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    Store(y, i, to, Load(x, i, from));
  }
}
)"};
}

}  // namespace reprise::codegen
