// all_reduce: (g0, g1, ...) -> (r0, r1, ...), each r the average of its g over the data-parallel
// ranks (src/parallel/communicator.h), all inputs of one float type (f32, bf16 or f16). One node is
// one bucket of gradients: the memory plan lays its inputs out contiguously, and its outputs
// likewise, so that one collective (NCCL's ncclAllReduce with ncclAvg) covers the whole bucket.
// The CPU reference is one replica's view: the average over a single rank, a copy.
#ifndef REPRISE_SRC_OPS_ALL_REDUCE_H_
#define REPRISE_SRC_OPS_ALL_REDUCE_H_

#include "src/ir/op_def.h"

namespace reprise::ops {

const ir::OpDef& AllReduceOp();

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_ALL_REDUCE_H_
