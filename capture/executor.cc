#include "capture/executor.h"

#include "absl/strings/str_cat.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise::capture {

absl::Status RunEager(absl::Span<const LoweredLaunch> launches, cudaStream_t stream,
                      bool sync_each) {
  for (const LoweredLaunch& launch : launches) {
    RETURN_IF_ERROR(launch.kernel->Launch(stream));
    if (sync_each) {
      const std::string context = absl::StrCat("node '", launch.node_name, "'");
      RETURN_IF_ERROR(
          runtime::CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize", context));
      RETURN_IF_ERROR(runtime::CudaStatus(cudaGetLastError(), "kernel launch", context));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CapturedStep> CapturedStep::Capture(absl::Span<const LoweredLaunch> launches,
                                                   cudaStream_t stream) {
  RETURN_IF_ERROR(
      runtime::CudaStatus(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                          "cudaStreamBeginCapture", "capture of the training step"));
  absl::Status recorded = RunEager(launches, stream, /*sync_each=*/false);
  cudaGraph_t raw = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &raw);
  runtime::Graph graph = runtime::Graph::Adopt(raw);
  if (!recorded.ok()) {
    return absl::Status(recorded.code(),
                        absl::StrCat("cannot capture the step: ", recorded.message()));
  }
  RETURN_IF_ERROR(
      runtime::CudaStatus(ended, "cudaStreamEndCapture", "capture of the training step"));
  size_t num_nodes = 0;
  RETURN_IF_ERROR(runtime::CudaStatus(cudaGraphGetNodes(graph.get(), nullptr, &num_nodes),
                                      "cudaGraphGetNodes", "captured step"));
  ASSIGN_OR_RETURN(runtime::GraphExec exec, runtime::GraphExec::Create(graph));
  return CapturedStep(std::move(graph), std::move(exec), static_cast<int64_t>(num_nodes));
}

absl::Status CapturedStep::Replay(cudaStream_t stream) {
  RETURN_IF_ERROR(runtime::CudaStatus(cudaGraphLaunch(exec_.get(), stream), "cudaGraphLaunch",
                                      "replay of the training step"));
  ++replays_;
  return absl::OkStatus();
}

}  // namespace reprise::capture
