// A process-wide cache of built library plans, one per key, for the cuDNN graph-API wrappers
// (attention, the GELU product): a lookup and, on a miss, the build happen under one lock, so that
// two lowerings of one shape build it once (cuDNN's builds are not worth running side by side).
#ifndef REPRISE_SRC_RUNTIME_PLAN_CACHE_H_
#define REPRISE_SRC_RUNTIME_PLAN_CACHE_H_

#include <cstddef>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace reprise::runtime {

template <typename Key, typename Plan>
class PlanCache {
 public:
  static PlanCache& Global() {
    static PlanCache* cache = new PlanCache();
    return *cache;
  }

  // The plan of `key`, built by `build()` (absl::StatusOr<std::shared_ptr<const Plan>>) where
  // there is none yet; a build that fails leaves nothing cached.
  template <typename Build>
  absl::StatusOr<std::shared_ptr<const Plan>> FindOrBuild(const Key& key, Build&& build) {
    absl::MutexLock lock(&mu_);
    if (auto it = entries_.find(key); it != entries_.end()) return it->second;
    absl::StatusOr<std::shared_ptr<const Plan>> built = std::forward<Build>(build)();
    if (built.ok()) entries_.emplace(key, *built);
    return built;
  }

  size_t size() {
    absl::MutexLock lock(&mu_);
    return entries_.size();
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<Key, std::shared_ptr<const Plan>> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_PLAN_CACHE_H_
