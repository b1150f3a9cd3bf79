// CUDA C++ source for resize_rows (src/ops/resize_rows.h): a tensor's leading bytes copied and
// the rest of the output zeroed, in words as wide as the sizes and addresses allow. Zero bits are
// 0.0 in every float type, so one kernel per word width serves every element type.
#ifndef REPRISE_SRC_CODEGEN_RESIZE_ROWS_KERNELS_H_
#define REPRISE_SRC_CODEGEN_RESIZE_ROWS_KERNELS_H_

#include <vector>

#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// The word widths ResizeRows has a kernel for, widest first.
inline constexpr int kResizeRowsWordBytes[] = {16, 8, 4, 2, 1};

// y[i] = i < kept ? x[i] : 0 for i < total, in words of `word_bytes` (one of
// kResizeRowsWordBytes): a grid-stride loop. Named "reprise_resize_rows_w<word_bytes>".
// Signature: (const word_t* x, word_t* y, long long kept, long long total), counts in words.
GeneratedKernel ResizeRows(int word_bytes);

// ResizeRows for every word width.
std::vector<GeneratedKernel> ResizeRowsKernels();

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_RESIZE_ROWS_KERNELS_H_
