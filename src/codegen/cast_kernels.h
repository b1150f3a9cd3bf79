// CUDA C++ source of the element-type conversion kernel (src/ops/cast.h).
#ifndef REPRISE_SRC_CODEGEN_CAST_KERNELS_H_
#define REPRISE_SRC_CODEGEN_CAST_KERNELS_H_

#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// The kernel's codes for element types: what `from` and `to` take.
inline constexpr int kCastFloat32 = 0, kCastBFloat16 = 1, kCastFloat16 = 2;

// y[i] = x[i] converted from type `from` to type `to` (codes above), rounding to nearest even
// through PTX's cvt.rn (no CUDA headers needed). Grid-stride. Signature: (const void* x, void* y,
// long long n, int from, int to).
GeneratedKernel Cast();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_CAST_KERNELS_H_
