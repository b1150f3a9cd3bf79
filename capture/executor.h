// Running a lowered step: eagerly (with or without a synchronisation after each launch), or as a
// CUDA graph captured once from the very same launch sequence and replayed.
#ifndef REPRISE_CAPTURE_EXECUTOR_H_
#define REPRISE_CAPTURE_EXECUTOR_H_

#include <cuda_runtime.h>

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "capture/lowered_step.h"
#include "src/runtime/owners.h"

namespace reprise::capture {

// Enqueues every launch on `stream`. With `sync_each`, waits after each one and reports a fault
// against the node that caused it.
absl::Status RunEager(absl::Span<const LoweredLaunch> launches, cudaStream_t stream,
                      bool sync_each);

// The step recorded under stream capture into one CUDA graph and instantiated once.
class CapturedStep {
 public:
  // Records `launches` on `stream` (no work runs) and instantiates the graph. A launch that
  // cannot be captured fails with its node's name; capture is then ended and nothing is kept.
  static absl::StatusOr<CapturedStep> Capture(absl::Span<const LoweredLaunch> launches,
                                              cudaStream_t stream);
  // One launch of the whole step.
  absl::Status Replay(cudaStream_t stream);

  int64_t num_nodes() const { return num_nodes_; }
  int64_t replays() const { return replays_; }
  const runtime::Graph& graph() const { return graph_; }

 private:
  CapturedStep(runtime::Graph graph, runtime::GraphExec exec, int64_t num_nodes)
      : graph_(std::move(graph)), exec_(std::move(exec)), num_nodes_(num_nodes) {}
  runtime::Graph graph_;
  runtime::GraphExec exec_;
  int64_t num_nodes_ = 0;
  int64_t replays_ = 0;
};

}  // namespace reprise::capture

#endif  // REPRISE_CAPTURE_EXECUTOR_H_
