// Schedule: the order of launches and the lane of each. The order runs each optimizer update as
// soon as it may, so gradients die early and the memory plan can reuse them. With two lanes the
// weight gradients, optimizer updates and what only weight gradients read (an activation the
// backward pass recomputes for them) run on lane 1 beside the data-gradient chain on lane 0; with
// more, side branches off the critical path get lanes of their own. A data-parallel graph's
// collectives (all_reduce) and the optimizer updates that wait for them take one more lane, the
// communication lane, after the compute lanes. Lanes become streams in eager mode and fork/join
// branches of the captured graph.
#ifndef REPRISE_SRC_PASSES_SCHEDULE_H_
#define REPRISE_SRC_PASSES_SCHEDULE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/graph.h"

namespace reprise::passes {

struct ScheduledLaunch {
  int32_t node = -1;
  int lane = 0;
  // Launches (indices into the schedule) on other lanes this one waits for: for each other lane,
  // the latest launch it needs, if a previous launch on its own lane did not already wait for it.
  std::vector<int> waits;
};

inline constexpr int kMaxLanes = 4;

// A weight gradient (role "wgrad"): with two lanes or more it runs on lane 1, and so does every
// node that only weight gradients read.
bool IsWeightGradient(const Node& node);

struct ScheduleOptions {
  // 1; 2 (weight gradients, optimizer updates and what only weight gradients read on lane 1); 3 or
  // 4 (also the nodes off the critical path, such as a residual block's downsample branch, on lanes
  // 2, 3); or 0: 2 if the graph has weight gradients, else 1. Lanes that nothing lands on are not
  // used.
  int lanes = 1;
};

// A topological order over the non-leaf nodes (data and control edges, and around each write of
// a parameter or state in place its readers' and writers' id order: what the CPU reference runs),
// optimizer updates first among the ready nodes, otherwise lowest node id first, with lanes and
// waits. Deterministic.
absl::StatusOr<std::vector<ScheduledLaunch>> Schedule(const Graph& graph,
                                                      const ScheduleOptions& options = {});

// Whether launch a has finished before launch b starts in every run of the schedule: same lane
// and earlier, or reached through a chain of waits.
class HappensBefore {
 public:
  explicit HappensBefore(absl::Span<const ScheduledLaunch> schedule);
  bool operator()(int a, int b) const;

 private:
  std::vector<int> lane_;
  // clock_[b][l]: the latest launch on lane l known finished when b starts (-1: none).
  std::vector<std::vector<int>> clock_;
};

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_SCHEDULE_H_
