// reprise-update-bench's host side: model specs and flags are checked with errors that
// name what is wrong, specs build the models they describe, and the table and JSON carry every
// measured path with its counters. The tool binary itself refuses bad flags before it looks for a
// device.
#include "src/tools/update_bench.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/api/update_paths.h"
#include "tests/cpu/json_reader.h"

namespace reprise::tools {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// InvalidArgument whose message holds every one of `parts`.
void ExpectInvalid(const absl::Status& status, std::initializer_list<const char*> parts) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  for (const char* part : parts) EXPECT_THAT(status.message(), HasSubstr(part));
}

TEST(UpdateBenchModelTest, ParsesMlpSpec) {
  auto m = ParseUpdateBenchModel("mlp:4x1024:b256");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->spec, "mlp:4x1024:b256");
  EXPECT_EQ(m->kind, UpdateBenchModel::Kind::kMlp);
  EXPECT_EQ(m->depth, 4);
  EXPECT_EQ(m->width, 1024);
  EXPECT_EQ(m->batch, 256);
  EXPECT_EQ(m->classes, 10);
  EXPECT_FALSE(m->tf32);
}

TEST(UpdateBenchModelTest, ParsesResNetSpecWithTokensInAnyOrder) {
  auto a = ParseUpdateBenchModel("resnet50:b32:nhwc:tf32");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, UpdateBenchModel::Kind::kResNet);
  EXPECT_EQ(a->depth, 50);
  EXPECT_EQ(a->batch, 32);
  EXPECT_EQ(a->classes, 1000);
  EXPECT_EQ(a->image_size, 224);
  EXPECT_EQ(a->layout, Layout::kNHWC);
  EXPECT_TRUE(a->tf32);
  auto b = ParseUpdateBenchModel("resnet18:c100:i112:nchw:b16");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->depth, 18);
  EXPECT_EQ(b->batch, 16);
  EXPECT_EQ(b->classes, 100);
  EXPECT_EQ(b->image_size, 112);
  EXPECT_EQ(b->layout, Layout::kNCHW);
  EXPECT_FALSE(b->tf32);
}

TEST(UpdateBenchModelTest, BadSpecsNameTheSpecAndWhatIsWrong) {
  ExpectInvalid(ParseUpdateBenchModel("").status(), {"model spec ''", "unknown model ''"});
  ExpectInvalid(ParseUpdateBenchModel("vgg16:b32").status(), {"'vgg16:b32'", "unknown model"});
  ExpectInvalid(ParseUpdateBenchModel("mlp").status(), {"<depth>x<width>"});
  ExpectInvalid(ParseUpdateBenchModel("mlp:8:b32").status(), {"<depth>x<width>"});
  ExpectInvalid(ParseUpdateBenchModel("mlp:8x-2:b32").status(), {"<depth>x<width>"});
  ExpectInvalid(ParseUpdateBenchModel("mlp:0x256:b32").status(), {"<depth>x<width>"});
  ExpectInvalid(ParseUpdateBenchModel("mlp:8x256").status(), {"no batch size"});
  ExpectInvalid(ParseUpdateBenchModel("mlp:8x256:b0").status(), {"'b0'", "positive batch"});
  ExpectInvalid(ParseUpdateBenchModel("mlp:8x256:b+3").status(), {"'b+3'", "positive batch"});
  ExpectInvalid(ParseUpdateBenchModel("mlp:8x256:b32:nhwc").status(), {"ResNets only"});
  ExpectInvalid(ParseUpdateBenchModel("mlp:8x256:b32:i64").status(), {"ResNets only"});
  ExpectInvalid(ParseUpdateBenchModel("mlp:8x256:b32:tf32:tf32").status(), {"tf32 given twice"});
  ExpectInvalid(ParseUpdateBenchModel("mlp:8x256:b32:fp16").status(), {"unknown token 'fp16'"});
  ExpectInvalid(ParseUpdateBenchModel("resnet:b32").status(), {"needs its depth"});
  ExpectInvalid(ParseUpdateBenchModel("resnet49:b32").status(), {"18, 34, 50, 101 or 152"});
  ExpectInvalid(ParseUpdateBenchModel("resnet50:b32:i").status(), {"'i'", "image size"});
  ExpectInvalid(ParseUpdateBenchModel("resnet50:b32:nhwc:nchw").status(), {"layout given twice"});
}

TEST(UpdateBenchModelTest, ListsKeepOrderAndRefuseEmpty) {
  auto models = ParseUpdateBenchModels("mlp:8x256:b32,resnet18:b4:i32");
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->size(), 2u);
  EXPECT_EQ((*models)[0].spec, "mlp:8x256:b32");
  EXPECT_EQ((*models)[1].spec, "resnet18:b4:i32");
  ExpectInvalid(ParseUpdateBenchModels("").status(), {"no model spec"});
  ExpectInvalid(ParseUpdateBenchModels("mlp:8x256:b32,resnet7:b4").status(), {"'resnet7:b4'"});
}

TEST(UpdateBenchModelTest, SpecsBuildTheModelsTheyDescribe) {
  auto mlp_spec = ParseUpdateBenchModel("mlp:3x48:b8:c7");
  ASSERT_TRUE(mlp_spec.ok()) << mlp_spec.status();
  auto mlp = BuildUpdateBenchModel(*mlp_spec);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  EXPECT_EQ(mlp->feature_input, "features");
  auto features = mlp->graph.FindNode("features");
  ASSERT_TRUE(features.ok()) << features.status();
  EXPECT_EQ(mlp->graph.node(*features).outputs[0].shape, Shape({8, 48}));
  EXPECT_TRUE(mlp->graph.FindNode("fc2.weight").ok());  // Three hidden layers.
  EXPECT_FALSE(mlp->graph.FindNode("fc4.weight").ok());
  EXPECT_EQ(mlp->graph.node(*mlp->graph.FindNode("fc3.weight")).outputs[0].shape.dim(0), 7);

  auto net_spec = ParseUpdateBenchModel("resnet18:b2:i32:nhwc:c5");
  ASSERT_TRUE(net_spec.ok()) << net_spec.status();
  auto net = BuildUpdateBenchModel(*net_spec);
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_EQ(net->feature_input, "images");
  auto images = net->graph.FindNode("images");
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(net->graph.node(*images).outputs[0].shape, Shape({2, 32, 32, 3}));
}

UpdateBenchFlags GoodFlags() {
  return {.models = "mlp:2x32:b16",
          .paths = "all",
          .reps = 10,
          .recapture_reps = 3,
          .warmup = 0,
          .device_steps = 5,
          .lanes = 2};
}

TEST(UpdateBenchFlagsTest, GoodFlagsBecomeTheOptions) {
  auto config = ParseUpdateBenchFlags(GoodFlags());
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->models.size(), 1u);
  EXPECT_EQ(config->options.paths.size(), 5u);
  EXPECT_EQ(config->options.reps, 10);
  EXPECT_EQ(config->options.recapture_reps, 3);
  EXPECT_EQ(config->options.warmup, 0);
  EXPECT_EQ(config->options.device_steps, 5);
  EXPECT_EQ(config->lanes, 2);
  EXPECT_FALSE(config->device_launch);
  UpdateBenchFlags device = GoodFlags();
  device.device_launch = true;
  auto device_config = ParseUpdateBenchFlags(device);
  ASSERT_TRUE(device_config.ok()) << device_config.status();
  EXPECT_TRUE(device_config->device_launch);
}

TEST(UpdateBenchFlagsTest, EachBadFlagIsNamed) {
  UpdateBenchFlags f = GoodFlags();
  f.models = "mlp:2x32";
  ExpectInvalid(ParseUpdateBenchFlags(f).status(), {"--models", "no batch size"});
  f = GoodFlags();
  f.paths = "step,nothing";
  ExpectInvalid(ParseUpdateBenchFlags(f).status(), {"--paths", "'nothing'"});
  f = GoodFlags();
  f.reps = 0;
  ExpectInvalid(ParseUpdateBenchFlags(f).status(), {"--reps must be at least 1, not 0"});
  f = GoodFlags();
  f.recapture_reps = -1;
  ExpectInvalid(ParseUpdateBenchFlags(f).status(), {"--recapture_reps", "not -1"});
  f = GoodFlags();
  f.device_steps = 0;
  ExpectInvalid(ParseUpdateBenchFlags(f).status(), {"--device_steps"});
  f = GoodFlags();
  f.warmup = -2;
  ExpectInvalid(ParseUpdateBenchFlags(f).status(), {"--warmup must be 0 or more, not -2"});
  f = GoodFlags();
  f.lanes = 5;
  ExpectInvalid(ParseUpdateBenchFlags(f).status(), {"--lanes", "not 5"});
}

TEST(UpdateBenchSummaryTest, MedianPercentileAndMinimum) {
  const TimeSummary odd = Summarize({5, 1, 3, 2, 4});
  EXPECT_EQ(odd.median, 3);
  EXPECT_EQ(odd.p90, 5);
  EXPECT_EQ(odd.min, 1);
  EXPECT_EQ(odd.count, 5);
  const TimeSummary even = Summarize({4, 1, 3, 2});
  EXPECT_EQ(even.median, 2.5);
  EXPECT_EQ(even.min, 1);
  std::vector<double> many;
  for (int i = 100; i >= 1; --i) many.push_back(i);
  EXPECT_EQ(Summarize(many).p90, 90);  // Nearest rank of 0.9 over 1..100.
  const TimeSummary none = Summarize({});
  EXPECT_EQ(none.count, 0);
  EXPECT_EQ(none.median, 0);
}

// A report as the tool would make it, with numbers chosen so each field is told apart.
UpdateBenchReport SampleReport() {
  UpdateBenchReport report{.gpu = "Test GPU",
                           .date = "2025-01-02",
                           .reps = 3,
                           .recapture_reps = 2,
                           .warmup = 1,
                           .lanes = 2};
  UpdateBenchRun run{.model = *ParseUpdateBenchModel("resnet18:b4:i32:nhwc:tf32")};
  run.result.step_device_ms = 1.25;
  run.result.launches_per_step = 40;
  run.result.graph_nodes = 52;
  run.result.lanes = 2;
  UpdatePathResult step{.path = UpdatePath::kStep, .step_us = {2, 3, 4}};
  step.counters.replays = 3;
  UpdatePathResult bind{
      .path = UpdatePath::kBindInput, .update_us = {1, 1.5, 2}, .step_us = {3, 3, 30}};
  bind.counters = {.replays = 3, .node_updates = 3};
  UpdatePathResult forced{
      .path = UpdatePath::kReinstantiate, .update_us = {900, 1100}, .step_us = {50, 70}};
  forced.counters = {.replays = 2,
                     .captures = 2,
                     .instantiations = 2,
                     .recapture_reasons = {{"forced (Trainer::Impl::ForceRecapture)", 2}},
                     .instantiation_reasons = {{"forced (Apply::kInstantiate)", 2}}};
  run.result.paths = {step, bind, forced};
  report.runs.push_back(run);
  return report;
}

TEST(UpdateBenchReportTest, JsonCarriesEveryPathWithItsCounters) {
  auto json = testing::ParseJson(UpdateBenchJson(SampleReport()));
  ASSERT_TRUE(json.ok()) << json.status();
  const testing::JsonValue& v = *json;
  EXPECT_EQ(v["tool"].string, "reprise-update-bench");
  EXPECT_EQ(v["gpu"].string, "Test GPU");
  EXPECT_EQ(v["date"].string, "2025-01-02");
  EXPECT_EQ(v["config"]["reps"].integer, 3);
  EXPECT_EQ(v["config"]["recapture_reps"].integer, 2);
  EXPECT_EQ(v["config"]["warmup"].integer, 1);
  EXPECT_EQ(v["config"]["lanes"].integer, 2);
  EXPECT_FALSE(v["config"]["device_launch"].boolean);
  ASSERT_EQ(v["models"].array.size(), 1u);
  const testing::JsonValue& m = v["models"].array[0];
  EXPECT_EQ(m["spec"].string, "resnet18:b4:i32:nhwc:tf32");
  EXPECT_EQ(m["model"].string, "resnet");
  EXPECT_EQ(m["depth"].integer, 18);
  EXPECT_EQ(m["batch"].integer, 4);
  EXPECT_EQ(m["image_size"].integer, 32);
  EXPECT_EQ(m["layout"].string, "NHWC");
  EXPECT_TRUE(m["tf32"].boolean);
  EXPECT_EQ(m["launches_per_step"].integer, 40);
  EXPECT_EQ(m["graph_nodes"].integer, 52);
  EXPECT_EQ(m["step_device_ms"].number, 1.25);
  const testing::JsonValue& paths = m["paths"];
  ASSERT_EQ(paths.object.size(), 3u);
  EXPECT_EQ(paths.object[0].first, "step");
  EXPECT_EQ(paths.object[1].first, "bind_input");
  EXPECT_EQ(paths.object[2].first, "reinstantiate");

  const testing::JsonValue& step = paths["step"];
  EXPECT_EQ(step["reps"].integer, 3);
  EXPECT_EQ(step["update_us"].type, testing::JsonValue::Type::kNull);
  EXPECT_EQ(step["step_us"]["median"].number, 3);
  EXPECT_EQ(step["total_us"]["median"].number, 3);
  EXPECT_EQ(step["replays"].integer, 3);
  EXPECT_EQ(step["instantiations"].integer, 0);

  const testing::JsonValue& bind = paths["bind_input"];
  EXPECT_EQ(bind["update_us"]["median"].number, 1.5);
  EXPECT_EQ(bind["update_us"]["min"].number, 1);
  EXPECT_EQ(bind["step_us"]["p90"].number, 30);
  EXPECT_EQ(bind["total_us"]["median"].number, 4.5);  // Per repetition: 4, 4.5, 32.
  EXPECT_EQ(bind["node_updates"].integer, 3);
  EXPECT_EQ(bind["captures"].integer, 0);
  EXPECT_TRUE(bind["instantiation_reasons"].object.empty());

  const testing::JsonValue& forced = paths["reinstantiate"];
  EXPECT_EQ(forced["reps"].integer, 2);
  EXPECT_EQ(forced["update_us"]["median"].number, 1000);
  EXPECT_EQ(forced["total_us"]["median"].number, 1060);  // 950 and 1170.
  EXPECT_EQ(forced["captures"].integer, 2);
  EXPECT_EQ(forced["instantiations"].integer, 2);
  EXPECT_EQ(forced["exec_updates"].integer, 0);
  EXPECT_EQ(forced["recapture_reasons"]["forced (Trainer::Impl::ForceRecapture)"].integer, 2);
  EXPECT_EQ(forced["instantiation_reasons"]["forced (Apply::kInstantiate)"].integer, 2);
}

TEST(UpdateBenchReportTest, TableHasAHeadAndARowPerPath) {
  const std::string table = UpdateBenchTable(SampleReport());
  EXPECT_THAT(table, HasSubstr("on Test GPU"));
  EXPECT_THAT(table, HasSubstr("resnet18:b4:i32:nhwc:tf32: 40 launches, 52 graph nodes, 2 lane(s), "
                               "1.2500 ms per step on the device"));
  std::istringstream lines(table);
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  step ", 0) == 0 || line.rfind("  bind_input ", 0) == 0 ||
        line.rfind("  reinstantiate ", 0) == 0) {
      rows.push_back(line);
    }
  }
  ASSERT_EQ(rows.size(), 3u) << table;
  EXPECT_THAT(rows[0], AllOf(HasSubstr(" - "), HasSubstr("3.00 [4.00]")));
  EXPECT_THAT(rows[1], AllOf(HasSubstr("1.50 [2.00]"), HasSubstr("3.00 [30.00]")));
  EXPECT_THAT(rows[2], AllOf(HasSubstr("1000.00 [1100.00]"), HasSubstr("1060.00")));
}

TEST(UpdateBenchReportTest, DeviceLaunchIsSaidInTheTableAndTheJson) {
  UpdateBenchReport report = SampleReport();
  EXPECT_THAT(UpdateBenchTable(report), Not(HasSubstr("launched from the device")));
  report.device_launch = true;
  EXPECT_THAT(UpdateBenchTable(report), HasSubstr("steps launched from the device"));
  auto json = testing::ParseJson(UpdateBenchJson(report));
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_TRUE((*json)["config"]["device_launch"].boolean);
}

// The tool beside this test (when built) exits 2 (a usage error) on a bad flag and says which,
// before it looks for a device; this runs the same with or without a GPU.
TEST(UpdateBenchToolTest, BadFlagsFailBeforeTheDevice) {
  const std::filesystem::path tool =
      std::filesystem::read_symlink("/proc/self/exe").parent_path() / "reprise-update-bench";
  if (!std::filesystem::exists(tool)) GTEST_SKIP() << "reprise-update-bench is not built";
  const std::string err = (std::filesystem::temp_directory_path() /
                           ("reprise_update_bench_" + std::to_string(getpid()) + ".err"))
                              .string();
  struct Case {
    const char* flags;
    const char* message;
  };
  for (const Case& c :
       {Case{"--models mlp:8x256", "--models: model spec 'mlp:8x256': no batch size"},
        Case{"--paths step,foo", "--paths: unknown update path 'foo'"},
        Case{"--reps 0", "--reps must be at least 1, not 0"},
        Case{"--lanes 9", "--lanes must be 0 (auto), 1, 2, 3 or 4, not 9"}}) {
    SCOPED_TRACE(c.flags);
    const std::string command = tool.string() + " " + c.flags + " > /dev/null 2> " + err;
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 2);
    std::ifstream in(err);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_THAT(text.str(), AllOf(HasSubstr("reprise-update-bench: "), HasSubstr(c.message)));
  }
  std::filesystem::remove(err);
}

}  // namespace
}  // namespace reprise::tools
