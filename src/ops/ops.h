// Every op the engine knows, one accessor per OpDef. Each family's file holds its ops' shape rule,
// gradient rule, CPU reference and GPU lowering side by side.
#ifndef REPRISE_SRC_OPS_OPS_H_
#define REPRISE_SRC_OPS_OPS_H_

#include <vector>

#include "src/ir/op_def.h"

namespace reprise::ops {

// matmul.cc. C = op(A)·op(B), attrs transpose_a, transpose_b (bool), role ("dgrad"/"wgrad").
const ir::OpDef& MatmulOp();

// pointwise.cc
const ir::OpDef& BiasAddOp();   // y[r, c] = x[r, c] + b[c]
const ir::OpDef& ReluOp();      // y = max(x, 0)
const ir::OpDef& ReluGradOp();  // dx = y > 0 ? dy : 0, inputs (dy, y)
const ir::OpDef& AddOp();       // y = a + b, same shapes

// reduction.cc
const ir::OpDef& ColumnSumOp();  // db[c] = Σ_r dy[r, c]: the bias gradient

// loss.cc
const ir::OpDef& SoftmaxCrossEntropyOp();      // (logits f32 [B, C], labels i32 [B]) -> f32 []
const ir::OpDef& SoftmaxCrossEntropyGradOp();  // (logits, labels, dloss f32 []) -> f32 [B, C]

// optimizer.cc
// (w, g, v, lr, momentum, weight_decay) -> nothing; writes w and v in place.
const ir::OpDef& SgdMomentumOp();

// All non-leaf ops, for tests that sweep over every op.
std::vector<const ir::OpDef*> AllOps();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_OPS_H_
