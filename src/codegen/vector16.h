// CUDA C++ helpers for 16-byte vectors of a kernel element type (src/codegen/element_type.h): one
// load or store moves VEC elements (8 of a 16-bit type, 4 of float32), for kernels that read a
// row once at memory speed and keep it in registers in its packed form, widening an element at a
// time. Appended after ElementTypeSource(dtype), whose ToFloat and PackTwo they use:
//   vec_t                  the packed 16 bytes (uint4 or float4);
//   LoadVec(p), ZeroVec()  p 16-byte aligned;
//   VecAt(v, i)            element i widened to float (i a constant once loops are unrolled);
//   StoreVec(p, f)         f[0..VEC) rounded once each to elem_t.
#ifndef REPRISE_SRC_CODEGEN_VECTOR16_H_
#define REPRISE_SRC_CODEGEN_VECTOR16_H_

#include <cstdint>
#include <string>

#include "absl/types/span.h"
#include "reprise/tensor.h"

namespace reprise::codegen {

// The source above for `dtype` (float32, bfloat16 or float16).
const std::string& Vector16Source(DType dtype);

// Elements of `dtype` in 16 bytes: VEC.
int Vector16Elements(DType dtype);

// True when every pointer is 16-byte aligned (a null pointer counts as aligned: an unused input).
bool Aligned16(absl::Span<const void* const> pointers);

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_VECTOR16_H_
