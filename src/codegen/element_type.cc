#include "src/codegen/element_type.h"

#include "absl/strings/str_cat.h"

namespace reprise::codegen {

bool IsKernelElementType(DType dtype) { return dtype == DType::kFloat32 || IsLowPrecision(dtype); }

// tanh for pointwise expressions (GELU's): exact for float32; for 16-bit elements the hardware's
// approximation (relative error under 2^-10.9, a quarter of a bfloat16 rounding), one instruction
// instead of tanhf's ~20: GPT-2's GELU backward was bound by it.
constexpr char kTanh32[] = R"(__device__ __forceinline__ float PointwiseTanh(float v) {
  return tanhf(v);
}
)";
constexpr char kTanh16[] = R"(__device__ __forceinline__ float PointwiseTanh(float v) {
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(v));
  return t;
}
)";
// GELU's (tanh form) derivative with its tanh computed once (an expression would repeat it).
constexpr char kGeluSlope[] = R"(__device__ __forceinline__ float PointwiseGeluSlope(float x) {
  const float k = 0.7978845608f;
  const float t = PointwiseTanh(k * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 0.134145f * x * x);
}
)";

const std::string& ElementTypeSource(DType dtype) {
  static const std::string* const kFloat32 = new std::string(std::string(R"(
typedef float elem_t;
__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float FromFloat(float v) { return v; }
__device__ __forceinline__ float4 Load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ void Store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
)") + kTanh32 + kGeluSlope);
  // A bfloat16 is the top half of a float32: widening is a shift. Two of them pack into 32 bits,
  // the first (lower address) in the low half.
  static const std::string* const kBFloat16 = new std::string(std::string(R"(
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
)") + kTanh16 + kGeluSlope);
  // float16 through PTX's conversions (no CUDA headers needed), two packed as bfloat16's are.
  static const std::string* const kFloat16 = new std::string(std::string(R"(
typedef unsigned short elem_t;
__device__ __forceinline__ float ToFloat(unsigned short v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
  return f;
}
__device__ __forceinline__ unsigned short FromFloat(float v) {
  unsigned short bits;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(v));
  return bits;
}
__device__ __forceinline__ unsigned int PackTwo(float first, float second) {
  unsigned int bits;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(bits) : "f"(second), "f"(first));
  return bits;
}
__device__ __forceinline__ float4 Load4(const unsigned short* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  return make_float4(ToFloat(static_cast<unsigned short>(u.x & 0xffffu)),
                     ToFloat(static_cast<unsigned short>(u.x >> 16)),
                     ToFloat(static_cast<unsigned short>(u.y & 0xffffu)),
                     ToFloat(static_cast<unsigned short>(u.y >> 16)));
}
__device__ __forceinline__ void Store4(unsigned short* p, float4 v) {
  *reinterpret_cast<uint2*>(p) = make_uint2(PackTwo(v.x, v.y), PackTwo(v.z, v.w));
}
)") + kTanh16 + kGeluSlope);
  switch (dtype) {
    case DType::kBFloat16:
      return *kBFloat16;
    case DType::kFloat16:
      return *kFloat16;
    default:
      return *kFloat32;
  }
}

std::string ElementKernelName(absl::string_view base, DType dtype) {
  switch (dtype) {
    case DType::kBFloat16:
      return absl::StrCat(base, "_bf16");
    case DType::kFloat16:
      return absl::StrCat(base, "_f16");
    default:
      return std::string(base);
  }
}

}  // namespace reprise::codegen
