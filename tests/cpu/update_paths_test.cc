// The update paths' names and lists, and MeasureUpdatePaths' refusals of what it cannot measure,
// which come before any device is touched (the measuring itself is in
// tests/gpu/update_paths_gpu_test.cc).
#include "src/api/update_paths.h"

#include <initializer_list>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"

namespace reprise {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

void ExpectInvalid(const absl::Status& status, std::initializer_list<const char*> parts) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  for (const char* part : parts) EXPECT_THAT(status.message(), HasSubstr(part));
}

TEST(UpdatePathsTest, NamesParseBackAndAllKeepsTheOrder) {
  auto all = ParseUpdatePaths("all");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(*all,
              ElementsAre(UpdatePath::kStep, UpdatePath::kLearningRate, UpdatePath::kBindInput,
                          UpdatePath::kExecUpdate, UpdatePath::kReinstantiate));
  for (UpdatePath path : *all) {
    auto one = ParseUpdatePaths(UpdatePathName(path));
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_THAT(*one, ElementsAre(path));
  }
  auto two = ParseUpdatePaths("reinstantiate,step");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_THAT(*two, ElementsAre(UpdatePath::kReinstantiate, UpdatePath::kStep));
}

TEST(UpdatePathsTest, BadListsAreRefused) {
  ExpectInvalid(ParseUpdatePaths("step,rebind").status(), {"unknown update path 'rebind'"});
  ExpectInvalid(ParseUpdatePaths("step,all").status(), {"unknown update path 'all'"});
  ExpectInvalid(ParseUpdatePaths("step,bind_input,step").status(), {"'step' named twice"});
  ExpectInvalid(ParseUpdatePaths("").status(), {"no update path"});
  ExpectInvalid(ParseUpdatePaths(",,").status(), {"no update path"});
}

struct SmallModel {
  Graph graph;
  Value loss;
};

SmallModel Mlp() {
  auto mlp = models::BuildMlp({.batch = 4, .input_features = 6, .depth = 1, .width = 8});
  EXPECT_TRUE(mlp.ok()) << mlp.status();
  return {std::move(mlp->graph), mlp->loss};
}

UpdateBenchOptions Bench() {
  return {.paths = {UpdatePath::kStep}, .reps = 2, .recapture_reps = 1, .bound_input = "features"};
}

TEST(MeasureUpdatePathsTest, RefusesEagerModes) {
  const SmallModel m = Mlp();
  for (ExecMode mode : {ExecMode::kSync, ExecMode::kBulked}) {
    TrainOptions options;
    options.launch.mode = mode;
    ExpectInvalid(MeasureUpdatePaths(m.graph, m.loss, options, Bench()).status(),
                  {"mode must be graph", std::string(ExecModeName(mode)).c_str()});
  }
}

TEST(MeasureUpdatePathsTest, RefusesBadCountsAndNoPaths) {
  const SmallModel m = Mlp();
  UpdateBenchOptions bench = Bench();
  bench.paths.clear();
  ExpectInvalid(MeasureUpdatePaths(m.graph, m.loss, {}, bench).status(), {"no update path"});
  bench = Bench();
  bench.reps = 0;
  ExpectInvalid(MeasureUpdatePaths(m.graph, m.loss, {}, bench).status(), {"got 0, 1, 20, 100"});
  bench = Bench();
  bench.recapture_reps = 0;
  ExpectInvalid(MeasureUpdatePaths(m.graph, m.loss, {}, bench).status(), {"got 2, 0, 20, 100"});
  bench = Bench();
  bench.warmup = -1;
  ExpectInvalid(MeasureUpdatePaths(m.graph, m.loss, {}, bench).status(), {"got 2, 1, -1, 100"});
  bench = Bench();
  bench.device_steps = 0;
  ExpectInvalid(MeasureUpdatePaths(m.graph, m.loss, {}, bench).status(), {"got 2, 1, 20, 0"});
}

}  // namespace
}  // namespace reprise
