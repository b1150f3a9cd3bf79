#include "src/codegen/gradient_loads.h"

#include <string>

namespace reprise::codegen {

std::string GradientType(DType gradient) {
  switch (gradient) {
    case DType::kBFloat16:
      return "Bf16Grad";
    case DType::kFloat16:
      return "F16Grad";
    default:
      return "float";
  }
}

unsigned char GradientKind(DType gradient) {
  return gradient == DType::kBFloat16 ? 1 : gradient == DType::kFloat16 ? 2 : 0;
}

std::string GradientLoads() {
  return R"(
// Gradients the updates read: float32, or bfloat16 / float16 widened exactly on load. Each 16-bit
// type is a struct of its bits, so that the overloads below tell them apart.
struct Bf16Grad { unsigned short bits; };
struct F16Grad { unsigned short bits; };
__device__ __forceinline__ float Bf16Value(unsigned int bits) { return __uint_as_float(bits << 16); }
__device__ __forceinline__ float F16Value(unsigned int bits) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)bits));
  return f;
}
__device__ __forceinline__ float GradValue(const float* g, long long i) { return g[i]; }
__device__ __forceinline__ float GradValue(const Bf16Grad* g, long long i) {
  return Bf16Value(g[i].bits);
}
__device__ __forceinline__ float GradValue(const F16Grad* g, long long i) {
  return F16Value(g[i].bits);
}
// Elements 4q .. 4q + 3, one aligned load (GradAligned).
__device__ __forceinline__ float4 GradQuad(const float* g, long long q) {
  return ((const float4*)g)[q];
}
__device__ __forceinline__ float4 GradQuad(const Bf16Grad* g, long long q) {
  const uint2 u = ((const uint2*)g)[q];
  return make_float4(Bf16Value(u.x & 0xffffu), Bf16Value(u.x >> 16), Bf16Value(u.y & 0xffffu),
                     Bf16Value(u.y >> 16));
}
__device__ __forceinline__ float4 GradQuad(const F16Grad* g, long long q) {
  const uint2 u = ((const uint2*)g)[q];
  return make_float4(F16Value(u.x & 0xffffu), F16Value(u.x >> 16), F16Value(u.y & 0xffffu),
                     F16Value(u.y >> 16));
}
__device__ __forceinline__ bool GradAligned(const float* g) {
  return ((unsigned long long)g & 15ull) == 0ull;
}
__device__ __forceinline__ bool GradAligned(const Bf16Grad* g) {
  return ((unsigned long long)g & 7ull) == 0ull;
}
__device__ __forceinline__ bool GradAligned(const F16Grad* g) {
  return ((unsigned long long)g & 7ull) == 0ull;
}
)";
}

}  // namespace reprise::codegen
