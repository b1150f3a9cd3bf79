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
#include "capture/executor.h"
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

// One launch as the lanes actually overlap: when it ended, in ms after the step began (the median
// over the repeats), and when it could start: the later of its lane's previous launch's end and
// the ends of the launches it waits for. end - start is its time with whatever ran beside it.
struct LaunchSpan {
  std::string node;
  std::string kernel;
  int lane = 0;
  std::vector<int> waits;  // The launches (indices) it waits for on other lanes.
  float start_ms = 0;
  float end_ms = 0;
};

// Captures the step through `lanes` on `origin` with an event-record node after each launch on
// its lane, and replays that graph once untimed and then `repeats` times. The event nodes add a
// little time between launches, so the spans are for finding where lanes wait, not for a step's
// time.
absl::StatusOr<std::vector<LaunchSpan>> TimeLanes(absl::Span<const LoweredLaunch> launches,
                                                  const Lanes& lanes, cudaStream_t origin,
                                                  int repeats);

}  // namespace reprise::capture

#endif  // REPRISE_CAPTURE_LAUNCH_PROFILE_H_
