// The optimizer update alone, for reprise-optimizer-bench: which launches of a plan make up the
// update (multi-tensor updates, gradient norm, clip coefficient, scheduled rate, step counter),
// the bytes they move, and their device time run back to back; and the device's copy bandwidth
// to hold it against.
#ifndef REPRISE_SRC_API_OPTIMIZER_BANDWIDTH_H_
#define REPRISE_SRC_API_OPTIMIZER_BANDWIDTH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "reprise/graph.h"
#include "reprise/trainer.h"
#include "src/passes/plan.h"

namespace reprise {

struct OptimizerTraffic {
  std::vector<std::string> nodes;  // The plan's optimizer launches, in plan order.
  int64_t bytes_read = 0;          // Every input of those launches, once per launch.
  int64_t bytes_written = 0;       // Their outputs and the inputs they update in place.
  int64_t parameters = 0;          // Parameter elements of the plan.
};

// Host-only: the launches of `plan` whose op is an optimizer op, and what they read and write.
OptimizerTraffic OptimizerTrafficOf(const passes::Plan& plan);

struct OptimizerTiming {
  OptimizerTraffic traffic;
  std::vector<float> ms;         // Per update: the optimizer launches back to back on one stream.
  int64_t nodes_per_update = 0;  // The plan's optimizer launches (GpuKernels).
  int64_t launches_per_update = 0;  // The kernel launches they make (a node may make several).
};

// Builds the trainer of `graph` (eager, so no graph is captured), runs two steps so that the
// gradients are real, then times the optimizer launches alone, `warmup` untimed and `iters` timed
// runs, each between CUDA events. The weights change as each run updates them.
absl::StatusOr<OptimizerTiming> TimeOptimizerUpdate(const Graph& graph, Value loss,
                                                    TrainOptions options, int warmup, int iters);

// A device-to-device cudaMemcpyAsync of `bytes`, `warmup` untimed and `iters` timed, each between
// CUDA events: the copy bandwidth the update is measured against (it reads and writes `bytes`).
absl::StatusOr<std::vector<float>> TimeDeviceCopy(int64_t bytes, int warmup, int iters);

}  // namespace reprise

#endif  // REPRISE_SRC_API_OPTIMIZER_BANDWIDTH_H_
