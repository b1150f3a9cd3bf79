#include "src/passes/pipeline.h"

#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/passes/data_parallel.h"
#include "src/passes/fuse.h"
#include "src/passes/mixed_precision.h"
#include "src/passes/schedule.h"
#include "src/util/status_macros.h"

namespace reprise::passes {

absl::StatusOr<TrainingStep> BuildTrainingStep(const Graph& graph, Value loss,
                                               const CompileOptions& options) {
  if (options.plan.lanes < 0 || options.plan.lanes > kMaxLanes) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainOptions::launch.lanes must be 0 (auto) or 1 to ", kMaxLanes, ", got ",
                     options.plan.lanes));
  }
  TrainingStep step;
  // The batched ops lower float32 only, so a mixed-precision ensemble trains unbatched.
  EnsembleOptions ensembles = options.ensembles;
  if (!options.batch_ensembles || options.compute_dtype != DType::kFloat32) {
    ensembles.min_models = INT_MAX;
  }
  ASSIGN_OR_RETURN(step.batched, BatchEnsembles(graph, loss, options.fetch, ensembles));
  // NCHW networks run channels-last inside; fetched values keep the user's layout.
  ASSIGN_OR_RETURN(ChannelsLastGraph layout,
                   ApplyChannelsLast(step.batched.graph, step.batched.loss, step.batched.kept,
                                     options.channels_last));
  // Mixed precision computes in 16 bits with float32 master weights (the loss and reads in f32).
  ASSIGN_OR_RETURN(
      MixedPrecisionGraph mixed,
      ConvertToMixedPrecision(layout.graph, layout.loss, layout.kept, options.compute_dtype));
  for (auto& [user, value] : layout.map.values) value = mixed.values.at(value);
  step.user_values = std::move(layout.map);
  step.kept = std::move(mixed.kept);
  ASSIGN_OR_RETURN(step.training,
                   autodiff::BuildTrainingGraphWith(
                       mixed.graph, mixed.loss, options.optimizer,
                       autodiff::ResolveLossScaling(options.loss_scale, options.compute_dtype),
                       options.non_finite));
  // Data parallelism: the gradients averaged over the ranks, bucket by bucket, before the
  // optimizer.
  if (options.data_parallel.has_value()) {
    ASSIGN_OR_RETURN(step.training, AddDataParallel(*options.data_parallel, step.training,
                                                    &step.data_parallel_buckets));
  }
  return step;
}

namespace {

absl::StatusOr<CompiledStep> PlanStep(TrainingStep step, const CompileOptions& options) {
  CompiledStep compiled;
  compiled.unfused_training = step.training.graph;
  ASSIGN_OR_RETURN(compiled.plan, BuildPlan(std::move(step.training), step.kept, options.plan));
  compiled.batched = std::move(step.batched);
  compiled.user_values = std::move(step.user_values);
  compiled.data_parallel_buckets = std::move(step.data_parallel_buckets);
  return compiled;
}

}  // namespace

absl::StatusOr<CompiledStep> CompileStep(const Graph& graph, Value loss,
                                         const CompileOptions& options) {
  ASSIGN_OR_RETURN(TrainingStep step, BuildTrainingStep(graph, loss, options));
  return PlanStep(std::move(step), options);
}

}  // namespace reprise::passes
