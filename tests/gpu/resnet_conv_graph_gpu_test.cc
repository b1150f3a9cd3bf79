// ResNet training with its convolutions through cuDNN's graph API
// (TrainOptions::kernels.conv_api = kGraph): replay gives the bits of the bulked run, the first
// losses follow the legacy API's trainer, ResNet-18's loss falls, and the plan runs graph-API
// plans; the same with the residual blocks' input gradients summed by the graph API apart from
// their summands (kernels.conv_sums_in_place = false), against the in-place sums' trainer, and
// with the batch norms' statistics summed in the convolutions' epilogues
// (kernels.conv_batch_norm_stats), against the graph API's unfused trainer; and with the input
// gradients summed by the batch-norm gradients that read them
// (kernels.residual_sums_in_batch_norm), against the in-place sums' trainer.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/template_images.h"

namespace reprise {
namespace {

constexpr int kBatch = 8, kSize = 64, kClasses = 4;

struct Config {
  std::string name;
  int depth;
  Layout layout;
  DType compute;
  bool tf32;
};

void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

// The kernel options a trainer of these tests varies.
struct Kernels {
  KernelTuning::ConvApi api = KernelTuning::ConvApi::kGraph;
  bool conv_bn_stats = false;
  bool deterministic = true;
  bool sums_in_place = true;
  bool sums_in_batch_norm = false;
  int64_t sums_min_elements = 0;
};

std::unique_ptr<Trainer> MakeTrainer(const models::ResNet& net, const Config& c, ExecMode mode,
                                     const Kernels& k = {}) {
  TrainOptions options;
  options.launch.mode = mode;
  options.numerics.deterministic = k.deterministic;
  options.numerics.allow_tf32 = c.tf32;
  options.numerics.compute_dtype = c.compute;
  options.kernels.channels_last = ChannelsLast::kOff;
  options.kernels.conv_api = k.api;
  options.kernels.conv_batch_norm_stats = k.conv_bn_stats;
  options.kernels.conv_sums_in_place = k.sums_in_place;
  options.kernels.residual_sums_in_batch_norm = k.sums_in_batch_norm;
  options.kernels.residual_sums_min_elements = k.sums_min_elements;
  options.optimizer.learning_rate = 0.005f;
  options.seed = 42;
  if (c.compute == DType::kFloat16) {
    // A scale that no step of this small network overflows, and that does not grow.
    options.numerics.loss_scale = {
        .mode = LossScaling::kDynamic, .init_scale = 1024.0f, .growth_interval = 1000000};
  }
  auto trainer = Trainer::Create(net.graph, net.loss, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

std::vector<float> Train(Trainer& t, int steps) {
  return testing::TrainOnTemplateImages(t, steps, kBatch, kSize, kClasses);
}

absl::StatusOr<models::ResNet> NetFor(const Config& c) {
  return models::BuildResNet({.depth = c.depth,
                              .batch = kBatch,
                              .classes = kClasses,
                              .image_size = kSize,
                              .layout = c.layout});
}

// A replayed trainer's run against the bulked one's: the same losses and parameters, bit for bit.
void ExpectSameRun(Trainer& replayed_by, Trainer& bulked, const std::vector<float>& replayed,
                   const std::vector<float>& eager) {
  EXPECT_EQ(replayed, eager);
  for (const std::string& name : replayed_by.ParameterNames()) {
    EXPECT_EQ(*replayed_by.GetParameter(name), *bulked.GetParameter(name)) << name;
  }
}

struct ConvCounts {
  int by_graph = 0;  // Graph-API convolutions.
  // Residual blocks' input gradients (conv2d_dgrad + add) run by each API.
  int sums_by_graph = 0, sums_by_legacy = 0;
};

// Counts them from the plan's launch descriptions; every legacy call must say why the graph API
// does not run it.
ConvCounts CountConvolutions(Trainer& trainer) {
  ConvCounts sums;
  auto launches = trainer.ProfileLaunches(1);
  EXPECT_TRUE(launches.ok()) << launches.status();
  if (!launches.ok()) return sums;
  for (const Trainer::LaunchTime& launch : *launches) {
    const bool sum = launch.node.find(".dgrad+") != std::string::npos;
    if (launch.kernel.rfind("cudnn graph conv ", 0) == 0) {
      ++sums.by_graph;
      sums.sums_by_graph += sum;
    }
    if (launch.kernel.rfind("cudnn conv ", 0) == 0) {
      EXPECT_NE(launch.kernel.find("(graph API: "), std::string::npos)
          << launch.node << ": " << launch.kernel;
      sums.sums_by_legacy += sum;
    }
  }
  return sums;
}

class ResNetConvGraphGpuTest : public ::testing::TestWithParam<Config> {};

TEST_P(ResNetConvGraphGpuTest, ReplayEqualsBulkedFollowsLegacyApiAndLossFalls) {
  REPRISE_REQUIRE_GPU();
  const Config& c = GetParam();
  auto net = NetFor(c);
  ASSERT_TRUE(net.ok()) << net.status();
  using Api = KernelTuning::ConvApi;
  auto graph = MakeTrainer(*net, c, ExecMode::kGraph);
  auto bulked = MakeTrainer(*net, c, ExecMode::kBulked);
  auto legacy = MakeTrainer(*net, c, ExecMode::kGraph, {.api = Api::kLegacy});
  ASSERT_TRUE(graph && bulked && legacy);
  std::cout << c.name << " graph API: " << graph->stats().ToString() << "\n";

  const int steps = c.depth == 18 ? 40 : 12;
  const std::vector<float> replayed = Train(*graph, steps), eager = Train(*bulked, steps);
  // The legacy API's whole run too: where the graph API's loss does not fall, whether the legacy
  // API's does tells a wrong plan from a network this short run does not train.
  const std::vector<float> by_legacy = Train(*legacy, steps);
  std::cout << c.name << " losses, graph API: " << ::testing::PrintToString(replayed) << "\n"
            << c.name << " losses, legacy API: " << ::testing::PrintToString(by_legacy) << "\n";
  ExpectSameRun(*graph, *bulked, replayed, eager);
  // The same weights and batches: the two APIs differ by summation order (and, in 16 bits or
  // TF32, by where it rounds), which grows through the layers and the updates. ResNet-50 at this
  // batch and rate does not train under either API (on an H200 both went from 1.5 to about 10
  // in nine steps, the bfloat16 runs bit for bit alike), and from its third step on the jumps
  // amplify the float32 APIs' different summation orders past any tight bar: its first two steps
  // are compared, and only ResNet-18, which trains, must see its loss fall.
  const double tolerance = c.compute == DType::kFloat32 && !c.tf32 ? 1e-4 : 2e-2;
  for (int i = 0; i < (c.depth == 18 ? 3 : 2); ++i) {
    EXPECT_NEAR(replayed[i], by_legacy[i], tolerance * by_legacy[i]) << "step " << i;
  }
  if (c.depth == 18) {
    float first = 0, last = 0;
    for (int i = 0; i < 5; ++i) first += replayed[i], last += replayed[steps - 5 + i];
    EXPECT_LT(last, 0.7f * first) << ::testing::PrintToString(replayed);
  }
  EXPECT_EQ(graph->stats().graph_instantiations, 1);

  // The plan runs graph-API convolutions; the legacy call remains for the residual blocks' input
  // gradients, summed in place by its beta = 1 (kernels.conv_sums_in_place), and where the graph
  // API has no plan (its description says why); our own kernels may run the stem.
  const ConvCounts counts = CountConvolutions(*graph);
  EXPECT_EQ(counts.sums_by_graph, 0);
  EXPECT_EQ(counts.sums_by_legacy, c.depth == 18 ? 8 : 16);
  EXPECT_GT(counts.by_graph, c.depth == 18 ? 20 : 60);
}

// Trains `net` 30 steps with `sums` replayed, bulked and against the default (in-place sums)
// trainer from the same weights and batches: replay gives the bulked run's bits, the first losses
// follow the in-place sums' trainer, and the loss falls. Returns the replayed trainer.
std::unique_ptr<Trainer> ExpectFollowsTheInPlaceSums(const models::ResNet& net, const Config& c,
                                                     const Kernels& sums, const std::string& what) {
  auto replaying = MakeTrainer(net, c, ExecMode::kGraph, sums);
  auto bulked = MakeTrainer(net, c, ExecMode::kBulked, sums);
  auto in_place = MakeTrainer(net, c, ExecMode::kGraph);
  if (!replaying || !bulked || !in_place) return nullptr;
  constexpr int kSteps = 30;
  const std::vector<float> replayed = Train(*replaying, kSteps), eager = Train(*bulked, kSteps),
                           summed_in_place = Train(*in_place, kSteps);
  std::cout << c.name << " losses, " << what << ": " << ::testing::PrintToString(replayed) << "\n"
            << c.name << " losses, in place: " << ::testing::PrintToString(summed_in_place) << "\n";
  ExpectSameRun(*replaying, *bulked, replayed, eager);
  const double tolerance = c.compute == DType::kFloat32 && !c.tf32 ? 1e-4 : 2e-2;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(replayed[i], summed_in_place[i], tolerance * summed_in_place[i]) << "step " << i;
  }
  float first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += replayed[i], last += replayed[kSteps - 5 + i];
  EXPECT_LT(last, 0.7f * first) << ::testing::PrintToString(replayed);
  return replaying;
}

class ResNetConvSumsApartGpuTest : public ::testing::TestWithParam<Config> {};

// kernels.conv_sums_in_place = false: the residual blocks' input gradients run as the graph API's
// data gradient with the sum in its epilogue, written apart from the summand (conv2d_dgrad_add).
// As above; in bfloat16 NHWC cuDNN has a fused plan for every block, so no legacy call runs.
TEST_P(ResNetConvSumsApartGpuTest, ReplayEqualsBulkedFollowsTheInPlaceSumsAndLossFalls) {
  REPRISE_REQUIRE_GPU();
  const Config& c = GetParam();
  auto net = NetFor(c);
  ASSERT_TRUE(net.ok()) << net.status();
  auto apart = ExpectFollowsTheInPlaceSums(*net, c, {.sums_in_place = false}, "sums apart");
  ASSERT_TRUE(apart);
  const ConvCounts counts = CountConvolutions(*apart);
  std::cout << c.name << ": residual sums through the graph API " << counts.sums_by_graph
            << ", through the legacy call " << counts.sums_by_legacy << "\n";
  EXPECT_EQ(counts.sums_by_graph + counts.sums_by_legacy, 8);
  if (c.compute == DType::kBFloat16) EXPECT_EQ(counts.sums_by_graph, 8);
}

// The batch-norm gradients of a trainer's plan that sum their dy (-1 if profiling fails).
int SumsInBatchNorms(Trainer& trainer) {
  auto launches = trainer.ProfileLaunches(1);
  EXPECT_TRUE(launches.ok()) << launches.status();
  if (!launches.ok()) return -1;
  int sums = 0;
  for (const Trainer::LaunchTime& launch : *launches) {
    sums += launch.kernel.find(" +dy_sum") != std::string::npos;
  }
  return sums;
}

class ResNetSumsInBatchNormGpuTest : public ::testing::TestWithParam<Config> {};

// kernels.residual_sums_in_batch_norm: the residual blocks' input gradients are summed by the
// batch-norm gradients that read them (all but the first block's, which the pooling gradient
// reads: that one the graph API sums apart). As above, and no convolution but that one sums.
TEST_P(ResNetSumsInBatchNormGpuTest, ReplayEqualsBulkedFollowsTheInPlaceSumsAndLossFalls) {
  REPRISE_REQUIRE_GPU();
  const Config& c = GetParam();
  auto net = NetFor(c);
  ASSERT_TRUE(net.ok()) << net.status();
  auto summed =
      ExpectFollowsTheInPlaceSums(*net, c, {.sums_in_batch_norm = true}, "sums in batch norms");
  ASSERT_TRUE(summed);
  const ConvCounts counts = CountConvolutions(*summed);
  EXPECT_EQ(counts.sums_by_graph + counts.sums_by_legacy, 1);
  EXPECT_EQ(SumsInBatchNorms(*summed), 7);
}

// kernels.residual_sums_min_elements: only the input gradients of at least that size ride in the
// batch-norm gradients (ResNet-18 here: block inputs of 131072, 65536, 32768 and 16384
// elements, two of each); the smaller ones and the pooling's are summed in place by the legacy
// call. As above.
TEST_P(ResNetSumsInBatchNormGpuTest, AboveASizeOnlyTheRestInPlace) {
  REPRISE_REQUIRE_GPU();
  const Config& c = GetParam();
  auto net = NetFor(c);
  ASSERT_TRUE(net.ok()) << net.status();
  auto summed = ExpectFollowsTheInPlaceSums(
      *net, c, {.sums_in_batch_norm = true, .sums_min_elements = kBatch * 8 * 8 * 128},
      "sums of at least 65536 in batch norms");
  ASSERT_TRUE(summed);
  const ConvCounts counts = CountConvolutions(*summed);
  EXPECT_EQ(counts.sums_by_graph, 0);
  EXPECT_EQ(counts.sums_by_legacy, 4);
  EXPECT_EQ(SumsInBatchNorms(*summed), 4);
}

class ResNetConvBnStatsGpuTest : public ::testing::TestWithParam<Config> {};

// Counts the conv2d_bn_train launches cuDNN runs fused and those that run separately (printing
// why), from the plan's launch descriptions.
void CountFused(Trainer& trainer, const std::string& what, int& fused, int& separate) {
  fused = separate = 0;
  auto launches = trainer.ProfileLaunches(1);
  ASSERT_TRUE(launches.ok()) << launches.status();
  for (const Trainer::LaunchTime& launch : *launches) {
    if (launch.kernel.rfind("cudnn graph conv fwd stats ", 0) == 0) ++fused;
    if (launch.kernel.rfind("unfused (", 0) == 0) {
      ++separate;
      std::cout << launch.node << ": " << launch.kernel.substr(0, 300) << "\n";
    }
  }
  std::cout << what << ": " << fused << " fused conv + batch norm nodes, " << separate
            << " run separately\n";
}

// Where cuDNN has engines for the fusion (float16 NHWC, ops::ConvBatchNormStatsSupport), every
// convolution that a batch norm follows but the stem's (3 channels) runs as one conv2d_bn_train
// node, and with nondeterministic engines allowed cuDNN fuses every one of them; deterministic
// training runs them apart (cuDNN's statistics differ run to run), and elsewhere the fuse pass
// leaves them apart. Deterministic: replay gives the bulked run's bits; either way the first
// steps follow the unfused trainer's.
TEST_P(ResNetConvBnStatsGpuTest, ReplayEqualsBulkedAndFollowsUnfusedSteps) {
  REPRISE_REQUIRE_GPU();
  const Config& c = GetParam();
  auto net = NetFor(c);
  ASSERT_TRUE(net.ok()) << net.status();
  auto graph = MakeTrainer(*net, c, ExecMode::kGraph, {.conv_bn_stats = true});
  auto bulked = MakeTrainer(*net, c, ExecMode::kBulked, {.conv_bn_stats = true});
  auto unfused = MakeTrainer(*net, c, ExecMode::kGraph);
  auto fast =
      MakeTrainer(*net, c, ExecMode::kGraph, {.conv_bn_stats = true, .deterministic = false});
  ASSERT_TRUE(graph && bulked && unfused && fast);
  const int steps = 30;
  const std::vector<float> replayed = Train(*graph, steps), eager = Train(*bulked, steps);
  const std::vector<float> plain = Train(*unfused, 3), nondeterministic = Train(*fast, steps);
  ExpectSameRun(*graph, *bulked, replayed, eager);
  // The statistics are summed in float before the output is rounded (ours: in double after).
  const double tolerance = c.compute == DType::kFloat32 && !c.tf32 ? 1e-3 : 2e-2;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(replayed[i], plain[i], tolerance * plain[i]) << "step " << i;
    EXPECT_NEAR(nondeterministic[i], plain[i], tolerance * plain[i]) << "step " << i;
  }
  for (const std::vector<float>* losses : {&replayed, &nondeterministic}) {
    float first = 0, last = 0;
    for (int i = 0; i < 5; ++i) first += (*losses)[i], last += (*losses)[steps - 5 + i];
    EXPECT_LT(last, 0.8f * first) << ::testing::PrintToString(*losses);
  }
  const int grouped = c.layout == Layout::kNHWC && c.compute == DType::kFloat16 ? 19 : 0;
  int fused = 0, separate = 0;
  CountFused(*graph, c.name + " deterministic", fused, separate);
  EXPECT_EQ(fused, 0);
  EXPECT_EQ(separate, grouped);
  CountFused(*fast, c.name, fused, separate);
  EXPECT_EQ(fused, grouped);
  EXPECT_EQ(separate, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Networks, ResNetConvBnStatsGpuTest,
    ::testing::Values(Config{"ResNet18NhwcF16", 18, Layout::kNHWC, DType::kFloat16, false},
                      Config{"ResNet18NhwcBf16", 18, Layout::kNHWC, DType::kBFloat16, false}),
    [](const ::testing::TestParamInfo<Config>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Networks, ResNetSumsInBatchNormGpuTest,
    ::testing::Values(Config{"ResNet18NhwcBf16", 18, Layout::kNHWC, DType::kBFloat16, false},
                      Config{"ResNet18NhwcTf32", 18, Layout::kNHWC, DType::kFloat32, true},
                      Config{"ResNet18NchwF32", 18, Layout::kNCHW, DType::kFloat32, false}),
    [](const ::testing::TestParamInfo<Config>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Networks, ResNetConvSumsApartGpuTest,
    ::testing::Values(Config{"ResNet18NhwcBf16", 18, Layout::kNHWC, DType::kBFloat16, false},
                      Config{"ResNet18NhwcTf32", 18, Layout::kNHWC, DType::kFloat32, true}),
    [](const ::testing::TestParamInfo<Config>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Networks, ResNetConvGraphGpuTest,
    ::testing::Values(Config{"ResNet18NchwF32", 18, Layout::kNCHW, DType::kFloat32, false},
                      Config{"ResNet18NhwcF32", 18, Layout::kNHWC, DType::kFloat32, false},
                      Config{"ResNet18NhwcTf32", 18, Layout::kNHWC, DType::kFloat32, true},
                      Config{"ResNet18NhwcBf16", 18, Layout::kNHWC, DType::kBFloat16, false},
                      Config{"ResNet50NhwcBf16", 50, Layout::kNHWC, DType::kBFloat16, false},
                      Config{"ResNet50NchwF32", 50, Layout::kNCHW, DType::kFloat32, false}),
    [](const ::testing::TestParamInfo<Config>& info) { return info.param.name; });

}  // namespace
}  // namespace reprise
