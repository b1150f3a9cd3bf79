// How busy the GPU is inside a window: CUPTI's activity records of every kernel and copy that ran
// in it (graph replays included), merged into busy time. CUPTI is loaded at run time, so nothing
// needs it to build or start; without it Start() is Unavailable and callers report "n/a".
//
//   ASSIGN_OR_RETURN(auto activity, KernelActivity::Start());
//   ... run and synchronise the steps ...
//   ASSIGN_OR_RETURN(KernelActivity::Summary s, activity->Stop());
#ifndef REPRISE_SRC_RUNTIME_KERNEL_ACTIVITY_H_
#define REPRISE_SRC_RUNTIME_KERNEL_ACTIVITY_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace reprise::runtime {

class KernelActivity {
 public:
  struct Summary {
    int64_t kernels = 0;       // Kernel executions recorded.
    int64_t copies = 0;        // Memory copies recorded.
    double busy_ms = 0;        // Union of their intervals: time anything ran.
    double kernel_sum_ms = 0;  // Sum of kernel durations (exceeds busy_ms when lanes overlap).
    int64_t dropped = 0;       // Records CUPTI could not keep (then busy_ms is a lower bound).
  };

  // Starts recording. Unavailable when libcupti cannot be loaded; FailedPrecondition when another
  // KernelActivity is recording (CUPTI's activity buffers are per process).
  static absl::StatusOr<std::unique_ptr<KernelActivity>> Start();
  ~KernelActivity();
  KernelActivity(const KernelActivity&) = delete;
  KernelActivity& operator=(const KernelActivity&) = delete;

  // Flushes and stops recording; call after the work is synchronised.
  absl::StatusOr<Summary> Stop();

 private:
  KernelActivity() = default;
  bool stopped_ = false;
};

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_KERNEL_ACTIVITY_H_
