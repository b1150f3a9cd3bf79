// The host cost of each way a captured step changes between replays, for reprise-update-bench and
// its tests: a scalar set in the device-side parameter block, an input rebound by patching a copy
// node, a re-capture applied with cudaGraphExecUpdate, a forced new instantiation, and a plain
// replay with nothing changed. Each is timed on the host with the device idle (the queued step is
// waited for before every repetition, untimed), apart from the Step() that follows it, and the
// trainer's counters over the timed repetitions show which path each one took.
#ifndef REPRISE_SRC_API_UPDATE_PATHS_H_
#define REPRISE_SRC_API_UPDATE_PATHS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reprise/graph.h"
#include "reprise/trainer.h"

namespace reprise {

enum class UpdatePath : uint8_t {
  kStep,           // Nothing changes: Step() alone.
  kLearningRate,   // SetLearningRate: a host write into the parameter block, no graph update.
  kBindInput,      // BindInput to another device pointer: one memcpy node's parameters.
  kExecUpdate,     // The step captured again, applied in place by cudaGraphExecUpdate.
  kReinstantiate,  // The step captured again and instantiated anew (forced).
};
// "step", "learning_rate", "bind_input", "exec_update", "reinstantiate".
absl::string_view UpdatePathName(UpdatePath path);
// One name, or "all" for every path in the order above; comma-separated. InvalidArgument naming
// an unknown or repeated path, or for an empty list.
absl::StatusOr<std::vector<UpdatePath>> ParseUpdatePaths(absl::string_view list);

// What the trainer's counters (stats(), Report()) did over one path's timed repetitions.
struct UpdateCounters {
  int64_t replays = 0;
  int64_t captures = 0;
  int64_t instantiations = 0;
  int64_t exec_updates = 0;
  int64_t node_updates = 0;
  // Reasons counted during the repetitions (Report()'s, as differences; zero counts left out).
  std::vector<std::pair<std::string, int64_t>> recapture_reasons;
  std::vector<std::pair<std::string, int64_t>> instantiation_reasons;
};

struct UpdatePathResult {
  UpdatePath path = UpdatePath::kStep;
  std::vector<double> update_us;  // Host time of the change alone; empty for kStep.
  std::vector<double> step_us;    // Host time of the Step() right after it.
  UpdateCounters counters;
};

struct UpdateBenchOptions {
  std::vector<UpdatePath> paths;
  int reps = 1000;           // Timed repetitions of kStep, kLearningRate and kBindInput.
  int recapture_reps = 100;  // Timed repetitions of kExecUpdate and kReinstantiate.
  int warmup = 20;           // Untimed repetitions before each path's timed ones.
  std::string bound_input;   // The input kBindInput rebinds ("features", "images").
  int device_steps = 100;    // Replays timed on the device for step_device_ms.
};

struct UpdateBenchResult {
  std::vector<UpdatePathResult> paths;  // In the order asked for.
  double step_device_ms = 0;            // Median device time of one replay (CUDA events).
  int64_t launches_per_step = 0;
  int64_t graph_nodes = 0;
  int lanes = 1;
};

// Creates the trainer of `graph` (options.launch.mode must be ExecMode::kGraph), times its replays
// on the device, then measures each path of `bench` in turn. kBindInput binds bound_input to one of
// two zeroed device buffers (a re-capture, before the timed repetitions), flips between them
// each repetition, and unbinds it after. InvalidArgument for bad counts or another mode; the
// trainer's errors pass through.
absl::StatusOr<UpdateBenchResult> MeasureUpdatePaths(const Graph& graph, Value loss,
                                                     const TrainOptions& options,
                                                     const UpdateBenchOptions& bench);

}  // namespace reprise

#endif  // REPRISE_SRC_API_UPDATE_PATHS_H_
