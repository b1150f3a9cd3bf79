#include "tools/launch_reports.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace reprise::tools {
namespace {

// Launch times summed per kind of kernel (the first two words of its description), largest
// first, as shares of their sum.
void PrintByKind(const std::vector<std::pair<std::string, double>>& kernel_ms, double total) {
  std::map<std::string, std::pair<double, int>> by_kind;
  for (const auto& [kernel, ms] : kernel_ms) {
    const std::vector<std::string> words = absl::StrSplit(kernel, ' ');
    const std::string kind = words.size() >= 2 ? absl::StrCat(words[0], " ", words[1]) : kernel;
    by_kind[kind].first += ms;
    by_kind[kind].second += 1;
  }
  std::vector<std::pair<std::string, std::pair<double, int>>> kinds(by_kind.begin(), by_kind.end());
  std::sort(kinds.begin(), kinds.end(),
            [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  for (const auto& [kind, stat] : kinds) {
    std::printf("  %-40s %4d launches %9.3f ms %5.1f%%\n", kind.c_str(), stat.second, stat.first,
                100 * stat.first / total);
  }
}

}  // namespace

void PrintProfile(std::vector<Trainer::LaunchTime> times, int slowest) {
  std::vector<std::pair<std::string, double>> kernel_ms;
  double total = 0;
  for (const auto& t : times) {
    kernel_ms.emplace_back(t.kernel, t.median_ms);
    total += t.median_ms;
  }
  std::printf("profile: %zu launches, %.3f ms in sum (launches timed one by one)\n", times.size(),
              total);
  PrintByKind(kernel_ms, total);
  std::sort(times.begin(), times.end(),
            [](const auto& a, const auto& b) { return a.median_ms > b.median_ms; });
  for (int i = 0; i < std::min<int>(slowest, times.size()); ++i) {
    std::printf("  %8.3f ms  lane %d  %-36s %s\n", times[i].median_ms, times[i].lane,
                times[i].node.c_str(), times[i].kernel.c_str());
  }
}

void PrintTimeline(const std::vector<Trainer::LaunchSpan>& spans, int listed, bool every_launch) {
  float span = 0, lane0_end = 0;
  std::map<int, std::pair<double, int>> busy;  // lane -> (ms, launches)
  struct Wait {
    float ms;
    int launch, awaited;
  };
  std::vector<Wait> waits;
  std::vector<float> lane_end;
  for (int i = 0; i < static_cast<int>(spans.size()); ++i) {
    const auto& s = spans[i];
    span = std::max(span, s.end_ms);
    busy[s.lane].first += s.end_ms - s.start_ms;
    busy[s.lane].second += 1;
    if (s.lane >= static_cast<int>(lane_end.size())) lane_end.resize(s.lane + 1, 0.0f);
    if (s.lane == 0) {
      lane0_end = s.end_ms;
      int awaited = -1;
      for (int w : s.waits) {
        if (awaited < 0 || spans[w].end_ms > spans[awaited].end_ms) awaited = w;
      }
      if (awaited >= 0 && spans[awaited].end_ms > lane_end[0]) {
        waits.push_back({spans[awaited].end_ms - lane_end[0], i, awaited});
      }
    }
    lane_end[s.lane] = s.end_ms;
  }
  double waited = 0;
  for (const Wait& w : waits) waited += w.ms;
  std::printf("timeline: %zu launches, %.3f ms from the step's start to its last launch's end\n",
              spans.size(), span);
  for (const auto& [lane, b] : busy) {
    std::printf("  lane %d: %4d launches, %.3f ms busy (%.1f%% of the step)\n", lane, b.second,
                b.first, 100 * b.first / span);
  }
  std::printf(
      "  lane 0 waits for other lanes %d times, %.3f ms in all; it ends at %.3f ms, "
      "%.3f ms before the step\n",
      static_cast<int>(waits.size()), waited, lane0_end, span - lane0_end);
  std::sort(waits.begin(), waits.end(), [](const Wait& a, const Wait& b) { return a.ms > b.ms; });
  for (int i = 0; i < std::min<int>(listed, waits.size()); ++i) {
    const Wait& w = waits[i];
    std::printf("  %8.3f ms  at %8.3f  %-36s waits for lane %d %s\n", w.ms,
                spans[w.launch].start_ms, spans[w.launch].node.c_str(), spans[w.awaited].lane,
                spans[w.awaited].node.c_str());
  }
  for (const auto& s : spans) {
    if (s.lane != 0 && s.end_ms > lane0_end) {
      std::printf("  after lane 0: %8.3f to %8.3f ms  lane %d  %-36s %s\n", s.start_ms, s.end_ms,
                  s.lane, s.node.c_str(), s.kernel.c_str());
    }
  }
  // Each launch's span in the replay (concurrent lanes overlap, so the sum exceeds the step):
  // what the launches cost inside the captured step, unlike --profile's launches timed alone.
  std::vector<std::pair<std::string, double>> kernel_ms;
  double total = 0;
  for (const auto& s : spans) {
    kernel_ms.emplace_back(s.kernel, s.end_ms - s.start_ms);
    total += s.end_ms - s.start_ms;
  }
  std::printf("  launch spans in the replay: %.3f ms in sum over the lanes\n", total);
  PrintByKind(kernel_ms, total);
  std::vector<int> longest(spans.size());
  for (int i = 0; i < static_cast<int>(spans.size()); ++i) longest[i] = i;
  auto length = [&](int i) { return spans[i].end_ms - spans[i].start_ms; };
  std::sort(longest.begin(), longest.end(), [&](int a, int b) { return length(a) > length(b); });
  for (int i = 0; i < std::min<int>(listed, longest.size()); ++i) {
    const auto& s = spans[longest[i]];
    std::printf("  %8.3f ms  lane %d  %-36s %s\n", length(longest[i]), s.lane, s.node.c_str(),
                s.kernel.c_str());
  }
  if (every_launch) {
    std::vector<int> by_start = longest;
    std::sort(by_start.begin(), by_start.end(),
              [&](int a, int b) { return spans[a].start_ms < spans[b].start_ms; });
    std::printf("  every launch, by start: start ms, end ms, lane, node\n");
    for (int i : by_start) {
      std::printf("  %8.3f %8.3f  lane %d  %s\n", spans[i].start_ms, spans[i].end_ms, spans[i].lane,
                  spans[i].node.c_str());
    }
  }
}

}  // namespace reprise::tools
