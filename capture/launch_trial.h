// Which launch of a captured step is faster, measured in the first steps a trainer runs rather
// than guessed from its node count (TrainOptions::launch.graph_launch = kAuto). A graph
// instantiated for device launch can be launched from the host too, with the same kernels and so
// the same bits, and which one is faster depends on more than the graph's size: on an H200 the
// host's launch took MLP 4x1024 at batch 256 (34 nodes) 0.180 ms a step against the device's
// 0.199 and ResNet-50 at batch 32 (556 nodes) 5.368 against 5.447, while GPT-2 124M at B=4 (409
// nodes) ran 3.571 ms from the device against 3.692 from the host (docs/benchmarks.md).
//
// The trial runs on the steps the trainer would run anyway (the host's launches on an executable of
// their own, instantiated for the host): after kWarmUpSteps, kBlocks blocks of kBlockSteps steps
// each, launched device, host, host, device (so that a drift of the clocks touches both alike). A
// block's first step, the one after a switch of launch, is not timed (it waits on the other
// launch's last step, which the steady loop never does): events after each block's first and last
// steps time the rest. Not solved: a trainer set up for both launches runs its host launches slower
// than a trainer that only launches from the host (ResNet-50 at batch 32 on an H100: 6.08 against
// 5.95 ms a step; MLP 4x1024 at batch 256 0.196 against 0.188, also after the trial kept the host's
// launch). The cause is the explicit cudaGraphUpload that a device launch needs: a kHost trainer
// whose executable is uploaded so runs as slowly, and neither a new executable, a new capture nor
// an upload on another stream escapes it afterwards (docs/benchmarks.md, 2026-12-06); so kAuto
// keeps the device's launch for ResNet-50 at batch 32 in bfloat16, 1.6% slower
// than kHost there (in TF32 and at batch 256 the device's launch is the faster). Nothing waits for
// the events: each later replay asks whether the last one has been reached, and once it has, the
// launch of less time per step is kept for good (the host's only where it is faster by more than
// kHostMargin: the device's launch costs the host less). The steps' timings are those of the
// trainer's own loop, whatever else that loop does between its steps.
#ifndef REPRISE_CAPTURE_LAUNCH_TRIAL_H_
#define REPRISE_CAPTURE_LAUNCH_TRIAL_H_

#include <cuda_runtime.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/runtime/owners.h"

namespace reprise::capture {

class LaunchTrial {
 public:
  static constexpr int kWarmUpSteps = 2, kBlockSteps = 4, kBlocks = 4;
  static constexpr double kHostMargin = 0.005;
  // Steps from the first replay to the last one the trial times.
  static constexpr int kSteps = kWarmUpSteps + kBlocks * kBlockSteps;

  struct Verdict {
    bool device = true;                 // Keep launching from the device.
    double host_ms = 0, device_ms = 0;  // Per step, over kBlocks / 2 * (kBlockSteps - 1) each.
    std::string text;                   // Both times, for TrainerStats and the report.
  };

  static absl::StatusOr<LaunchTrial> Create();

  // Whether the next replay launches from the device (the warm-up's and the device blocks').
  bool NextOnDevice() const;
  // After each replay: records a block's events where one falls.
  absl::Status AfterReplay(cudaStream_t stream);
  // Once every block has been timed on the device (asked, never waited for): the verdict;
  // std::nullopt before.
  absl::StatusOr<std::optional<Verdict>> Poll();
  // Starts over (the step was recorded again: earlier times may not hold).
  void Restart() { replays_ = 0; }
  // "measuring: step N of kSteps" until a verdict.
  std::string Progress() const;

 private:
  explicit LaunchTrial(std::vector<runtime::Event> marks) : marks_(std::move(marks)) {}
  // The block replay `r` (0-based) falls in, or -1 (warm-up or past the blocks).
  static int BlockOf(int r);

  std::vector<runtime::Event> marks_;  // 2 per block (after its first and last steps).
  int replays_ = 0;                    // Replays since the trial started.
};

}  // namespace reprise::capture

#endif  // REPRISE_CAPTURE_LAUNCH_TRIAL_H_
