#include "capture/launch_trial.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise::capture {
namespace {

constexpr char kWhat[] = "timing the step's launch from the host and from the device";

// Device, host, host, device: a drift of the clocks over the trial touches both launches alike.
bool BlockOnDevice(int block) { return block == 0 || block == LaunchTrial::kBlocks - 1; }

}  // namespace

absl::StatusOr<LaunchTrial> LaunchTrial::Create() {
  std::vector<runtime::Event> marks;
  for (int i = 0; i < 2 * kBlocks; ++i) {
    ASSIGN_OR_RETURN(runtime::Event mark, runtime::Event::Create(cudaEventDefault));
    marks.push_back(std::move(mark));
  }
  return LaunchTrial(std::move(marks));
}

int LaunchTrial::BlockOf(int r) {
  if (r < kWarmUpSteps || r >= kSteps) return -1;
  return (r - kWarmUpSteps) / kBlockSteps;
}

bool LaunchTrial::NextOnDevice() const {
  const int block = BlockOf(replays_);
  return block < 0 || BlockOnDevice(block);
}

absl::Status LaunchTrial::AfterReplay(cudaStream_t stream) {
  const int block = BlockOf(replays_);
  const int in_block = (replays_ - kWarmUpSteps) % kBlockSteps;
  ++replays_;
  if (block < 0 || (in_block != 0 && in_block != kBlockSteps - 1)) return absl::OkStatus();
  return runtime::CudaStatus(
      cudaEventRecord(marks_[2 * block + (in_block == 0 ? 0 : 1)].get(), stream), "cudaEventRecord",
      kWhat);
}

absl::StatusOr<std::optional<LaunchTrial::Verdict>> LaunchTrial::Poll() {
  if (replays_ < kSteps) return std::nullopt;
  const cudaError_t reached = cudaEventQuery(marks_.back().get());
  if (reached == cudaErrorNotReady) return std::nullopt;
  RETURN_IF_ERROR(runtime::CudaStatus(reached, "cudaEventQuery", kWhat));
  Verdict v;
  for (int block = 0; block < kBlocks; ++block) {
    ASSIGN_OR_RETURN(const float ms, runtime::ElapsedMs(marks_[2 * block], marks_[2 * block + 1]));
    (BlockOnDevice(block) ? v.device_ms : v.host_ms) += ms;
  }
  const int steps_each = kBlocks / 2 * (kBlockSteps - 1);
  v.host_ms /= steps_each;
  v.device_ms /= steps_each;
  v.device = !(v.host_ms < v.device_ms * (1 - kHostMargin));
  v.text = absl::StrFormat(
      "measured over %d steps each: %.4f ms a step launched from the host, %.4f from the device",
      steps_each, v.host_ms, v.device_ms);
  return v;
}

std::string LaunchTrial::Progress() const {
  return absl::StrCat("measuring both launches: step ", replays_, " of ", kSteps);
}

}  // namespace reprise::capture
