// Device code for what a generated kernel's tensors hold: float32, or a 16-bit float (bfloat16 or
// float16) kept as its 16 bits. Kernels compute in float and convert at loads and stores, so one
// kernel source serves every type: prepend ElementTypeSource(dtype) and name the kernel
// ElementKernelName(base, dtype).
//
// The source defines, for the chosen type:
//   elem_t                      what memory holds (float, or unsigned short for 16-bit floats);
//   float ToFloat(elem_t)       exact widening;
//   elem_t FromFloat(float)     rounding to nearest even (PTX cvt.rn.bf16.f32 / cvt.rn.f16.f32),
//                               as PyTorch does; float16 overflows to infinity past 65504;
//   float4 Load4(const elem_t*) four consecutive elements (16-byte aligned for float32, 8 for the
//                               16-bit types);
//   void Store4(elem_t*, float4)
//   float PointwiseTanh(float)  tanhf for float32; for the 16-bit types PTX tanh.approx.f32, whose
//                               error is a fraction of their rounding (pointwise ops' tanh, GELU's)
//   float PointwiseGeluSlope(float) GELU's (tanh form) derivative, through PointwiseTanh
#ifndef REPRISE_SRC_CODEGEN_ELEMENT_TYPE_H_
#define REPRISE_SRC_CODEGEN_ELEMENT_TYPE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "reprise/tensor.h"

namespace reprise::codegen {

// True for the types the generated kernels store: float32, bfloat16 and float16.
bool IsKernelElementType(DType dtype);

// The kernel element types, float32 first: what kernel lists generate each kernel for.
inline constexpr DType kKernelElementTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

// The definitions above for float32, bfloat16 or float16 (float32 for any other type: check
// IsKernelElementType first).
const std::string& ElementTypeSource(DType dtype);

// `base` for float32, `base` + "_bf16" for bfloat16, `base` + "_f16" for float16: the kernels of
// the types differ in name, so they are different entries of the kernel store and can live in one
// process.
std::string ElementKernelName(absl::string_view base, DType dtype);

// The bytes of one element of a kernel element type.
inline int ElementBytes(DType dtype) { return IsLowPrecision(dtype) ? 2 : 4; }

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_ELEMENT_TYPE_H_
