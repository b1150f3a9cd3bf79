// RunningTimes: the host time of a repeated call (Trainer::Step) as a mean over every sample and a
// median over the most recent ones, kept in a fixed ring so that a million steps cost no memory.
#ifndef REPRISE_SRC_UTIL_RUNNING_STATS_H_
#define REPRISE_SRC_UTIL_RUNNING_STATS_H_

#include <cstdint>
#include <vector>

namespace reprise::util {

class RunningTimes {
 public:
  static constexpr int kWindow = 1024;

  void Add(double value);
  int64_t count() const { return count_; }
  double mean() const { return count_ == 0 ? 0 : sum_ / static_cast<double>(count_); }
  // Median of the last kWindow samples (of an even number: the mean of the middle two); 0 when
  // there are none.
  double median() const;

 private:
  std::vector<double> recent_;  // A ring once full; next_ is the oldest sample.
  int next_ = 0;
  int64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace reprise::util

#endif  // REPRISE_SRC_UTIL_RUNNING_STATS_H_
