// ParallelFor: runs independent tasks on a few threads and returns when all are done. For work
// that takes long enough to be worth a thread each, such as compiling kernels; not a pool for
// fine-grained loops (threads are started per call).
#ifndef REPRISE_SRC_UTIL_PARALLEL_FOR_H_
#define REPRISE_SRC_UTIL_PARALLEL_FOR_H_

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace reprise {

// std::thread::hardware_concurrency(), or 1 where the machine does not say.
int HardwareThreads();

// Calls task(i) once for every i in [0, count), on min(threads, count) threads, the calling
// thread one of them; tasks are handed out in order of i as threads become free. `task` must be
// safe to call concurrently. threads < 1 counts as 1.
void ParallelFor(int64_t count, int threads, absl::FunctionRef<void(int64_t)> task);

}  // namespace reprise

#endif  // REPRISE_SRC_UTIL_PARALLEL_FOR_H_
