// TrainOptions::device_graph_launch launches the captured step graph from the device, so it needs
// ExecMode::kGraph: the eager modes are refused at Trainer::Create, before the device is touched
// (this runs the same with or without a GPU).
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
    options.mode = mode;
    options.device_graph_launch = true;
    const absl::Status status = Trainer::Create(mlp->graph, mlp->loss, options).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), AllOf(HasSubstr("device_graph_launch"),
                                        HasSubstr(absl::StrCat("mode ", ExecModeName(mode))),
                                        HasSubstr("ExecMode::kGraph")));
  }
}

TEST(DeviceLaunchOptionsTest, OffByDefault) { EXPECT_FALSE(TrainOptions{}.device_graph_launch); }

}  // namespace
}  // namespace reprise
