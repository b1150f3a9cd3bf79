// PhaseTimer: splits a span of wall time into named phases that follow one another, so that the
// phases add up to the whole (Trainer::Create's breakdown in TrainerStats::create_ms).
#ifndef REPRISE_SRC_UTIL_PHASE_TIMER_H_
#define REPRISE_SRC_UTIL_PHASE_TIMER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace reprise::util {

class PhaseTimer {
 public:
  PhaseTimer() : start_(absl::Now()), last_(start_) {}

  // Closes the phase that began at the previous Mark (or at construction) and books its time
  // under `name`. A name marked again adds to its first entry, which keeps its place, so that a
  // loop that alternates two kinds of work books each once.
  void Mark(absl::string_view name) {
    const absl::Time now = absl::Now();
    const double ms = absl::ToDoubleMilliseconds(now - last_);
    last_ = now;
    for (auto& [phase, total] : phases_) {
      if (phase == name) {
        total += ms;
        return;
      }
    }
    phases_.emplace_back(std::string(name), ms);
  }

  // Every phase so far, in the order each was first marked; milliseconds.
  const std::vector<std::pair<std::string, double>>& phases() const { return phases_; }
  // From construction to the last Mark: the sum of phases().
  double total_ms() const { return absl::ToDoubleMilliseconds(last_ - start_); }

 private:
  absl::Time start_;
  absl::Time last_;
  std::vector<std::pair<std::string, double>> phases_;
};

}  // namespace reprise::util

#endif  // REPRISE_SRC_UTIL_PHASE_TIMER_H_
