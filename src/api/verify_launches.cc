#include "src/api/verify_launches.h"

namespace reprise {

std::vector<VerifyLaunch> InterleaveCopies(absl::Span<const LaunchOrder> launches,
                                           absl::Span<const int> copies_after) {
  std::vector<VerifyLaunch> out;
  std::vector<int> stands_for(launches.size());  // Launch -> the last entry standing for it.
  for (size_t i = 0; i < launches.size(); ++i) {
    VerifyLaunch launch;
    launch.original = static_cast<int>(i);
    launch.lane = launches[i].lane;
    for (int w : launches[i].waits) launch.waits.push_back(stands_for[w]);
    out.push_back(std::move(launch));
    const int copies = i < copies_after.size() ? copies_after[i] : 0;
    for (int c = 0; c < copies; ++c) {
      out.push_back({.copy = c, .producer = static_cast<int>(i), .lane = launches[i].lane});
    }
    stands_for[i] = static_cast<int>(out.size()) - 1;
  }
  return out;
}

}  // namespace reprise
