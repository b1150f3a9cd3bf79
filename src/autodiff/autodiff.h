// Autodiff: extends a copy of the forward graph with its backward pass (one gradient rule per op,
// matmul gradients as separate dgrad and wgrad nodes) and the optimizer's update of every
// parameter, as ordinary graph nodes.
#ifndef REPRISE_SRC_AUTODIFF_AUTODIFF_H_
#define REPRISE_SRC_AUTODIFF_AUTODIFF_H_

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "reprise/graph.h"
#include "reprise/trainer.h"

namespace reprise::autodiff {

// Names of the scalar inputs that carry the optimizer's hyperparameters.
inline constexpr char kLearningRate[] = "learning_rate";
inline constexpr char kMomentum[] = "momentum";
inline constexpr char kWeightDecay[] = "weight_decay";
// The device-side step counter (state i32[2]) that random ops, Adam's bias correction and the
// learning-rate schedule read; the training step advances it.
inline constexpr char kStepCounter[] = "rng.step";

struct TrainingGraph {
  Graph graph;  // Node ids of the forward graph are kept: a forward Value means the same here.
  Value loss;
  std::vector<int32_t> parameters;                // Parameter node ids, in graph order.
  absl::flat_hash_map<int32_t, Value> gradients;  // Parameter node id -> its gradient.
  std::vector<int32_t> optimizer_nodes;
  int32_t forward_nodes = 0;  // Nodes [0, forward_nodes) are the forward graph's (for mirroring).
};

// Gradients of `loss` (a scalar of `forward`) with respect to every parameter it depends on.
// Returns the graph without optimizer nodes; used by tests and by BuildTrainingGraph.
absl::StatusOr<TrainingGraph> BuildBackward(const Graph& forward, Value loss);

// Backward plus one sgd_momentum node per parameter. Each update runs after every other reader
// of its parameter (control edges), so the step reads the weights it started with.
absl::StatusOr<TrainingGraph> BuildTrainingGraph(const Graph& forward, Value loss,
                                                 const SgdOptions& sgd);

// Backward plus the optimizer `optimizer` describes (src/autodiff/optimizer_graph.h), and the
// advance of the device step counter after its last reader. InvalidArgument for bad options.
absl::StatusOr<TrainingGraph> BuildTrainingGraphWith(const Graph& forward, Value loss,
                                                     const OptimizerOptions& optimizer);

// Control edges from every other reader of `leaf` to `writer`, which updates it in place: the
// step reads the value it started with.
absl::Status RunAfterEveryReader(Graph& g, int32_t leaf, int32_t writer);

}  // namespace reprise::autodiff

#endif  // REPRISE_SRC_AUTODIFF_AUTODIFF_H_
