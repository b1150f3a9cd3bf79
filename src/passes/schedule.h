// Schedule: the order of launches and the lane of each. Today one lane; the order runs each
// optimizer update as soon as it may, so gradients die early and the memory plan can reuse them.
#ifndef REPRISE_SRC_PASSES_SCHEDULE_H_
#define REPRISE_SRC_PASSES_SCHEDULE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "reprise/graph.h"

namespace reprise::passes {

struct ScheduledLaunch {
  int32_t node = -1;
  int lane = 0;
  std::vector<int> waits;  // Launch indices on other lanes this one waits for.
};

// A topological order over the non-leaf nodes (data and control edges), optimizer updates first
// among the ready nodes, otherwise lowest node id first. Deterministic.
absl::StatusOr<std::vector<ScheduledLaunch>> Schedule(const Graph& graph);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_SCHEDULE_H_
