// The guarded whole-step MLP kernel across steps that no host access separates: steps queued back
// to back, a skipped (non-finite) step at either parity of the weights' two buffers, and every
// host access after an odd number of steps (GetParameter, SaveWeights, SaveCheckpoint,
// RestoreCheckpoint, LoadWeights, SetParameter, a ForwardRunner's Run) give the bits of the
// unguarded kernel (kIgnore) on the same batches; so do the steps of a BucketedTrainer's buckets,
// each its own kernel with its own second buffers, alternating over the shared parameters. Tests
// that read the parameters after every step always start a step from the trainer's own buffers;
// these start steps from the other buffer too, and read it, so a wrong parity or a missing copy
// back changes bits here.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/util/safetensors.h"
#include "tests/cpu/cache_test_util.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/parameter_values.h"

namespace reprise {
namespace {

using ::reprise::testing::ParameterValues;
using ::reprise::testing::ScopedTempDir;
using Tensors = ::reprise::testing::ParameterMap;

constexpr int kBatch = 32, kFeatures = 64, kWidth = 128;
const models::MlpConfig kConfig{
    .batch = kBatch, .input_features = kFeatures, .depth = 2, .width = kWidth, .classes = 10};

// A plain MLP (1 model) or a batched ensemble (4), in float32 or with TF32.
struct Variant {
  int models;
  bool tf32;
};
constexpr Variant kVariants[] = {{1, false}, {1, true}, {4, false}, {4, true}};

std::string Describe(const Variant& s) {
  return absl::StrCat(s.models, " model(s)", s.tf32 ? ", TF32" : "");
}

std::string Prefix(const Variant& s, int model) {
  return s.models == 1 ? "" : absl::StrCat("m", model, ".");
}

// A trainer of the whole-step kernel, guarded (kSkipStep, the default) or not (kIgnore).
std::unique_ptr<Trainer> Make(const Variant& s, bool guarded) {
  TrainOptions options;
  options.seed = 7;
  options.numerics.allow_tf32 = s.tf32;
  if (!guarded) options.numerics.non_finite.policy = NonFinitePolicy::kIgnore;
  absl::StatusOr<std::unique_ptr<Trainer>> t;
  if (s.models == 1) {
    auto mlp = models::BuildMlp(kConfig);
    EXPECT_TRUE(mlp.ok()) << mlp.status();
    if (!mlp.ok()) return nullptr;
    t = Trainer::Create(mlp->graph, mlp->loss, options);
  } else {
    auto ensemble = models::BuildMlpEnsemble(s.models, kConfig);
    EXPECT_TRUE(ensemble.ok()) << ensemble.status();
    if (!ensemble.ok()) return nullptr;
    t = Trainer::Create(ensemble->graph, ensemble->loss, options);
  }
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return nullptr;
  const TrainerStats stats = (*t)->stats();
  EXPECT_EQ(stats.non_finite_policy, guarded ? "skip" : "ignore");
  // Input copies + the one whole-step launch: on the per-layer path this test would prove nothing.
  if (stats.launches_per_step > 1 + 2 * s.models) {
    ADD_FAILURE() << "not the whole step: " << stats.launches_per_step << " launches; "
                  << stats.whole_step_declined;
    return nullptr;
  }
  return *std::move(t);
}

// Model `model`'s features of batch `step`; with `nan`, row 5's feature 17 is a NaN.
std::vector<float> Features(int step, int model, bool nan = false) {
  std::mt19937 rng(90 + 31 * step + model);
  std::normal_distribution<float> normal;
  std::vector<float> x(kBatch * kFeatures);
  for (float& v : x) v = normal(rng);
  if (nan) x[5 * kFeatures + 17] = std::numeric_limits<float>::quiet_NaN();
  return x;
}

// The labels of the first `rows` rows of `x`.
std::vector<int32_t> Labels(const std::vector<float>& x, int64_t rows) {
  std::vector<int32_t> y(rows);
  for (int64_t i = 0; i < rows; ++i) {
    y[i] = static_cast<int32_t>((x[i * kFeatures] > 0) + 2 * (i % 4));
  }
  return y;
}

// Binds batch `step` for every model; with `nan`, the last model's batch holds a NaN.
absl::Status Feed(Trainer& t, const Variant& s, int step, bool nan = false) {
  for (int k = 0; k < s.models; ++k) {
    const std::vector<float> x = Features(step, k, nan && k == s.models - 1);
    RETURN_IF_ERROR(t.SetInput(Prefix(s, k) + "features", x));
    RETURN_IF_ERROR(t.SetInput(Prefix(s, k) + "labels", Labels(x, kBatch)));
  }
  return absl::OkStatus();
}

// Steps on batches first, first + 1, ..., count of them, with no host read in between.
absl::Status Steps(Trainer& t, const Variant& s, int first, int count) {
  for (int step = first; step < first + count; ++step) {
    RETURN_IF_ERROR(Feed(t, s, step));
    RETURN_IF_ERROR(t.Step());
  }
  return absl::OkStatus();
}

// Every parameter and its SGD velocity ("<name>.momentum") as SaveWeights writes them to `path`:
// the file is the public API's only reader of the optimizer state.
absl::StatusOr<Tensors> SavedState(Trainer& t, const std::string& path) {
  RETURN_IF_ERROR(t.SaveWeights(path));
  ASSIGN_OR_RETURN(const util::SafetensorsFile file, util::ReadSafetensors(path));
  Tensors out;
  for (const std::string& parameter : t.ParameterNames()) {
    for (const std::string& name : {parameter, parameter + ".momentum"}) {
      const util::SafetensorsEntry* entry = file.Find(name);
      if (entry == nullptr || entry->dtype != util::SafetensorsDType::kF32) {
        return absl::NotFoundError(absl::StrCat(path, " has no F32 tensor '", name, "'"));
      }
      const absl::string_view data = file.Data(*entry);
      std::vector<float>& values = out[name];
      values.resize(data.size() / sizeof(float));
      std::memcpy(values.data(), data.data(), values.size() * sizeof(float));
    }
  }
  return out;
}

// n steps queued back to back end at parity n % 2: GetParameter, then the weights file (each
// parameter and velocity) and the loss give the unguarded kernel's bits.
TEST(MlpDoubleBufferGpuTest, BackToBackStepsGiveTheUnguardedBits) {
  REPRISE_REQUIRE_GPU();
  ScopedTempDir dir;
  for (const Variant& s : kVariants) {
    for (int n : {1, 2, 3, 5}) {
      SCOPED_TRACE(absl::StrCat(Describe(s), ", ", n, " steps"));
      auto guarded = Make(s, true);
      auto ignored = Make(s, false);
      ASSERT_TRUE(guarded && ignored);
      REPRISE_ASSERT_OK(Steps(*guarded, s, 0, n));
      REPRISE_ASSERT_OK(Steps(*ignored, s, 0, n));
      const Tensors parameters = ParameterValues(*ignored);
      ASSERT_EQ(parameters.size(), 3u * 2 * s.models);  // fc0, fc1, fc2: weight and bias.
      EXPECT_EQ(ParameterValues(*guarded), parameters);
      REPRISE_ASSERT_OK_AND_ASSIGN(const Tensors a, SavedState(*guarded, dir.path() + "/g"));
      REPRISE_ASSERT_OK_AND_ASSIGN(const Tensors b, SavedState(*ignored, dir.path() + "/u"));
      EXPECT_EQ(a, b);
      REPRISE_ASSERT_OK_AND_ASSIGN(const float loss_a, guarded->Loss());
      REPRISE_ASSERT_OK_AND_ASSIGN(const float loss_b, ignored->Loss());
      EXPECT_EQ(loss_a, loss_b);
      EXPECT_EQ(*guarded->SkippedSteps(), 0);
    }
  }
}

// A NaN batch after 1 clean step (its update would go to buffer 0) and after 2 (to buffer 1),
// then 1 or 2 clean steps, none read: the guarded run is the unguarded run of the clean batches.
TEST(MlpDoubleBufferGpuTest, SkippedStepAtEitherParity) {
  REPRISE_REQUIRE_GPU();
  ScopedTempDir dir;
  for (const Variant& s : kVariants) {
    for (int before : {1, 2}) {
      for (int after : {1, 2}) {
        SCOPED_TRACE(absl::StrCat(Describe(s), ", NaN after ", before, " steps, ", after,
                                  " clean after it"));
        auto guarded = Make(s, true);
        auto ignored = Make(s, false);
        ASSERT_TRUE(guarded && ignored);
        REPRISE_ASSERT_OK(Steps(*guarded, s, 0, before));
        REPRISE_ASSERT_OK(Feed(*guarded, s, before, /*nan=*/true));
        REPRISE_ASSERT_OK(guarded->Step());
        REPRISE_ASSERT_OK(Steps(*guarded, s, before + 1, after));
        REPRISE_ASSERT_OK(Steps(*ignored, s, 0, before));
        REPRISE_ASSERT_OK(Steps(*ignored, s, before + 1, after));
        EXPECT_EQ(ParameterValues(*guarded), ParameterValues(*ignored));
        REPRISE_ASSERT_OK_AND_ASSIGN(const Tensors a, SavedState(*guarded, dir.path() + "/g"));
        REPRISE_ASSERT_OK_AND_ASSIGN(const Tensors b, SavedState(*ignored, dir.path() + "/u"));
        EXPECT_EQ(a, b);
        REPRISE_ASSERT_OK_AND_ASSIGN(const int64_t skipped, guarded->SkippedSteps());
        EXPECT_EQ(skipped, 1);
        const TrainerReport report = guarded->Report();
        ASSERT_TRUE(report.non_finite.has_value());
        EXPECT_EQ(report.non_finite->steps_checked, before + 1 + after);
        EXPECT_EQ(report.non_finite->first_non_finite_step, before);
      }
    }
  }
}

// SaveCheckpoint as the first host access after 3 steps; restored into a fresh trainer and into
// one 1 step in, both then run the saving trainer's next 2 steps to its bits (and to 5 unguarded
// steps'). SaveWeights after 1 step, loaded into a fresh trainer and one 1 step in, likewise.
TEST(MlpDoubleBufferGpuTest, CheckpointAfterAnOddStepResumesTheSameRun) {
  REPRISE_REQUIRE_GPU();
  ScopedTempDir dir;
  const std::string checkpoint = dir.path() + "/checkpoint";
  const std::string weights = dir.path() + "/weights.safetensors";
  for (const Variant& s : kVariants) {
    SCOPED_TRACE(Describe(s));
    auto saver = Make(s, true);
    auto fresh = Make(s, true);
    auto odd = Make(s, true);
    auto ignored = Make(s, false);
    ASSERT_TRUE(saver && fresh && odd && ignored);
    REPRISE_ASSERT_OK(Steps(*saver, s, 0, 3));
    REPRISE_ASSERT_OK(saver->SaveCheckpoint(checkpoint));
    REPRISE_ASSERT_OK(Steps(*saver, s, 3, 2));
    REPRISE_ASSERT_OK(fresh->RestoreCheckpoint(checkpoint));
    REPRISE_ASSERT_OK(Steps(*fresh, s, 3, 2));
    REPRISE_ASSERT_OK(Steps(*odd, s, 7, 1));  // Another batch: restored over, at parity 1.
    REPRISE_ASSERT_OK(odd->RestoreCheckpoint(checkpoint));
    REPRISE_ASSERT_OK(Steps(*odd, s, 3, 2));
    REPRISE_ASSERT_OK(Steps(*ignored, s, 0, 5));
    const Tensors expected = ParameterValues(*saver);
    EXPECT_EQ(ParameterValues(*fresh), expected) << "restored into a fresh trainer";
    EXPECT_EQ(ParameterValues(*odd), expected) << "restored into a trainer 1 step in";
    EXPECT_EQ(ParameterValues(*ignored), expected) << "the unguarded run";

    auto writer = Make(s, true);
    auto reader = Make(s, true);
    auto odd_reader = Make(s, true);
    auto one_step = Make(s, false);
    ASSERT_TRUE(writer && reader && odd_reader && one_step);
    REPRISE_ASSERT_OK(Steps(*writer, s, 0, 1));
    REPRISE_ASSERT_OK(writer->SaveWeights(weights));
    REPRISE_ASSERT_OK(Steps(*writer, s, 1, 1));
    REPRISE_ASSERT_OK(Steps(*one_step, s, 0, 1));
    const Tensors after_one = ParameterValues(*one_step);
    REPRISE_ASSERT_OK(reader->LoadWeights(weights));
    EXPECT_EQ(ParameterValues(*reader), after_one) << "GetParameter after LoadWeights";
    REPRISE_ASSERT_OK(Steps(*reader, s, 1, 1));
    REPRISE_ASSERT_OK(Steps(*odd_reader, s, 7, 1));
    REPRISE_ASSERT_OK(odd_reader->LoadWeights(weights));
    REPRISE_ASSERT_OK(Steps(*odd_reader, s, 1, 1));
    const Tensors two_steps = ParameterValues(*writer);
    EXPECT_NE(two_steps, after_one);
    EXPECT_EQ(ParameterValues(*reader), two_steps) << "loaded into a fresh trainer";
    EXPECT_EQ(ParameterValues(*odd_reader), two_steps) << "loaded into a trainer 1 step in";
  }
}

// SetParameter as the first host access after 1 step, then a step: the unguarded bits. A
// GetParameter right after SetParameter gives what was set, the others the step's update.
TEST(MlpDoubleBufferGpuTest, SetParameterAfterAnOddStep) {
  REPRISE_REQUIRE_GPU();
  ScopedTempDir dir;
  for (const Variant& s : kVariants) {
    SCOPED_TRACE(Describe(s));
    // The first model's first weight and the last model's hidden bias.
    const std::string weight = Prefix(s, 0) + "fc0.weight";
    const std::string bias = Prefix(s, s.models - 1) + "fc1.bias";
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::vector<float> w(kWidth * kFeatures), b(kWidth);
    for (float& v : w) v = normal(rng);
    for (float& v : b) v = normal(rng);
    auto set = [&](Trainer& t) -> absl::Status {
      RETURN_IF_ERROR(t.SetParameter(weight, w));
      return t.SetParameter(bias, b);
    };

    auto guarded = Make(s, true);
    auto ignored = Make(s, false);
    ASSERT_TRUE(guarded && ignored);
    for (Trainer* t : {guarded.get(), ignored.get()}) {
      REPRISE_ASSERT_OK(Steps(*t, s, 0, 1));
      REPRISE_ASSERT_OK(set(*t));
      REPRISE_ASSERT_OK(Steps(*t, s, 1, 1));
    }
    const Tensors expected = ParameterValues(*ignored);
    EXPECT_EQ(ParameterValues(*guarded), expected);
    REPRISE_ASSERT_OK_AND_ASSIGN(const Tensors a, SavedState(*guarded, dir.path() + "/g"));
    REPRISE_ASSERT_OK_AND_ASSIGN(const Tensors c, SavedState(*ignored, dir.path() + "/u"));
    EXPECT_EQ(a, c);

    auto read_back = Make(s, true);
    auto one_step = Make(s, false);
    ASSERT_TRUE(read_back && one_step);
    for (Trainer* t : {read_back.get(), one_step.get()}) {
      REPRISE_ASSERT_OK(Steps(*t, s, 0, 1));
      REPRISE_ASSERT_OK(set(*t));
    }
    REPRISE_ASSERT_OK_AND_ASSIGN(const std::vector<float> got_w, read_back->GetParameter(weight));
    EXPECT_EQ(got_w, w);
    REPRISE_ASSERT_OK_AND_ASSIGN(const std::vector<float> got_b, read_back->GetParameter(bias));
    EXPECT_EQ(got_b, b);
    const Tensors updated = ParameterValues(*one_step);
    EXPECT_EQ(ParameterValues(*read_back), updated);
  }
}

// A forward graph of the same model, its logits as outputs.
struct Eval {
  Graph graph;
  std::vector<Value> logits;
};

absl::StatusOr<Eval> BuildEval(const Variant& s) {
  if (s.models == 1) {
    ASSIGN_OR_RETURN(models::Mlp mlp, models::BuildMlp(kConfig));
    return Eval{std::move(mlp.graph), {mlp.logits}};
  }
  ASSIGN_OR_RETURN(models::MlpEnsemble ensemble, models::BuildMlpEnsemble(s.models, kConfig));
  return Eval{std::move(ensemble.graph), ensemble.logits};
}

// Every model's logits of a held-out batch, concatenated.
absl::StatusOr<std::vector<float>> Logits(ForwardRunner& runner, const Eval& eval,
                                          const Variant& s) {
  for (int k = 0; k < s.models; ++k) {
    RETURN_IF_ERROR(runner.SetInput(Prefix(s, k) + "features", Features(50, k)));
  }
  RETURN_IF_ERROR(runner.Run());
  std::vector<float> out;
  for (Value logits : eval.logits) {
    ASSIGN_OR_RETURN(std::vector<float> values, runner.Read(logits));
    out.insert(out.end(), values.begin(), values.end());
  }
  return out;
}

// A runner's Run as the first host access after 1 or 3 steps, the runner compiled before the
// steps or after them: the guarded trainer's weights give the unguarded one's logits. The plain
// MLP only: a runner over one model of an ensemble reads its slice of the stacked biases, which
// cuBLASLt's bias epilogue cannot take unaligned (CompileForward refuses it, InvalidArgument).
TEST(MlpDoubleBufferGpuTest, ForwardRunnerAfterAnOddStep) {
  REPRISE_REQUIRE_GPU();
  for (const Variant& s : kVariants) {
    if (s.models != 1) continue;
    for (int n : {1, 3}) {
      for (bool compiled_before : {true, false}) {
        SCOPED_TRACE(absl::StrCat(Describe(s), ", ", n, " steps, runner compiled ",
                                  compiled_before ? "before" : "after", " them"));
        REPRISE_ASSERT_OK_AND_ASSIGN(const Eval eval, BuildEval(s));
        auto guarded = Make(s, true);
        auto ignored = Make(s, false);
        ASSERT_TRUE(guarded && ignored);
        std::unique_ptr<ForwardRunner> runners[2];
        std::vector<float> initial;
        if (compiled_before) {
          for (int i = 0; i < 2; ++i) {
            Trainer& t = i == 0 ? *guarded : *ignored;
            REPRISE_ASSERT_OK_AND_ASSIGN(runners[i], t.CompileForward(eval.graph, eval.logits));
          }
          REPRISE_ASSERT_OK_AND_ASSIGN(initial, Logits(*runners[0], eval, s));
        }
        REPRISE_ASSERT_OK(Steps(*guarded, s, 0, n));
        REPRISE_ASSERT_OK(Steps(*ignored, s, 0, n));
        if (!compiled_before) {
          for (int i = 0; i < 2; ++i) {
            Trainer& t = i == 0 ? *guarded : *ignored;
            REPRISE_ASSERT_OK_AND_ASSIGN(runners[i], t.CompileForward(eval.graph, eval.logits));
          }
        }
        REPRISE_ASSERT_OK_AND_ASSIGN(const std::vector<float> a, Logits(*runners[0], eval, s));
        REPRISE_ASSERT_OK_AND_ASSIGN(const std::vector<float> b, Logits(*runners[1], eval, s));
        ASSERT_EQ(a.size(), static_cast<size_t>(s.models * kBatch * kConfig.classes));
        EXPECT_EQ(a, b);
        if (compiled_before) EXPECT_NE(a, initial) << "the runner did not see the steps";
        // The weights the runs read, read by the host.
        EXPECT_EQ(ParameterValues(*guarded), ParameterValues(*ignored));
      }
    }
  }
}

// Shape buckets: each bucket is its own plan and whole-step kernel, with its own second buffers
// and parity, over parameters the buckets share.
const std::vector<int64_t> kBuckets = {16, kBatch};

// The plain MLP at `batch` rows: one bucket's model.
absl::StatusOr<BucketModel> MlpAt(int64_t batch) {
  models::MlpConfig config = kConfig;
  config.batch = batch;
  ASSIGN_OR_RETURN(models::Mlp mlp, models::BuildMlp(config));
  return BucketModel{std::move(mlp.graph), mlp.loss};
}

// A bucketed trainer over kBuckets, guarded or not, every bucket on the whole-step kernel.
std::unique_ptr<BucketedTrainer> MakeBucketed(bool guarded) {
  TrainOptions options;
  options.seed = 7;
  if (!guarded) options.numerics.non_finite.policy = NonFinitePolicy::kIgnore;
  absl::StatusOr<std::unique_ptr<BucketedTrainer>> t =
      BucketedTrainer::Create(MlpAt, kBuckets, options);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return nullptr;
  for (int64_t batch : kBuckets) {
    absl::StatusOr<Trainer*> bucket = (*t)->Bucket(batch);
    EXPECT_TRUE(bucket.ok()) << bucket.status();
    if (!bucket.ok()) return nullptr;
    const TrainerStats stats = (*bucket)->stats();
    EXPECT_EQ(stats.non_finite_policy, guarded ? "skip" : "ignore") << "bucket " << batch;
    // The two input copies + the one whole-step launch, in every bucket.
    if (stats.launches_per_step > 3) {
      ADD_FAILURE() << "bucket " << batch << " is not the whole step: " << stats.launches_per_step
                    << " launches; " << stats.whole_step_declined;
      return nullptr;
    }
  }
  return *std::move(t);
}

// Binds the first `batch` rows of batch `step` (which selects bucket `batch`) and steps.
absl::Status BucketStep(BucketedTrainer& t, int64_t batch, int step) {
  std::vector<float> x = Features(step, 0);
  x.resize(batch * kFeatures);
  RETURN_IF_ERROR(t.SetInput("features", x));
  RETURN_IF_ERROR(t.SetInput("labels", Labels(x, batch)));
  if (t.batch() != batch) {
    return absl::InternalError(absl::StrCat("bucket ", t.batch(), " selected, not ", batch));
  }
  return t.Step();
}

// Steps alternating buckets with no parameter read in between, so that a bucket's step starts
// where another bucket's last step left the weights (in that bucket's second buffer after an odd
// run of its steps), then the parameters read first through either bucket: the unguarded bits.
// The schedules end on either bucket; with `losses`, Loss() after every step (it reads the loss,
// no parameter) gives the unguarded losses too.
TEST(MlpDoubleBufferGpuTest, BucketSwitchesWithoutReadsGiveTheUnguardedBits) {
  REPRISE_REQUIRE_GPU();
  ScopedTempDir dir;
  const std::vector<std::vector<int64_t>> schedules = {{32, 16, 16, 32, 16},
                                                       {16, 32, 16, 16, 32, 32, 32}};
  auto fresh = MakeBucketed(false);
  ASSERT_TRUE(fresh);
  const Tensors initial = ParameterValues(*fresh);
  for (const std::vector<int64_t>& schedule : schedules) {
    for (int64_t reader : kBuckets) {
      for (bool losses : {false, true}) {
        SCOPED_TRACE(absl::StrCat("schedule ", absl::StrJoin(schedule, ","), ", read through ",
                                  "bucket ", reader, losses ? ", losses read" : ""));
        auto guarded = MakeBucketed(true);
        auto ignored = MakeBucketed(false);
        ASSERT_TRUE(guarded && ignored);
        std::vector<float> loss[2];
        for (int i = 0; i < 2; ++i) {
          BucketedTrainer& t = i == 0 ? *guarded : *ignored;
          for (size_t step = 0; step < schedule.size(); ++step) {
            REPRISE_ASSERT_OK(BucketStep(t, schedule[step], static_cast<int>(step)));
            if (!losses) continue;
            REPRISE_ASSERT_OK_AND_ASSIGN(const float value, t.Loss());
            loss[i].push_back(value);
          }
        }
        EXPECT_EQ(loss[0], loss[1]);
        // The first host access: BucketedTrainer::GetParameter reads through the smallest
        // bucket, Bucket(batch)->GetParameter through that bucket.
        REPRISE_ASSERT_OK_AND_ASSIGN(Trainer * guarded_reader, guarded->Bucket(reader));
        REPRISE_ASSERT_OK_AND_ASSIGN(Trainer * ignored_reader, ignored->Bucket(reader));
        const Tensors got =
            reader == kBuckets[0] ? ParameterValues(*guarded) : ParameterValues(*guarded_reader);
        const Tensors expected = ParameterValues(*ignored_reader);
        ASSERT_EQ(expected.size(), 6u);  // fc0, fc1, fc2: weight and bias.
        EXPECT_EQ(got, expected);
        EXPECT_NE(expected, initial) << "the steps changed nothing";
        for (int64_t batch : kBuckets) {
          REPRISE_ASSERT_OK_AND_ASSIGN(Trainer * bucket, guarded->Bucket(batch));
          EXPECT_EQ(ParameterValues(*bucket), expected) << "read through bucket " << batch;
        }
        REPRISE_ASSERT_OK_AND_ASSIGN(const Tensors a,
                                     SavedState(*guarded_reader, dir.path() + "/g"));
        REPRISE_ASSERT_OK_AND_ASSIGN(const Tensors b,
                                     SavedState(*ignored_reader, dir.path() + "/u"));
        EXPECT_EQ(a, b);
        REPRISE_ASSERT_OK_AND_ASSIGN(const float loss_a, guarded->Loss());
        REPRISE_ASSERT_OK_AND_ASSIGN(const float loss_b, ignored->Loss());
        EXPECT_EQ(loss_a, loss_b);
        // Each bucket ran its own steps of the schedule, and only those.
        for (const BucketedReport::Bucket& bucket : guarded->Report().buckets) {
          EXPECT_EQ(bucket.report.stats.steps,
                    std::count(schedule.begin(), schedule.end(), bucket.batch))
              << "bucket " << bucket.batch;
        }
      }
    }
  }
}

}  // namespace
}  // namespace reprise
