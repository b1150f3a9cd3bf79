// reprise-bench's timed steps: the warm-up (which runs kAuto's launch trial out, so the timed
// steps run its choice) and long runs timed in chunks that report progress.
#ifndef REPRISE_TOOLS_BENCH_TIMING_H_
#define REPRISE_TOOLS_BENCH_TIMING_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reprise/trainer.h"

namespace reprise::tools {

// While the trainer times both graph launches (TrainerStats::graph_launch_measuring: kAuto's
// first 18 steps, capture/launch_trial.h), steps back to back, as the timed ones run, then saying
// on stderr which launch it kept and why; then Trainer::TimeSteps(steps), whose times it returns.
absl::StatusOr<std::vector<float>> WarmUp(Trainer& trainer, int steps);

// TimeSteps(steps), in chunks of about five seconds when the steps would take longer than ten in
// all (`step_s` estimates one step), saying on stderr how far it got after each chunk. Each chunk
// starts on an idle device, so its first step's time includes the host's launch: short runs stay
// one chunk, and in a long one (steps of many ms) that launch is a negligible part of a step.
absl::StatusOr<std::vector<float>> TimeStepsShowingProgress(Trainer& trainer, int steps,
                                                            double step_s, absl::string_view what);

}  // namespace reprise::tools

#endif  // REPRISE_TOOLS_BENCH_TIMING_H_
