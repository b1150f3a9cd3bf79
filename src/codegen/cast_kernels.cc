#include "src/codegen/cast_kernels.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/element_type.h"
#include "src/codegen/optimizer_kernels.h"

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

GeneratedKernel CastMulti(int capacity, DType to, bool refresh) {
  const std::string name =
      ElementKernelName(refresh ? "reprise_refresh_copies" : "reprise_cast_multi", to);
  // The refresh form returns at once unless *stale: the copies are current.
  const std::string stale_parameter = refresh ? ", const int* __restrict__ stale" : "";
  const std::string skip_if_current = refresh ? "  if (*stale == 0) return;\n" : "";
  return {name, absl::StrCat(ElementTypeSource(to), "#define REPRISE_CAPACITY ", capacity,
                             "\n#define REPRISE_CHUNK ", kNormChunk, "\n#define REPRISE_BLOCK ",
                             kNormBlock, "\n#define REPRISE_BLOCKS_PER_SM ", kNormBlocksPerSm, R"(
struct CastTable {
  const float* x[REPRISE_CAPACITY];
  elem_t* y[REPRISE_CAPACITY];
  long long n[REPRISE_CAPACITY];
  int first[REPRISE_CAPACITY + 1];
};
// Each element rounded by FromFloat, as the single cast does; four at a time (one 16-byte load,
// one 8-byte store) where both tensors are aligned.
extern "C" __global__ void __launch_bounds__(REPRISE_BLOCK, REPRISE_BLOCKS_PER_SM) )",
                             name, "(CastTable table, int count", stale_parameter, ") {\n",
                             skip_if_current, R"(  int t = 0;
  for (int c = blockIdx.x; c < table.first[count]; c += gridDim.x) {
    while (c >= table.first[t + 1]) ++t;
    const long long start = (long long)(c - table.first[t]) * REPRISE_CHUNK;
    const int n = (int)min((long long)REPRISE_CHUNK, table.n[t] - start);
    const float* __restrict__ x = table.x[t] + start;
    elem_t* __restrict__ y = table.y[t] + start;
    const bool aligned =
        (((unsigned long long)table.x[t] & 15ull) | ((unsigned long long)table.y[t] & 7ull)) == 0ull;
    int done = 0;
    if (aligned && sizeof(elem_t) == 2) {
      done = n / 4 * 4;
      for (int q = threadIdx.x; q < n / 4; q += REPRISE_BLOCK) {
        const float4 v = ((const float4*)x)[q];
        const unsigned int lo = (unsigned int)FromFloat(v.x) | ((unsigned int)FromFloat(v.y) << 16);
        const unsigned int hi = (unsigned int)FromFloat(v.z) | ((unsigned int)FromFloat(v.w) << 16);
        ((uint2*)y)[q] = make_uint2(lo, hi);
      }
    }
    for (int i = done + threadIdx.x; i < n; i += REPRISE_BLOCK) y[i] = FromFloat(x[i]);
  }
}
)")};
}

}  // namespace reprise::codegen
