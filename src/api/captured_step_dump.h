// The captured CUDA graph of a model's training step, read back for dumps (reprise-dump --stage
// cuda-graph). Needs a GPU: a Trainer::Impl in ExecMode::kGraph captures the step while it is
// created; one step is then run and waited for, so the graph dumped is one known to replay.
#ifndef REPRISE_SRC_API_CAPTURED_STEP_DUMP_H_
#define REPRISE_SRC_API_CAPTURED_STEP_DUMP_H_

#include <string>

#include "absl/status/statusor.h"
#include "capture/graph_dump.h"
#include "reprise/graph.h"
#include "reprise/trainer.h"
#include "src/passes/plan.h"

namespace reprise {

struct CapturedStepDump {
  passes::Plan plan;             // The plan the step was lowered from.
  capture::CudaGraphDump graph;  // The captured graph's nodes, edges and their launches.
  std::string cuda_debug_dot;    // CUDA's own DOT (capture/graph_inspect.h), when asked for.
};

// OK when a CUDA device is visible; otherwise FailedPrecondition saying that --stage cuda-graph
// needs one (and the other stages do not).
absl::Status CheckDeviceForCapture();

// Builds the step of `loss` with `options` (mode forced to kGraph), runs it once and reads the
// captured graph. FailedPrecondition without a CUDA device; otherwise the Trainer's errors.
absl::StatusOr<CapturedStepDump> CaptureStepForDump(const Graph& graph, Value loss,
                                                    TrainOptions options, bool cuda_debug_dot);

}  // namespace reprise

#endif  // REPRISE_SRC_API_CAPTURED_STEP_DUMP_H_
