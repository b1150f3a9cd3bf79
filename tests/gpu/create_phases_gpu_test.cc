// Trainer::Create's wall time by phase (TrainerStats::create_ms) on a small GPT-2: every phase of
// a captured trainer is there and they add up to Create's time; and the initial values are bit for
// bit what the initialisers give on one thread on the CPU (parameters, Adam's moments, the step
// counter), however they were made: the token embedding (GPT-2's 50,257 x 128) drawn on every
// core into pinned pieces and copied while the next is drawn (four pieces, so each pinned half is
// reused after its copy), the smaller weights drawn whole, the zeros cleared on the device.
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/api/initial_upload.h"
#include "src/ir/host_tensor.h"
#include "src/ir/initializer.h"
#include "src/ir/op_def.h"
#include "src/util/safetensors.h"
#include "tests/cpu/cache_test_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

TrainOptions Gpt2Options() {
  TrainOptions options;
  options.seed = 7;
  options.numerics.compute_dtype = DType::kBFloat16;
  options.optimizer = OptimizerOptions{.kind = OptimizerKind::kAdamW,
                                       .learning_rate = 1e-3f,
                                       .beta1 = 0.9f,
                                       .beta2 = 0.95f,
                                       .weight_decay = 0.1f,
                                       .decay_rank1 = false,
                                       .max_grad_norm = 1.0f};
  return options;
}

absl::StatusOr<models::Gpt2> SmallGpt2() {
  return models::BuildGpt2({.batch = 4,
                            .seq = 64,
                            .max_positions = 64,
                            .vocab = 50257,
                            .layers = 2,
                            .heads = 4,
                            .width = 128});
}

TEST(CreatePhasesGpuTest, EveryPhaseIsThereAndTheyAddUpToCreatesTime) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(models::Gpt2 model, SmallGpt2());
  const absl::Time start = absl::Now();
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> trainer,
                               Trainer::Create(model.graph, model.loss, Gpt2Options()));
  const double outer_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  const TrainerStats stats = trainer->stats();
  std::set<std::string> names;
  double sum = 0;
  for (const auto& [name, ms] : stats.create_ms) {
    EXPECT_GE(ms, 0) << name;
    EXPECT_TRUE(names.insert(name).second) << name << " is listed twice";
    sum += ms;
  }
  for (const char* phase :
       {"checks", "device (CUDA context)", "compile passes", "plan checks and fingerprint",
        "stream and library handles (cuBLASLt, cuDNN)", "arena and workspaces",
        "kernel store and staging", "initial values (CPU)", "initial values (upload)", "kernels",
        "lowering (cuBLASLt heuristics, cuDNN plans)", "workspaces", "lanes",
        "capture and instantiation"}) {
    EXPECT_TRUE(names.count(phase)) << "no phase '" << phase << "' in " << stats.CreateBreakdown();
  }
  EXPECT_NEAR(sum, stats.create_total_ms, 1e-6 * stats.create_total_ms);
  // Create's own span sits inside the caller's, and nothing of note happens outside it.
  EXPECT_LE(stats.create_total_ms, outer_ms);
  EXPECT_GE(stats.create_total_ms, 0.95 * outer_ms - 2.0) << stats.CreateBreakdown();
  EXPECT_THAT(stats.CreateBreakdown(), HasSubstr("Create "));
  EXPECT_THAT(trainer->Report().ToText(), HasSubstr("initial values (CPU)"));
}

TEST(CreatePhasesGpuTest, InitialValuesAreTheInitialisersBitsOnOneThread) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(models::Gpt2 model, SmallGpt2());
  const TrainOptions options = Gpt2Options();
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainer> trainer,
                               Trainer::Create(model.graph, model.loss, options));
  testing::ScopedTempDir dir;
  const std::string path = dir.path() + "/initial.safetensors";
  REPRISE_ASSERT_OK(trainer->SaveWeights(path));
  REPRISE_ASSERT_OK_AND_ASSIGN(const util::SafetensorsFile file, util::ReadSafetensors(path));
  const Graph& g = trainer->training_graph();
  int compared = 0, zeros = 0;
  for (const util::SafetensorsEntry& entry : file.entries) {
    absl::StatusOr<int32_t> id = g.FindNode(entry.name);
    ASSERT_TRUE(id.ok()) << entry.name;
    const Node& node = g.node(*id);
    if (!ir::IsLeaf(node)) {
      ADD_FAILURE() << entry.name << " is saved but is no parameter or state";
      continue;
    }
    ir::HostTensor want(node.outputs[0]);
    ir::FillInitial(node.init, options.seed, node.name, want);
    const absl::string_view got = file.Data(entry);
    ASSERT_EQ(static_cast<int64_t>(got.size()), want.spec().bytes()) << entry.name;
    EXPECT_EQ(std::memcmp(got.data(), want.raw(), got.size()), 0) << entry.name;
    ++compared;
    zeros += ir::WritesZeroBits(node.init);
  }
  // The weights, biases, layer norms, both moments of each, and the step counter.
  EXPECT_GE(compared, 3 * 28);
  EXPECT_GE(zeros, 2 * 28);
  const util::SafetensorsEntry* wte = file.Find("transformer.wte.weight");
  ASSERT_NE(wte, nullptr);
  EXPECT_GT(wte->NumElements(), 3 * InitialUpload::kPieceElements);
  EXPECT_NE(file.Find("transformer.h.0.attn.c_attn.weight.exp_avg_sq"), nullptr);
}

}  // namespace
}  // namespace reprise
