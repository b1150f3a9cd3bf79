// Autodiff: extends a copy of the forward graph with its backward pass (one gradient rule per op,
// matmul gradients as separate dgrad and wgrad nodes) and the optimizer's update of every
// parameter, as ordinary graph nodes.
#ifndef REPRISE_SRC_AUTODIFF_AUTODIFF_H_
#define REPRISE_SRC_AUTODIFF_AUTODIFF_H_

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "reprise/graph.h"
#include "reprise/optimizer.h"
#include "src/autodiff/non_finite_guard.h"

namespace reprise::autodiff {

// Names of the scalar inputs that carry the optimizer's hyperparameters.
inline constexpr char kLearningRate[] = "learning_rate";
inline constexpr char kMomentum[] = "momentum";
inline constexpr char kWeightDecay[] = "weight_decay";
// The device-side step counter (state i32[2]) that random ops, Adam's bias correction and the
// learning-rate schedule read; the training step advances it (not when loss scaling skipped it).
inline constexpr char kStepCounter[] = "rng.step";
// Loss scaling's state (reprise/optimizer.h, LossScaleOptions): the scale (f32[], the backward's
// d(loss)), clean steps since it last changed (i32[]) and skipped steps (i32[]); and the node
// computing the step's check f32[2] = [1 / scale, found non-finite] that the updates read.
inline constexpr char kLossScale[] = "loss_scale";
inline constexpr char kLossScaleGrowthTracker[] = "loss_scale.growth_tracker";
inline constexpr char kLossScaleSkippedSteps[] = "loss_scale.skipped_steps";
inline constexpr char kLossScaleCheck[] = "loss_scale.check";

// Whether `scaling` scales the loss: kStatic or kDynamic (kAuto is for the Trainer to resolve by
// its compute dtype, and means off here).
bool ScalesLoss(const LossScaleOptions& scaling);

struct TrainingGraph {
  Graph graph;  // Node ids of the forward graph are kept: a forward Value means the same here.
  Value loss;
  std::vector<int32_t> parameters;                // Parameter node ids, in graph order.
  absl::flat_hash_map<int32_t, Value> gradients;  // Parameter node id -> its gradient.
  std::vector<int32_t> optimizer_nodes;
  int32_t forward_nodes = 0;  // Nodes [0, forward_nodes) are the forward graph's (for mirroring).
};

// Gradients of `loss` (a scalar of `forward`) with respect to every parameter it depends on.
// Returns the graph without optimizer nodes; used by tests and by BuildTrainingGraph. When
// `scaling` scales the loss, the backward starts from d(loss) = the state kLossScale (initially
// scaling.init_scale) instead of the constant 1, so every gradient comes out scaled.
absl::StatusOr<TrainingGraph> BuildBackward(const Graph& forward, Value loss,
                                            const LossScaleOptions& scaling = {});

// Backward plus one sgd_momentum node per parameter. Each update runs after every other reader
// of its parameter (control edges), so the step reads the weights it started with.
absl::StatusOr<TrainingGraph> BuildTrainingGraph(const Graph& forward, Value loss,
                                                 const SgdOptions& sgd);

// Backward plus the optimizer `optimizer` describes (src/autodiff/optimizer_graph.h), loss scaling
// as `scaling` says, the non-finite guard as `guard` says (src/autodiff/non_finite_guard.h; none
// by default here, while the Trainer's default guards), and the advance of the device step
// counter after its last reader (skipped with the update). InvalidArgument for bad options, and
// for a loss that depends on none of the graph's parameters (a step would train nothing), naming
// the loss and the parameters.
absl::StatusOr<TrainingGraph> BuildTrainingGraphWith(const Graph& forward, Value loss,
                                                     const OptimizerOptions& optimizer,
                                                     const LossScaleOptions& scaling = {},
                                                     const NonFiniteOptions& guard = kNoGuard);

// Control edges from every other reader of `leaf` to `writer`, which updates it in place: the
// step reads the value it started with.
absl::Status RunAfterEveryReader(Graph& g, int32_t leaf, int32_t writer);

}  // namespace reprise::autodiff

#endif  // REPRISE_SRC_AUTODIFF_AUTODIFF_H_
