// Convolutions through cuDNN's graph API (src/runtime/cudnn_conv_graph.h) against the float64 CPU
// reference of the conv ops and against the legacy API (src/runtime/cudnn_conv.h), for the three
// kinds, both layouts and float32 (strict and TF32), bfloat16 and float16; plus the plan cache,
// deterministic plans giving the same bits run after run and from a captured CUDA graph.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/runtime/cudnn_conv.h"
#include "src/runtime/cudnn_conv_graph.h"
#include "src/runtime/cudnn_handle.h"
#include "src/runtime/device.h"
#include "src/runtime/owners.h"
#include "tests/gpu/conv_graph_test_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using runtime::ConvKind;
using testing::ComputeConvReference;
using testing::ConvDevice;
using testing::ConvReference;
using testing::RelativeL2;
using testing::ShapeOf;
using testing::Tolerance;
using Case = testing::ConvCase;
constexpr size_t kWorkspace = testing::kConvWorkspace;

class ConvGraphGpuTest : public ::testing::TestWithParam<Case> {};

// Each kind through the graph API, then through the legacy API with the same options: both match
// the float64 reference within the dtype's tolerance, and each other.
TEST_P(ConvGraphGpuTest, MatchesCpuReferenceAndLegacyApi) {
  REPRISE_REQUIRE_GPU();
  const Case& t = GetParam();
  const runtime::ConvShape shape = ShapeOf(t);
  const ConvReference ref = ComputeConvReference(t);
  REPRISE_ASSERT_OK(runtime::UseDevice(0).status());
  REPRISE_ASSERT_OK_AND_ASSIGN(ConvDevice dev, ConvDevice::Create(t.dtype, ref));
  const std::string device = testing::DeviceKeyForTests();
  for (ConvKind kind : {ConvKind::kForward, ConvKind::kBackwardData, ConvKind::kBackwardFilter}) {
    SCOPED_TRACE(runtime::ConvKindName(kind));
    const std::vector<double>& want = kind == ConvKind::kForward        ? ref.y
                                      : kind == ConvKind::kBackwardData ? ref.dx
                                                                        : ref.dw;
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::CudnnConvGraph graph_conv,
                                 runtime::CudnnConvGraph::Create(dev.cudnn(), kind, shape, {},
                                                                 {.allow_tf32 = t.tf32,
                                                                  .deterministic = t.deterministic,
                                                                  .workspace_limit = kWorkspace,
                                                                  .device = device},
                                                                 t.name));
    EXPECT_EQ(graph_conv.Describe().rfind("cudnn graph conv ", 0), 0u) << graph_conv.Describe();
    EXPECT_LE(graph_conv.workspace_bytes(), kWorkspace);
    REPRISE_ASSERT_OK(dev.Clear(kind, want.size()));
    REPRISE_ASSERT_OK(dev.cudnn().Bind(dev.stream(), t.name));
    REPRISE_ASSERT_OK(graph_conv.Run(dev.cudnn(), dev.Buffers(kind), dev.workspace(), t.name));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<double> by_graph, dev.Read(kind, want.size()));
    EXPECT_LE(RelativeL2(by_graph, want), Tolerance(t)) << graph_conv.Describe();

    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::CudnnConv legacy,
                                 runtime::CudnnConv::Create(dev.cudnn(), kind, shape,
                                                            {.allow_tf32 = t.tf32,
                                                             .deterministic = t.deterministic,
                                                             .workspace_limit = kWorkspace,
                                                             .device = device},
                                                            {}, t.name));
    REPRISE_ASSERT_OK(dev.Clear(kind, want.size()));
    REPRISE_ASSERT_OK(dev.cudnn().Bind(dev.stream(), t.name));
    REPRISE_ASSERT_OK(
        legacy.Run(dev.cudnn(), dev.a(kind), dev.b(kind), dev.out(kind), dev.workspace(), t.name));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<double> by_legacy, dev.Read(kind, want.size()));
    EXPECT_LE(RelativeL2(by_legacy, want), Tolerance(t)) << legacy.Describe();
    EXPECT_LE(RelativeL2(by_graph, by_legacy), 2 * Tolerance(t))
        << graph_conv.Describe() << " vs " << legacy.Describe();
  }
}

// Strict float32 on a rectified input (x >= 0, as a ReLU or max-pool hands a convolution): the
// forward and weight gradient keep float32's accuracy. Zero-mean operands hide an engine whose
// transforms cancel badly on inputs with a mean (Winograd-like); a trainer's activations do not.
TEST_P(ConvGraphGpuTest, StrictFloat32HoldsOnRectifiedInputs) {
  REPRISE_REQUIRE_GPU();
  const Case& t = GetParam();
  if (t.dtype != DType::kFloat32 || t.tf32) GTEST_SKIP() << "strict float32 cases only";
  const runtime::ConvShape shape = ShapeOf(t);
  ConvReference ref = ComputeConvReference(t, [](int64_t, double v) { return std::abs(v); });
  for (double& v : ref.x) v = std::abs(v);
  REPRISE_ASSERT_OK(runtime::UseDevice(0).status());
  REPRISE_ASSERT_OK_AND_ASSIGN(ConvDevice dev, ConvDevice::Create(t.dtype, ref));
  for (ConvKind kind : {ConvKind::kForward, ConvKind::kBackwardFilter}) {
    SCOPED_TRACE(runtime::ConvKindName(kind));
    const std::vector<double>& want = kind == ConvKind::kForward ? ref.y : ref.dw;
    REPRISE_ASSERT_OK_AND_ASSIGN(
        runtime::CudnnConvGraph conv,
        runtime::CudnnConvGraph::Create(dev.cudnn(), kind, shape, {},
                                        {.deterministic = t.deterministic,
                                         .workspace_limit = kWorkspace,
                                         .device = testing::DeviceKeyForTests()},
                                        t.name));
    REPRISE_ASSERT_OK(dev.Clear(kind, want.size()));
    REPRISE_ASSERT_OK(dev.cudnn().Bind(dev.stream(), t.name));
    REPRISE_ASSERT_OK(conv.Run(dev.cudnn(), dev.Buffers(kind), dev.workspace(), t.name));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<double> got, dev.Read(kind, want.size()));
    EXPECT_LE(RelativeL2(got, want), Tolerance(t)) << conv.Describe();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvGraphGpuTest,
    ::testing::Values(
        Case{"NchwF32", Layout::kNCHW, DType::kFloat32, false, 2, 8, 9, 9, 16, 3, 3, 1, 1, 1, 1},
        Case{"NhwcF32", Layout::kNHWC, DType::kFloat32, false, 2, 8, 9, 9, 16, 3, 3, 1, 1, 1, 1},
        Case{"NchwF32Tf32", Layout::kNCHW, DType::kFloat32, true, 4, 64, 14, 14, 64, 3, 3, 1, 1, 1,
             1},
        Case{"NhwcF32Tf32", Layout::kNHWC, DType::kFloat32, true, 4, 64, 14, 14, 64, 3, 3, 1, 1, 1,
             1},
        Case{"NchwF32GroupsStride2", Layout::kNCHW, DType::kFloat32, false, 2, 8, 11, 11, 12, 3, 3,
             2, 1, 1, 4},
        Case{"NhwcF32Dilation2", Layout::kNHWC, DType::kFloat32, false, 2, 8, 10, 10, 8, 3, 3, 1, 2,
             2, 1},
        Case{"NhwcBf16", Layout::kNHWC, DType::kBFloat16, false, 4, 64, 14, 14, 64, 3, 3, 1, 1, 1,
             1},
        Case{"NchwBf16", Layout::kNCHW, DType::kBFloat16, false, 4, 64, 14, 14, 64, 3, 3, 1, 1, 1,
             1},
        Case{"NhwcF16", Layout::kNHWC, DType::kFloat16, false, 4, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1},
        Case{"NchwF16", Layout::kNCHW, DType::kFloat16, false, 4, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1},
        // ResNet's downsampling shortcut and stem.
        Case{"NhwcBf161x1Stride2", Layout::kNHWC, DType::kBFloat16, false, 4, 64, 28, 28, 128, 1, 1,
             2, 0, 1, 1},
        Case{"NchwF327x7Stride2", Layout::kNCHW, DType::kFloat32, false, 2, 3, 32, 32, 64, 7, 7, 2,
             3, 1, 1},
        Case{"NhwcBf167x7Stride2", Layout::kNHWC, DType::kBFloat16, false, 2, 3, 32, 32, 64, 7, 7,
             2, 3, 1, 1},
        // ResNet-18's at 32x32 in strict float32, deterministic: a TF32 engine would miss 1e-5.
        Case{"NhwcF32ResNetBlock", Layout::kNHWC, DType::kFloat32, false, 8, 64, 16, 16, 64, 3, 3,
             1, 1, 1, 1, true},
        Case{"NchwF32ResNetBlock", Layout::kNCHW, DType::kFloat32, false, 8, 64, 16, 16, 64, 3, 3,
             1, 1, 1, 1, true},
        Case{"NhwcF32ResNetStride2", Layout::kNHWC, DType::kFloat32, false, 8, 128, 4, 4, 256, 3, 3,
             2, 1, 1, 1, true},
        Case{"NhwcF32ResNetShortcut", Layout::kNHWC, DType::kFloat32, false, 8, 64, 8, 8, 128, 1, 1,
             2, 0, 1, 1, true},
        Case{"NhwcF32ResNetStem", Layout::kNHWC, DType::kFloat32, false, 8, 3, 32, 32, 64, 7, 7, 2,
             3, 1, 1, true},
        Case{"NchwF32DeterministicAt4x4", Layout::kNCHW, DType::kFloat32, false, 8, 256, 4, 4, 256,
             3, 3, 1, 1, 1, 1, true},
        Case{"NhwcBf16DeterministicAt8x8", Layout::kNHWC, DType::kBFloat16, false, 8, 128, 8, 8,
             128, 3, 3, 1, 1, 1, 1, true}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// A deterministic weight gradient (the kind cuDNN most often computes with atomics) gives the same
// bits on every run and when replayed from a captured CUDA graph; a second Create of the same key
// finds the plan built.
TEST(CudnnConvGraphTest, DeterministicPlansReplayBitwiseAndAreCached) {
  REPRISE_REQUIRE_GPU();
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Case t{"wgrad", Layout::kNHWC, dtype, true, 8, 64, 16, 16, 64, 3, 3, 1, 1, 1, 1, true};
    const runtime::ConvShape shape = ShapeOf(t);
    const ConvReference ref = ComputeConvReference(t);
    REPRISE_ASSERT_OK(runtime::UseDevice(0).status());
    REPRISE_ASSERT_OK_AND_ASSIGN(ConvDevice dev, ConvDevice::Create(dtype, ref));
    const runtime::ConvGraphOptions options{.allow_tf32 = true,
                                            .deterministic = true,
                                            .workspace_limit = kWorkspace,
                                            .device = testing::DeviceKeyForTests()};
    const ConvKind kind = ConvKind::kBackwardFilter;
    REPRISE_ASSERT_OK_AND_ASSIGN(
        runtime::CudnnConvGraph conv,
        runtime::CudnnConvGraph::Create(dev.cudnn(), kind, shape, {}, options, "first"));
    const size_t built = runtime::CudnnConvGraph::CacheSize();
    REPRISE_ASSERT_OK_AND_ASSIGN(
        runtime::CudnnConvGraph again,
        runtime::CudnnConvGraph::Create(dev.cudnn(), kind, shape, {}, options, "second"));
    EXPECT_EQ(runtime::CudnnConvGraph::CacheSize(), built);
    EXPECT_EQ(again.Describe(), conv.Describe());
    EXPECT_NE(conv.Describe().find("deterministic"), std::string::npos) << conv.Describe();

    const size_t count = ref.dw.size();
    std::vector<std::vector<double>> eager;
    for (int run = 0; run < 3; ++run) {
      REPRISE_ASSERT_OK(dev.Clear(kind, count));
      REPRISE_ASSERT_OK(dev.cudnn().Bind(dev.stream(), "eager"));
      REPRISE_ASSERT_OK(conv.Run(dev.cudnn(), dev.Buffers(kind), dev.workspace(), "eager"));
      REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<double> out, dev.Read(kind, count));
      eager.push_back(std::move(out));
    }
    EXPECT_EQ(eager[0], eager[1]);
    EXPECT_EQ(eager[0], eager[2]);
    EXPECT_LE(RelativeL2(eager[0], ref.dw), Tolerance(t));

    REPRISE_ASSERT_OK(dev.Clear(kind, count));
    REPRISE_ASSERT_OK(dev.cudnn().Bind(dev.stream(), "captured"));
    REPRISE_ASSERT_OK(cudaStreamBeginCapture(dev.stream(), cudaStreamCaptureModeThreadLocal));
    const absl::Status recorded =
        conv.Run(dev.cudnn(), dev.Buffers(kind), dev.workspace(), "captured");
    cudaGraph_t raw_graph = nullptr;
    REPRISE_ASSERT_OK(cudaStreamEndCapture(dev.stream(), &raw_graph));
    runtime::Graph graph = runtime::Graph::Adopt(raw_graph);
    REPRISE_ASSERT_OK(recorded);
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::GraphExec exec, runtime::GraphExec::Create(graph));
    REPRISE_ASSERT_OK(cudaGraphLaunch(exec.get(), dev.stream()));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<double> replayed, dev.Read(kind, count));
    EXPECT_EQ(replayed, eager[0]);
  }
}

// A data gradient added to its output in the graph's epilogue (conv2d_dgrad_accumulate's form)
// against the legacy API's beta = 1 and the float64 reference, in float32 and bfloat16. Where
// cuDNN has no plan for it, Create must say Unimplemented (the lowering then keeps the legacy
// call).
TEST(CudnnConvGraphTest, AccumulatedDataGradientMatchesLegacyAndReference) {
  REPRISE_REQUIRE_GPU();
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Case t{"acc", Layout::kNHWC, dtype, false, 4, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1};
    const runtime::ConvShape shape = ShapeOf(t);
    const ConvReference ref = ComputeConvReference(t);
    REPRISE_ASSERT_OK(runtime::UseDevice(0).status());
    REPRISE_ASSERT_OK_AND_ASSIGN(ConvDevice dev, ConvDevice::Create(dtype, ref));
    const std::string device = testing::DeviceKeyForTests();
    const ConvKind kind = ConvKind::kBackwardData;
    // acc: x's values, rounded to the dtype as stored.
    std::vector<double> want(ref.dx.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = ref.dx[i] + ref.x[i];
    const std::vector<uint8_t> acc = testing::Encode(dtype, ref.x);
    const auto reset = [&]() {
      RETURN_IF_ERROR(testing::ToStatus(
          cudaMemcpy(dev.out(kind), acc.data(), acc.size(), cudaMemcpyHostToDevice), "reset"));
      // The copy may still be in flight on the legacy stream, which dev's stream does not wait for.
      return testing::ToStatus(cudaStreamSynchronize(cudaStreamLegacy), "reset");
    };
    absl::StatusOr<runtime::CudnnConvGraph> graph_conv =
        runtime::CudnnConvGraph::Create(dev.cudnn(), kind, shape, {.add_to_output = true},
                                        {.workspace_limit = kWorkspace, .device = device}, "acc");
    if (!graph_conv.ok()) {
      std::cout << "accumulated dgrad: " << graph_conv.status() << "\n";
      EXPECT_EQ(graph_conv.status().code(), absl::StatusCode::kUnimplemented);
      continue;
    }
    std::cout << graph_conv->Describe() << "\n";
    REPRISE_ASSERT_OK(reset());
    REPRISE_ASSERT_OK(dev.cudnn().Bind(dev.stream(), "acc"));
    REPRISE_ASSERT_OK(graph_conv->Run(dev.cudnn(), dev.Buffers(kind), dev.workspace(), "acc"));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<double> by_graph, dev.Read(kind, want.size()));
    EXPECT_LE(RelativeL2(by_graph, want), Tolerance(t));

    REPRISE_ASSERT_OK_AND_ASSIGN(
        runtime::CudnnConv legacy,
        runtime::CudnnConv::Create(dev.cudnn(), kind, shape,
                                   {.workspace_limit = kWorkspace, .device = device}, {}, "acc"));
    REPRISE_ASSERT_OK(reset());
    REPRISE_ASSERT_OK(dev.cudnn().Bind(dev.stream(), "acc"));
    REPRISE_ASSERT_OK(legacy.Run(dev.cudnn(), dev.dy(), dev.w(), dev.out(kind), dev.workspace(),
                                 "acc", /*accumulate=*/true));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<double> by_legacy, dev.Read(kind, want.size()));
    EXPECT_LE(RelativeL2(by_graph, by_legacy), 2 * Tolerance(t));
  }
}

TEST(CudnnConvGraphTest, RefusesWhatItCannotRun) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK(runtime::UseDevice(0).status());
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::CudnnHandle cudnn, runtime::CudnnHandle::Create());
  runtime::ConvShape shape =
      ShapeOf({"f64", Layout::kNCHW, DType::kFloat64, false, 1, 4, 5, 5, 4, 3, 3, 1, 1, 1, 1});
  absl::StatusOr<runtime::CudnnConvGraph> f64 = runtime::CudnnConvGraph::Create(
      cudnn, ConvKind::kForward, shape, {}, {.workspace_limit = kWorkspace}, "node 'c'");
  EXPECT_EQ(f64.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(f64.status().message().find("node 'c'"), std::string::npos) << f64.status();
  shape.dtype = DType::kFloat32;
  absl::StatusOr<runtime::CudnnConvGraph> fused_dgrad =
      runtime::CudnnConvGraph::Create(cudnn, ConvKind::kBackwardData, shape, {.output_stats = true},
                                      {.workspace_limit = kWorkspace}, "node 'd'");
  EXPECT_EQ(fused_dgrad.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(fused_dgrad.status().message().find("node 'd'"), std::string::npos);
}

}  // namespace
}  // namespace reprise
