// The update paths of a captured step (issue 5) take the route their counters say: a new learning
// rate and a plain step touch no graph, a rebinding patches one node, a forced re-capture is
// applied by cudaGraphExecUpdate, and only the forced re-instantiation instantiates; forced
// re-captures leave the step's results bit for bit as they were; reprise-update-bench reports it.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/api/trainer_impl.h"
#include "src/api/update_paths.h"
#include "src/autodiff/autodiff.h"
#include "tests/cpu/json_reader.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using Apply = capture::CapturedStep::Apply;

struct Config {
  const char* name;
  std::function<absl::StatusOr<std::pair<Graph, Value>>()> build;
  std::string input;  // The input kBindInput rebinds.
  bool whole_step = true;
  int lanes = 0;
};

absl::StatusOr<std::pair<Graph, Value>> SmallMlp() {
  ASSIGN_OR_RETURN(
      models::Mlp mlp,
      models::BuildMlp({.batch = 16, .input_features = 24, .depth = 3, .width = 32, .classes = 5}));
  return std::make_pair(std::move(mlp.graph), mlp.loss);
}

absl::StatusOr<std::pair<Graph, Value>> SmallResNet() {
  ASSIGN_OR_RETURN(
      models::ResNet net,
      models::BuildResNet(
          {.depth = 18, .batch = 2, .classes = 10, .image_size = 32, .layout = Layout::kNHWC}));
  return std::make_pair(std::move(net.graph), net.loss);
}

// The whole-step MLP kernel (two launches), the per-layer MLP on two lanes (fork/join branches),
// and a convolutional network (cuDNN and cuBLASLt launches on two lanes).
const Config kConfigs[] = {
    {"mlp_whole_step", SmallMlp, "features", true, 0},
    {"mlp_per_layer_two_lanes", SmallMlp, "features", false, 2},
    {"resnet18_nhwc", SmallResNet, "images", true, 2},
};

class UpdatePathsGpuTest : public ::testing::TestWithParam<Config> {};

TEST_P(UpdatePathsGpuTest, EachPathTakesItsOwnRoute) {
  REPRISE_REQUIRE_GPU();
  const Config& config = GetParam();
  auto model = config.build();
  ASSERT_TRUE(model.ok()) << model.status();
  TrainOptions options;
  options.kernels.whole_step = config.whole_step;
  options.launch.lanes = config.lanes;
  const int kReps = 5, kRecaptureReps = 3;
  auto result = MeasureUpdatePaths(model->first, model->second, options,
                                   {.paths = *ParseUpdatePaths("all"),
                                    .reps = kReps,
                                    .recapture_reps = kRecaptureReps,
                                    .warmup = 2,
                                    .bound_input = config.input,
                                    .device_steps = 3});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->step_device_ms, 0);
  EXPECT_GE(result->graph_nodes, result->launches_per_step);
  ASSERT_EQ(result->paths.size(), 5u);
  for (const UpdatePathResult& p : result->paths) {
    SCOPED_TRACE(UpdatePathName(p.path));
    const bool recaptures =
        p.path == UpdatePath::kExecUpdate || p.path == UpdatePath::kReinstantiate;
    const int reps = recaptures ? kRecaptureReps : kReps;
    const UpdateCounters& c = p.counters;
    ASSERT_EQ(p.step_us.size(), static_cast<size_t>(reps));
    ASSERT_EQ(p.update_us.size(), p.path == UpdatePath::kStep ? 0u : static_cast<size_t>(reps));
    for (double us : p.step_us) EXPECT_GT(us, 0);
    for (double us : p.update_us) EXPECT_GT(us, 0);
    EXPECT_EQ(c.replays, reps);
    EXPECT_EQ(c.captures, recaptures ? reps : 0);
    EXPECT_EQ(c.node_updates, p.path == UpdatePath::kBindInput ? reps : 0);
    EXPECT_EQ(c.exec_updates, p.path == UpdatePath::kExecUpdate ? reps : 0);
    EXPECT_EQ(c.instantiations, p.path == UpdatePath::kReinstantiate ? reps : 0);
    if (recaptures) {
      EXPECT_THAT(c.recapture_reasons, ElementsAre(Pair(Trainer::Impl::kForcedRecapture, reps)));
    } else {
      EXPECT_THAT(c.recapture_reasons, IsEmpty());
    }
    if (p.path == UpdatePath::kReinstantiate) {
      EXPECT_THAT(c.instantiation_reasons,
                  ElementsAre(Pair(capture::CapturedStep::kForcedInstantiation, reps)));
    } else {
      EXPECT_THAT(c.instantiation_reasons, IsEmpty());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, UpdatePathsGpuTest, ::testing::ValuesIn(kConfigs),
                         [](const auto& info) { return std::string(info.param.name); });

TrainOptions BitwiseOptions() {
  TrainOptions options;
  options.kernels.whole_step = false;
  options.launch.lanes = 2;
  options.numerics.deterministic = true;
  options.seed = 3;
  return options;
}

// One step of `trainer` after `rate` is set as the learning rate.
absl::Status StepAt(Trainer::Impl& trainer, float rate) {
  RETURN_IF_ERROR(trainer.SetInput(autodiff::kLearningRate, &rate, 1, DType::kFloat32));
  return trainer.Step();
}

TEST(ForceRecaptureGpuTest, ForcedRecapturesKeepTheStepsBits) {
  REPRISE_REQUIRE_GPU();
  auto model = SmallMlp();
  ASSERT_TRUE(model.ok()) << model.status();
  REPRISE_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Trainer::Impl> plain,
      Trainer::Impl::Create(model->first, model->second, BitwiseOptions()));
  REPRISE_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Trainer::Impl> forced,
      Trainer::Impl::Create(model->first, model->second, BitwiseOptions()));
  const float rates[] = {0.05f, 0.02f, 0.04f, 0.01f};
  for (float rate : rates) REPRISE_ASSERT_OK(StepAt(*plain, rate));
  // Updated in place, instantiated anew, then an update of that new executable.
  REPRISE_ASSERT_OK(StepAt(*forced, rates[0]));
  REPRISE_ASSERT_OK(forced->ForceRecapture(Apply::kUpdateElseInstantiate));
  REPRISE_ASSERT_OK(StepAt(*forced, rates[1]));
  const TrainerStats before_forced = forced->stats();
  REPRISE_ASSERT_OK(forced->ForceRecapture(Apply::kInstantiate));
  const TrainerStats after_forced = forced->stats();
  REPRISE_ASSERT_OK(StepAt(*forced, rates[2]));
  REPRISE_ASSERT_OK(forced->ForceRecapture(Apply::kUpdateElseInstantiate));
  REPRISE_ASSERT_OK(StepAt(*forced, rates[3]));

  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> plain_loss, plain->ReadFloat(plain->loss()));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> forced_loss, forced->ReadFloat(forced->loss()));
  EXPECT_EQ(plain_loss, forced_loss);
  for (const std::string& name : plain->ParameterNames()) {
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> want, plain->GetParameter(name));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> got, forced->GetParameter(name));
    EXPECT_EQ(want, got) << name;
  }

  EXPECT_EQ(after_forced.graph_instantiations - before_forced.graph_instantiations, 1);
  EXPECT_EQ(after_forced.graph_exec_updates, before_forced.graph_exec_updates);
  const TrainerStats stats = forced->stats();
  EXPECT_EQ(stats.graph_captures, 4);        // At Create, then three forced.
  EXPECT_EQ(stats.graph_instantiations, 2);  // At Create, then the forced one.
  EXPECT_EQ(stats.graph_exec_updates, 2);
  EXPECT_EQ(stats.graph_node_updates, 0);
  EXPECT_EQ(stats.graph_replays, 4);
  const TrainerReport report = forced->Report();
  EXPECT_THAT(report.recapture_reasons, ElementsAre(Pair(Trainer::Impl::kForcedRecapture, 3)));
  EXPECT_THAT(report.instantiation_reasons,
              ElementsAre(Pair(capture::CapturedStep::kForcedInstantiation, 1)));
  const TrainerStats plain_stats = plain->stats();
  EXPECT_EQ(plain_stats.graph_captures, 1);
  EXPECT_EQ(plain_stats.graph_instantiations, 1);
}

TEST(ForceRecaptureGpuTest, NeedsACapturedStep) {
  REPRISE_REQUIRE_GPU();
  auto model = SmallMlp();
  ASSERT_TRUE(model.ok()) << model.status();
  TrainOptions options;
  options.launch.mode = ExecMode::kBulked;
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer::Impl> trainer,
                               Trainer::Impl::Create(model->first, model->second, options));
  const absl::Status status = trainer->ForceRecapture(Apply::kInstantiate);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("not captured (mode bulked)"));
}

TEST(MeasureUpdatePathsGpuTest, UnknownBoundInputIsRefusedBeforeTiming) {
  REPRISE_REQUIRE_GPU();
  auto model = SmallMlp();
  ASSERT_TRUE(model.ok()) << model.status();
  auto result = MeasureUpdatePaths(model->first, model->second, TrainOptions{},
                                   {.paths = {UpdatePath::kStep, UpdatePath::kBindInput},
                                    .reps = 2,
                                    .recapture_reps = 1,
                                    .bound_input = "pixels"});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("pixels"));
}

// The tool beside this test runs every path on a small MLP and writes the counters that prove
// each path's route.
TEST(UpdateBenchToolGpuTest, JsonShowsEachPathsCounters) {
  REPRISE_REQUIRE_GPU();
  const std::filesystem::path tool =
      std::filesystem::read_symlink("/proc/self/exe").parent_path() / "reprise-update-bench";
  if (!std::filesystem::exists(tool)) GTEST_SKIP() << "reprise-update-bench is not built";
  const std::string json_path = (std::filesystem::temp_directory_path() /
                                 ("reprise_update_bench_" + std::to_string(getpid()) + ".json"))
                                    .string();
  const std::string command = tool.string() +
                              " --models mlp:2x32:b16,mlp:2x32:b16:c4 --reps 20"
                              " --recapture_reps 4 --warmup 2 --device_steps 5 --json " +
                              json_path + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream in(json_path);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(json_path);
  auto json = testing::ParseJson(text.str());
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_FALSE((*json)["gpu"].string.empty());
  ASSERT_EQ((*json)["models"].array.size(), 2u);
  for (const testing::JsonValue& m : (*json)["models"].array) {
    SCOPED_TRACE(m["spec"].string);
    EXPECT_GT(m["step_device_ms"].number, 0);
    EXPECT_GE(m["graph_nodes"].integer, m["launches_per_step"].integer);
    const testing::JsonValue& paths = m["paths"];
    ASSERT_EQ(paths.object.size(), 5u);
    for (const auto& [name, p] : paths.object) {
      SCOPED_TRACE(name);
      const bool recaptures = name == "exec_update" || name == "reinstantiate";
      EXPECT_EQ(p["reps"].integer, recaptures ? 4 : 20);
      EXPECT_GT(p["step_us"]["median"].number, 0);
      EXPECT_GE(p["total_us"]["median"].number, p["step_us"]["min"].number);
      if (name == "step") {
        EXPECT_EQ(p["update_us"].type, testing::JsonValue::Type::kNull);
      } else {
        EXPECT_GT(p["update_us"]["median"].number, 0);
      }
      EXPECT_EQ(p["replays"].integer, p["reps"].integer);
      EXPECT_EQ(p["captures"].integer, recaptures ? 4 : 0);
      EXPECT_EQ(p["instantiations"].integer, name == "reinstantiate" ? 4 : 0);
      EXPECT_EQ(p["exec_updates"].integer, name == "exec_update" ? 4 : 0);
      EXPECT_EQ(p["node_updates"].integer, name == "bind_input" ? 20 : 0);
    }
  }
}

}  // namespace
}  // namespace reprise
