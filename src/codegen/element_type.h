// Device code for what a generated kernel's tensors hold: float32, or bfloat16 kept as its 16
// bits. Kernels compute in float and convert at loads and stores, so one kernel source serves both
// types: prepend ElementTypeSource(dtype) and name the kernel ElementKernelName(base, dtype).
//
// The source defines, for the chosen type:
//   elem_t                      what memory holds (float, or unsigned short for bfloat16);
//   float ToFloat(elem_t)       exact widening;
//   elem_t FromFloat(float)     rounding to nearest even (PTX cvt.rn.bf16.f32), as PyTorch does;
//   float4 Load4(const elem_t*) four consecutive elements (16-byte aligned for float32, 8 for
//                               bfloat16);
//   void Store4(elem_t*, float4)
#ifndef REPRISE_SRC_CODEGEN_ELEMENT_TYPE_H_
#define REPRISE_SRC_CODEGEN_ELEMENT_TYPE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "reprise/tensor.h"

namespace reprise::codegen {

// True for the types the generated kernels store: float32 and bfloat16.
bool IsKernelElementType(DType dtype);

// The definitions above for float32 or bfloat16 (float32 for any other type: check
// IsKernelElementType first).
const std::string& ElementTypeSource(DType dtype);

// `base` for float32, `base` + "_bf16" for bfloat16: the kernels of the two types differ in name,
// so they are different entries of the kernel store and can live in one process.
std::string ElementKernelName(absl::string_view base, DType dtype);

// The bytes of one element of a kernel element type.
inline int ElementBytes(DType dtype) { return dtype == DType::kBFloat16 ? 2 : 4; }

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_ELEMENT_TYPE_H_
