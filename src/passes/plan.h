// Plan: the training step as an ordered list of launches with every tensor's place in the arena.
// It is host-only data; capture/ runs it eagerly or records it into a CUDA graph.
#ifndef REPRISE_SRC_PASSES_PLAN_H_
#define REPRISE_SRC_PASSES_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/autodiff/autodiff.h"
#include "src/passes/memory_plan.h"
#include "src/passes/schedule.h"

namespace reprise::passes {

struct Plan {
  autodiff::TrainingGraph training;
  std::vector<ScheduledLaunch> launches;  // Compute launches; the input copy precedes them.
  MemoryPlan memory;
  std::vector<Value> kept;  // The loss and the fetched values.

  const Graph& graph() const { return training.graph; }
};

// Schedules and places `training`; `fetch` are forward values to keep after the step.
absl::StatusOr<Plan> BuildPlan(autodiff::TrainingGraph training, absl::Span<const Value> fetch);

// One line per launch (lane, node, op, output specs and offsets), then the arena summary.
std::string PlanToString(const Plan& plan);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_PLAN_H_
