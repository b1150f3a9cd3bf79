// Device graph launch (TrainOptions::device_graph_launch): the step's CUDA graph instantiated for
// launch from the device, and a one-node host graph whose kernel tail-launches it. A Step() then
// costs the host one cudaGraphLaunch of that one-node graph, whatever the step's size
// (cudaGraphLaunch's host work grows with the nodes of the graph it launches: ~0.15 us each on an
// H100).
//
// Ordering (CUDA Programming Guide, "Device Graph Launch"): a graph launched from the host runs in
// its stream's environment, and a graph it tail-launches replaces its environment there when it
// completes; the stream's next work (the next step, an event, reading the loss) starts only once
// the tail-launched step is done.
//
// Updates: an executable graph instantiated for device launch is updated on the host (node
// parameters, cudaGraphExecUpdate) and the change reaches the device only when the executable is
// uploaded again (cudaGraphUpload); updating it while the device launches it is undefined, so
// callers update with no step in flight and upload before the next launch.
#ifndef REPRISE_CAPTURE_DEVICE_LAUNCH_H_
#define REPRISE_CAPTURE_DEVICE_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "capture/lowered_step.h"
#include "src/runtime/owners.h"

namespace reprise::capture {

// Instantiates `graph`, captured from `launches` (`launch_nodes`: CapturedStep::launch_nodes();
// both may be empty for a graph built otherwise), for launch from the device
// (cudaGraphInstantiateFlagDeviceLaunch). A graph the device cannot launch (a host node, an event
// node, a copy from pageable host memory, nodes on several devices, ...) is FailedPrecondition
// naming CUDA's reason and the node: its kind, kernel or copy, and the plan launch it came from.
absl::StatusOr<runtime::GraphExec> InstantiateForDeviceLaunch(
    const runtime::Graph& graph, absl::Span<const LoweredLaunch> launches = {},
    absl::Span<const std::vector<cudaGraphNode_t>> launch_nodes = {});

// "memcpy node (4096 bytes from pageable host memory to memory of device 0)", "host node", ...: a
// node's kind and, for a copy, where its operands live; for the message above.
std::string DescribeGraphNode(cudaGraphNode_t node);

// The one-node host graph that tail-launches a step instantiated by InstantiateForDeviceLaunch.
class DeviceLauncher {
 public:
  // For `step`, which must stay alive while the launcher launches it; a new executable of the step
  // needs a new launcher.
  static absl::StatusOr<DeviceLauncher> Create(cudaGraphExec_t step);
  // Uploads the step's executable to the device in `stream`: needed once after instantiation and
  // again after every update of it, before the next launch.
  absl::Status Upload(cudaStream_t stream);
  // Queues the step on `stream`: one host launch of the one-node graph. Internal, naming CUDA's
  // error, if an earlier launch found the device refusing the step (the stream has failed too).
  absl::Status Launch(cudaStream_t stream);
  absl::Status CheckFault() const;

 private:
  DeviceLauncher(cudaGraphExec_t step, runtime::Graph graph, runtime::GraphExec exec,
                 runtime::PinnedBuffer fault)
      : step_(step), graph_(std::move(graph)), exec_(std::move(exec)), fault_(std::move(fault)) {}

  cudaGraphExec_t step_;
  runtime::Graph graph_;
  runtime::GraphExec exec_;
  runtime::PinnedBuffer fault_;  // One int the kernel writes if the device refuses the step.
};

}  // namespace reprise::capture

#endif  // REPRISE_CAPTURE_DEVICE_LAUNCH_H_
