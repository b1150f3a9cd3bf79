// What the non-finite guard's CPU tests share: a small MLP classifier, its training graph with a
// guard policy, and batches for the CPU reference (normal features, labels from their signs, one
// feature a NaN where asked).
#ifndef REPRISE_TESTS_CPU_GUARD_TEST_UTIL_H_
#define REPRISE_TESTS_CPU_GUARD_TEST_UTIL_H_

#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/reference_executor.h"

namespace reprise::testing {

inline constexpr int kGuardBatch = 8, kGuardFeatures = 6;

// 6 features, two hidden layers of 12, 4 classes, batch 8.
inline models::Mlp BuildGuardMlp() {
  auto mlp = models::BuildMlp({.batch = kGuardBatch,
                               .input_features = kGuardFeatures,
                               .depth = 2,
                               .width = 12,
                               .classes = 4});
  EXPECT_TRUE(mlp.ok()) << mlp.status();
  return *std::move(mlp);
}

inline absl::StatusOr<autodiff::TrainingGraph> BuildGuarded(const models::Mlp& mlp,
                                                            autodiff::NonFinitePolicy policy,
                                                            const OptimizerOptions& optimizer = {},
                                                            const LossScaleOptions& scaling = {}) {
  return autodiff::BuildTrainingGraphWith(mlp.graph, mlp.loss, optimizer, scaling,
                                          autodiff::NonFiniteOptions{.policy = policy});
}

// The batch drawn from `seed`; with `nan_at` >= 0 that one feature is a NaN.
inline void SetGuardBatch(ir::ReferenceExecutor& exec, uint32_t seed, int nan_at = -1) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> x(kGuardBatch * kGuardFeatures);
  for (double& v : x) v = normal(rng);
  std::vector<int32_t> y(kGuardBatch);
  for (int i = 0; i < kGuardBatch; ++i) {
    y[i] = (x[i * kGuardFeatures] > 0) + 2 * (x[i * kGuardFeatures + 1] > 0);
  }
  if (nan_at >= 0) x[nan_at] = std::numeric_limits<double>::quiet_NaN();
  ASSERT_TRUE(exec.SetLeaf("features", x).ok());
  ASSERT_TRUE(exec.SetLeaf("labels", y).ok());
}

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_CPU_GUARD_TEST_UTIL_H_
