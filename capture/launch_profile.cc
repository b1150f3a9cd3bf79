#include "capture/launch_profile.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/owners.h"
#include "src/util/status_macros.h"

namespace reprise::capture {

absl::StatusOr<std::vector<LaunchTime>> ProfileLaunches(absl::Span<const LoweredLaunch> launches,
                                                        cudaStream_t stream, int repeats) {
  if (repeats <= 0) return absl::InvalidArgumentError("ProfileLaunches needs repeats > 0");
  std::vector<runtime::Event> marks;
  for (size_t i = 0; i <= launches.size(); ++i) {
    ASSIGN_OR_RETURN(runtime::Event e, runtime::Event::Create(cudaEventDefault));
    marks.push_back(std::move(e));
  }
  std::vector<std::vector<float>> samples(launches.size());
  for (int r = 0; r <= repeats; ++r) {  // Run 0 warms caches and clocks; it is not kept.
    for (size_t i = 0; i < launches.size(); ++i) {
      RETURN_IF_ERROR(runtime::CudaStatus(cudaEventRecord(marks[i].get(), stream),
                                          "cudaEventRecord", "ProfileLaunches"));
      RETURN_IF_ERROR(launches[i].kernel->Launch(stream));
    }
    RETURN_IF_ERROR(runtime::CudaStatus(cudaEventRecord(marks.back().get(), stream),
                                        "cudaEventRecord", "ProfileLaunches"));
    RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize",
                                        "ProfileLaunches"));
    if (r == 0) continue;
    for (size_t i = 0; i < launches.size(); ++i) {
      ASSIGN_OR_RETURN(float ms, runtime::ElapsedMs(marks[i], marks[i + 1]));
      samples[i].push_back(ms);
    }
  }
  std::vector<LaunchTime> times;
  for (size_t i = 0; i < launches.size(); ++i) {
    std::vector<float>& s = samples[i];
    std::nth_element(s.begin(), s.begin() + s.size() / 2, s.end());
    times.push_back(
        {launches[i].node_name, launches[i].kernel->Describe(), launches[i].lane, s[s.size() / 2]});
  }
  return times;
}

absl::StatusOr<std::vector<LaunchSpan>> TimeLanes(absl::Span<const LoweredLaunch> launches,
                                                  const Lanes& lanes, cudaStream_t origin,
                                                  int repeats) {
  if (repeats <= 0) return absl::InvalidArgumentError("TimeLanes needs repeats > 0");
  const char* kWhere = "TimeLanes";
  ASSIGN_OR_RETURN(runtime::Event begin, runtime::Event::Create(cudaEventDefault));
  std::vector<runtime::Event> ends;
  std::vector<cudaEvent_t> raw;
  for (size_t i = 0; i < launches.size(); ++i) {
    ASSIGN_OR_RETURN(runtime::Event e, runtime::Event::Create(cudaEventDefault));
    raw.push_back(e.get());
    ends.push_back(std::move(e));
  }
  // The step captured with an event-record node after every launch, so that what is timed is a
  // replay, as Step() runs it, not launches queued one by one from the host.
  RETURN_IF_ERROR(
      runtime::CudaStatus(cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal),
                          "cudaStreamBeginCapture", kWhere));
  absl::Status recorded =
      runtime::CudaStatus(cudaEventRecordWithFlags(begin.get(), origin, cudaEventRecordExternal),
                          "cudaEventRecordWithFlags", kWhere);
  if (recorded.ok()) recorded = lanes.Run(launches, origin, /*sync_each=*/false, nullptr, raw);
  cudaGraph_t captured = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(origin, &captured);
  const runtime::Graph graph = runtime::Graph::Adopt(captured);
  RETURN_IF_ERROR(recorded);
  RETURN_IF_ERROR(runtime::CudaStatus(ended, "cudaStreamEndCapture", kWhere));
  ASSIGN_OR_RETURN(const runtime::GraphExec exec, runtime::GraphExec::Create(graph));
  std::vector<std::vector<float>> samples(launches.size());
  for (int r = 0; r <= repeats; ++r) {  // Run 0 warms caches and clocks; it is not kept.
    RETURN_IF_ERROR(
        runtime::CudaStatus(cudaGraphLaunch(exec.get(), origin), "cudaGraphLaunch", kWhere));
    RETURN_IF_ERROR(
        runtime::CudaStatus(cudaStreamSynchronize(origin), "cudaStreamSynchronize", kWhere));
    if (r == 0) continue;
    for (size_t i = 0; i < launches.size(); ++i) {
      ASSIGN_OR_RETURN(float ms, runtime::ElapsedMs(begin, ends[i]));
      samples[i].push_back(ms);
    }
  }
  std::vector<LaunchSpan> spans;
  std::vector<float> lane_end;
  for (size_t i = 0; i < launches.size(); ++i) {
    const LoweredLaunch& launch = launches[i];
    std::vector<float>& s = samples[i];
    std::nth_element(s.begin(), s.begin() + s.size() / 2, s.end());
    if (launch.lane >= static_cast<int>(lane_end.size())) {
      // A lane forks after launch 0 (Lanes::Run).
      lane_end.resize(launch.lane + 1, spans.empty() ? 0.0f : spans[0].end_ms);
    }
    float start = lane_end[launch.lane];
    for (int w : launch.waits) start = std::max(start, spans[w].end_ms);
    // Every run orders launch i's event after those of its lane and of what it waits for, so the
    // medians keep that order too: end >= start.
    const float end = s[s.size() / 2];
    spans.push_back(
        {launch.node_name, launch.kernel->Describe(), launch.lane, launch.waits, start, end});
    lane_end[launch.lane] = end;
  }
  return spans;
}

}  // namespace reprise::capture
