// Options of the mirror pass (src/passes/mirror.h), which TrainOptions::mirror and the tools'
// --mirror flags set.
//
// Backward mirroring: recomputing cheap forward values (pointwise ops, batch-norm outputs, max
// pooling; never convolutions or matmuls) in the backward pass, where that lowers the activation
// peak, i.e. the liveness-planned transient memory. Results are the same: bit for bit on the CPU
// reference.
#ifndef REPRISE_INCLUDE_REPRISE_MIRROR_OPTIONS_H_
#define REPRISE_INCLUDE_REPRISE_MIRROR_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reprise {

struct MirrorOptions {
  enum class Policy : uint8_t {
    kOff,     // Keep every value the backward pass reads.
    kAuto,    // Mirror while the peak keeps falling: the largest saving for cheap recomputation.
    kBudget,  // The least recomputation that brings the activation peak to budget_bytes or below.
  };
  Policy policy = Policy::kOff;
  int64_t budget_bytes = 0;  // kBudget only.
};

// "off", "auto" or a byte count (a budget), as the tools' --mirror flags take it.
absl::StatusOr<MirrorOptions> ParseMirrorOptions(absl::string_view text);
std::string MirrorOptionsToString(const MirrorOptions& options);  // "off", "auto" or the bytes.

}  // namespace reprise

#endif  // REPRISE_INCLUDE_REPRISE_MIRROR_OPTIONS_H_
