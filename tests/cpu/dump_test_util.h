// What the dump tests share: the small MLP (depth 2, width 8) at every host-side stage, and a way
// to run a test with another PATH (to hide Graphviz).
#ifndef REPRISE_TESTS_CPU_DUMP_TEST_UTIL_H_
#define REPRISE_TESTS_CPU_DUMP_TEST_UTIL_H_

#include <string>

#include "reprise/models.h"
#include "src/autodiff/autodiff.h"
#include "src/passes/plan.h"
#include "tests/cpu/scoped_env.h"  // ScopedEnv, for the dump tests

namespace reprise::testing {

inline constexpr models::MlpConfig kSmallMlp = {
    .batch = 32, .input_features = 8, .depth = 2, .width = 8, .classes = 10};

struct MlpStages {
  models::Mlp mlp;                   // Stage ir.
  autodiff::TrainingGraph training;  // Stage training.
  passes::Plan plan;                 // Stage plan (fused unless asked not to).
};
// Fused per layer (the whole-step MLP kernel off), so the dumps show several kinds of groups.
MlpStages SmallMlpStages(bool fuse = true, int lanes = 0);

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_CPU_DUMP_TEST_UTIL_H_
