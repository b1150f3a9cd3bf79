// Per-launch device time of a lowered step: every launch in plan order on one stream, each between
// two CUDA events, repeated and reduced to medians. For finding where a step's time goes; the
// timings include no overlap between lanes, so their sum exceeds a lane-parallel step's time.
#ifndef REPRISE_CAPTURE_LAUNCH_PROFILE_H_
#define REPRISE_CAPTURE_LAUNCH_PROFILE_H_

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "capture/lowered_step.h"

namespace reprise::capture {

struct LaunchTime {
  std::string node;    // The plan node (a fused group's first node's name).
  std::string kernel;  // GpuKernel::Describe().
  int lane = 0;        // The lane the plan gives it.
  float median_ms = 0;
};

// Runs the step `repeats` times (after one untimed run) on `stream`. The plan order is a
// topological order, so one stream runs every lane's launches correctly.
absl::StatusOr<std::vector<LaunchTime>> ProfileLaunches(absl::Span<const LoweredLaunch> launches,
                                                        cudaStream_t stream, int repeats);

}  // namespace reprise::capture

#endif  // REPRISE_CAPTURE_LAUNCH_PROFILE_H_
