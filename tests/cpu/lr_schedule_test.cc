// The lr_schedule op: each decay at chosen steps of the device counter (both of its words), and
// attribute errors.
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/ir/reference_executor.h"
#include "src/ops/ops.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

struct ScheduleGraph {
  Graph g;
  Value rate;
  absl::Status status;
};

ScheduleGraph MakeSchedule(Attrs attrs) {
  ScheduleGraph s;
  Value lr = *s.g.AddInput("lr", {Shape{}}, Initializer::Constant(0.5));
  Value step = *s.g.AddState("step", {Shape{2}, DType::kInt32}, Initializer::Zeros());
  auto rate = s.g.AddOp1(ops::LrScheduleOp(), "rate", {lr, step}, std::move(attrs));
  s.status = rate.status();
  if (rate.ok()) s.rate = *rate;
  return s;
}

Attrs Cosine(int64_t warmup, int64_t total, double floor) {
  return {{"warmup_steps", warmup}, {"decay", std::string("cosine")}, {"total_steps", total},
          {"min_factor", floor},    {"step_size", int64_t{0}},        {"gamma", 1.0}};
}

double RateAt(ScheduleGraph& s, int32_t low, int32_t high) {
  ir::ReferenceExecutor cpu(s.g, /*float64=*/true, 1);
  EXPECT_TRUE(cpu.SetLeaf("step", std::vector<int32_t>{low, high}).ok());
  EXPECT_TRUE(cpu.Run().ok());
  return (*cpu.Tensor(s.rate))->data<double>()[0];
}

TEST(LrScheduleTest, WarmUpThenCosineToTheFloor) {
  ScheduleGraph s = MakeSchedule(Cosine(10, 110, 0.1));
  ASSERT_TRUE(s.status.ok()) << s.status;
  EXPECT_DOUBLE_EQ(RateAt(s, 0, 0), 0.5 / 10);
  EXPECT_DOUBLE_EQ(RateAt(s, 9, 0), 0.5);
  EXPECT_DOUBLE_EQ(RateAt(s, 10, 0), 0.5);
  EXPECT_NEAR(RateAt(s, 60, 0), 0.5 * (0.1 + 0.9 * 0.5), 1e-15);  // Half way.
  EXPECT_NEAR(RateAt(s, 110, 0), 0.05, 1e-15);
  EXPECT_NEAR(RateAt(s, 5, 1), 0.05, 1e-15);  // Step 2^32 + 5: long past the end.
}

TEST(LrScheduleTest, StepDecayAndConstant) {
  ScheduleGraph step = MakeSchedule({{"warmup_steps", int64_t{0}},
                                     {"decay", std::string("step")},
                                     {"total_steps", int64_t{0}},
                                     {"min_factor", 0.0},
                                     {"step_size", int64_t{30}},
                                     {"gamma", 0.5}});
  ASSERT_TRUE(step.status.ok()) << step.status;
  EXPECT_DOUBLE_EQ(RateAt(step, 29, 0), 0.5);
  EXPECT_DOUBLE_EQ(RateAt(step, 30, 0), 0.25);
  EXPECT_DOUBLE_EQ(RateAt(step, 95, 0), 0.0625);
  ScheduleGraph constant = MakeSchedule({{"warmup_steps", int64_t{4}},
                                         {"decay", std::string("constant")},
                                         {"total_steps", int64_t{0}},
                                         {"min_factor", 0.0},
                                         {"step_size", int64_t{0}},
                                         {"gamma", 1.0}});
  ASSERT_TRUE(constant.status.ok()) << constant.status;
  EXPECT_DOUBLE_EQ(RateAt(constant, 1, 0), 0.25);
  EXPECT_DOUBLE_EQ(RateAt(constant, -1, 7), 0.5);
}

TEST(LrScheduleTest, HostFactorMatchesTheClosedForms) {
  const codegen::ScheduleParams p{.warmup_steps = 3,
                                  .decay = codegen::ScheduleDecay::kCosine,
                                  .total_steps = 13,
                                  .min_factor = 0.0};
  for (uint64_t s = 3; s < 20; ++s) {
    const double t = std::min<double>(s - 3, 10);
    EXPECT_NEAR(codegen::LrFactor(p, s), (1 + std::cos(M_PI * t / 10)) / 2, 1e-15) << s;
  }
  // Each squaring doubles the relative error: about e ulps, far below what bias correction needs.
  for (uint64_t e : {0ull, 1ull, 7ull, 100ull, 12345ull}) {
    const double want = std::pow(0.999, static_cast<double>(e));
    EXPECT_NEAR(codegen::PowInt(0.999, e), want, (e + 1) * 1e-15 * want) << e;
  }
}

TEST(LrScheduleTest, BadAttributesAreInvalidArgument) {
  EXPECT_THAT(MakeSchedule(Cosine(10, 10, 0)).status.message(), HasSubstr("must exceed"));
  EXPECT_THAT(MakeSchedule(Cosine(0, 10, 1.5)).status.message(), HasSubstr("min_factor"));
  Attrs unknown = Cosine(0, 10, 0);
  unknown["decay"] = std::string("exponential");
  EXPECT_THAT(MakeSchedule(unknown).status.message(), HasSubstr("constant, cosine or step"));
  Attrs step = Cosine(0, 10, 0);
  step["decay"] = std::string("step");
  EXPECT_THAT(MakeSchedule(step).status.message(), HasSubstr("step_size"));
}

}  // namespace
}  // namespace reprise
