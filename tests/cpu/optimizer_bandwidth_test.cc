// The optimizer benchmark's byte count, from the plan: SGD with momentum reads w, g, v and writes
// w, v; AdamW with clipping reads w, g, m, v, and g again for the norm, and writes w, m, v.
#include "src/api/optimizer_bandwidth.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/autodiff.h"

namespace reprise {
namespace {

passes::Plan PlanOf(const OptimizerOptions& optimizer) {
  auto mlp =
      models::BuildMlp({.batch = 8, .input_features = 32, .depth = 2, .width = 64, .classes = 10});
  EXPECT_TRUE(mlp.ok()) << mlp.status();
  auto training = autodiff::BuildTrainingGraphWith(mlp->graph, mlp->loss, optimizer);
  EXPECT_TRUE(training.ok()) << training.status();
  passes::PlanOptions options;
  options.fusion.whole_mlp_step = false;
  auto plan = passes::BuildPlan(*std::move(training), {}, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

TEST(OptimizerBandwidthTest, SgdMomentumMovesFiveTensorsPerParameter) {
  const OptimizerTraffic t =
      OptimizerTrafficOf(PlanOf({.kind = OptimizerKind::kSgd, .momentum = 0.9f}));
  const int64_t p = 32 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10;
  EXPECT_EQ(t.parameters, p);
  ASSERT_FALSE(t.nodes.empty());
  EXPECT_EQ(t.bytes_written, 2 * 4 * p);  // w and v.
  EXPECT_GE(t.bytes_read, 3 * 4 * p);     // w, g and v, and the scalars.
  EXPECT_LE(t.bytes_read, 3 * 4 * p + 64);
}

TEST(OptimizerBandwidthTest, AdamWWithClippingReadsTheGradientsTwice) {
  const OptimizerTraffic t = OptimizerTrafficOf(
      PlanOf({.kind = OptimizerKind::kAdamW,
              .weight_decay = 0.01f,
              .max_grad_norm = 1.0f,
              .schedule = {.warmup_steps = 10, .decay = LrDecay::kCosine, .total_steps = 100}}));
  const int64_t p = t.parameters;
  ASSERT_GT(p, 0);
  // The gradient norm's partial sums; the update, which finishes the norm and schedules the rate
  // itself; the step counter.
  EXPECT_EQ(t.nodes.size(), 3u);
  const int64_t small = 4096;  // Scalars, each tensor's weight decay, the partial sums, the step.
  EXPECT_GE(t.bytes_read, (4 + 1) * 4 * p);
  EXPECT_LE(t.bytes_read, (4 + 1) * 4 * p + small);
  EXPECT_GE(t.bytes_written, 3 * 4 * p);
  EXPECT_LE(t.bytes_written, 3 * 4 * p + small);
}

}  // namespace
}  // namespace reprise
