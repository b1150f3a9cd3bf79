// The non-finite guard's counter op (src/autodiff/non_finite_guard.h), beside loss scaling's ops
// in src/ops/loss_scale.cc.
#ifndef REPRISE_SRC_OPS_NON_FINITE_H_
#define REPRISE_SRC_OPS_NON_FINITE_H_

#include "src/ir/op_def.h"

namespace reprise::ops {

// (skipped_steps i32[], record i32[2], check f32[2]) -> nothing; in place: skipped_steps counts
// the steps check[1] found non-finite, record = [steps checked, 1 + the first such step or 0].
const ir::OpDef& NonFiniteCountOp();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_NON_FINITE_H_
