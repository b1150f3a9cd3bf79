#include "capture/executor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise::capture {
namespace {

absl::Status SyncAfter(const LoweredLaunch& launch, cudaStream_t stream) {
  const std::string context = absl::StrCat("node '", launch.node_name, "'");
  RETURN_IF_ERROR(
      runtime::CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize", context));
  return runtime::CudaStatus(cudaGetLastError(), "kernel launch", context);
}

// A memcpy node and what SetCopySource relies on of it: where it writes, how much, its kind.
struct CopyNode {
  cudaGraphNode_t node;
  void* destination;
  size_t bytes;
  cudaMemcpyKind kind;
};

bool SameCopies(const std::vector<CopyNode>& a, const std::vector<CopyNode>& b) {
  return std::equal(
      a.begin(), a.end(), b.begin(), b.end(), [](const CopyNode& x, const CopyNode& y) {
        return x.destination == y.destination && x.bytes == y.bytes && x.kind == y.kind;
      });
}

// The memcpy nodes of `graph`, in its node order.
absl::StatusOr<std::vector<CopyNode>> CopyNodesOf(cudaGraph_t graph, const std::string& context) {
  size_t count = 0;
  RETURN_IF_ERROR(
      runtime::CudaStatus(cudaGraphGetNodes(graph, nullptr, &count), "cudaGraphGetNodes", context));
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0) {
    RETURN_IF_ERROR(runtime::CudaStatus(cudaGraphGetNodes(graph, nodes.data(), &count),
                                        "cudaGraphGetNodes", context));
  }
  std::vector<CopyNode> copies;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    RETURN_IF_ERROR(
        runtime::CudaStatus(cudaGraphNodeGetType(node, &type), "cudaGraphNodeGetType", context));
    if (type != cudaGraphNodeTypeMemcpy) continue;
    cudaMemcpy3DParms params = {};
    RETURN_IF_ERROR(runtime::CudaStatus(cudaGraphMemcpyNodeGetParams(node, &params),
                                        "cudaGraphMemcpyNodeGetParams", context));
    copies.push_back({node, params.dstPtr.ptr, params.extent.width, params.kind});
  }
  return copies;
}

// Why cudaGraphExecUpdate refused an update, in words.
absl::string_view ExecUpdateResultName(cudaGraphExecUpdateResult result) {
  switch (result) {
    case cudaGraphExecUpdateSuccess:
      return "update reported success but failed";
    case cudaGraphExecUpdateError:
      return "update refused (unspecified)";
    case cudaGraphExecUpdateErrorTopologyChanged:
      return "topology changed";
    case cudaGraphExecUpdateErrorNodeTypeChanged:
      return "node type changed";
    case cudaGraphExecUpdateErrorFunctionChanged:
      return "kernel function changed";
    case cudaGraphExecUpdateErrorParametersChanged:
      return "unsupported parameter change";
    case cudaGraphExecUpdateErrorNotSupported:
      return "update not supported";
    case cudaGraphExecUpdateErrorUnsupportedFunctionChange:
      return "unsupported kernel function change";
    case cudaGraphExecUpdateErrorAttributesChanged:
      return "node attributes changed";
  }
  return "update refused (unknown result)";
}

}  // namespace

absl::StatusOr<Lanes> Lanes::Create(absl::Span<const LoweredLaunch> launches) {
  Lanes lanes;
  int count = 1;
  lanes.done_.resize(launches.size());
  for (const LoweredLaunch& launch : launches) {
    count = std::max(count, launch.lane + 1);
    for (int w : launch.waits) {
      if (w < 0 || w >= static_cast<int>(launches.size())) {
        return absl::InternalError(
            absl::StrCat("launch '", launch.node_name, "' waits for launch ", w));
      }
      if (!lanes.done_[w].has_value()) {
        ASSIGN_OR_RETURN(lanes.done_[w], runtime::Event::Create());
      }
    }
  }
  for (int lane = 1; lane < count; ++lane) {
    ASSIGN_OR_RETURN(runtime::Stream stream, runtime::Stream::Create());
    lanes.streams_.push_back(std::move(stream));
    ASSIGN_OR_RETURN(runtime::Event join, runtime::Event::Create());
    lanes.joins_.push_back(std::move(join));
  }
  if (count > 1) {
    ASSIGN_OR_RETURN(lanes.fork_, runtime::Event::Create());
  }
  return lanes;
}

absl::Status Lanes::Run(absl::Span<const LoweredLaunch> launches, cudaStream_t origin,
                        bool sync_each, std::vector<std::vector<cudaGraphNode_t>>* last_nodes,
                        absl::Span<const cudaEvent_t> after_each) const {
  const char* kWhere = "lane fork/join";
  if (!after_each.empty() && after_each.size() != launches.size()) {
    return absl::InternalError(absl::StrCat("Lanes::Run: ", after_each.size(), " events for ",
                                            launches.size(), " launches"));
  }
  for (size_t i = 0; i < launches.size(); ++i) {
    const LoweredLaunch& launch = launches[i];
    // The other lanes fork after launch 0, the input copy, which any launch may read.
    if (i == 1 && fork_.has_value()) {
      RETURN_IF_ERROR(
          runtime::CudaStatus(cudaEventRecord(fork_->get(), origin), "cudaEventRecord", kWhere));
      for (const runtime::Stream& s : streams_) {
        RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamWaitEvent(s.get(), fork_->get(), 0),
                                            "cudaStreamWaitEvent", kWhere));
      }
    }
    if (launch.lane >= count()) {
      return absl::InternalError(absl::StrCat("launch '", launch.node_name, "' is on lane ",
                                              launch.lane, " of ", count()));
    }
    cudaStream_t stream = launch.lane == 0 ? origin : streams_[launch.lane - 1].get();
    for (int w : launch.waits) {
      RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamWaitEvent(stream, done_[w]->get(), 0),
                                          "cudaStreamWaitEvent",
                                          absl::StrCat("node '", launch.node_name, "'")));
    }
    RETURN_IF_ERROR(launch.kernel->Launch(stream));
    if (last_nodes != nullptr) {
      cudaStreamCaptureStatus status;
      const cudaGraphNode_t* deps = nullptr;
      size_t count = 0;
      RETURN_IF_ERROR(runtime::CudaStatus(
          cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, nullptr, &count),
          "cudaStreamGetCaptureInfo", absl::StrCat("node '", launch.node_name, "'")));
      last_nodes->emplace_back(deps, deps + count);
    }
    if (!after_each.empty()) {
      // External: under capture, an event-record node (a timing point), not only an edge.
      RETURN_IF_ERROR(runtime::CudaStatus(
          cudaEventRecordWithFlags(after_each[i], stream, cudaEventRecordExternal),
          "cudaEventRecordWithFlags", absl::StrCat("node '", launch.node_name, "'")));
    }
    if (done_[i].has_value()) {
      RETURN_IF_ERROR(runtime::CudaStatus(cudaEventRecord(done_[i]->get(), stream),
                                          "cudaEventRecord",
                                          absl::StrCat("node '", launch.node_name, "'")));
    }
    if (sync_each) RETURN_IF_ERROR(SyncAfter(launch, stream));
  }
  for (size_t lane = 0; lane < streams_.size(); ++lane) {
    RETURN_IF_ERROR(runtime::CudaStatus(cudaEventRecord(joins_[lane].get(), streams_[lane].get()),
                                        "cudaEventRecord", kWhere));
    RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamWaitEvent(origin, joins_[lane].get(), 0),
                                        "cudaStreamWaitEvent", kWhere));
  }
  return absl::OkStatus();
}

absl::Status RunEager(absl::Span<const LoweredLaunch> launches, cudaStream_t stream,
                      bool sync_each) {
  for (const LoweredLaunch& launch : launches) {
    if (launch.lane != 0) {
      return absl::InvalidArgumentError(absl::StrCat("launch '", launch.node_name, "' is on lane ",
                                                     launch.lane, ": run it with Lanes"));
    }
    RETURN_IF_ERROR(launch.kernel->Launch(stream));
    if (sync_each) RETURN_IF_ERROR(SyncAfter(launch, stream));
  }
  return absl::OkStatus();
}

absl::StatusOr<runtime::Graph> CapturedStep::Record(
    absl::Span<const LoweredLaunch> launches, const Lanes& lanes, cudaStream_t stream,
    std::vector<std::vector<cudaGraphNode_t>>& launch_nodes) {
  RETURN_IF_ERROR(
      runtime::CudaStatus(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                          "cudaStreamBeginCapture", "capture of the training step"));
  launch_nodes.clear();
  absl::Status recorded = lanes.Run(launches, stream, /*sync_each=*/false, &launch_nodes);
  cudaGraph_t raw = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &raw);
  runtime::Graph graph = runtime::Graph::Adopt(raw);
  if (!recorded.ok()) {
    return absl::Status(recorded.code(),
                        absl::StrCat("cannot capture the step: ", recorded.message()));
  }
  RETURN_IF_ERROR(
      runtime::CudaStatus(ended, "cudaStreamEndCapture", "capture of the training step"));
  return graph;
}

absl::StatusOr<runtime::GraphExec> CapturedStep::Instantiate(
    const runtime::Graph& graph, absl::Span<const LoweredLaunch> launches,
    absl::Span<const std::vector<cudaGraphNode_t>> launch_nodes) {
  if (launch_ == Launch::kDevice) {
    absl::StatusOr<runtime::GraphExec> exec =
        InstantiateForDeviceLaunch(graph, launches, launch_nodes);
    if (exec.ok() || !host_fallback_ ||
        exec.status().code() != absl::StatusCode::kFailedPrecondition) {
      return exec;
    }
    launch_ = Launch::kHost;
    launcher_.reset();
    trial_.reset();
    host_exec_.reset();
    host_launch_reason_ = absl::StrCat("the device refused the graph: ", exec.status().message());
  }
  return runtime::GraphExec::Create(graph);
}

absl::Status CapturedStep::UploadIfDevice(bool new_exec) {
  if (launch_ != Launch::kDevice) return absl::OkStatus();
  if (new_exec || !launcher_.has_value()) {
    ASSIGN_OR_RETURN(launcher_, DeviceLauncher::Create(exec_.get()));
  }
  RETURN_IF_ERROR(launcher_->Upload(stream_));
  ++uploads_;
  return absl::OkStatus();
}

absl::StatusOr<CapturedStep> CapturedStep::Capture(absl::Span<const LoweredLaunch> launches,
                                                   const Lanes& lanes, cudaStream_t stream,
                                                   Launch launch) {
  std::vector<std::vector<cudaGraphNode_t>> launch_nodes;
  ASSIGN_OR_RETURN(runtime::Graph graph, Record(launches, lanes, stream, launch_nodes));
  size_t num_nodes = 0;
  RETURN_IF_ERROR(runtime::CudaStatus(cudaGraphGetNodes(graph.get(), nullptr, &num_nodes),
                                      "cudaGraphGetNodes", "captured step"));
  CapturedStep step(std::move(graph), runtime::GraphExec::Adopt(nullptr),
                    static_cast<int64_t>(num_nodes));
  step.launch_ = launch;
  if (launch == Launch::kAuto) {
    const bool small = step.num_nodes_ < kAutoDeviceLaunchMinNodes;
    step.launch_ = small ? Launch::kHost : Launch::kDevice;
    step.host_fallback_ = true;
    if (small) {
      step.host_launch_reason_ =
          absl::StrCat(step.num_nodes_, " nodes, fewer than ", kAutoDeviceLaunchMinNodes,
                       ": the host launches them for less than the launcher costs the device");
    }
  }
  step.stream_ = stream;
  if (launch == Launch::kAuto && step.launch_ == Launch::kDevice) {
    ASSIGN_OR_RETURN(LaunchTrial trial, LaunchTrial::Create());
    step.trial_.emplace(std::move(trial));
  }
  ASSIGN_OR_RETURN(step.exec_, step.Instantiate(step.graph_, launches, launch_nodes));
  if (step.trial_.has_value()) {
    ASSIGN_OR_RETURN(runtime::GraphExec host_exec, runtime::GraphExec::Create(step.graph_));
    step.host_exec_.emplace(std::move(host_exec));
    RETURN_IF_ERROR(step.UploadHostExec());
  }
  step.launch_nodes_ = std::move(launch_nodes);
  RETURN_IF_ERROR(step.UploadIfDevice(/*new_exec=*/true));
  return step;
}

absl::Status CapturedStep::Recapture(absl::Span<const LoweredLaunch> launches, const Lanes& lanes,
                                     cudaStream_t stream, Apply apply) {
  std::vector<std::vector<cudaGraphNode_t>> launch_nodes;
  ASSIGN_OR_RETURN(runtime::Graph graph, Record(launches, lanes, stream, launch_nodes));
  ++captures_;
  size_t num_nodes = 0;
  RETURN_IF_ERROR(runtime::CudaStatus(cudaGraphGetNodes(graph.get(), nullptr, &num_nodes),
                                      "cudaGraphGetNodes", "re-captured step"));
  cudaGraphExecUpdateResultInfo info = {};
  std::string reason(kForcedInstantiation);
  if (apply == Apply::kUpdateElseInstantiate) {
    // An updated executable keeps naming its nodes by the graph it was instantiated from, which
    // SetCopySource searches for copy destinations: update only while the copies keep their places.
    const std::string context = "comparing the step's copies before a graph update";
    ASSIGN_OR_RETURN(const std::vector<CopyNode> before, CopyNodesOf(graph_.get(), context));
    ASSIGN_OR_RETURN(const std::vector<CopyNode> after, CopyNodesOf(graph.get(), context));
    if (!SameCopies(before, after)) {
      reason = kCopiesMoved;
    } else if (cudaGraphExecUpdate(exec_.get(), graph.get(), &info) == cudaSuccess) {
      ++exec_updates_;  // graph_ stays: it names the executable's nodes.
      RETURN_IF_ERROR(RestartLaunchTrial(graph, /*update=*/true));
      return UploadIfDevice(/*new_exec=*/false);
    } else {
      (void)cudaGetLastError();  // A refused update (e.g. new topology) is expected: instantiate.
      reason = std::string(ExecUpdateResultName(info.result));
    }
  }
  ASSIGN_OR_RETURN(exec_, Instantiate(graph, launches, launch_nodes));
  RETURN_IF_ERROR(RestartLaunchTrial(graph, /*update=*/false));
  ++instantiations_;
  ++instantiation_reasons_[reason];
  graph_ = std::move(graph);
  copy_nodes_.clear();  // Handles of the old graph.
  launch_nodes_ = std::move(launch_nodes);
  num_nodes_ = static_cast<int64_t>(num_nodes);
  return UploadIfDevice(/*new_exec=*/true);
}

absl::StatusOr<std::string> CapturedStep::Bind(InputCopy& copy, void* slot, const void* source,
                                               size_t bytes, bool on_device,
                                               absl::Span<const LoweredLaunch> launches,
                                               const Lanes& lanes, cudaStream_t stream) {
  const bool was_bound = copy.IsBound(slot), gathered = copy.Gathers();
  copy.Bind(slot, source, bytes, on_device);
  if (was_bound && source != nullptr && copy.Gathers() == gathered &&
      (gathered ? SetGatherList(copy.gather_list()) : SetCopySource(slot, source, bytes)).ok()) {
    return std::string();
  }
  // A new or removed copy, or a source the node cannot be switched to (another memory type).
  (void)cudaGetLastError();
  RETURN_IF_ERROR(Recapture(launches, lanes, stream));
  return std::string(
      source == nullptr ? "unbound" : (was_bound ? "rebound to another kind of memory" : "bound"));
}

absl::StatusOr<cudaGraphNode_t> CapturedStep::FindCopyNode(void* destination, size_t bytes) {
  if (auto it = copy_nodes_.find(destination); it != copy_nodes_.end()) return it->second;
  ASSIGN_OR_RETURN(const std::vector<CopyNode> copies, CopyNodesOf(graph_.get(), "binding update"));
  for (const CopyNode& c : copies) {
    // The staging copies may start at the same address; bound copies alone are cudaMemcpyDefault
    // copies of exactly one input.
    if (c.destination == destination && c.kind == cudaMemcpyDefault && c.bytes == bytes) {
      copy_nodes_[destination] = c.node;
      return c.node;
    }
  }
  return absl::NotFoundError("no copy node of the captured step writes that input");
}

absl::Status CapturedStep::SetCopySource(void* destination, const void* source, size_t bytes) {
  ASSIGN_OR_RETURN(cudaGraphNode_t node, FindCopyNode(destination, bytes));
  RETURN_IF_ERROR(
      runtime::CudaStatus(cudaGraphExecMemcpyNodeSetParams1D(exec_.get(), node, destination, source,
                                                             bytes, cudaMemcpyDefault),
                          "cudaGraphExecMemcpyNodeSetParams1D", "binding update"));
  if (host_exec_.has_value()) {
    RETURN_IF_ERROR(runtime::CudaStatus(
        cudaGraphExecMemcpyNodeSetParams1D(host_exec_->get(), node, destination, source, bytes,
                                           cudaMemcpyDefault),
        "cudaGraphExecMemcpyNodeSetParams1D", "binding update (the launch trial's host copy)"));
  }
  ++node_updates_;
  return UploadIfDevice(/*new_exec=*/false);
}

absl::Status CapturedStep::SetGatherList(const runtime::GatherList& list) {
  const char* kContext = "binding update (the input copy's gather kernel)";
  if (launch_nodes_.empty() || launch_nodes_[0].size() != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(kContext, ": launch 0 was not captured as one node"));
  }
  void* args[1] = {const_cast<runtime::GatherList*>(&list)};
  const cudaKernelNodeParams params = runtime::GatherKernelParams(list, args);
  RETURN_IF_ERROR(runtime::CudaStatus(
      cudaGraphExecKernelNodeSetParams(exec_.get(), launch_nodes_[0][0], &params),
      "cudaGraphExecKernelNodeSetParams", kContext));
  if (host_exec_.has_value()) {
    RETURN_IF_ERROR(runtime::CudaStatus(
        cudaGraphExecKernelNodeSetParams(host_exec_->get(), launch_nodes_[0][0], &params),
        "cudaGraphExecKernelNodeSetParams", kContext));
  }
  ++node_updates_;
  return UploadIfDevice(/*new_exec=*/false);
}

absl::Status CapturedStep::Replay(cudaStream_t stream) {
  // An executable instantiated for device launch may be launched from the host too.
  const bool on_device = trial_.has_value() ? trial_->NextOnDevice() : launch_ == Launch::kDevice;
  if (launch_ == Launch::kDevice && stream != stream_) {
    // The uploads went to stream_; a replay elsewhere would not be ordered after them.
    return absl::InvalidArgumentError(
        "a device-launched step replays only on the stream it was captured on");
  }
  if (on_device) {
    RETURN_IF_ERROR(launcher_->Launch(stream));
  } else {
    cudaGraphExec_t exec = host_exec_.has_value() ? host_exec_->get() : exec_.get();
    RETURN_IF_ERROR(runtime::CudaStatus(cudaGraphLaunch(exec, stream), "cudaGraphLaunch",
                                        "replay of the training step"));
  }
  ++replays_;
  if (!trial_.has_value()) return absl::OkStatus();
  RETURN_IF_ERROR(trial_->AfterReplay(stream));
  return SettleLaunchTrial();
}

absl::Status CapturedStep::UploadHostExec() {
  return runtime::CudaStatus(cudaGraphUpload(host_exec_->get(), stream_), "cudaGraphUpload",
                             "the host-launched executable of the launch trial");
}

absl::Status CapturedStep::SettleLaunchTrial() {
  ASSIGN_OR_RETURN(const std::optional<LaunchTrial::Verdict> verdict, trial_->Poll());
  if (!verdict.has_value()) return absl::OkStatus();
  launch_measured_ = verdict->text;
  trial_.reset();
  if (!verdict->device) {
    // Replays of the device's executable may still be in flight: CUDA frees an executable
    // destroyed in flight when it completes.
    launch_ = Launch::kHost;
    exec_ = *std::move(host_exec_);
    launcher_.reset();
    host_launch_reason_ = absl::StrCat("faster from the host (", launch_measured_, ")");
  }
  host_exec_.reset();
  return absl::OkStatus();
}

absl::Status CapturedStep::RestartLaunchTrial(const runtime::Graph& graph, bool update) {
  if (!trial_.has_value()) return absl::OkStatus();
  if (!update) {
    ASSIGN_OR_RETURN(runtime::GraphExec host_exec, runtime::GraphExec::Create(graph));
    host_exec_.emplace(std::move(host_exec));
    RETURN_IF_ERROR(UploadHostExec());
  } else if (cudaGraphExecUpdateResultInfo info = {};
             cudaGraphExecUpdate(host_exec_->get(), graph.get(), &info) != cudaSuccess) {
    (void)cudaGetLastError();
    // graph_ keeps naming the device's executable's nodes, which an executable instantiated from
    // `graph` would not share: the trial ends, keeping the device's launch, and says why.
    trial_.reset();
    host_exec_.reset();
    launch_measured_ = "not measured: the host's executable refused an update the device's took";
    return absl::OkStatus();
  }
  trial_->Restart();
  return absl::OkStatus();
}

}  // namespace reprise::capture
