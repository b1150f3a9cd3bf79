// reprise-bench's per-launch reports: where a step's device time goes (--profile, from
// Trainer::ProfileLaunches) and how its lanes overlap (--timeline, from Trainer::TimeLanes).
#ifndef REPRISE_TOOLS_LAUNCH_REPORTS_H_
#define REPRISE_TOOLS_LAUNCH_REPORTS_H_

#include <vector>

#include "reprise/trainer.h"

namespace reprise::tools {

// Launch times summed per kind of kernel, then the `slowest` slowest launches.
void PrintProfile(std::vector<Trainer::LaunchTime> times, int slowest);

// Busy time per lane, the `listed` longest waits of lane 0 (the data-gradient chain) for other
// lanes, what runs after lane 0's last launch, the launches' spans per kind of kernel and the
// `listed` longest; with `every_launch`, every launch by start.
void PrintTimeline(const std::vector<Trainer::LaunchSpan>& spans, int listed, bool every_launch);

}  // namespace reprise::tools

#endif  // REPRISE_TOOLS_LAUNCH_REPORTS_H_
