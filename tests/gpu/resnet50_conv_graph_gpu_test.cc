// Every distinct convolution of ResNet-50 through cuDNN's graph API
// (src/runtime/cudnn_conv_graph.h), to find which plans make ResNet-50 diverge under
// --conv_api=graph (issue 42) while ResNet-18 trains: the shapes models::BuildResNet gives at the
// ResNet graph tests' batch (8) and image size (64), in NHWC bfloat16 and float32 (strict) in
// both layouts, and ResNet-18's shapes in strict float32 (ChannelsLastGpuTest's network),
// with the trainer tests' deterministic engines. Each shape runs as forward, data gradient, data
// gradient added to another tensor (ConvFusion::add_to_output into another output) and weight
// gradient; a second test adds the data gradient to its accumulator in place, the memory
// conv2d_dgrad_accumulate's plan gives it. Each plan runs twice (for the same bits) and is compared
// with the legacy API on the same data; where they disagree, the float64 CPU reference of the conv
// ops decides. Outputs and the used workspace start as NaN bytes, as a trainer's reused memory is
// never zero. Every check prints one line (kind, shape, nodes, engine, distance). A third test runs
// one plan on two streams at once through one handle, as a trainer's lanes do with ResNet-50's
// layer1.0 conv3 and its downsampling shortcut (one shape).
#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/ops/conv.h"
#include "src/ops/conv_shape.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/cudnn_conv.h"
#include "src/runtime/cudnn_conv_graph.h"
#include "src/runtime/device.h"
#include "src/util/status_macros.h"
#include "tests/gpu/conv_graph_test_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using runtime::ConvKind;
using testing::ConvCase;
using testing::ConvDevice;
using testing::ConvReference;

constexpr int kBatch = 8, kImage = 64;

struct Config {
  std::string name;
  Layout layout;
  DType dtype;
  int depth = 50;
};
void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

// Strict float32 in both layouts, and ResNet-18's shapes (ChannelsLastGpuTest's network).
const Config kConfigs[] = {{"NhwcBf16", Layout::kNHWC, DType::kBFloat16},
                           {"NchwF32", Layout::kNCHW, DType::kFloat32},
                           {"NhwcF32", Layout::kNHWC, DType::kFloat32},
                           {"ResNet18NhwcF32", Layout::kNHWC, DType::kFloat32, 18},
                           {"ResNet18NchwF32", Layout::kNCHW, DType::kFloat32, 18}};

// One distinct convolution of the network: its shape and the first nodes that have it.
struct NetConv {
  runtime::ConvShape shape;
  std::string nodes;
  int count = 0;
};

absl::StatusOr<std::vector<NetConv>> ResNet50Convolutions(const Config& c) {
  const models::ResNetConfig config{
      .depth = c.depth, .batch = kBatch, .classes = 4, .image_size = kImage, .layout = c.layout};
  ASSIGN_OR_RETURN(const models::ResNet net, models::BuildResNet(config));
  std::vector<NetConv> convs;
  for (const Node& node : net.graph.nodes()) {
    if (node.op != &ops::Conv2dOp()) continue;
    ASSIGN_OR_RETURN(runtime::ConvShape shape,
                     ops::Conv2dShape(node.attrs, net.graph.spec(node.inputs[0]),
                                      net.graph.spec(node.inputs[1])));
    shape.dtype = c.dtype;
    auto seen = std::find_if(convs.begin(), convs.end(),
                             [&](const NetConv& conv) { return conv.shape == shape; });
    if (seen == convs.end()) {
      convs.push_back({shape, node.name, 1});
    } else if (++seen->count <= 3) {
      absl::StrAppend(&seen->nodes, ", ", node.name);
    }
  }
  return convs;
}

ConvCase CaseOf(const Config& c, const runtime::ConvShape& s) {
  return {c.name,  s.layout,     s.dtype,  /*tf32=*/false,
          s.n,     s.c,          s.h,      s.w,
          s.k,     s.r,          s.s,      s.stride_h,
          s.pad_h, s.dilation_h, s.groups, /*deterministic=*/true};
}

runtime::ConvGraphOptions Options() {
  return {.deterministic = true,
          .workspace_limit = testing::kConvWorkspace,
          .device = testing::DeviceKeyForTests()};
}

// How one plan is asked to run.
struct Variant {
  const char* name;
  ConvKind kind;
  bool accumulate;  // ConvFusion::add_to_output, with the case's x as the accumulator.
  bool in_place;    // The accumulator is the output's memory (else it is x's).
};

constexpr Variant kForward{"fwd", ConvKind::kForward, false, false};
constexpr Variant kDgrad{"dgrad", ConvKind::kBackwardData, false, false};
constexpr Variant kDgradAccumulate{"dgrad acc into another output", ConvKind::kBackwardData, true,
                                   false};
constexpr Variant kDgradInPlace{"dgrad acc in place", ConvKind::kBackwardData, true, true};
constexpr Variant kWgrad{"wgrad", ConvKind::kBackwardFilter, false, false};

// The float64 result the variant should give: the accumulator is x (dx's shape).
std::vector<double> Want(const Variant& v, const ConvReference& ref) {
  if (v.kind == ConvKind::kForward) return ref.y;
  if (v.kind == ConvKind::kBackwardFilter) return ref.dw;
  std::vector<double> want = ref.dx;
  if (v.accumulate) {
    for (size_t i = 0; i < want.size(); ++i) want[i] += ref.x[i];
  }
  return want;
}

// Sets the output (the accumulator's values where the sum is written over it, else NaN bytes)
// and the plan's workspace (NaN bytes), then writes `kind`'s output by `run` and reads it.
template <typename RunFn>
absl::StatusOr<std::vector<double>> RunFromDirtyMemory(const Variant& v, const ConvDevice& dev,
                                                       const std::vector<uint8_t>& acc,
                                                       size_t count, size_t workspace_bytes,
                                                       RunFn&& run) {
  if (v.in_place) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev.out(v.kind), acc.data(), acc.size(),
                                         cudaMemcpyHostToDevice, dev.stream()),
                         "accumulator");
  } else {
    RETURN_IF_ERROR(dev.Clear(v.kind, count));
  }
  if (workspace_bytes > 0) {
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dev.workspace(), 0xff, workspace_bytes, dev.stream()),
                         "workspace");
  }
  RETURN_IF_ERROR(dev.cudnn().Bind(dev.stream(), "resnet50"));
  RETURN_IF_ERROR(run());
  return dev.Read(v.kind, count);
}

absl::StatusOr<std::vector<double>> RunGraph(const runtime::CudnnConvGraph& plan, const Variant& v,
                                             const ConvDevice& dev, const std::vector<uint8_t>& acc,
                                             size_t count) {
  runtime::ConvGraphBuffers buffers = dev.Buffers(v.kind);
  if (v.accumulate && !v.in_place) buffers.acc = dev.x();
  return RunFromDirtyMemory(v, dev, acc, count, plan.workspace_bytes(), [&]() {
    return plan.Run(dev.cudnn(), buffers, dev.workspace(), "resnet50 graph");
  });
}

// The legacy API on the same data (its beta = 1 accumulates in place).
absl::StatusOr<std::vector<double>> RunLegacy(const runtime::ConvShape& shape, const Variant& v,
                                              const ConvDevice& dev,
                                              const std::vector<uint8_t>& acc, size_t count) {
  const runtime::ConvOptions options{.deterministic = true,
                                     .workspace_limit = testing::kConvWorkspace,
                                     .device = testing::DeviceKeyForTests()};
  ASSIGN_OR_RETURN(runtime::CudnnConv legacy,
                   runtime::CudnnConv::Create(dev.cudnn(), v.kind, shape, options, {}, "legacy"));
  Variant in_place = v;
  in_place.in_place = v.accumulate;
  return RunFromDirtyMemory(in_place, dev, acc, count, legacy.algorithm().workspace_bytes, [&]() {
    return legacy.Run(dev.cudnn(), dev.a(v.kind), dev.b(v.kind), dev.out(v.kind), dev.workspace(),
                      "resnet50 legacy", v.accumulate);
  });
}

// The graph plan run twice and the legacy call once, on one device's operands.
struct Runs {
  std::vector<double> first, second, legacy;
};

absl::StatusOr<Runs> RunBoth(const runtime::CudnnConvGraph& plan, const Variant& v,
                             const ConvDevice& dev, const std::vector<uint8_t>& acc, size_t count) {
  Runs runs;
  ASSIGN_OR_RETURN(runs.first, RunGraph(plan, v, dev, acc, count));
  ASSIGN_OR_RETURN(runs.second, RunGraph(plan, v, dev, acc, count));
  ASSIGN_OR_RETURN(runs.legacy, RunLegacy(plan.shape(), v, dev, acc, count));
  return runs;
}

// Random operands of a case (uniform in [-1, 1], rounded to its dtype) with zeroed room for the
// results: the float64 reference (at ResNet-50's shapes, seconds of CPU each) is computed only
// where the graph API and the legacy API disagree.
ConvReference RandomOperands(const ConvCase& t) {
  const runtime::ConvShape s = testing::ShapeOf(t);
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> uniform(-1, 1);
  const auto random = [&](int64_t count) {
    std::vector<double> values(count);
    for (double& v : values) v = testing::RoundTo(t.dtype, uniform(rng));
    return values;
  };
  ConvReference operands;
  operands.x = random(s.n * s.c * s.h * s.w);
  operands.w = random(s.k * (s.c / s.groups) * s.r * s.s);
  operands.dy = random(s.n * s.k * s.p * s.q);
  operands.y.assign(operands.dy.size(), 0.0);
  operands.dx.assign(operands.x.size(), 0.0);
  operands.dw.assign(operands.w.size(), 0.0);
  return operands;
}

// Runs each variant of every distinct convolution through the graph API and the legacy API;
// where they disagree (or the graph plan's second run gives other bits), the float64 reference
// decides, and a wrong graph plan is a failure naming its kind, shape, nodes and engine.
void CheckEveryConvolution(const Config& c, std::initializer_list<Variant> variants) {
  REPRISE_ASSERT_OK_AND_ASSIGN(const std::vector<NetConv> convs, ResNet50Convolutions(c));
  // ResNet-50: the stem, then 4 shapes in layer1 and 6 in each later stage (v1.5: the stride on
  // the 3x3). ResNet-18: the stem, 1 shape in layer1 and 3 in each later stage.
  EXPECT_EQ(convs.size(), c.depth == 50 ? 23u : 11u);
  REPRISE_ASSERT_OK(runtime::UseDevice(0).status());
  const runtime::ConvGraphOptions options = Options();
  int checked = 0, disagreed = 0, wrong = 0;
  for (const NetConv& conv : convs) {
    const ConvCase t = CaseOf(c, conv.shape);
    const ConvReference operands = RandomOperands(t);
    REPRISE_ASSERT_OK_AND_ASSIGN(ConvDevice dev, ConvDevice::Create(c.dtype, operands));
    const std::vector<uint8_t> acc = testing::Encode(c.dtype, operands.x);
    for (const Variant& v : variants) {
      const std::string what = absl::StrCat(c.name, " ", v.name, " ", conv.shape.ToString(), " (",
                                            conv.nodes, conv.count > 3 ? ", ..." : "", ")");
      const size_t count = Want(v, operands).size();
      absl::StatusOr<runtime::CudnnConvGraph> plan = runtime::CudnnConvGraph::Create(
          dev.cudnn(), v.kind, conv.shape, {.add_to_output = v.accumulate}, options, "");
      if (!plan.ok()) {
        // The lowering runs the legacy call instead; only "no engine" may say so.
        std::cout << "no plan " << what << ": " << plan.status().message().substr(0, 300) << "\n";
        EXPECT_TRUE(absl::IsUnimplemented(plan.status())) << what << ": " << plan.status();
        continue;
      }
      ++checked;
      REPRISE_ASSERT_OK_AND_ASSIGN(const Runs runs, RunBoth(*plan, v, dev, acc, count));
      const double apart = testing::RelativeL2(runs.first, runs.legacy);
      const bool same_bits = runs.first == runs.second;
      const bool agree = apart <= 2 * testing::Tolerance(t) && same_bits;
      std::cout << (agree ? "ok       " : "DIFFERS  ") << what << ": " << plan->Describe()
                << ": from the legacy API " << apart
                << (same_bits ? "" : ", the second run gave other bits") << "\n";
      if (agree) continue;
      ++disagreed;
      // The float64 reference decides, on its own operands.
      const ConvReference ref = testing::ComputeConvReference(t);
      REPRISE_ASSERT_OK_AND_ASSIGN(ConvDevice exact, ConvDevice::Create(c.dtype, ref));
      REPRISE_ASSERT_OK_AND_ASSIGN(
          const Runs again, RunBoth(*plan, v, exact, testing::Encode(c.dtype, ref.x), count));
      const std::vector<double> want = Want(v, ref);
      const double graph_error = testing::RelativeL2(again.first, want);
      const double legacy_error = testing::RelativeL2(again.legacy, want);
      const bool repeatable = same_bits && again.first == again.second;
      std::cout << "         against the float64 reference: graph API " << graph_error
                << ", legacy API " << legacy_error << " (tolerance " << testing::Tolerance(t)
                << ")\n";
      if (graph_error <= testing::Tolerance(t) && repeatable) continue;
      ++wrong;
      ADD_FAILURE() << what << " through " << plan->Describe() << ": relative L2 error "
                    << graph_error << " (tolerance " << testing::Tolerance(t)
                    << "; the legacy API's " << legacy_error << ")"
                    << (repeatable ? "" : ", and a second run gave other bits");
    }
  }
  std::cout << c.name << ": " << checked << " graph-API plans over " << convs.size()
            << " distinct convolutions; " << disagreed << " disagreed with the legacy API, "
            << wrong << " wrong\n";
}

class ResNet50ConvGraphGpuTest : public ::testing::TestWithParam<Config> {};

// What the lowerings run through the graph API: forward, data and weight gradients, and the
// accumulating data gradient's fusion into another output.
TEST_P(ResNet50ConvGraphGpuTest, EveryConvolutionMatchesTheReference) {
  REPRISE_REQUIRE_GPU();
  CheckEveryConvolution(GetParam(), {kForward, kDgrad, kDgradAccumulate, kWgrad});
}

// The accumulating data gradient written over its accumulator (conv2d_dgrad_accumulate's memory),
// which the lowering keeps on the legacy call: where this fails, CudnnConvGraph must refuse an
// output that aliases the accumulator.
TEST_P(ResNet50ConvGraphGpuTest, DataGradientAccumulatedInPlace) {
  REPRISE_REQUIRE_GPU();
  CheckEveryConvolution(GetParam(), {kDgradInPlace});
}

INSTANTIATE_TEST_SUITE_P(Layouts, ResNet50ConvGraphGpuTest, ::testing::ValuesIn(kConfigs),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return info.param.name;
                         });

// One plan run on two streams at once through one cuDNN handle, as a trainer's two lanes run
// ResNet-50's layer1.0 conv3 and its downsampling shortcut (both 1x1, 64 to 256 channels at
// 16x16): each stream's result has the bits of the plan run alone.
TEST(ResNet50ConvGraphConcurrencyGpuTest, OnePlanOnTwoStreamsGivesTheBitsOfOneRun) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK(runtime::UseDevice(0).status());
  const runtime::ConvGraphOptions options = Options();
  for (const Config& c : kConfigs) {
    const runtime::ConvShape shape{.layout = c.layout,
                                   .dtype = c.dtype,
                                   .n = kBatch,
                                   .c = 64,
                                   .h = 16,
                                   .w = 16,
                                   .k = 256,
                                   .r = 1,
                                   .s = 1,
                                   .p = 16,
                                   .q = 16};
    const ConvCase t = CaseOf(c, shape);
    const ConvReference ref = testing::ComputeConvReference(t);
    REPRISE_ASSERT_OK_AND_ASSIGN(ConvDevice one, ConvDevice::Create(c.dtype, ref));
    REPRISE_ASSERT_OK_AND_ASSIGN(ConvDevice two, ConvDevice::Create(c.dtype, ref));
    for (const Variant& v : {kForward, kDgrad, kWgrad}) {
      const std::string what = absl::StrCat(c.name, " ", v.name, " ", shape.ToString());
      SCOPED_TRACE(what);
      REPRISE_ASSERT_OK_AND_ASSIGN(
          runtime::CudnnConvGraph plan,
          runtime::CudnnConvGraph::Create(one.cudnn(), v.kind, shape, {}, options, what));
      const size_t count = Want(v, ref).size();
      REPRISE_ASSERT_OK_AND_ASSIGN(const std::vector<double> alone,
                                   RunGraph(plan, v, one, {}, count));
      EXPECT_LE(testing::RelativeL2(alone, Want(v, ref)), testing::Tolerance(t)) << plan.Describe();
      REPRISE_ASSERT_OK(one.Clear(v.kind, count));
      REPRISE_ASSERT_OK(two.Clear(v.kind, count));
      for (int i = 0; i < 20; ++i) {
        for (const ConvDevice* dev : {&one, &two}) {
          REPRISE_ASSERT_OK(one.cudnn().Bind(dev->stream(), what));
          REPRISE_ASSERT_OK(
              plan.Run(one.cudnn(), dev->Buffers(v.kind), dev->workspace(), "two streams"));
        }
      }
      REPRISE_ASSERT_OK_AND_ASSIGN(const std::vector<double> on_one, one.Read(v.kind, count));
      REPRISE_ASSERT_OK_AND_ASSIGN(const std::vector<double> on_two, two.Read(v.kind, count));
      std::cout << what << ": " << plan.Describe() << (on_one == alone ? "" : ": stream 1 differs")
                << (on_two == alone ? "" : ": stream 2 differs") << "\n";
      EXPECT_EQ(on_one, alone) << plan.Describe();
      EXPECT_EQ(on_two, alone) << plan.Describe();
    }
  }
}

}  // namespace
}  // namespace reprise
