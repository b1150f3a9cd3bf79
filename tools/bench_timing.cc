#include "tools/bench_timing.h"

#include <algorithm>
#include <cstdio>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "src/util/status_macros.h"

namespace reprise::tools {

absl::StatusOr<std::vector<float>> WarmUp(Trainer& trainer, int steps) {
  // More than the trial's 14 steps, so that one call ends it wherever the warm-up left it.
  constexpr int kTrialSteps = 16;
  ASSIGN_OR_RETURN(std::vector<float> ms, trainer.TimeSteps(steps));
  while (trainer.stats().graph_launch_measuring) {
    ASSIGN_OR_RETURN(ms, trainer.TimeSteps(kTrialSteps));
  }
  return ms;
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
