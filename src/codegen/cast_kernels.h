// CUDA C++ source of the element-type conversion kernels (src/ops/cast.h): one tensor, or many
// in one launch.
#ifndef REPRISE_SRC_CODEGEN_CAST_KERNELS_H_
#define REPRISE_SRC_CODEGEN_CAST_KERNELS_H_

#include "reprise/tensor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// The kernel's codes for element types: what `from` and `to` take.
inline constexpr int kCastFloat32 = 0, kCastBFloat16 = 1, kCastFloat16 = 2;

// y[i] = x[i] converted from type `from` to type `to` (codes above), rounding to nearest even
// through PTX's cvt.rn (no CUDA headers needed). Grid-stride. Signature: (const void* x, void* y,
// long long n, int from, int to).
GeneratedKernel Cast();

// y_t[i] = x_t[i] (float32) rounded to `to` (bfloat16 or float16) as Cast rounds it, for every
// tensor t of a table: the tensors seen as one list of chunks of kNormChunk elements that blocks
// of kNormBlock threads stride over, as the chunked optimizer kernels do (optimizer_kernels.h).
// Signature: (CastTable table, int count), CastTable { const float* x[C]; elem_t* y[C];
// long long n[C]; int first[C + 1]; } with C = capacity, laid out as ops::ChunkTable(C, 2);
// kernel name ElementKernelName("reprise_cast_multi", to). With `refresh` (the copies that the
// update keeps current, ops::RefreshCopiesOp): a third argument `const int* stale`, and nothing is
// done unless *stale is nonzero; kernel name ElementKernelName("reprise_refresh_copies", to).
GeneratedKernel CastMulti(int capacity, DType to, bool refresh = false);

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_CAST_KERNELS_H_
