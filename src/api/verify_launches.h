// Verify mode's launch list: the trainer's launches with gradient copies interleaved (see
// src/api/trainer_verify.cc for why). Index bookkeeping only, host-only and tested on the CPU: each
// copy runs on its producer's lane right after it, and every launch that waited for the producer
// waits for its last copy instead, so nothing that runs after the producer on another lane (and
// nothing that may overwrite the gradient's space) can start before the copies are done.
#ifndef REPRISE_SRC_API_VERIFY_LAUNCHES_H_
#define REPRISE_SRC_API_VERIFY_LAUNCHES_H_

#include <vector>

#include "absl/types/span.h"

namespace reprise {

// What the interleaving needs of a launch: its lane and the launches (indices) it waits for.
struct LaunchOrder {
  int lane = 0;
  std::vector<int> waits;
};

struct VerifyLaunch {
  int original = -1;  // The trainer's launch this runs, or -1 for a copy.
  int copy = -1;      // For a copy: which of its producer's copies (0, 1, ...).
  int producer = -1;  // For a copy: the trainer's launch that produced the gradient.
  int lane = 0;
  std::vector<int> waits;  // Indices into the interleaved list.
};

// `launches` in order, with copies_after[i] copies after launch i (copies_after.size() ==
// launches.size()). Launch 0 keeps index 0: lanes fork after it.
std::vector<VerifyLaunch> InterleaveCopies(absl::Span<const LaunchOrder> launches,
                                           absl::Span<const int> copies_after);

}  // namespace reprise

#endif  // REPRISE_SRC_API_VERIFY_LAUNCHES_H_
