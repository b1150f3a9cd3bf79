// The Trainer and the kernel cache: the first Trainer compiles (cold), a second one in the same
// process reuses the process's store (hot), a store over a filled folder loads every kernel from
// disk (warm), a damaged entry is compiled again and counted, and REPRISE_CACHE_DIR=off leaves
// the disk alone; measured cuDNN convolution plans and cuBLASLt configurations are recorded in the
// folder and a later process builds them from the records, training to the same bits. (Separate
// from trainer_gpu_test.cc, which checks the numerics of the step.)
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/codegen/generated_kernel.h"
#include "src/ops/lt_matmul_kernel.h"
#include "src/runtime/cache_folder.h"
#include "src/runtime/cudnn_conv.h"
#include "src/runtime/cudnn_conv_graph.h"
#include "src/util/status_macros.h"
#include "tests/cpu/cache_test_util.h"
#include "tests/cpu/scoped_env.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::reprise::testing::ScopedEnv;
using ::testing::HasSubstr;

absl::StatusOr<TrainerStats> CreateTrainerStats() {
  ASSIGN_OR_RETURN(
      models::Mlp mlp,
      models::BuildMlp({.batch = 8, .input_features = 4, .depth = 1, .width = 16, .classes = 3}));
  TrainOptions options;
  options.launch.mode = ExecMode::kBulked;
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::Create(mlp.graph, mlp.loss, options));
  return trainer->stats();
}

// Copies every entry of one cache folder into another: entries are named by their key, so the
// copy is a warm cache for a store that has never seen them (as a new process would).
void CopyFolder(const std::string& from, const std::string& to) {
  for (const auto& entry : std::filesystem::directory_iterator(from)) {
    std::filesystem::copy(entry.path(), std::filesystem::path(to) / entry.path().filename());
  }
}

TEST(TrainerKernelCacheTest, ColdCompilesHotReusesWarmLoadsFromDisk) {
  REPRISE_REQUIRE_GPU();
  testing::ScopedTempDir cold_dir, warm_dir;
  int64_t kernels = 0;
  {
    ScopedEnv env("REPRISE_CACHE_DIR", cold_dir.path());
    // Every generated kernel is prefetched; the plan's fused kernels come on top.
    REPRISE_ASSERT_OK_AND_ASSIGN(TrainerStats cold, CreateTrainerStats());
    kernels = cold.kernels_compiled;
    EXPECT_GE(kernels, static_cast<int64_t>(codegen::AllKernels().size()));
    EXPECT_EQ(cold.kernel_disk_hits, 0);
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::VerifyResult stored,
                                 runtime::VerifyCacheFolder(cold_dir.path()));
    EXPECT_EQ(stored.good, kernels);
    // Hot: the process's store already holds every kernel.
    REPRISE_ASSERT_OK_AND_ASSIGN(TrainerStats hot, CreateTrainerStats());
    EXPECT_EQ(hot.kernels_compiled, 0);
    EXPECT_EQ(hot.kernel_disk_hits, 0);
  }
  CopyFolder(cold_dir.path(), warm_dir.path());
  ScopedEnv env("REPRISE_CACHE_DIR", warm_dir.path());
  REPRISE_ASSERT_OK_AND_ASSIGN(TrainerStats warm, CreateTrainerStats());
  EXPECT_EQ(warm.kernels_compiled, 0);
  EXPECT_EQ(warm.kernel_disk_hits, kernels);
  EXPECT_EQ(warm.kernel_cache_corrupt, 0);
  EXPECT_THAT(warm.ToString(), HasSubstr("disk hits"));
}

TEST(TrainerKernelCacheTest, DamagedEntryIsCompiledAgainAndCounted) {
  REPRISE_REQUIRE_GPU();
  testing::ScopedTempDir filled, damaged;
  {
    ScopedEnv env("REPRISE_CACHE_DIR", filled.path());
    REPRISE_ASSERT_OK(CreateTrainerStats().status());
  }
  CopyFolder(filled.path(), damaged.path());
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::CacheListing listing,
                               runtime::ListCacheFolder(damaged.path()));
  ASSERT_FALSE(listing.entries.empty());
  testing::DamageEntry(listing.entries.front().path, testing::Damage::kPayloadBitFlip);

  ScopedEnv env("REPRISE_CACHE_DIR", damaged.path());
  REPRISE_ASSERT_OK_AND_ASSIGN(TrainerStats stats, CreateTrainerStats());
  EXPECT_EQ(stats.kernels_compiled, 1);
  EXPECT_EQ(stats.kernel_cache_corrupt, 1);
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::VerifyResult verified,
                               runtime::VerifyCacheFolder(damaged.path()));
  EXPECT_TRUE(verified.bad.empty());
}

// A small bfloat16 ResNet-18, its convolutions on the graph API with measured plans (its residual
// sums on the legacy call, with measured algorithms): how its Create chose them (CudnnConvGraph's
// process-wide counts, before and after) and the losses of three steps on fixed batches.
struct MeasuredRun {
  runtime::ConvGraphStats before, after;
  TrainerStats stats;  // The trainer's own counts of the same.
  std::vector<float> losses;
};
absl::StatusOr<MeasuredRun> TrainWithMeasuredConvPlans() {
  ASSIGN_OR_RETURN(
      models::ResNet net,
      models::BuildResNet(
          {.depth = 18, .batch = 4, .classes = 4, .image_size = 32, .layout = Layout::kNHWC}));
  TrainOptions options;
  options.numerics.deterministic = true;
  options.numerics.compute_dtype = DType::kBFloat16;
  options.kernels.conv_api = KernelTuning::ConvApi::kGraph;
  options.kernels.measure_conv_algorithms = true;
  // The residual blocks' sums in place, on the legacy call, whose measured algorithms are
  // recorded too (by default no legacy call runs).
  options.kernels.conv_sums_in_place = true;
  options.kernels.residual_sums_in_batch_norm = false;
  options.seed = 7;
  MeasuredRun run{.before = runtime::CudnnConvGraph::Stats()};
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::Create(net.graph, net.loss, options));
  run.after = runtime::CudnnConvGraph::Stats();
  run.stats = trainer->stats();
  std::vector<float> images(4 * 32 * 32 * 3);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < images.size(); ++i) {
      images[i] = static_cast<float>((i * 7 + step) % 13) / 13;
    }
    RETURN_IF_ERROR(trainer->SetInput("images", images));
    RETURN_IF_ERROR(trainer->SetInput("labels", std::vector<int32_t>{0, 1, 2, 3}));
    RETURN_IF_ERROR(trainer->Step());
    ASSIGN_OR_RETURN(float loss, trainer->Loss());
    run.losses.push_back(loss);
  }
  return run;
}

TEST(TrainerKernelCacheTest, MeasuredConvPlansAreRecordedAndALaterProcessReusesThem) {
  REPRISE_REQUIRE_GPU();
  testing::ScopedTempDir dir;
  ScopedEnv env("REPRISE_CACHE_DIR", dir.path());
  runtime::CudnnConvGraph::ForgetPlans();
  runtime::ConvAlgorithmCache::Global().Clear();
  REPRISE_ASSERT_OK_AND_ASSIGN(MeasuredRun measured, TrainWithMeasuredConvPlans());
  const int64_t plans = measured.after.measured_plans - measured.before.measured_plans;
  std::cout << "measured " << plans << " plans in "
            << measured.after.measure_ms - measured.before.measure_ms << " ms\n";
  EXPECT_GT(plans, 10);
  EXPECT_EQ(measured.after.record_plans, measured.before.record_plans);
  EXPECT_EQ(measured.stats.conv_plans_measured, plans);
  EXPECT_EQ(measured.stats.conv_plans_from_records, 0);
  EXPECT_EQ(measured.stats.conv_candidates_timed,
            measured.after.candidates_timed - measured.before.candidates_timed);
  EXPECT_GT(measured.stats.conv_measure_ms, 0);
  // The residual blocks' in-place sums stay on the legacy call: measured by cudnnFind, recorded.
  EXPECT_GT(measured.stats.conv_legacy_measured, 0);
  EXPECT_EQ(measured.stats.conv_legacy_from_records, 0);
  // A later process: the plans and algorithms from the records, nothing timed, the same losses
  // bit for bit.
  runtime::CudnnConvGraph::ForgetPlans();
  runtime::ConvAlgorithmCache::Global().Clear();
  REPRISE_ASSERT_OK_AND_ASSIGN(MeasuredRun recorded, TrainWithMeasuredConvPlans());
  EXPECT_EQ(recorded.after.measured_plans, recorded.before.measured_plans);
  EXPECT_EQ(recorded.after.record_plans - recorded.before.record_plans, plans);
  EXPECT_EQ(recorded.after.records_discarded, recorded.before.records_discarded);
  EXPECT_EQ(recorded.stats.conv_plans_from_records, plans);
  EXPECT_EQ(recorded.stats.conv_plans_measured, 0);
  EXPECT_EQ(recorded.stats.conv_plan_records_discarded, 0);
  EXPECT_EQ(recorded.stats.conv_legacy_from_records, measured.stats.conv_legacy_measured);
  EXPECT_EQ(recorded.stats.conv_legacy_measured, 0);
  EXPECT_EQ(recorded.stats.conv_legacy_records_discarded, 0);
  EXPECT_EQ(recorded.losses, measured.losses);
  for (float loss : measured.losses) EXPECT_TRUE(std::isfinite(loss)) << loss;
  runtime::CudnnConvGraph::ForgetPlans();
}

// A small bfloat16 GPT-2 with measured cuBLASLt configurations (with gelu_product_library's
// default, its GELU products raced between cuDNN and cuBLASLt): how many choices its Create
// measured or took from records (ops::MatmulChoices, before and after), and the losses of three
// steps.
struct MeasuredProducts {
  ops::MatmulChoiceStats before, after;
  TrainerStats stats;  // The trainer's own counts of the same.
  std::vector<float> losses;
};
absl::StatusOr<MeasuredProducts> TrainWithMeasuredProducts(
    KernelTuning::GeluProductLibrary gelu_library) {
  ASSIGN_OR_RETURN(models::Gpt2 model, models::BuildGpt2({.batch = 2,
                                                          .seq = 32,
                                                          .max_positions = 32,
                                                          .vocab = 512,
                                                          .layers = 2,
                                                          .heads = 2,
                                                          .width = 64}));
  TrainOptions options;
  options.numerics.compute_dtype = DType::kBFloat16;
  options.kernels.measure_matmul_algorithms = true;
  options.kernels.gelu_product_library = gelu_library;
  options.seed = 11;
  MeasuredProducts run{.before = ops::MatmulChoices()};
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                   Trainer::Create(model.graph, model.loss, options));
  run.after = ops::MatmulChoices();
  run.stats = trainer->stats();
  std::vector<int32_t> tokens(2 * 32), targets(2 * 32);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>((i * 37 + step * 5) % 512);
      targets[i] = static_cast<int32_t>((i * 11 + step) % 512);
    }
    RETURN_IF_ERROR(trainer->SetInput("tokens", tokens));
    RETURN_IF_ERROR(trainer->SetInput("targets", targets));
    RETURN_IF_ERROR(trainer->Step());
    ASSIGN_OR_RETURN(float loss, trainer->Loss());
    run.losses.push_back(loss);
  }
  return run;
}

// Measured choices recorded, and a later process (the records on disk) taking every one from its
// record, timing nothing and giving the same losses bit for bit.
void ExpectMeasuredChoicesRecordedAndReused(KernelTuning::GeluProductLibrary gelu_library) {
  testing::ScopedTempDir dir;
  ScopedEnv env("REPRISE_CACHE_DIR", dir.path());
  REPRISE_ASSERT_OK_AND_ASSIGN(MeasuredProducts measured, TrainWithMeasuredProducts(gelu_library));
  const ops::MatmulChoiceStats first = measured.after.Since(measured.before);
  std::cout << first.MeasuredSince({}) << "\n";
  // Each distinct product is timed once; the layers' products of the same shape after the first
  // take its record.
  EXPECT_GT(first.measured, 5);
  EXPECT_GE(first.candidates_timed, first.measured);
  EXPECT_GT(first.from_records, 0);
  EXPECT_EQ(measured.stats.matmul_choices_measured, first.measured);
  EXPECT_EQ(measured.stats.matmul_choices_from_records, first.from_records);
  EXPECT_EQ(measured.stats.matmul_candidates_timed, first.candidates_timed);
  EXPECT_GT(measured.stats.matmul_measure_ms, 0);
  REPRISE_ASSERT_OK_AND_ASSIGN(MeasuredProducts recorded, TrainWithMeasuredProducts(gelu_library));
  const ops::MatmulChoiceStats later = recorded.after.Since(recorded.before);
  EXPECT_EQ(later.measured, 0);
  EXPECT_EQ(later.from_records, first.measured + first.from_records);
  EXPECT_EQ(later.records_discarded, 0);
  EXPECT_EQ(recorded.stats.matmul_choices_measured, 0);
  EXPECT_EQ(recorded.stats.matmul_choices_from_records, later.from_records);
  EXPECT_EQ(recorded.stats.matmul_records_discarded, 0);
  EXPECT_EQ(recorded.losses, measured.losses);
  for (float loss : measured.losses) EXPECT_TRUE(std::isfinite(loss)) << loss;
}

TEST(TrainerKernelCacheTest, MeasuredMatmulChoicesAreRecordedAndALaterProcessReusesThem) {
  REPRISE_REQUIRE_GPU();
  ExpectMeasuredChoicesRecordedAndReused(KernelTuning::GeluProductLibrary::kCublasLt);
}

// The race between cuDNN's plan and cuBLASLt's epilogue for each GELU product (the default where
// measuring) is one more recorded choice: a later process runs the recorded winner (cuDNN's plan
// by its name) untimed.
TEST(TrainerKernelCacheTest, RacedGeluProductsAreRecordedAndALaterProcessReusesThem) {
  REPRISE_REQUIRE_GPU();
  ExpectMeasuredChoicesRecordedAndReused(KernelTuning::GeluProductLibrary::kFastest);
}

TEST(TrainerKernelCacheTest, OffLeavesTheDiskAlone) {
  REPRISE_REQUIRE_GPU();
  ScopedEnv env("REPRISE_CACHE_DIR", "off");
  REPRISE_ASSERT_OK_AND_ASSIGN(TrainerStats stats, CreateTrainerStats());
  EXPECT_EQ(stats.kernel_disk_hits, 0);
}

}  // namespace
}  // namespace reprise
