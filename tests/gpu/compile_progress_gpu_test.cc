// TrainOptions::on_compile_progress: Trainer::Create reports its kernels as they become ready,
// from 0 of N to N of N, with the time since acquisition began; without a callback nothing is
// called (and nothing changes).
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

TEST(CompileProgressGpuTest, CreateReportsEveryKernelFromZeroToTheTotal) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(
      models::Mlp mlp,
      models::BuildMlp({.batch = 8, .input_features = 16, .depth = 2, .width = 16, .classes = 3}));
  std::vector<CompileProgress> calls;
  TrainOptions options;
  options.on_compile_progress = [&](const CompileProgress& p) { calls.push_back(p); };
  REPRISE_ASSERT_OK_AND_ASSIGN(auto trainer, Trainer::Create(mlp.graph, mlp.loss, options));
  ASSERT_GE(calls.size(), 2u) << "0 of N, then at least one kernel";
  const int64_t total = calls.front().total;
  EXPECT_GT(total, 0);
  EXPECT_EQ(calls.front().done, 0);
  EXPECT_EQ(calls.back().done, total);
  EXPECT_EQ(static_cast<int64_t>(calls.size()), total + 1);
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].done, calls[i - 1].done + 1);
    EXPECT_EQ(calls[i].total, total);
    EXPECT_GE(calls[i].elapsed_s, calls[i - 1].elapsed_s);
  }
  REPRISE_ASSERT_OK(trainer->Step());  // The callback is not needed after Create.
}

}  // namespace
}  // namespace reprise
