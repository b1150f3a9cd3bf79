// Weights through safetensors: a second Trainer that loads what the first saved holds the same
// bits in every parameter and momentum buffer and takes the same next step, in the same captured
// graph; a file that does not fit the graph is refused whole, naming the tensor.
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/util/safetensors.h"
#include "tests/cpu/cache_test_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using ::reprise::testing::ScopedTempDir;
using ::testing::HasSubstr;

constexpr int kBatch = 16, kFeatures = 12, kClasses = 4, kWidth = 32;

models::MlpConfig SmallMlp(int64_t width = kWidth) {
  return {.batch = kBatch,
          .input_features = kFeatures,
          .depth = 2,
          .width = width,
          .classes = kClasses};
}

std::unique_ptr<Trainer> MakeTrainer(const models::Mlp& mlp, uint64_t seed,
                                     bool whole_step = true) {
  TrainOptions options;
  options.seed = seed;
  options.kernels.whole_step = whole_step;
  auto trainer = Trainer::Create(mlp.graph, mlp.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

void Feed(Trainer& t, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int32_t> label(0, kClasses - 1);
  std::vector<float> x(kBatch * kFeatures);
  std::vector<int32_t> y(kBatch);
  for (float& v : x) v = normal(rng);
  for (int32_t& v : y) v = label(rng);
  ASSERT_TRUE(t.SetInput("features", x).ok());
  ASSERT_TRUE(t.SetInput("labels", y).ok());
}

void Train(Trainer& t, int steps) {
  std::mt19937 rng(7);
  for (int s = 0; s < steps; ++s) {
    Feed(t, rng);
    ASSERT_TRUE(t.Step().ok());
  }
  ASSERT_TRUE(t.Synchronize().ok());
}

// Every parameter's bytes, by name.
std::vector<std::pair<std::string, std::vector<float>>> Parameters(Trainer& t) {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const std::string& name : t.ParameterNames()) {
    absl::StatusOr<std::vector<float>> values = t.GetParameter(name);
    EXPECT_TRUE(values.ok()) << values.status();
    out.emplace_back(name, values.ok() ? *values : std::vector<float>{});
  }
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void ExpectSameParameters(Trainer& a, Trainer& b) {
  const auto pa = Parameters(a), pb = Parameters(b);
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_TRUE(SameBits(pa[i].second, pb[i].second)) << pa[i].first;
  }
}

// Writes `file`'s tensors, less `drop` and with `add`, to `path`.
void Rewrite(const util::SafetensorsFile& file, const std::string& path, absl::string_view drop,
             std::vector<util::TensorView> add = {}) {
  std::vector<util::TensorView> views = std::move(add);
  for (const util::SafetensorsEntry& e : file.entries) {
    if (e.name == drop) continue;
    bool replaced = false;
    for (const util::TensorView& v : views) replaced = replaced || v.name == e.name;
    if (!replaced) views.push_back({e.name, e.dtype, e.shape, file.Data(e)});
  }
  ASSERT_TRUE(util::WriteSafetensors(path, views).ok());
}

TEST(WeightsGpuTest, LoadedTrainerHasTheSameBitsAndTakesTheSameStep) {
  REPRISE_REQUIRE_GPU();
  absl::StatusOr<models::Mlp> mlp = models::BuildMlp(SmallMlp());
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  std::unique_ptr<Trainer> a = MakeTrainer(*mlp, 1);
  std::unique_ptr<Trainer> b = MakeTrainer(*mlp, 2);
  ASSERT_TRUE(a && b);
  Train(*a, 5);
  ScopedTempDir dir;
  const std::string a_path = dir.path() + "/a.safetensors", b_path = dir.path() + "/b.safetensors";
  REPRISE_ASSERT_OK(a->SaveWeights(a_path));
  ASSERT_FALSE(SameBits(Parameters(*a)[0].second, Parameters(*b)[0].second));

  const int64_t captures = b->stats().graph_captures;
  REPRISE_ASSERT_OK(b->LoadWeights(a_path));
  EXPECT_EQ(b->stats().graph_captures, captures);  // The captured step is still the one to run.
  ExpectSameParameters(*a, *b);

  // The files hold every parameter and its momentum, and B's is A's to the bit.
  REPRISE_ASSERT_OK(b->SaveWeights(b_path));
  REPRISE_ASSERT_OK_AND_ASSIGN(const util::SafetensorsFile fa, util::ReadSafetensors(a_path));
  REPRISE_ASSERT_OK_AND_ASSIGN(const util::SafetensorsFile fb, util::ReadSafetensors(b_path));
  EXPECT_EQ(fa.metadata, (util::SafetensorsMetadata{{"format", "pt"}}));
  ASSERT_EQ(fa.entries.size(), fb.entries.size());
  for (size_t i = 0; i < fa.entries.size(); ++i) {
    EXPECT_EQ(fa.entries[i].name, fb.entries[i].name);
    EXPECT_EQ(fa.Data(fa.entries[i]), fb.Data(fb.entries[i])) << fa.entries[i].name;
  }
  for (const std::string& name : a->ParameterNames()) {
    const util::SafetensorsEntry* w = fa.Find(name);
    const util::SafetensorsEntry* m = fa.Find(name + ".momentum");
    ASSERT_TRUE(w != nullptr && m != nullptr) << name;
    EXPECT_EQ(w->dtype, util::SafetensorsDType::kF32);
    EXPECT_EQ(w->shape, m->shape);
    // Five steps in, the velocity is not zero: the comparison above compared something.
    const absl::string_view v = fa.Data(*m);
    EXPECT_NE(v, std::string(v.size(), '\0')) << name;
  }
  const util::SafetensorsEntry* w0 = fa.Find("fc0.weight");
  ASSERT_NE(w0, nullptr);
  EXPECT_EQ(w0->shape, (std::vector<int64_t>{kWidth, kFeatures}));  // [out, in], as PyTorch.
  EXPECT_EQ(fa.Find("mlp_train_step.barrier"), nullptr);            // A fused kernel's own state.

  // The same batch: the same loss, and the same weights after it.
  for (Trainer* t : {a.get(), b.get()}) {
    std::mt19937 rng(99);
    Feed(*t, rng);
    REPRISE_ASSERT_OK(t->Step());
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(const float loss_a, a->Loss());
  REPRISE_ASSERT_OK_AND_ASSIGN(const float loss_b, b->Loss());
  EXPECT_EQ(std::memcmp(&loss_a, &loss_b, sizeof(float)), 0) << loss_a << " vs " << loss_b;
  ExpectSameParameters(*a, *b);
}

TEST(WeightsGpuTest, FilesMoveBetweenFusedAndUnfusedSteps) {
  REPRISE_REQUIRE_GPU();
  absl::StatusOr<models::Mlp> mlp = models::BuildMlp(SmallMlp());
  ASSERT_TRUE(mlp.ok());
  std::unique_ptr<Trainer> fused = MakeTrainer(*mlp, 1, /*whole_step=*/true);
  std::unique_ptr<Trainer> unfused = MakeTrainer(*mlp, 2, /*whole_step=*/false);
  ASSERT_TRUE(fused && unfused);
  Train(*fused, 3);
  ScopedTempDir dir;
  const std::string path = dir.path() + "/w.safetensors";
  REPRISE_ASSERT_OK(fused->SaveWeights(path));
  // The same names on both sides: nothing missing, nothing unexpected.
  REPRISE_ASSERT_OK(
      unfused->LoadWeights(path, {.allow_missing = false, .allow_unexpected = false}));
  ExpectSameParameters(*fused, *unfused);
  REPRISE_ASSERT_OK(unfused->SaveWeights(path));
  REPRISE_ASSERT_OK(fused->LoadWeights(path, {.allow_missing = false, .allow_unexpected = false}));
}

TEST(WeightsGpuTest, RefusedFilesNameTheTensorAndChangeNothing) {
  REPRISE_REQUIRE_GPU();
  absl::StatusOr<models::Mlp> mlp = models::BuildMlp(SmallMlp());
  absl::StatusOr<models::Mlp> wider = models::BuildMlp(SmallMlp(kWidth + 16));
  ASSERT_TRUE(mlp.ok() && wider.ok());
  std::unique_ptr<Trainer> a = MakeTrainer(*mlp, 1);
  std::unique_ptr<Trainer> b = MakeTrainer(*mlp, 2);
  std::unique_ptr<Trainer> c = MakeTrainer(*wider, 3);
  ASSERT_TRUE(a && b && c);
  Train(*a, 2);
  ScopedTempDir dir;
  const std::string path = dir.path() + "/a.safetensors";
  REPRISE_ASSERT_OK(a->SaveWeights(path));
  REPRISE_ASSERT_OK_AND_ASSIGN(const util::SafetensorsFile file, util::ReadSafetensors(path));
  const auto before = Parameters(*b);
  auto expect_unchanged = [&] {
    const auto now = Parameters(*b);
    for (size_t i = 0; i < now.size(); ++i) {
      EXPECT_TRUE(SameBits(now[i].second, before[i].second)) << now[i].first;
    }
  };

  absl::Status s = c->LoadWeights(path);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'fc0.weight' is F32[32, 12] in the file but "
                                     "F32[48, 12] in the graph"));

  const std::string missing = dir.path() + "/missing.safetensors";
  Rewrite(file, missing, "fc1.bias");
  s = b->LoadWeights(missing);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("the file has no tensor 'fc1.bias' of the graph"));
  expect_unchanged();
  REPRISE_ASSERT_OK(b->LoadWeights(missing, {.allow_missing = true}));
  const auto pa = Parameters(*a), pb = Parameters(*b);
  for (size_t i = 0; i < pb.size(); ++i) {
    // The tensor the file lacks keeps B's value; the others are A's.
    const auto& expected = pb[i].first == "fc1.bias" ? before[i] : pa[i];
    EXPECT_TRUE(SameBits(pb[i].second, expected.second)) << pb[i].first;
  }
  REPRISE_ASSERT_OK(b->LoadWeights(path));

  // PyTorch's batch-norm counter: ignored unless the caller asks for an exact match.
  const std::string extra = dir.path() + "/extra.safetensors";
  const std::string counter(8, '\0');
  Rewrite(file, extra, "",
          {{"fc0.num_batches_tracked", util::SafetensorsDType::kI64, {}, counter}});
  REPRISE_ASSERT_OK(b->LoadWeights(extra));
  s = b->LoadWeights(extra, {.allow_unexpected = false});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("the graph has no tensor 'fc0.num_batches_tracked'"));

  // Other dtypes are refused, not converted.
  const std::string f64(kWidth * kFeatures * 8, '\0'), bf16(kWidth * kFeatures * 2, '\0');
  for (const auto& [dtype, data, spec] :
       {std::tuple{util::SafetensorsDType::kF64, f64, "F64[32, 12]"},
        std::tuple{util::SafetensorsDType::kBF16, bf16, "BF16[32, 12]"}}) {
    const std::string other = dir.path() + "/dtype.safetensors";
    Rewrite(file, other, "", {{"fc0.weight", dtype, {kWidth, kFeatures}, data}});
    s = b->LoadWeights(other);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("tensor 'fc0.weight' is ", spec,
                                                    " in the file but F32[32, 12] in the graph")));
  }
  ExpectSameParameters(*a, *b);  // The refused files changed nothing since the last good load.

  EXPECT_EQ(b->LoadWeights(dir.path() + "/absent.safetensors").code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace reprise
