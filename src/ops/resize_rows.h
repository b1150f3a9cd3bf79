// resize_rows: (x [n, ...]) -> y [rows, ...] of x's dtype, attr "rows" (int, at least 1): y's
// first min(n, rows) rows are x's, the rest zeros. Its gradient is resize_rows of dy back to n
// rows: the first rows of dy, zeros for the rows it dropped. GPT-2 pads its vocabulary with it so
// that the output product's leading dimension is a multiple of 128 (src/api/models_gpt2.cc).
// Byte for byte, so the CPU reference and the GPU lowering take any element type.
#ifndef REPRISE_SRC_OPS_RESIZE_ROWS_H_
#define REPRISE_SRC_OPS_RESIZE_ROWS_H_

#include "src/ir/op_def.h"

namespace reprise::ops {

const ir::OpDef& ResizeRowsOp();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_RESIZE_ROWS_H_
