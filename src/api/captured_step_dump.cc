#include "src/api/captured_step_dump.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "capture/graph_inspect.h"
#include "src/api/trainer_impl.h"
#include "src/runtime/device.h"
#include "src/util/status_macros.h"

namespace reprise {

absl::Status CheckDeviceForCapture() {
  ASSIGN_OR_RETURN(int devices, runtime::VisibleDeviceCount());
  if (devices == 0) {
    return absl::FailedPreconditionError(
        "--stage cuda-graph needs a CUDA device and none is visible; the ir, training and plan "
        "stages need none");
  }
  return absl::OkStatus();
}

absl::StatusOr<CapturedStepDump> CaptureStepForDump(const Graph& graph, Value loss,
                                                    TrainOptions options, bool cuda_debug_dot) {
  RETURN_IF_ERROR(CheckDeviceForCapture());
  options.launch.mode = ExecMode::kGraph;
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer::Impl> trainer,
                   Trainer::Impl::Create(graph, loss, options));
  RETURN_IF_ERROR(trainer->Step());
  RETURN_IF_ERROR(trainer->Synchronize());
  const capture::CapturedStep* step = trainer->captured();
  if (step == nullptr) {
    return absl::InternalError("the trainer was built in graph mode but captured no step");
  }
  CapturedStepDump dump;
  ASSIGN_OR_RETURN(dump.graph, capture::InspectCudaGraph(step->graph().get(), trainer->launches(),
                                                         step->launch_nodes()));
  if (cuda_debug_dot) {
    ASSIGN_OR_RETURN(dump.cuda_debug_dot,
                     capture::CudaGraphDebugDot(step->graph().get(), dump.graph));
  }
  dump.plan = trainer->plan();
  return dump;
}

}  // namespace reprise
