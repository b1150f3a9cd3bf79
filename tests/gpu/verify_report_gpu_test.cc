// Verify mode and the step report on the GPU: 200 captured and 200 eager steps agree bit for bit on
// the MLP with dropout and on ResNet-18 (AdamW, clipping, warm-up + cosine; 8 steps under
// compute-sanitizer) and leave the trainer as it was; a host scalar frozen into the captured graph
// is caught and named; the report's counters are what the test did.
#include <cstdlib>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/api/checkpoint_format.h"
#include "src/api/trainer_impl.h"
#include "tests/cpu/cache_test_util.h"
#include "tests/cpu/json_reader.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/trust_test_models.h"

namespace reprise {
namespace {

using ::reprise::testing::FeedStep;
using ::reprise::testing::MakeTrustTrainer;
using ::reprise::testing::ScopedTempDir;
using ::reprise::testing::TrustModel;
using ::reprise::testing::TrustOptions;
using ::reprise::testing::UnderComputeSanitizer;
using ::testing::HasSubstr;

class VerifyGpuTest : public ::testing::TestWithParam<bool> {
 protected:
  TrustModel Model() const { return GetParam() ? testing::SmallResNet18() : testing::DropoutMlp(); }
};

TEST_P(VerifyGpuTest, TwoHundredStepsAgreeBitForBitAndTheTrainerIsLeftAsItWas) {
  REPRISE_REQUIRE_GPU();
  const TrustModel m = Model();
  auto t = MakeTrustTrainer(m, TrustOptions(m));
  ASSERT_NE(t, nullptr);
  for (int s = 0; s < 3; ++s) {  // Past the first step: moments and statistics are not zero.
    FeedStep(*t, m, s);
    REPRISE_ASSERT_OK(t->Step());
  }
  FeedStep(*t, m, 3);
  ScopedTempDir dir;
  REPRISE_ASSERT_OK(t->SaveCheckpoint(dir.path() + "/before.safetensors"));
  const TrainerStats stats_before = t->stats();

  // Under compute-sanitizer 200 ResNet-18 steps each way take longer than a device call allows
  // (memcheck stopped inside them at 320 s on an H100); eight still cover every launch.
  const int steps = GetParam() && UnderComputeSanitizer() ? 8 : 200;
  REPRISE_ASSERT_OK_AND_ASSIGN(const VerifyResult result, t->Verify(steps));
  EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(result.steps, steps);
  // The loss, every parameter and its gradient (unless fused away), two AdamW moments each.
  const int64_t parameters = static_cast<int64_t>(t->ParameterNames().size());
  EXPECT_GE(result.tensors_compared,
            1 + 4 * parameters - static_cast<int64_t>(result.gradients_not_materialized.size()));

  // Left as it was: the same state and step count, the trainer's own graph not replayed.
  REPRISE_ASSERT_OK(t->SaveCheckpoint(dir.path() + "/after.safetensors"));
  auto before = ReadCheckpoint(dir.path() + "/before.safetensors");
  auto after = ReadCheckpoint(dir.path() + "/after.safetensors");
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_EQ(before->header.step, after->header.step);
  for (const util::SafetensorsEntry& entry : before->file.entries) {
    EXPECT_TRUE(before->file.Data(entry) == after->file.Data(*after->file.Find(entry.name)))
        << entry.name << " changed";
  }
  const TrainerStats stats_after = t->stats();
  EXPECT_EQ(stats_after.graph_replays, stats_before.graph_replays);
  EXPECT_EQ(stats_after.graph_instantiations, 1);
  EXPECT_EQ(stats_after.verify_runs, 1);
  REPRISE_ASSERT_OK(t->Step());  // Still trains.
  REPRISE_ASSERT_OK(t->Synchronize());
}

INSTANTIATE_TEST_SUITE_P(MlpAndResNet18, VerifyGpuTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "ResNet18" : "DropoutMlp";
                         });

TEST(VerifyFaultGpuTest, HostScalarFrozenAtCaptureIsCaughtAndNamed) {
  REPRISE_REQUIRE_GPU();
  const TrustModel m = testing::DropoutMlp();
  auto impl = Trainer::Impl::Create(m.graph, m.loss, TrustOptions(m));
  ASSERT_TRUE(impl.ok()) << impl.status();
  std::vector<float> x(m.input_elements, 0.5f);
  std::vector<int32_t> y(m.batch, 1);
  REPRISE_ASSERT_OK((*impl)->SetInput("features", x.data(), x.size(), DType::kFloat32));
  REPRISE_ASSERT_OK((*impl)->SetInput("labels", y.data(), y.size(), DType::kInt32));
  REPRISE_ASSERT_OK_AND_ASSIGN(const VerifyResult clean, (*impl)->Verify(5));
  EXPECT_TRUE(clean.ok()) << clean.ToString();

  // The learning rate read by value when launched: the graph keeps step 0's, eager takes each.
  REPRISE_ASSERT_OK_AND_ASSIGN(const VerifyResult result,
                               (*impl)->Verify(5, {.frozen_input = "learning_rate"}));
  ASSERT_FALSE(result.ok());
  const VerifyMismatch& mismatch = *result.mismatch;
  EXPECT_EQ(mismatch.step, 1) << result.ToString();  // Step 0 used the same value in both runs.
  EXPECT_EQ(result.steps, 2);
  // The first tensor the rate reaches: a parameter, written by the AdamW update.
  EXPECT_EQ(mismatch.kind, "parameter") << result.ToString();
  EXPECT_THAT((*impl)->ParameterNames(), ::testing::Contains(mismatch.tensor));
  EXPECT_THAT(mismatch.op, HasSubstr("adam")) << result.ToString();
  EXPECT_NE(mismatch.graph_value, mismatch.eager_value);
  EXPECT_THAT(result.ToString(), HasSubstr(mismatch.tensor));
  EXPECT_THAT(result.ToString(), HasSubstr("step 1"));
}

TEST(ReportGpuTest, CountersMatchWhatTheTestDid) {
  REPRISE_REQUIRE_GPU();
  const TrustModel m = testing::DropoutMlp();
  auto t = MakeTrustTrainer(m, TrustOptions(m));
  ASSERT_NE(t, nullptr);
  for (int s = 0; s < 50; ++s) {
    FeedStep(*t, m, s);
    REPRISE_ASSERT_OK(t->Step());
  }
  REPRISE_ASSERT_OK(t->Synchronize());
  TrainerReport report = t->Report();
  EXPECT_EQ(report.stats.steps, 50);
  ASSERT_EQ(report.graphs.size(), 1u);
  EXPECT_EQ(report.graphs[0].replays, 50);
  EXPECT_EQ(report.stats.graph_captures, 1);
  EXPECT_EQ(report.stats.graph_instantiations, 1);  // Zero re-instantiations over 50 steps...
  EXPECT_EQ(report.stats.graph_exec_updates, 0);    // ... and no update: the schedule, clipping
  EXPECT_EQ(report.stats.graph_node_updates, 0);    // and Adam's step live on the device.
  EXPECT_TRUE(report.recapture_reasons.empty());
  EXPECT_TRUE(report.instantiation_reasons.empty());
  int64_t nodes = 0, kernels = 0, copies = 0;
  for (const auto& [kind, n] : report.graphs[0].nodes_by_kind) {
    nodes += n;
    if (kind == "kernel") kernels = n;
    if (kind == "memcpy") copies = n;
  }
  EXPECT_EQ(nodes, report.stats.graph_nodes);
  EXPECT_GT(kernels, 0);
  EXPECT_GE(copies + kernels, 2);  // The input copy (memcpy nodes or a gather kernel) and more.
  EXPECT_GT(report.stats.host_step_us_median, 0);
  EXPECT_GT(report.stats.parameter_bytes, 0);
  EXPECT_GE(report.stats.optimizer_state_bytes, 2 * report.stats.parameter_bytes);
  EXPECT_GT(report.stats.gradient_bytes, 0);
  absl::StatusOr<testing::JsonValue> json = testing::ParseJson(report.ToJson());
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ((*json)["graphs"].array[0]["replays"].integer, 50);
  EXPECT_THAT(report.ToText(), HasSubstr("replays 50"));

  // Binding an input to device memory re-captures once, for that reason.
  void* features = nullptr;
  REPRISE_ASSERT_OK(cudaMalloc(&features, m.input_elements * sizeof(float)));
  REPRISE_ASSERT_OK(cudaMemset(features, 0, m.input_elements * sizeof(float)));
  REPRISE_ASSERT_OK(cudaStreamSynchronize(cudaStreamLegacy));  // The memset runs on that stream.
  REPRISE_ASSERT_OK(t->BindInput("features", features, m.input_elements * sizeof(float)));
  REPRISE_ASSERT_OK(t->Step());
  REPRISE_ASSERT_OK(t->Synchronize());
  report = t->Report();
  EXPECT_EQ(report.stats.graph_captures, 2);
  EXPECT_THAT(report.recapture_reasons,
              ::testing::ElementsAre(::testing::Pair("input 'features' bound", 1)));
  EXPECT_EQ(report.stats.graph_exec_updates + report.stats.graph_instantiations - 1, 1);
  EXPECT_EQ(report.instantiation_reasons.empty(), report.stats.graph_instantiations == 1);
  REPRISE_ASSERT_OK(t->BindInput("features", nullptr, 0));
  t.reset();
  REPRISE_ASSERT_OK(cudaFree(features));
}

TEST(ReportGpuTest, EagerTrainerHasNoGraphAndReportPrintsAtDestructionWhenAsked) {
  REPRISE_REQUIRE_GPU();
  const TrustModel m = testing::DropoutMlp();
  auto t = MakeTrustTrainer(m, TrustOptions(m, ExecMode::kBulked));
  ASSERT_NE(t, nullptr);
  FeedStep(*t, m, 0);
  REPRISE_ASSERT_OK(t->Step());
  EXPECT_TRUE(t->Report().graphs.empty());
  EXPECT_EQ(t->Report().stats.steps, 1);
  ASSERT_EQ(setenv("REPRISE_REPORT", "1", 1), 0);
  ::testing::internal::CaptureStderr();
  t.reset();
  const std::string printed = ::testing::internal::GetCapturedStderr();
  unsetenv("REPRISE_REPORT");
  EXPECT_THAT(printed, HasSubstr("reprise step report"));
  EXPECT_THAT(printed, HasSubstr("no captured graph"));
}

TEST(ReportGpuTest, OutOfMemoryAtCreateSaysWhatWasAskedTheBreakdownAndWhatIsFree) {
  REPRISE_REQUIRE_GPU();
  // 2^30 elements (4 GiB) per activation and 64 layers keeping their inputs for the backward
  // pass: an arena of some 256 GiB, more than any one GPU has.
  auto mlp = models::BuildMlp({.batch = int64_t{1} << 18,
                               .input_features = 4096,
                               .depth = 64,
                               .width = 4096,
                               .classes = 10});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  auto trainer = Trainer::Create(mlp->graph, mlp->loss, {});
  ASSERT_FALSE(trainer.ok());
  const absl::Status& status = trainer.status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr("could not allocate the arena"));
  EXPECT_THAT(status.message(), HasSubstr("bytes ("));
  EXPECT_THAT(status.message(), HasSubstr("parameters"));
  EXPECT_THAT(status.message(), HasSubstr("activation peak"));
  EXPECT_THAT(status.message(), HasSubstr("free device memory"));
}

}  // namespace
}  // namespace reprise
