// The generated code of the fused MLP step's non-finite guard that its kernel generators emit
// (mlp_step_source.cc for the layer phases and the row chain, mlp_cluster_kernel.cc for the group
// schedule): the step-start copies and the restore of a skipped step, over mlp_guard_device.inc's
// device functions.
#ifndef REPRISE_SRC_CODEGEN_MLP_GUARD_SOURCE_H_
#define REPRISE_SRC_CODEGEN_MLP_GUARD_SOURCE_H_

#include <string>
#include <vector>

#include "src/codegen/mlp_step_kernel.h"

namespace reprise::codegen {

// Statements (of a kernel with MlpStepKernelSignature's parameters) that copy the parameters and
// velocities of `layers` (every model's) to their step-start copies in the workspace
// (plan.grad_w_offset, ...), spread over the blocks as mlpg::CopyStart says, in a phase with
// `tasks` (a C++ constant expression) tasks.
std::string GuardCopySource(const MlpStepPlan& plan, const std::vector<int>& layers,
                            const std::string& tasks);

// Statements (of a kernel with MlpStepKernelSignature's parameters) by which one block copies
// every parameter and velocity of the plan's models back from its step-start copy in the workspace
// (plan.grad_w_offset, grad_b_offset, start_vw_offset, start_vb_offset): the restore of a skipped
// step (by the last block to finish, mlpg::GuardFinish).
std::string GuardRestoreSource(const MlpStepPlan& plan);

// Makes a guarded plan double-buffered: sets double_buffered and lays each layer's weights, biases
// and their velocities out in the shadow (shadow_w_offset, ...), as MlpStepShadowFloats counts
// them. Such a plan has no copies: the two functions above return "".
void LayOutShadow(MlpStepPlan& plan);

// Statements of a double-buffered kernel (plan.double_buffered) that read the parity word once
// into `flip` and point w<l>_now, b<l>_now, vw<l>_now and vb<l>_now at each layer's current values
// (every model's; the parameters' own buffers or the shadow's) and w<l>_next, ... at the other
// buffers, which the step's updates write.
std::string ParityPointersSource(const MlpStepPlan& plan);

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_MLP_GUARD_SOURCE_H_
