// fused_pointwise: a chain of pointwise ops run as one generated kernel, optionally ending in the
// column sum of one of its values (the bias gradient). The fuse pass writes the chain into the
// node's attributes as a PointwiseProgram; the CPU reference runs each step's own reference.
// On the GPU its tensors are all float32, all bfloat16 or all float16; the steps compute in float
// and bfloat16 rounds only the stored outputs (and the column sums), as the CPU reference of the
// node does.
#ifndef REPRISE_SRC_OPS_FUSED_POINTWISE_H_
#define REPRISE_SRC_OPS_FUSED_POINTWISE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "reprise/graph.h"
#include "src/ir/op_def.h"
#include "src/runtime/kernel_store.h"

namespace reprise::ops {

struct PointwiseProgram {
  struct Step {
    const ir::OpDef* op = nullptr;  // A kPointwise op with a PointwiseForm.
    std::vector<int> operands;      // >= 0: the node's input; < 0: step (-1 - operand).
  };
  std::vector<Step> steps;   // In order; a step reads inputs and earlier steps only.
  std::vector<int> outputs;  // Steps whose values the node outputs, in output order.
  int column_sum = -1;       // A step whose column sums are the node's last output, or -1.

  static int StepOperand(int step) { return -1 - step; }
  // Attributes "steps" ("relu_grad:0,1;bias_add:s0,2"), "outputs" ("0,1") and "column_sum".
  Attrs ToAttrs() const;
  static absl::StatusOr<PointwiseProgram> FromAttrs(const Attrs& attrs);
};

const ir::OpDef& FusedPointwiseOp();

// The kernel a fused_pointwise node lowers to, so that it can be compiled ahead of lowering:
// float32, bfloat16 or float16 as its outputs are; Unimplemented, naming the node, for another
// type.
absl::StatusOr<runtime::KernelSource> FusedPointwiseKernel(const Node& node);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_FUSED_POINTWISE_H_
