// The whole training step of a small ReLU MLP (forward, softmax cross-entropy, backward and SGD
// with momentum) as ONE persistent CUDA kernel, generated for one set of shapes. Its phases are
// separated by grid-wide barriers, so it must be launched cooperatively (all blocks co-resident).
//
// Phases (L linear layers; d_0 = features, d_L = classes; B = batch):
//   forward l = 0..L-2    h_{l+1} = relu(h_l W_l^T + b_l), tiles over [B, d_{l+1}]
//   head                  logits, softmax, per-row loss, dz_{L-1}, and dz_{L-2} (rows of B)
//   backward k = 0..L-2   dgrad of layer L-2-k (if >= 1) beside wgrad + bias grad + SGD of layer
//                         L-1-k; the last one adds wgrad + SGD of layer 0. k = 0 also sums the
//                         loss.
// (L = 1: head, then wgrad of layer 0.) So 2L-1 phases and 2L-2 barriers for L >= 2. That is the
// kLayerPhases schedule; kRowChain (see MlpSchedule) does the same work in two phases. Either way
// every weight is updated after its last reader's phase, so each update uses the step's starting
// weights.
//
// Determinism: no floating-point atomics; every sum has a fixed order; data written by other
// blocks in the same launch is read only through L2 (cp.async.cg / ld.global.cg).
//
// Ensembles: the same kernel trains K identically shaped MLPs (an ensemble batched by
// src/passes/batch_ensemble.h) in one launch. Every tensor is stacked [K, ...]; each phase's tasks
// are (model, tile) pairs spread over the grid, and the grid barriers keep all models in
// lockstep. Tiles are planned for K times each GEMM's tiles.
#ifndef REPRISE_SRC_CODEGEN_MLP_STEP_KERNEL_H_
#define REPRISE_SRC_CODEGEN_MLP_STEP_KERNEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "src/codegen/generated_kernel.h"

namespace reprise::codegen {

// How the step's work is cut into phases (grid barriers between them).
//   kLayerPhases: a phase per layer forward, the head, then a phase per layer backward (each
//                 layer's dgrad beside the next layer's wgrad + SGD): 2L - 1 phases, every phase's
//                 tasks (model, tile) pairs of its one or two GEMMs.
//   kRowChain:    two phases. Phase 0's tasks are (model, block of batch rows): each runs its
//                 rows through every forward layer, the head and every data gradient (all of
//                 them row-local), reading all the weights. Phase 1 runs every layer's weight
//                 gradient + SGD as (model, tile) tasks. One barrier whatever the depth, at the
//                 price of each row block reading every weight (from L2).
//   kCluster:     no grid barrier at all: each model trains in its own thread-block cluster, its
//                 weights and activations in the blocks' shared memory, the layers split between
//                 the blocks (see mlp_cluster_kernel.h). Not a cooperative launch: models beyond
//                 one wave of clusters run in later waves.
//   kGroups:      kCluster's kernel in one cooperative launch instead: each model's blocks are a
//                 group that exchanges activations through its own area of the workspace (L2)
//                 and waits at a barrier word of its own; every group is co-resident, so every
//                 model whose group fits the grid runs at once (hardware clusters of 4 fit 30 to a
//                 wave on an H100 or H200, whose other SMs sit idle), and a group trains models
//                 k, k + groups, ... in turn.
//   kAuto:        kGroups for ensembles of at least kGroupsMinModels models where it fits
//                 (measured on an H200, docs/results/history/2026-11-28_86ad6a5.md and
//                 2026-11-28_357315a.md, the issue-9 MLPs: at K = 32 41 us against 76 for the
//                 clusters' two waves and 75 for the layer phases in TF32, 63 against 94 in f32;
//                 at K = 128 162 against 219 for the clusters and 205 for the row chain in TF32);
//                 else kCluster for TF32 ensembles of at least kClusterMinModels models where it
//                 fits (measured on an H100, docs/results/history/2026-11-28_a482790.md: the
//                 clusters beat both other schedules there at K = 8 and 32 and tie the row chain
//                 at K = 128; in strict f32, whose SIMT products are issue-bound in 4 or 8 SMs per
//                 model, and at K = 4 they lose); else kRowChain for ensembles of at least
//                 kRowChainMinModels models where it fits, else kLayerPhases. Measured on an H100
//                 (docs/results/history/2026-11-28_33a94cc.md), the issue-9 MLPs 64-256-256-10 at
//                 batch 64: layer phases faster at K = 4 and 8, the two equal at K = 32, the row
//                 chain 6-8% faster at K = 128.
enum class MlpSchedule : uint8_t { kAuto, kLayerPhases, kRowChain, kCluster, kGroups };
inline constexpr int kRowChainMinModels = 32;

// The non-finite guard inside the kernel (src/autodiff/non_finite_guard.h's policies). The check is
// the step's, over every model (an ensemble is one training graph, its loss the models' sum): one
// non-finite model skips the whole step, as the unfused graph's guard does. Without a shadow
// (below), kLayerPhases, kRowChain and kGroups: every weight update happens in place where the
// unguarded kernel does it, after the step-start values it overwrites (weights, biases and their
// velocities) were copied to the workspace: by kLayerPhases and kRowChain in the forward phases
// (mlpg::CopyStart), by kGroups in the update itself. A non-finite gradient (or loss) sets its
// block's flag. No grid barrier is added: after its last task each block adds its arrival and flag
// to the guard word, and the last block to arrive counts the step and, where it skips, alone copies
// every parameter and velocity back (kStop: once stopped, no task writes any). A clean step so
// costs the copies and one atomic per block; only a skipped step pays for the restore. kCluster
// guards double-buffered only (a model's cluster may run in a later wave than another's, after a
// restore), so a guarded plan without a shadow never picks it.
//
// Double-buffered (MlpStepPlan::double_buffered: a guarded plan with a shadow input,
// MlpStepTarget::shadow, which the fuse pass always gives), nothing is copied: every weight, bias
// and velocity has a second buffer in the shadow (plan.shadow_w_offset, shadow_b_offset,
// shadow_vw_offset, shadow_vb_offset), persistent like the parameters, and a parity says which of
// the two holds the current values. The step reads that one and writes its update to the other;
// an applied step flips the parity and a skipped one leaves it, so a skipped step needs no
// restore, and the forward phases are the unguarded kernel's (measured on an H200, the bias copies
// there cost each forward phase ~0.2 us). kGroups and kCluster: the last block to arrive (of
// any wave) flips barrier word kMlpStepParityWord. kLayerPhases and kRowChain defer the verdict
// (MlpStepPlan::deferred_verdict): no block arrives; the next step reads it with the parity and
// counts it. Between steps the parameters' own buffers are therefore current only where the parity
// is 0: MlpStepSettleKernel copies the second buffers back and clears it, and must run before
// anything else reads or writes the weights or velocities.
enum class MlpGuard : uint8_t { kNone, kSkip, kStop };
inline constexpr int kClusterMinModels = 8;
inline constexpr int kGroupsMinModels = 32;

// What the kernel is planned for. Correct for any grid that is co-resident; tiles are sized for
// `grid` blocks of `threads` threads.
struct MlpStepTarget {
  int grid = 132;                         // Blocks launched (one per SM: an H100 has 132).
  int threads = 256;                      // Threads per block.
  int64_t max_shared_bytes = 227 * 1024;  // Dynamic shared memory one block may use (opt-in).
  bool aligned = true;  // Every tensor base is 16-byte aligned: 16-byte copies where shapes allow.
  // GEMMs may run on TF32 tensor cores (the trainer's allow_tf32), where the plan finds that
  // faster.
  bool tf32 = false;
  MlpSchedule schedule = MlpSchedule::kAuto;
  // kRowChain: rows per phase-0 task (a power of two); 0 lets the planner choose.
  int chain_rows = 0;
  MlpGuard guard = MlpGuard::kNone;
  // Guarded: the step has a second buffer for every parameter and velocity (its shadow input, of
  // MlpStepShadowFloats): a kLayerPhases or kRowChain plan then double-buffers (see MlpGuard).
  bool shadow = false;
};

// One GEMM's tiling: tm x tn outputs per task, the reduction in chunks of pc, each thread owning
// rm x rn outputs of one of `split` slices of the reduction (summed in slice order). With `mma`
// the products run on TF32 tensor cores and each warp owns rm x rn fragments of 16 x 8 outputs.
struct MlpGemmTile {
  int tm = 1, tn = 1, pc = 4, rm = 1, rn = 1, split = 1;
  bool mma = false;
  int tiles = 0;  // Tasks of this GEMM.
};

struct MlpStepPlan {
  int models = 1;           // K: the models trained side by side (1: a single MLP).
  int batch = 0;            // Per model.
  std::vector<int> widths;  // d_0 .. d_L.
  MlpStepTarget target;
  bool row_chain = false;  // The kRowChain schedule; its row blocks are head_rows.
  int cluster = 0;         // kCluster, kGroups: blocks per model; else 0.
  int groups = 0;          // kGroups: the groups launched (each `cluster` blocks).
  // kGroups: exchange areas per group (GroupAreaFloats each), 1 or 2. With 2, consecutive
  // exchanges alternate between them, so a block publishes without first waiting for the group to
  // finish reading the previous exchange.
  int exchange_areas = 0;
  // kGroups: where the exchange areas start in the workspace (guarded: clear of the gradients).
  int64_t area_offset = 0;
  std::vector<MlpGemmTile> forward;  // [l], l = 0..L-2 (row chain: tm = head_rows).
  std::vector<MlpGemmTile> dgrad;    // [l], used for l = 1..L-2 (layer L-1's is in the head;
                                     // row chain: tm = head_rows).
  std::vector<MlpGemmTile> wgrad;    // [l], l = 0..L-1.
  int head_rows = 1;                 // Batch rows per head task (row chain: per phase-0 task).
  int64_t shared_bytes = 0;          // Dynamic shared memory per block.
  // Of shared_bytes, the floats at its end holding a phase's GEMM and head arguments
  // (mlp_layout::ArgFloats); the loss scratch and the guard's word come before them.
  int64_t arg_floats = 0;
  // Workspace (f32 elements, each buffer 128-byte aligned): h_l for l = 1..L-1, dz_l for
  // l = 0..L-1, the per-row losses; each [K, B, ...], model k's slice after model k-1's.
  std::vector<int64_t> h_offset;   // [l], l = 1..L-1 used.
  std::vector<int64_t> dz_offset;  // [l], l = 0..L-1.
  int64_t row_loss_offset = 0;
  // Guarded (target.guard), each layer's [K, ...]: the step-start weights and biases, and their
  // velocities at start_vw_offset / start_vb_offset (the copies a skipped step is restored from).
  std::vector<int64_t> grad_w_offset, grad_b_offset;
  std::vector<int64_t> start_vw_offset, start_vb_offset;
  int64_t workspace_floats = 0;
  // Guarded kLayerPhases and kRowChain with a shadow: the parameters and their velocities
  // alternate between their own buffers and the shadow's, each layer's [K, ...] at these offsets
  // (see MlpGuard); the double-buffered plan copies nothing.
  bool double_buffered = false;
  // Double-buffered kLayerPhases and kRowChain (at least one grid barrier): no block arrives on
  // the guard word; the next step reads the verdict and counts it (mlpg::VerdictBegin, the words
  // from kMlpStepVerdictWord), and MlpStepSettleKernel folds the last one into the counters.
  bool deferred_verdict = false;
  std::vector<int64_t> shadow_w_offset, shadow_b_offset, shadow_vw_offset, shadow_vb_offset;
  int phases = 0;
  int barriers = 0;

  int layers() const { return static_cast<int>(widths.size()) - 1; }
  // Blocks to launch: models x cluster for kCluster (in clusters of `cluster`), groups x cluster
  // for kGroups (cooperatively), else the target's grid (cooperatively).
  int grid() const {
    return cluster == 0 ? target.grid : groups > 0 ? groups * cluster : models * cluster;
  }
};

// Elements of the i32 barrier state. Word 0 is the grid barrier: bit 31 flips at every barrier,
// the low 31 bits count arrivals and are 0 between barriers and launches. Word 1 counts the models
// whose loss is in (kCluster, kGroups); words 2..62 are kGroups' group barriers, like word 0; word
// 63 (kMlpStepGuardWord) is the guard's: the blocks that finished (low 16 bits) and those of them
// that found a non-finite value (high 16 bits); zero between launches.
inline constexpr int64_t kMlpStepBarrierWords = 64;
inline constexpr int64_t kMlpStepGuardWord = kMlpStepBarrierWords - 1;
// Word 62 of a double-buffered plan (whose kGroups plans launch at most 60 groups, their barriers
// below it): 1 where the weights' and velocities' current values are in the shadow, 0 where in
// their own buffers.
inline constexpr int64_t kMlpStepParityWord = kMlpStepBarrierWords - 2;
// Words 60..63 of a plan with a deferred verdict (kLayerPhases and kRowChain use only words 0 and
// 1 otherwise): parity and toggle, steps since the fold, and two steps' verdicts (mlpg::Verdict).
inline constexpr int64_t kMlpStepVerdictWord = kMlpStepBarrierWords - 4;

// f32 elements of the workspace for these shapes (see MlpStepPlan's layout); needs no target.
// From kGroupsMinModels models it also holds GroupsWorkspaceFloats (mlp_cluster_kernel.h);
// `start_copies` (a guarded plan without a shadow), the parameters' step-start copies too
// (kGroups' exchange areas after them). A double-buffered plan needs no more than an unguarded
// one.
int64_t MlpStepWorkspaceFloats(int64_t batch, const std::vector<int64_t>& widths,
                               int64_t models = 1, bool start_copies = false);

// Picks the schedule (target.schedule) and tiles for every phase of `models` MLPs of these
// shapes. kUnimplemented, saying which limit, where the shapes exceed what the kernel supports on
// `target` (shared memory for the head or a GEMM tile, 32-bit indexing; kRowChain asked for where
// no row block fits); kInvalidArgument for non-positive sizes.
absl::StatusOr<MlpStepPlan> PlanMlpStep(int64_t batch, const std::vector<int64_t>& widths,
                                        const MlpStepTarget& target, int64_t models = 1);

// The kernel "reprise_mlp_step" for `plan`. Parameters, in the op's input order then its
// outputs: (const float* x, const int* labels, const float* dloss, const float* lr,
// const float* momentum, const float* weight_decay, then per layer float* W, float* b,
// float* W_velocity, float* b_velocity, then unsigned* barrier, guarded (plan.target.guard) also
// int* skipped_steps, int* record (the guard's counters, src/autodiff/non_finite_guard.h), then
// float* loss, float* logits, float* workspace). Launch with plan.target.threads threads and
// plan.shared_bytes of dynamic shared memory, cooperatively.
GeneratedKernel MlpStepKernel(const MlpStepPlan& plan);

// The kernel "reprise_batched_mlp_step" for `plan` (any plan.models >= 1): the parameters of
// MlpStepKernel with every tensor stacked [K, ...], except features [B, F] and labels [B] where
// `shared_features` / `shared_labels` (every model reads the same), and the outputs (float* loss,
// float* model_losses, float* logits, float* workspace): the sum of the models' mean losses, each
// model's mean loss [K], logits [K, B, C]. With `phase_clock` (for tuning) a last parameter
// `unsigned long long* phase_clock` [plan.phases + 1][grid] receives each block's %globaltimer
// (ns) at the start and as it leaves each phase.
GeneratedKernel BatchedMlpStepKernel(const MlpStepPlan& plan, bool shared_features,
                                     bool shared_labels, bool phase_clock = false);

// f32 elements of a guarded step's shadow input (every weight, bias and velocity once, each
// 128-byte aligned): the same for every batch, so shape buckets of one model agree on it.
int64_t MlpStepShadowFloats(const std::vector<int64_t>& widths, int64_t models);

// The settle of a double-buffered plan: "reprise_mlp_step_settle" (unsigned* barrier, then per
// layer float* W, float* b, float* W_velocity, float* b_velocity as the step kernel takes them,
// then const float* shadow, int* skipped_steps, int* record, int mode). With mode 0 it copies
// every parameter and velocity whose current values are in the shadow back to its own buffer
// (grid-stride: any grid); a second launch with mode 1 (one thread) then says they are in their
// own buffers. With a deferred verdict, mode 1 also folds the verdict of the last step and the
// steps run since the last fold into the guard's counters, and mode 2 (one thread) only folds
// them, leaving the values where they are (for reading the counters between steps).
GeneratedKernel MlpStepSettleKernel(const MlpStepPlan& plan);

}  // namespace reprise::codegen

#endif  // REPRISE_SRC_CODEGEN_MLP_STEP_KERNEL_H_
