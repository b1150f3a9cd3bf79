#include "src/util/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace reprise {

int HardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

void ParallelFor(int64_t count, int threads, absl::FunctionRef<void(int64_t)> task) {
  if (count <= 0) return;
  const int64_t workers = std::clamp<int64_t>(threads, 1, count);
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) task(i);
  };
  std::vector<std::thread> helpers;
  helpers.reserve(workers - 1);
  for (int64_t t = 1; t < workers; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& helper : helpers) helper.join();
}

}  // namespace reprise
