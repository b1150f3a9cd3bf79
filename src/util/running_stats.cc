#include "src/util/running_stats.h"

#include <algorithm>

namespace reprise::util {

void RunningTimes::Add(double value) {
  ++count_;
  sum_ += value;
  if (static_cast<int>(recent_.size()) < kWindow) {
    recent_.push_back(value);
    return;
  }
  recent_[next_] = value;
  next_ = (next_ + 1) % kWindow;
}

double RunningTimes::median() const {
  if (recent_.empty()) return 0;
  std::vector<double> sorted = recent_;
  const size_t mid = sorted.size() / 2;
  std::nth_element(sorted.begin(), sorted.begin() + mid, sorted.end());
  const double upper = sorted[mid];
  if (sorted.size() % 2 == 1) return upper;
  const double lower = *std::max_element(sorted.begin(), sorted.begin() + mid);
  return (lower + upper) / 2;
}

}  // namespace reprise::util
