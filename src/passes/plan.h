// Plan: the training step as an ordered list of launches with every tensor's place in the arena.
// It is host-only data; capture/ runs it eagerly or records it into a CUDA graph.
#ifndef REPRISE_SRC_PASSES_PLAN_H_
#define REPRISE_SRC_PASSES_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/autodiff/autodiff.h"
#include "src/passes/fuse.h"
#include "src/passes/memory_plan.h"
#include "src/passes/mirror.h"
#include "src/passes/schedule.h"

namespace reprise::passes {

struct PlanOptions {
  // Recompute cheap forward values in the backward pass where that lowers the activation peak
  // (src/passes/mirror.h); runs first, each candidate planned by the rest of this pipeline.
  MirrorOptions mirror;
  bool fuse = true;  // Run the fuse pass; off, every node is its own launch.
  FuseOptions fusion;
  int lanes = 1;  // See ScheduleOptions.
};

struct Plan {
  autodiff::TrainingGraph training;       // After fusion: the graph the launches run.
  std::vector<ScheduledLaunch> launches;  // Compute launches; the input copy precedes them.
  MemoryPlan memory;
  std::vector<Value> kept;  // The loss and the fetched values.
  // Values of the unfused (mirrored) training graph, whose forward values are the user's graph's,
  // -> values here; empty when nothing was fused.
  absl::flat_hash_map<Value, Value> values;
  std::vector<std::pair<std::string, std::vector<std::string>>> fused_groups;
  // Why the whole-step MLP kernel (FuseOptions::whole_mlp_step) did not apply, when it was tried.
  std::string whole_step_declined;
  // Mirroring: the activation peak this plan would have without it (memory.transient_peak when
  // nothing is mirrored), and each recomputed forward node as (original, twin) names.
  int64_t activation_peak_unmirrored = 0;
  int64_t mirror_floor = 0;  // MirrorFloorBytes: no policy's activation peak is lower.
  std::vector<std::pair<std::string, std::string>> mirrored;
  int mirror_evaluations = 0;  // Candidate graphs the mirror pass planned.

  const Graph& graph() const { return training.graph; }
  int lanes() const;  // 1 + the highest lane of any launch.
  // Lanes that run compute, each with a workspace: all but a data-parallel plan's communication
  // lane (the last), whose collectives and optimizer updates need none.
  int compute_lanes() const;
  // The plan's value for a value of the user's graph; NotFound if fusion removed it.
  absl::StatusOr<Value> MapValue(Value user_value) const;
};

// Mirrors, fuses (per `options`), schedules and places `training`, as autodiff built it; `fetch`
// are forward values to keep after the step. Errors of the mirror pass (a budget no plan meets)
// pass through.
absl::StatusOr<Plan> BuildPlan(autodiff::TrainingGraph training, absl::Span<const Value> fetch,
                               const PlanOptions& options = {});

// One line per launch (lane, node, op, output specs and offsets), then the arena summary.
std::string PlanToString(const Plan& plan);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_PLAN_H_
