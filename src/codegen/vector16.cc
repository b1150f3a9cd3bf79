#include "src/codegen/vector16.h"

#include "src/codegen/element_type.h"

namespace reprise::codegen {

const std::string& Vector16Source(DType dtype) {
  // Two 16-bit elements pack into each 32-bit word, the first (lower address) in the low half.
  static const std::string* const kSixteenBit = new std::string(R"(
#define VEC 8
typedef uint4 vec_t;
__device__ __forceinline__ vec_t LoadVec(const elem_t* p) {
  return *reinterpret_cast<const uint4*>(p);
}
__device__ __forceinline__ vec_t ZeroVec() { return make_uint4(0u, 0u, 0u, 0u); }
__device__ __forceinline__ float VecAt(const uint4& v, int i) {
  const unsigned int word = i < 4 ? (i < 2 ? v.x : v.y) : (i < 6 ? v.z : v.w);
  return ToFloat(static_cast<unsigned short>((i & 1) ? (word >> 16) : (word & 0xffffu)));
}
__device__ __forceinline__ void StoreVec(elem_t* p, const float (&f)[8]) {
  *reinterpret_cast<uint4*>(p) = make_uint4(PackTwo(f[0], f[1]), PackTwo(f[2], f[3]),
                                            PackTwo(f[4], f[5]), PackTwo(f[6], f[7]));
}
)");
  static const std::string* const kFloat32 = new std::string(R"(
#define VEC 4
typedef float4 vec_t;
__device__ __forceinline__ vec_t LoadVec(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ vec_t ZeroVec() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
__device__ __forceinline__ float VecAt(const float4& v, int i) {
  return i < 2 ? (i == 0 ? v.x : v.y) : (i == 2 ? v.z : v.w);
}
__device__ __forceinline__ void StoreVec(float* p, const float (&f)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(f[0], f[1], f[2], f[3]);
}
)");
  return IsLowPrecision(dtype) ? *kSixteenBit : *kFloat32;
}

int Vector16Elements(DType dtype) { return IsLowPrecision(dtype) ? 8 : 4; }

bool Aligned16(absl::Span<const void* const> pointers) {
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

}  // namespace reprise::codegen
