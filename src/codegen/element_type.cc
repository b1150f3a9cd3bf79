#include "src/codegen/element_type.h"

#include "absl/strings/str_cat.h"

namespace reprise::codegen {

bool IsKernelElementType(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kBFloat16;
}

const std::string& ElementTypeSource(DType dtype) {
  static const std::string* const kFloat32 = new std::string(R"(
typedef float elem_t;
__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float FromFloat(float v) { return v; }
__device__ __forceinline__ float4 Load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ void Store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
)");
  // A bfloat16 is the top half of a float32: widening is a shift. Two of them pack into 32 bits,
  // the first (lower address) in the low half.
  static const std::string* const kBFloat16 = new std::string(R"(
typedef unsigned short elem_t;
__device__ __forceinline__ float ToFloat(unsigned short v) {
  return __uint_as_float(static_cast<unsigned int>(v) << 16);
}
__device__ __forceinline__ unsigned short FromFloat(float v) {
  unsigned short bits;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(v));
  return bits;
}
__device__ __forceinline__ unsigned int PackTwo(float first, float second) {
  unsigned int bits;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(bits) : "f"(second), "f"(first));
  return bits;
}
__device__ __forceinline__ float4 Load4(const unsigned short* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                     __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}
__device__ __forceinline__ void Store4(unsigned short* p, float4 v) {
  *reinterpret_cast<uint2*>(p) = make_uint2(PackTwo(v.x, v.y), PackTwo(v.z, v.w));
}
)");
  return dtype == DType::kBFloat16 ? *kBFloat16 : *kFloat32;
}

std::string ElementKernelName(absl::string_view base, DType dtype) {
  return dtype == DType::kBFloat16 ? absl::StrCat(base, "_bf16") : std::string(base);
}

}  // namespace reprise::codegen
