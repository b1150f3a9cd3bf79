// The generated code of the fused MLP step's non-finite guard that both kernel generators emit
// (mlp_step_source.cc for the layer phases and the row chain, mlp_cluster_kernel.cc for the
// group schedule) over the device functions of mlp_guard_device.inc.
#ifndef REPRISE_SRC_CODEGEN_MLP_GUARD_SOURCE_H_
#define REPRISE_SRC_CODEGEN_MLP_GUARD_SOURCE_H_

#include <string>

#include "src/codegen/mlp_step_kernel.h"

namespace reprise::codegen {

// Statements (of a kernel with MlpStepKernelSignature's parameters, `ws` the workspace) that apply
// SGD to every parameter of the plan's models, w{l}, b{l} with velocities vw{l}, vb{l}, from their
// gradients at plan.grad_w_offset / grad_b_offset of ws, over every thread of the grid; lr, mu and
// wd name the step's scalars. Every parameter whose size and address allow it is one range of
// float4s: each thread takes four of them per round and issues all their loads before any store,
// so a round costs one trip to L2 rather than one per parameter tensor (the compiler may not move
// a load above a store that might alias it). The rest go element by element.
std::string GuardUpdateSource(const MlpStepPlan& plan, const std::string& lr, const std::string& mu,
                              const std::string& wd);

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_MLP_GUARD_SOURCE_H_
