// The step compiler: the one place that turns a user's graph and loss into the Plan a Trainer
// runs. Every caller (Trainer, BucketedTrainer, LocalDataParallel, reprise-dump) goes through it,
// so a dump shows exactly what a Trainer runs. The passes run in this order, each a function of
// the graph and its own options:
//
//   ensemble batching  src/passes/batch_ensemble.h   (float32 only: the batched ops lower f32)
//   channels-last      src/passes/channels_last.h
//   mixed precision    src/passes/mixed_precision.h
//   autodiff + optimizer + loss scaling  src/autodiff/
//   data parallel      src/passes/data_parallel.h
//   mirror -> fuse -> schedule -> memory plan   src/passes/plan.h
//
//   ASSIGN_OR_RETURN(passes::CompiledStep step, passes::CompileStep(graph, loss, options));
//   // step.plan: the launches and the arena; the rest maps user names and values onto it.
#ifndef REPRISE_SRC_PASSES_PIPELINE_H_
#define REPRISE_SRC_PASSES_PIPELINE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "reprise/channels_last.h"
#include "reprise/data_parallel.h"
#include "reprise/graph.h"
#include "reprise/optimizer.h"
#include "src/autodiff/autodiff.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/passes/batch_ensemble.h"
#include "src/passes/channels_last.h"
#include "src/passes/plan.h"

namespace reprise::passes {

struct CompileOptions {
  // Structurally identical models train as one batched model; min_models is raised out of reach
  // (nothing batched) for a 16-bit compute_dtype.
  bool batch_ensembles = true;
  EnsembleOptions ensembles;
  ChannelsLast channels_last = ChannelsLast::kAuto;
  DType compute_dtype = DType::kFloat32;
  OptimizerOptions optimizer = autodiff::FromSgd(SgdOptions{});
  LossScaleOptions loss_scale;  // kAuto is resolved for compute_dtype here.
  // The non-finite guard (reprise/non_finite.h). On by default, as TrainOptions'; a whole-step
  // MLP kernel declines a guarded step (it updates each layer as its gradient is ready).
  NonFiniteOptions non_finite;
  std::optional<DataParallel> data_parallel;
  PlanOptions plan;          // Mirror, fuse, lanes (0: auto).
  std::vector<Value> fetch;  // Forward values of the user's graph kept readable after the step.
};

// The forward graph rewritten and differentiated: everything before mirroring.
struct TrainingStep {
  autodiff::TrainingGraph training;
  std::vector<Value> kept;     // The loss's and fetched values' forms in `training`.
  BatchedGraph batched;        // Ensemble batching: user values -> (stacked) values, per model.
  LayoutValueMap user_values;  // Values of the batched graph -> their forms in `training`.
  std::string data_parallel_buckets;  // BucketsToString of the averaged gradients, if any.
};

struct CompiledStep {
  Plan plan;
  BatchedGraph batched;
  LayoutValueMap user_values;
  Graph unfused_training;  // The training graph before mirroring and fusion (its own names).
  std::string data_parallel_buckets;
};

// The first half of CompileStep: ensemble batching through data parallelism. InvalidArgument for
// options no pass accepts (lanes outside [0, kMaxLanes], a bad optimizer, ...).
absl::StatusOr<TrainingStep> BuildTrainingStep(const Graph& graph, Value loss,
                                               const CompileOptions& options);

// The whole pipeline. Errors of every pass pass through, naming the node.
absl::StatusOr<CompiledStep> CompileStep(const Graph& graph, Value loss,
                                         const CompileOptions& options);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_PIPELINE_H_
