// The mirror floor (passes::MirrorFloorBytes) of graphs whose activations add up past int64:
// refused with InvalidArgument, by the floor and by the plan that reports it, not wrapped.
#include <cstdint>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/nn.h"
#include "src/autodiff/autodiff.h"
#include "src/passes/mirror.h"
#include "src/passes/plan.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

// Found by the graph-builder fuzzer: each activation's size fits in int64, their sum did not, and
// the floor wrapped (undefined behaviour) instead of refusing the graph.
TEST(MirrorFloorTest, ActivationsPastAnInt64OfBytesAreRefusedNotWrapped) {
  Graph g;
  constexpr int64_t kWide = int64_t{1} << 30;  // [2^30, 2^30] f32: 2^62 bytes each.
  Value h = *g.AddInput("x", {Shape{kWide, 2}, DType::kFloat32});
  const Value labels = *g.AddInput("labels", {Shape{kWide}, DType::kInt32});
  h = *nn::Linear(g, h, kWide, "fc0", /*bias=*/false);
  h = *nn::Linear(g, h, kWide, "fc1", /*bias=*/false);
  h = *nn::Linear(g, h, 2, "fc2", /*bias=*/false);
  const Value loss = *nn::SoftmaxCrossEntropy(g, h, labels, "loss");
  auto training = autodiff::BuildTrainingGraph(g, loss, {.learning_rate = 0.05f});
  ASSERT_TRUE(training.ok()) << training.status();

  const auto floor = passes::MirrorFloorBytes(*training, {training->loss});
  EXPECT_EQ(floor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(floor.status().message(), HasSubstr("int64"));
  const auto plan = passes::BuildPlan(*std::move(training), {}, passes::PlanOptions{});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace reprise
