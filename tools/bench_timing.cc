#include "tools/bench_timing.h"

#include <algorithm>
#include <cstdio>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "src/util/status_macros.h"

namespace reprise::tools {

absl::StatusOr<std::vector<float>> WarmUp(Trainer& trainer, int steps) {
  // kAuto's launch trial first, in one call of more than its 18 steps: TimeSteps synchronizes
  // before it starts, and a synchronization inside the trial's blocks shows the launch's latency
  // where the timed loop (one call, the host ahead of the device) hides it (with the warm-up's 10
  // steps first, the host's second block held that synchronization).
  constexpr int kTrialSteps = 20;
  bool measured = false;
  while (trainer.stats().graph_launch_measuring) {
    RETURN_IF_ERROR(trainer.TimeSteps(kTrialSteps).status());
    measured = true;
  }
  if (measured) {
    const TrainerStats stats = trainer.stats();
    std::fprintf(stderr, "reprise-bench: launched from the %s, %s\n",
                 stats.device_graph_launch ? "device" : "host",
                 stats.graph_launch_measurement.c_str());
  }
  return trainer.TimeSteps(steps);
}

absl::StatusOr<std::vector<float>> TimeStepsShowingProgress(Trainer& trainer, int steps,
                                                            double step_s, absl::string_view what) {
  if (steps * step_s < 10) return trainer.TimeSteps(steps);
  const int chunk = std::max(1, static_cast<int>(5 / step_s));
  const absl::Time start = absl::Now();
  std::vector<float> ms;
  while (static_cast<int>(ms.size()) < steps) {
    ASSIGN_OR_RETURN(std::vector<float> part,
                     trainer.TimeSteps(std::min(chunk, steps - static_cast<int>(ms.size()))));
    ms.insert(ms.end(), part.begin(), part.end());
    std::fprintf(stderr, "reprise-bench: %.*s: %zu/%d steps (%.0f s)\n",
                 static_cast<int>(what.size()), what.data(), ms.size(), steps,
                 absl::ToDoubleSeconds(absl::Now() - start));
  }
  return ms;
}

}  // namespace reprise::tools
