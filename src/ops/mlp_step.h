// mlp_train_step: one whole SGD-with-momentum training step of a ReLU MLP classifier, as one node
// (what models::BuildMlp + autodiff::BuildTrainingGraph compute, fused). On the GPU it is one
// launch of a generated kernel (src/codegen/mlp_step_kernel.h): cooperative and persistent, or
// in thread-block clusters (MlpSchedule::kCluster).
//
// attrs: "layers" (int L >= 1, the number of Linear layers; BuildMlp's depth + 1);
//        "non_finite" (optional: "skip" or "stop"): the non-finite guard inside the step (see
//        codegen::MlpGuard and src/autodiff/non_finite_guard.h): the update happens only if the
//        loss and every gradient are finite (and, "stop", no earlier step was found otherwise);
//        a skipped step is counted in the guard's counters, inputs [7 + 4L] and [8 + 4L].
// inputs, in order:
//   [0] features f32 [B, F]          [1] labels i32 [B]       [2] dloss f32 [] (loss seed, 1)
//   [3] learning_rate f32 []         [4] momentum f32 []      [5] weight_decay f32 []
//   [6 + 4l + 0..3] for l = 0..L-1:  W_l f32 [out_l, in_l] (in_0 = F, in_l = out_{l-1}),
//                                    b_l f32 [out_l], velocity of W_l, velocity of b_l
//   [6 + 4L] barrier i32 [64]: zero-initialised state of the kernel's grid barrier. Word 0: bit 31
//            flips at every grid barrier, the low 31 bits count arrivals and are 0 again after
//            each, so the state is never reset by the host and serves every later launch (of any
//            grid). Word 1 counts the models the cluster schedule has finished in a launch (0
//            again at its end). Words 2..63 are reserved. Launches sharing one barrier must not
//            overlap.
//   [7 + 4L] skipped_steps i32 [], [8 + 4L] record i32 [2] (with "non_finite" only): the guard's
//            counters, moved on as loss_scale_check's attr count moves them.
// outputs: [0] loss f32 [] (mean softmax cross-entropy of the step's starting weights)
//          [1] logits f32 [B, C] (C = out_{L-1})
//          [2] workspace f32 [n]: activations and gradients (MlpTrainStepWorkspaceFloats).
// Written in place: every W_l, b_l, both velocities, the barrier and the guard's counters.
//
// GPU limits (kUnimplemented from the lowering, and from CheckMlpTrainStepSupported without a
// GPU): f32 only; batch and every width at most 65536; every weight matrix and the workspace
// under 2^31 elements; the whole of W_{L-1} (C rows of in_{L-1} floats, padded) plus a row of
// activations must fit in one block's shared memory: with an H100's 227 KB, at most 219 classes
// for 256 inputs to the last layer, 55 for 1024, 13 for 4096. Every other shape runs; larger
// reductions are chunked through shared memory.
//
// Speed (H100, median per CUDA-graph replay, this kernel alone): MLP 8x256 batch 32, 10 classes:
// 60-62 us (the unfused cuBLASLt graph: 233 us). MLP 4x1024 batch 256: 396 us, which is slower
// than the unfused graph (373 us): its tiles re-read operands from L2 and run on CUDA cores at
// about a fifth of fp32 peak. Fuse small MLPs; leave large ones to cuBLASLt.
#ifndef REPRISE_SRC_OPS_MLP_STEP_H_
#define REPRISE_SRC_OPS_MLP_STEP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "reprise/tensor.h"
#include "src/codegen/mlp_step_kernel.h"
#include "src/ir/op_def.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/device.h"

namespace reprise::ops {

const ir::OpDef& MlpTrainStepOp();

// f32 elements of output [2] for batch B and widths F, out_0, ..., out_{L-1}:
// n = a(B) + sum over l = 1..L-1 of a(B * out_{l-1}) + sum over l = 0..L-1 of a(B * out_l),
// with a(x) = x rounded up to a multiple of 32; `start_copies` (guarded with no shadow), plus
// every layer's parameters and velocities.
int64_t MlpTrainStepWorkspaceFloats(int64_t batch, const std::vector<int64_t>& widths,
                                    bool start_copies = false);

// The guard a whole-step node's attr "non_finite" asks for (kNone without it); InvalidArgument
// for a value other than "skip" or "stop".
absl::StatusOr<codegen::MlpGuard> MlpStepGuardOf(const Attrs& attrs);
// The attr value for `guard` (kSkip "skip", kStop "stop").
std::string MlpStepGuardName(codegen::MlpGuard guard);
// Checks the guard's counters, inputs [first] (skipped_steps i32 []) and [first + 1] (record
// i32 [2]).
absl::Status CheckMlpStepGuardInputs(absl::Span<const TensorSpec> in, int first);

// What the lowering plans for on `device`: one block of 256 threads per SM, its opt-in shared
// memory. A target built by hand (e.g. codegen::MlpStepTarget{} = an H100) needs no GPU.
codegen::MlpStepTarget MlpTrainStepTargetFor(const runtime::DeviceInfo& device);
// The target one lowering plans for: the device's, narrowed to what the node's tensors allow
// (16-byte alignment) and widened to TF32 tensor cores where the trainer allows them.
codegen::MlpStepTarget MlpTrainStepTargetFor(const LoweringContext& ctx);

// The launch of a planned step kernel `source` (with its arguments): cooperative on `grid` blocks
// (0: the plan's; for a kGroups plan a multiple of plan.cluster, at most plan.grid(), else
// InvalidArgument), or for a kCluster plan in clusters of plan.cluster blocks, plan.grid() of
// them (`grid` ignored). Errors name `node_name`.
absl::StatusOr<std::unique_ptr<GpuKernel>> LaunchForMlpStep(const LoweringContext& ctx,
                                                            const std::string& node_name,
                                                            const codegen::MlpStepPlan& plan,
                                                            const codegen::GeneratedKernel& source,
                                                            KernelArgs args, int grid = 0);

// Pure shape check, no GPU needed: OK when a node with these inputs (the op's order; L is
// derived from their number, with the counters where target.guard asks for the guard) is valid
// and the GPU lowering can run it on `target`.
// kInvalidArgument for an invalid node, kUnimplemented (naming the limit) for an unsupported one.
absl::Status CheckMlpTrainStepSupported(absl::Span<const TensorSpec> inputs,
                                        const codegen::MlpStepTarget& target);
// The same as a bool; `why` (optional) gets the reason when false.
bool MlpTrainStepSupported(const std::vector<TensorSpec>& inputs,
                           const codegen::MlpStepTarget& target, std::string* why);

// batched_mlp_train_step (mlp_step.cc, beside it): mlp_train_step for K models of one shape, every
// tensor stacked [K, ...] (an ensemble after src/passes/batch_ensemble.h), as one launch: a
// cooperative one whose phases run (model, tile) tasks, or one thread-block cluster per model.
// Model k's slices compute what mlp_train_step computes on them.
// attrs: "layers" (L >= 1).
// inputs: as mlp_train_step's, with K from W_0 [K, out_0, F]:
//   [0] features f32 [K, B, F], or [B, F] read by every model
//   [1] labels i32 [K, B], or [B] read by every model
//   [2..5] dloss, learning_rate, momentum, weight_decay: f32 [] shared by all models
//   [6 + 4l + 0..3] W_l [K, out_l, in_l], b_l [K, out_l] and their velocities
//   [6 + 4L] barrier i32 [64] (as mlp_train_step's)
//   [7 + 4L], [8 + 4L]: the guard's counters (as mlp_train_step's, with its attr "non_finite":
//            one check of every model's gradients and the summed loss skips every model's update)
// outputs: [0] loss f32 []: the sum of the models' losses (as model_sum: in model order)
//          [1] losses f32 [K]: each model's mean softmax cross-entropy
//          [2] logits f32 [K, B, C]
//          [3] workspace f32 [BatchedMlpTrainStepWorkspaceFloats]
// GPU limits: mlp_train_step's per model, and at most 8192 models.
const ir::OpDef& BatchedMlpTrainStepOp();

// f32 elements of output [3]: MlpTrainStepWorkspaceFloats with K * B rows (and K models'
// step-start copies, `start_copies`).
int64_t BatchedMlpTrainStepWorkspaceFloats(int64_t models, int64_t batch,
                                           const std::vector<int64_t>& widths,
                                           bool start_copies = false);

// As CheckMlpTrainStepSupported, for batched_mlp_train_step's inputs.
absl::Status CheckBatchedMlpTrainStepSupported(absl::Span<const TensorSpec> inputs,
                                               const codegen::MlpStepTarget& target);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_MLP_STEP_H_
