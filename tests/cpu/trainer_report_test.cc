// The step report's text and JSON forms, and the out-of-memory text, from a report filled by hand.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/trainer.h"
#include "src/api/trainer_report_format.h"
#include "tests/cpu/json_reader.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

TrainerReport SampleReport() {
  TrainerReport r;
  TrainerStats& s = r.stats;
  s.steps = 200;
  s.graph_replays = 200;
  s.graph_captures = 2;
  s.graph_instantiations = 1;
  s.graph_exec_updates = 1;
  s.graph_node_updates = 3;
  s.launches_per_step = 42;
  s.lanes = 2;
  s.arena_bytes = 10 << 20;
  s.parameter_bytes = 2 << 20;
  s.optimizer_state_bytes = 4 << 20;
  s.activation_peak_bytes = 3 << 20;
  s.activation_peak_unmirrored_bytes = 3 << 20;
  s.gradient_bytes = 1 << 20;
  s.input_bytes = 1 << 19;
  s.workspace_bytes = 64 << 20;
  s.lane_ticket_bytes = 32 << 10;
  s.kernels_compiled = 3;
  s.kernel_compile_ms = 120;
  s.kernel_cache_hits = 50;
  s.kernel_disk_hits = 4;
  s.library_handle_bytes = 8 << 20;
  s.host_step_us_mean = 12.5;
  s.host_step_us_median = 11.25;
  r.graphs.push_back({"step", {{"event_record", 2}, {"kernel", 40}, {"memcpy", 1}}, 200});
  r.recapture_reasons = {{"input 'features' bound", 1}};
  r.workspace_per_lane = {48 << 20, 16 << 20};
  return r;
}

TEST(TrainerReportTest, TextSaysEveryCounter) {
  const std::string text = SampleReport().ToText();
  EXPECT_THAT(text, HasSubstr("steps 200; host time per Step(): mean 12.5 us, median 11.2 us"));
  EXPECT_THAT(text, HasSubstr("graph 'step': 43 nodes (event_record 2, kernel 40, memcpy 1), "
                              "replays 200; 42 launches on 2 lane(s)"));
  EXPECT_THAT(text, HasSubstr("captures 2 (re-captures 1), exec updates in place 1, "
                              "instantiations 1 (re-instantiations 0)"));
  EXPECT_THAT(text, HasSubstr("re-captured because: input 'features' bound 1"));
  EXPECT_THAT(text, HasSubstr("compiled 3 (120 ms), memory hits 50, disk hits 4"));
  EXPECT_THAT(text, HasSubstr("arena 10.00 MiB = parameters 2.00 + optimizer state 4.00"));
  EXPECT_THAT(text, HasSubstr("gradients 1.00 of it"));
  EXPECT_THAT(text, HasSubstr("workspaces 64.00 MiB (lanes: 48.00 + 16.00), tickets 32 KiB; "
                              "library handles 8.00"));
}

TEST(TrainerReportTest, TextAndJsonSayWhoLaunchesTheGraphAndWhy) {
  TrainerReport r = SampleReport();
  r.stats.device_graph_launch = true;
  r.stats.graph_uploads = 3;
  EXPECT_THAT(r.ToText(), HasSubstr("launched from the device (uploads 3)"));
  EXPECT_THAT(r.ToText(), ::testing::Not(HasSubstr("    launch ")));
  r.stats.graph_launch_measurement = "measured over 6 steps each: 0.2 ms, 0.1";
  EXPECT_THAT(r.ToText(), HasSubstr("\n    launch measured over 6 steps each: 0.2 ms, 0.1\n"));
  r.stats.device_graph_launch = false;
  r.stats.host_launch_reason = "the device refused the graph: host node";
  EXPECT_THAT(r.ToText(),
              HasSubstr("launched from the host (the device refused the graph: host node)"));
  const absl::StatusOr<testing::JsonValue> json = testing::ParseJson(r.ToJson());
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_FALSE((*json)["device_graph_launch"].boolean);
  EXPECT_EQ((*json)["host_launch_reason"].string, "the device refused the graph: host node");
  EXPECT_FALSE((*json)["graph_launch_measuring"].boolean);
  EXPECT_EQ((*json)["graph_launch_measurement"].string, "measured over 6 steps each: 0.2 ms, 0.1");
}

TEST(TrainerReportTest, ConvolutionPlanCountsAreInTheTextWhereAnyAndAlwaysInJson) {
  TrainerReport r = SampleReport();
  EXPECT_THAT(r.ToText(), ::testing::Not(HasSubstr("convolution plans")));
  EXPECT_THAT(r.stats.ToString(), ::testing::Not(HasSubstr("conv plans")));
  r.stats.conv_plans_heuristic = 2;
  r.stats.conv_plans_measured = 5;
  r.stats.conv_candidates_timed = 37;
  r.stats.conv_measure_ms = 412.4;
  r.stats.conv_plans_from_records = 3;
  r.stats.conv_plan_records_discarded = 1;
  r.stats.conv_plan_lower_ms = 380.2;
  r.stats.conv_plan_build_ms = 2.4;
  r.stats.conv_plan_warm_up_ms = 171.6;
  EXPECT_THAT(r.ToText(), HasSubstr("convolution plans (cuDNN graph API): heuristic 2, measured 5 "
                                    "(37 candidates timed, 412 ms), from records 3, records "
                                    "discarded 1; lowering 380 ms, builds 2, first runs 172"));
  EXPECT_THAT(
      r.stats.ToString(),
      HasSubstr("conv plans: heuristic 2, measured 5, from records 3, records discarded 1"));
  const absl::StatusOr<testing::JsonValue> json = testing::ParseJson(r.ToJson());
  ASSERT_TRUE(json.ok()) << json.status();
  const testing::JsonValue& plans = (*json)["conv_plans"];
  EXPECT_EQ(plans["heuristic"].integer, 2);
  EXPECT_EQ(plans["measured"].integer, 5);
  EXPECT_EQ(plans["from_records"].integer, 3);
  EXPECT_EQ(plans["records_discarded"].integer, 1);
  EXPECT_EQ(plans["candidates_timed"].integer, 37);
  EXPECT_EQ(plans["measure_ms"].number, 412.4);
  EXPECT_EQ(plans["lower_ms"].number, 380.2);
  EXPECT_EQ(plans["build_ms"].number, 2.4);
  EXPECT_EQ(plans["warm_up_ms"].number, 171.6);
  const absl::StatusOr<testing::JsonValue> none = testing::ParseJson(SampleReport().ToJson());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)["conv_plans"]["measured"].integer, 0);
}

TEST(TrainerReportTest, LegacyConvAlgorithmCountsAreInTheTextWhereAnyAndAlwaysInJson) {
  TrainerReport r = SampleReport();
  EXPECT_THAT(r.ToText(), ::testing::Not(HasSubstr("cuDNN legacy calls")));
  EXPECT_THAT(r.stats.ToString(), ::testing::Not(HasSubstr("legacy conv algorithms")));
  r.stats.conv_legacy_measured = 4;
  r.stats.conv_legacy_measure_ms = 2512.6;
  r.stats.conv_legacy_from_records = 12;
  r.stats.conv_legacy_records_discarded = 1;
  EXPECT_THAT(r.ToText(), HasSubstr("convolution algorithms (cuDNN legacy calls): measured 4 "
                                    "(2513 ms), from records 12, records discarded 1"));
  EXPECT_THAT(
      r.stats.ToString(),
      HasSubstr("legacy conv algorithms: measured 4, from records 12, records discarded 1"));
  const absl::StatusOr<testing::JsonValue> json = testing::ParseJson(r.ToJson());
  ASSERT_TRUE(json.ok()) << json.status();
  const testing::JsonValue& legacy = (*json)["conv_legacy_algorithms"];
  EXPECT_EQ(legacy["measured"].integer, 4);
  EXPECT_EQ(legacy["from_records"].integer, 12);
  EXPECT_EQ(legacy["records_discarded"].integer, 1);
  EXPECT_EQ(legacy["measure_ms"].number, 2512.6);
  const absl::StatusOr<testing::JsonValue> none = testing::ParseJson(SampleReport().ToJson());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)["conv_legacy_algorithms"]["measured"].integer, 0);
}

TEST(TrainerReportTest, MatmulChoiceCountsAreInTheTextWhereAnyAndAlwaysInJson) {
  TrainerReport r = SampleReport();
  EXPECT_THAT(r.ToText(), ::testing::Not(HasSubstr("cuBLASLt choices")));
  EXPECT_THAT(r.stats.ToString(), ::testing::Not(HasSubstr("cuBLASLt choices")));
  r.stats.matmul_choices_measured = 15;
  r.stats.matmul_candidates_timed = 118;
  r.stats.matmul_measure_ms = 1784.2;
  r.stats.matmul_choices_from_records = 132;
  r.stats.matmul_records_discarded = 2;
  EXPECT_THAT(r.ToText(), HasSubstr("cuBLASLt choices: measured 15 (118 candidates timed, 1784 "
                                    "ms), from records 132, records discarded 2"));
  EXPECT_THAT(r.stats.ToString(),
              HasSubstr("cuBLASLt choices: measured 15, from records 132, records discarded 2"));
  const absl::StatusOr<testing::JsonValue> json = testing::ParseJson(r.ToJson());
  ASSERT_TRUE(json.ok()) << json.status();
  const testing::JsonValue& choices = (*json)["matmul_choices"];
  EXPECT_EQ(choices["measured"].integer, 15);
  EXPECT_EQ(choices["from_records"].integer, 132);
  EXPECT_EQ(choices["records_discarded"].integer, 2);
  EXPECT_EQ(choices["candidates_timed"].integer, 118);
  EXPECT_EQ(choices["measure_ms"].number, 1784.2);
  const absl::StatusOr<testing::JsonValue> none = testing::ParseJson(SampleReport().ToJson());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)["matmul_choices"]["measured"].integer, 0);
}

TEST(TrainerReportTest, EagerTextSaysThereIsNoGraphAndUnmeasuredHandles) {
  TrainerReport r = SampleReport();
  r.graphs.clear();
  r.stats.library_handle_bytes = -1;
  const std::string text = r.ToText();
  EXPECT_THAT(text, HasSubstr("no captured graph: the step runs eagerly, 42 launches"));
  EXPECT_THAT(text, HasSubstr("library handles not measured"));
}

TEST(TrainerReportTest, JsonHoldsTheSameNumbers) {
  absl::StatusOr<testing::JsonValue> json = testing::ParseJson(SampleReport().ToJson());
  ASSERT_TRUE(json.ok()) << json.status();
  const testing::JsonValue& j = *json;
  EXPECT_EQ(j["steps"].integer, 200);
  EXPECT_EQ(j["host_step_us"]["median"].number, 11.25);
  ASSERT_EQ(j["graphs"].array.size(), 1u);
  EXPECT_EQ(j["graphs"].array[0]["name"].string, "step");
  EXPECT_EQ(j["graphs"].array[0]["nodes_by_kind"]["kernel"].integer, 40);
  EXPECT_EQ(j["graphs"].array[0]["replays"].integer, 200);
  EXPECT_EQ(j["recaptures"].integer, 1);
  EXPECT_EQ(j["reinstantiations"].integer, 0);
  EXPECT_EQ(j["recapture_reasons"]["input 'features' bound"].integer, 1);
  EXPECT_EQ(j["kernels"]["disk_hits"].integer, 4);
  EXPECT_EQ(j["memory_bytes"]["arena"].integer, 10 << 20);
  EXPECT_EQ(j["memory_bytes"]["gradients"].integer, 1 << 20);
  ASSERT_EQ(j["memory_bytes"]["workspace_per_lane"].array.size(), 2u);
  EXPECT_EQ(j["memory_bytes"]["workspace_per_lane"].array[1].integer, 16 << 20);
  EXPECT_EQ(j["memory_bytes"]["library_handles"].integer, 8 << 20);
  TrainerReport unmeasured = SampleReport();
  unmeasured.stats.library_handle_bytes = -1;
  json = testing::ParseJson(unmeasured.ToJson());
  ASSERT_TRUE(json.ok());
  EXPECT_EQ((*json)["memory_bytes"]["library_handles"].type, testing::JsonValue::Type::kNull);
}

TEST(TrainerReportTest, CreatePhasesAreShownLargestFirstInTextAndInOrderInJson) {
  TrainerReport r = SampleReport();
  r.stats.create_ms = {{"compile passes", 210.4},
                       {"device (CUDA context)", 301},
                       {"initial values (CPU)", 45.6},
                       {"lanes", 0.2}};
  r.stats.create_total_ms = 557.2;
  EXPECT_EQ(
      r.stats.CreateBreakdown(),
      "Create 557 ms: device (CUDA context) 301, compile passes 210, initial values (CPU) 46");
  EXPECT_THAT(r.ToText(), HasSubstr("  Create 557 ms: device (CUDA context) 301, compile"));
  EXPECT_THAT(r.stats.ToString(), HasSubstr("| Create 557 ms: device (CUDA context) 301"));
  absl::StatusOr<testing::JsonValue> json = testing::ParseJson(r.ToJson());
  ASSERT_TRUE(json.ok()) << json.status();
  const testing::JsonValue& create = (*json)["create_ms"];
  ASSERT_EQ(create.object.size(), 5u);
  EXPECT_EQ(create.object[0].first, "total");
  EXPECT_EQ(create["total"].number, 557.2);
  EXPECT_EQ(create.object[1].first, "compile passes");
  EXPECT_EQ(create["lanes"].number, 0.2);
  // A trainer that was not created (a report filled by hand) says nothing of Create.
  EXPECT_THAT(SampleReport().stats.ToString(), ::testing::Not(HasSubstr("Create")));
}

TEST(TrainerReportTest, OutOfMemoryTextGivesBytesBreakdownAndFreeMemory) {
  const TrainerStats s = SampleReport().stats;
  std::string text = OutOfMemoryText("the arena", 10 << 20, s, 2, 5 << 20, 80 << 20);
  EXPECT_THAT(text, HasSubstr("could not allocate the arena: 10485760 bytes (10.00 MiB)"));
  EXPECT_THAT(text, HasSubstr("parameters 2.00 MiB, optimizer state 4.00 MiB"));
  EXPECT_THAT(text, HasSubstr("activation peak 3.00 MiB"));
  EXPECT_THAT(text, HasSubstr("free device memory 5.00 MiB of 80.00 MiB"));
  text = OutOfMemoryText("the arena", 1, s, 1, -1, 0);
  EXPECT_THAT(text, HasSubstr("free device memory unknown"));
}

// The non-finite guard's line: how many steps it skipped, why, and who checked.
TEST(TrainerReportTest, NonFiniteGuardSaysWhatItSkippedAndWhy) {
  TrainerReport r = SampleReport();
  r.stats.non_finite_policy = "skip";
  r.stats.skipped_steps = 2;
  r.non_finite =
      TrainerReport::NonFiniteState{.policy = "skip",
                                    .checked_by = "the guard's check of the loss and gradients",
                                    .skipped_steps = 2,
                                    .steps_checked = 200,
                                    .first_non_finite_step = 17};
  EXPECT_THAT(r.ToText(), HasSubstr("non-finite guard skip: 2 steps skipped for an inf or a NaN in "
                                    "the loss or gradients, by the guard's check of the loss and "
                                    "gradients; 200 steps checked; first at step 17"));
  absl::StatusOr<testing::JsonValue> json = testing::ParseJson(r.ToJson());
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ((*json)["skipped_steps"].integer, 2);
  EXPECT_EQ((*json)["non_finite"]["first_non_finite_step"].integer, 17);
  EXPECT_EQ((*json)["non_finite"]["checked_by"].string,
            "the guard's check of the loss and gradients");
  r.non_finite.reset();
  r.stats.non_finite_policy = "ignore";
  EXPECT_THAT(r.ToText(), HasSubstr("non-finite guard ignore: nothing checked"));
  json = testing::ParseJson(r.ToJson());
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ((*json)["non_finite"].type, testing::JsonValue::Type::kNull);
}

}  // namespace
}  // namespace reprise
