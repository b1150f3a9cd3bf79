// TrainOptions::launch.graph_launch = kDevice launches the captured step graph from the device, so
// it needs ExecMode::kGraph: the eager modes are refused at Trainer::Create, before the device is
// touched (this runs the same with or without a GPU). The default, kAuto, is allowed in every mode;
// the launch names parse back.
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/trainer.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(DeviceLaunchOptionsTest, EagerModesAreRefusedNamingTheOptionAndTheMode) {
  auto mlp = models::BuildMlp({.batch = 4, .input_features = 8, .depth = 1, .width = 8});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  for (ExecMode mode : {ExecMode::kSync, ExecMode::kBulked}) {
    TrainOptions options;
    options.launch.mode = mode;
    options.launch.graph_launch = GraphLaunch::kDevice;
    const absl::Status status = Trainer::Create(mlp->graph, mlp->loss, options).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), AllOf(HasSubstr("graph_launch = device"),
                                        HasSubstr(absl::StrCat("mode ", ExecModeName(mode))),
                                        HasSubstr("ExecMode::kGraph")));
  }
}

TEST(DeviceLaunchOptionsTest, AutoByDefault) {
  EXPECT_EQ(TrainOptions{}.launch.graph_launch, GraphLaunch::kAuto);
}

TEST(DeviceLaunchOptionsTest, NamesParseBackAndUnknownOnesAreClearErrors) {
  for (GraphLaunch launch : {GraphLaunch::kAuto, GraphLaunch::kHost, GraphLaunch::kDevice}) {
    const absl::StatusOr<GraphLaunch> parsed = ParseGraphLaunch(GraphLaunchName(launch));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, launch);
  }
  const absl::StatusOr<GraphLaunch> bad = ParseGraphLaunch("gpu");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), AllOf(HasSubstr("'gpu'"), HasSubstr("auto, host or device")));
}

}  // namespace
}  // namespace reprise
