// The cluster schedule of the fused MLP step (MlpSchedule::kCluster): each model trains in its own
// thread-block cluster of `ranks` blocks, with every weight it needs and every activation in the
// blocks' shared memory. Nothing waits on another cluster, so the launch is not cooperative and
// any number of models runs in waves.
//
// Layers are split Megatron-style between the blocks of a cluster, alternating:
//   column-parallel (layer 0, and every hidden layer whose input is whole): block r owns output
//     columns [r c, (r + 1) c) of the layer (rows of W_l), computes them from the whole input
//     and keeps them (its slice of h_{l+1});
//   row-parallel (a hidden layer whose input is sliced): block r owns the matching input columns
//     of W_l, computes a partial product of the whole output, and the blocks reduce-scatter the
//     partials through distributed shared memory (block r sums columns r c.. in block order).
// Whole activations are all-gathered from the slices when a product needs them. The head (the
// last layer) is computed whole by every block when its input is whole, else as a row-parallel
// product whose small logits are summed by every block. Backward mirrors this: a row-parallel
// layer's gradients are local, a column-parallel layer's data gradient is reduce-scattered.
// Each block applies SGD to the weights it owns; the step-start weights stay in shared memory,
// so every update uses them.
//
// kGroups runs the same code in one cooperative launch: a model's blocks are a group that
// exchanges through its area of the workspace (each block copies what the others read into its
// slot, L2 only) and meets at a barrier word of its own, so models are not limited to one wave of
// hardware clusters, and each group trains models k, k + groups, ... in turn. The sums are the
// clusters' in the same order: the same bits for the same blocks per model. Under the non-finite
// guard the SGD epilogues flag a non-finite gradient and write the new values to the other of
// each parameter's two buffers (double-buffered), which the last block to finish, of any wave,
// makes current unless some block flagged; without a shadow (kGroups only) they copy the
// step-start values to the workspace first, and that block restores them where the step skips
// (mlp_cluster_guard_device.inc, mlp_guard_device.inc).
//
// With TF32 products the hidden activations are stored rounded to TF32: only products (which
// round their operands anyway), copies and ReLU masks read them, so their products skip the
// conversion and give the same bits (mlp_cluster_device.inc, Operand and BiasRelu).
//
// Padding: the batch is padded to a multiple of 16, hidden widths to multiples of 16 ranks,
// features and classes to multiples of 16, all with zeros (padding rows get a zero loss
// gradient, padding columns zero weights and biases), so every product tiles exactly.
#ifndef REPRISE_SRC_CODEGEN_MLP_CLUSTER_KERNEL_H_
#define REPRISE_SRC_CODEGEN_MLP_CLUSTER_KERNEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "src/codegen/generated_kernel.h"
#include "src/codegen/mlp_step_kernel.h"

namespace reprise::codegen {

// Chooses the blocks per model for `plan` (models, batch, widths and target set): the fewest
// whose shared memory fits, doubled while twice the blocks would still fill at most half of
// target.grid (more blocks per model shorten its chain of products), and at most 8, the portable
// cluster size. Sets plan.cluster, shared_bytes, phases and barriers; with `groups` (kGroups)
// also plan.groups: as many groups as the grid holds, at most one per model, as many barrier
// words as there are and as many exchange areas (GroupAreaFloats each) as the workspace holds, and
// plan.exchange_areas: 2 where the workspace holds two for each of them.
// kUnimplemented, saying why, where even 8 blocks per model do not fit, the target is not 256
// threads per block, or (kGroups) no group fits.
absl::Status PlanCluster(MlpStepPlan& plan, bool groups = false);

// kGroups: the workspace floats of one group's exchange area (a slot per block, each as large
// as the widest activation of the model's padded batch).
int64_t GroupAreaFloats(const MlpStepPlan& plan);

// What MlpStepWorkspaceFloats reserves for kGroups (it needs no target): two exchange areas per
// group, at 4 blocks per model (the issue-9 MLPs' fewest in 227 KiB of shared memory), for as many
// groups as there are barrier words. Where a plan needs more blocks per model, its groups get one
// area each, or fewer groups.
int64_t GroupsWorkspaceFloats(int64_t batch, const std::vector<int64_t>& widths, int64_t models);

// The generated step kernels' signature: "extern "C" __global__ ... name(params) {" with
// MlpStepKernel's parameters (batched = false) or BatchedMlpStepKernel's, for `threads` per block;
// `guarded` adds the guard's counters after the barrier, and `shadow` (MlpStepTarget::shadow) the
// shadow after them (unused by a kernel that does not double-buffer, but passed all the same).
std::string MlpStepKernelSignature(const char* name, int layers, int threads, bool batched,
                                   bool phase_clock, bool guarded = false, bool shadow = false);

// The kernel for a plan of PlanCluster, with MlpStepKernel's parameters (batched = false) or
// BatchedMlpStepKernel's. Launch plan.models * plan.cluster blocks in clusters of plan.cluster,
// or (plan.groups > 0) a multiple of plan.cluster blocks, at most plan.grid(), cooperatively.
// With `phase_clock`, index 0 is each block's start and index i + 1 the end of section i.
GeneratedKernel ClusterStepKernel(const MlpStepPlan& plan, bool batched, bool shared_features,
                                  bool shared_labels, bool phase_clock);

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_MLP_CLUSTER_KERNEL_H_
