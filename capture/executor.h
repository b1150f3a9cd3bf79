// Running a lowered step: eagerly (with or without a synchronisation after each launch), or as a
// CUDA graph captured once from the very same launch sequence and replayed. Lanes run on streams
// of their own, ordered by events; captured, the same waits become the graph's fork/join edges.
#ifndef REPRISE_CAPTURE_EXECUTOR_H_
#define REPRISE_CAPTURE_EXECUTOR_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "capture/device_launch.h"
#include "capture/launch_trial.h"
#include "capture/lowered_step.h"
#include "src/runtime/owners.h"

namespace reprise::capture {

// The streams of lanes 1, 2, ... and the events that order a step's launches across lanes. Lane
// 0 is the caller's stream: the other lanes fork from it after launch 0 (the input copy, which
// any launch may read) and join back into it at the end, so whatever follows on that stream sees
// the whole step done.
class Lanes {
 public:
  static absl::StatusOr<Lanes> Create(absl::Span<const LoweredLaunch> launches);
  int count() const { return static_cast<int>(streams_.size()) + 1; }

  // Enqueues every launch on its lane. With `sync_each`, waits after each launch and reports a
  // fault against the node that caused it. Under capture, `last_nodes` (if given) receives for
  // each launch the graph nodes its lane depended on right after it: the launch's last nodes.
  // `after_each` (empty, or one event per launch): event i is recorded on launch i's lane right
  // after it, to time the lanes as they overlap (TimeLanes).
  absl::Status Run(absl::Span<const LoweredLaunch> launches, cudaStream_t origin, bool sync_each,
                   std::vector<std::vector<cudaGraphNode_t>>* last_nodes = nullptr,
                   absl::Span<const cudaEvent_t> after_each = {}) const;

 private:
  Lanes() = default;
  std::vector<runtime::Stream> streams_;
  std::vector<std::optional<runtime::Event>> done_;  // After launch i, if someone waits for it.
  std::optional<runtime::Event> fork_;
  std::vector<runtime::Event> joins_;  // End of lane 1, 2, ...
};

// Single-lane form: every launch on `stream`; InvalidArgument if a launch is on another lane.
absl::Status RunEager(absl::Span<const LoweredLaunch> launches, cudaStream_t stream,
                      bool sync_each);

// The step recorded under stream capture into one CUDA graph and instantiated once.
class CapturedStep {
 public:
  // Who launches the step's executable graph on each Replay.
  enum class Launch : uint8_t {
    kHost,  // cudaGraphLaunch of the step from the host: host work grows with the graph's nodes.
    // Instantiated for device launch and tail-launched by a one-node launcher graph
    // (capture/device_launch.h): constant host work. Every change of the executable is uploaded
    // on the capture stream, and Replay must use that stream.
    kDevice,
    // kDevice for a graph of at least kAutoDeviceLaunchMinNodes nodes that the device can
    // launch, then during the first replays both launches timed (capture/launch_trial.h) and the
    // faster kept; else kHost, for good (host_launch_reason() says why). launch() says which
    // runs.
    kAuto,
  };
  // Below this many nodes kAuto launches from the host: cudaGraphLaunch costs the host ~0.1 to
  // 0.15 us per node (at most ~8 us here), while a device launch adds the launcher's kernel to
  // every step's device time, which a step this small feels; and the trial would slow the host's
  // launches for good, since the device's executable must be uploaded (capture/launch_trial.h).
  // MLP 4x1024 at batch 256 (34 nodes) on an H100: 0.188 ms a step launched from the host alone,
  // 0.196 after the trial kept the host's launch (docs/benchmarks.md, 2026-12-06).
  static constexpr int64_t kAutoDeviceLaunchMinNodes = 64;

  // Records `launches` on `stream` and the lanes' streams (no work runs) and instantiates the
  // graph. A launch that cannot be captured fails with its node's name; capture is then ended and
  // nothing is kept. kDevice: FailedPrecondition naming the node if the graph cannot be launched
  // from the device.
  static absl::StatusOr<CapturedStep> Capture(absl::Span<const LoweredLaunch> launches,
                                              const Lanes& lanes, cudaStream_t stream,
                                              Launch launch = Launch::kHost);
  // One launch of the whole step.
  absl::Status Replay(cudaStream_t stream);

  // How Recapture brings the executable graph up to date.
  enum class Apply : uint8_t {
    kUpdateElseInstantiate,  // cudaGraphExecUpdate in place; instantiate anew if it is refused.
    // Instantiate anew without trying an update: only to measure and test that fallback
    // (counted under the reason kForcedInstantiation).
    kInstantiate,
  };
  static constexpr char kForcedInstantiation[] = "forced (Apply::kInstantiate)";
  // Counted where a re-capture moved, added or removed input copies (bindings changed).
  static constexpr char kCopiesMoved[] = "input copies changed";

  // Records `launches` again after a change of topology (a binding added or removed) and brings
  // the executable graph up to date: in place with cudaGraphExecUpdate when the driver accepts
  // it and the input copies kept their places, else by instantiating anew. Each path is counted.
  // kDevice: no replay may be in flight.
  absl::Status Recapture(absl::Span<const LoweredLaunch> launches, const Lanes& lanes,
                         cudaStream_t stream, Apply apply = Apply::kUpdateElseInstantiate);
  // Points the captured bound-input copy (a cudaMemcpyDefault copy of `bytes`) into
  // `destination` at a new source, in the executable graph itself: no capture, no instantiation.
  // NotFound if no such copy node writes `destination`. kDevice: no replay may be in flight.
  absl::Status SetCopySource(void* destination, const void* source, size_t bytes);
  // Points the captured gather kernel of the input copy (launch 0, InputCopy::Gathers) at `list`,
  // in the executable graph itself, as SetCopySource does for a memcpy node: no capture, no
  // instantiation. An error if launch 0 is not that one kernel node. Counted with node_updates.
  // kDevice: no replay may be in flight.
  absl::Status SetGatherList(const runtime::GatherList& list);

  // Binds the input at `slot` to `source` (nullptr: unbinds it) in `copy`, the step's input copy
  // (LoweredStep::input_copy, launch 0 of `launches`), and brings the executable graph up to date
  // the cheapest way: a rebinding to memory of the same kind patches the copy's node in place
  // (SetGatherList or SetCopySource); a new or removed binding, or a source the node cannot be
  // switched to, records the step again (Recapture). Returns why it re-captured ("bound",
  // "unbound", "rebound to another kind of memory"), or "" when it patched in place.
  // kDevice: no replay may be in flight.
  absl::StatusOr<std::string> Bind(InputCopy& copy, void* slot, const void* source, size_t bytes,
                                   bool on_device, absl::Span<const LoweredLaunch> launches,
                                   const Lanes& lanes, cudaStream_t stream);

  int64_t exec_updates() const { return exec_updates_; }
  int64_t instantiations() const { return instantiations_; }
  int64_t node_updates() const { return node_updates_; }
  int64_t captures() const { return captures_; }
  // kHost or kDevice: the launch in use (kDevice while kAuto's trial times both).
  Launch launch() const { return launch_; }
  // kAuto: why the host launches the step ("" when the device does, or kAuto was not asked).
  const std::string& host_launch_reason() const { return host_launch_reason_; }
  // kAuto: whether the first replays are still timing both launches, and what that trial says
  // (its progress, then both times; "" where there was none).
  bool launch_measuring() const { return trial_.has_value(); }
  std::string launch_measurement() const {
    return trial_.has_value() ? trial_->Progress() : launch_measured_;
  }
  // kDevice: uploads of the executable to the device (one per instantiation and per update).
  int64_t uploads() const { return uploads_; }
  // Why each re-capture was instantiated anew rather than updated in place: cudaGraphExecUpdate's
  // result ("topology changed", ...), counted.
  const std::map<std::string, int64_t>& instantiation_reasons() const {
    return instantiation_reasons_;
  }

  int64_t num_nodes() const { return num_nodes_; }
  int64_t replays() const { return replays_; }
  const runtime::Graph& graph() const { return graph_; }
  // For each launch, the captured graph's nodes that end it (edges leave a launch only there).
  const std::vector<std::vector<cudaGraphNode_t>>& launch_nodes() const { return launch_nodes_; }

 private:
  CapturedStep(runtime::Graph graph, runtime::GraphExec exec, int64_t num_nodes)
      : graph_(std::move(graph)), exec_(std::move(exec)), num_nodes_(num_nodes) {}
  // Records the step into a new graph; `launch_nodes` gets each launch's last nodes.
  static absl::StatusOr<runtime::Graph> Record(
      absl::Span<const LoweredLaunch> launches, const Lanes& lanes, cudaStream_t stream,
      std::vector<std::vector<cudaGraphNode_t>>& launch_nodes);
  // The bound-input copy node writing `destination` (searched once, then remembered).
  absl::StatusOr<cudaGraphNode_t> FindCopyNode(void* destination, size_t bytes);
  // Instantiates `graph` for launch_ (device launch: launch_nodes names a refused node's launch;
  // with host_fallback_, a refusal turns launch_ to kHost and instantiates for it).
  absl::StatusOr<runtime::GraphExec> Instantiate(
      const runtime::Graph& graph, absl::Span<const LoweredLaunch> launches,
      absl::Span<const std::vector<cudaGraphNode_t>> launch_nodes);
  // kDevice, after exec_ changed (`new_exec`: instantiated anew, so the launcher needs it too):
  // uploads it. Nothing for kHost.
  absl::Status UploadIfDevice(bool new_exec);
  // kAuto's trial: uploads host_exec_ as soon as it is made, so that the trial's first
  // host-launched block does not also pay for the upload its first launch would do.
  absl::Status UploadHostExec();
  // kAuto's trial, after a replay: once it has a verdict, keeps that launch for good.
  absl::Status SettleLaunchTrial();
  // After a re-capture to `graph` during kAuto's trial: brings the host's executable up to date
  // (in place where `update` and the driver allow it) and starts the trial over.
  absl::Status RestartLaunchTrial(const runtime::Graph& graph, bool update);

  runtime::Graph graph_;
  std::vector<std::vector<cudaGraphNode_t>> launch_nodes_;
  absl::flat_hash_map<void*, cudaGraphNode_t> copy_nodes_;  // Nodes of graph_ found so far.
  runtime::GraphExec exec_;
  Launch launch_ = Launch::kHost;
  bool host_fallback_ = false;  // Asked for kAuto.
  std::string host_launch_reason_;
  cudaStream_t stream_ = nullptr;           // kDevice: where uploads go and replays must run.
  std::optional<DeviceLauncher> launcher_;  // kDevice.
  std::optional<LaunchTrial> trial_;        // kAuto, until its verdict.
  // During the trial, the same graph instantiated for the host's launch: an executable made for
  // device launch runs slower when the host launches it (MLP 4x1024: 0.194 against 0.180 ms).
  std::optional<runtime::GraphExec> host_exec_;
  std::string launch_measured_;  // The verdict's times.
  int64_t uploads_ = 0;
  int64_t num_nodes_ = 0;
  int64_t replays_ = 0;
  int64_t captures_ = 1, instantiations_ = 1, exec_updates_ = 0, node_updates_ = 0;
  std::map<std::string, int64_t> instantiation_reasons_;
};

}  // namespace reprise::capture

#endif  // REPRISE_CAPTURE_EXECUTOR_H_
