// What MLPerf's batch-norm fusions would buy ResNet-50 (NHWC) at batch 256 in float16 (on an H200
// cuDNN 9.19 offers them in float16 only), and at batch 32 in float16 and bfloat16 (where the
// batch norms' passes are latency-bound and most of the step), per convolution that reads a batch
// norm's ReLU output
// (each bottleneck's conv2 and conv3): the plain forward, with the statistics epilogue, with the
// scale-bias-ReLU prologue and the statistics, and the weight gradient plain and with the
// prologue (reading the batch norm's input instead of a stored output); by the heuristics' first
// plans and by measured ones. A benchmark, not a test (speed is measured, not asserted): run it
// with --gtest_also_run_disabled_tests.
#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/cudnn_conv_graph.h"
#include "src/runtime/device.h"
#include "src/runtime/owners.h"
#include "tests/gpu/conv_graph_test_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using runtime::ConvFusion;
using runtime::ConvKind;
using runtime::ConvShape;

constexpr int kRuns = 20;

ConvShape Bottleneck(int64_t n, DType dtype, int64_t c, int64_t size, int64_t k, int64_t kernel) {
  const int64_t pad = kernel / 2;
  return {.layout = Layout::kNHWC,
          .dtype = dtype,
          .n = n,
          .c = c,
          .h = size,
          .w = size,
          .k = k,
          .r = kernel,
          .s = kernel,
          .p = size,
          .q = size,
          .pad_h = pad,
          .pad_w = pad};
}

// Median ms of kRuns runs of `kind` with `fusion` at `shape`, or a negative value (printed with
// why) where cuDNN has no plan.
double TimeConv(const runtime::CudnnHandle& cudnn, cudaStream_t stream, ConvKind kind,
                const ConvShape& shape, const ConvFusion& fusion,
                const runtime::ConvGraphBuffers& b, void* workspace, bool measure) {
  absl::StatusOr<runtime::CudnnConvGraph> conv =
      runtime::CudnnConvGraph::Create(cudnn, kind, shape, fusion,
                                      {.workspace_limit = testing::kConvWorkspace,
                                       .device = testing::DeviceKeyForTests(),
                                       .measure = measure,
                                       .measure_buffers = b,
                                       .measure_workspace = workspace},
                                      "timing");
  if (!conv.ok()) {
    std::printf("    %s %s: %s\n", std::string(runtime::ConvKindName(kind)).c_str(),
                fusion.ToString().c_str(),
                std::string(conv.status().message()).substr(0, 160).c_str());
    return -1;
  }
  std::vector<runtime::Event> events;
  for (int i = 0; i < 2 * kRuns; ++i) events.push_back(*runtime::Event::Create(cudaEventDefault));
  EXPECT_TRUE(conv->Run(cudnn, b, workspace, "timing").ok());
  for (int i = 0; i < kRuns; ++i) {
    EXPECT_EQ(cudaEventRecord(events[2 * i].get(), stream), cudaSuccess);
    EXPECT_TRUE(conv->Run(cudnn, b, workspace, "timing").ok());
    EXPECT_EQ(cudaEventRecord(events[2 * i + 1].get(), stream), cudaSuccess);
  }
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<float> ms(kRuns);
  for (int i = 0; i < kRuns; ++i) {
    EXPECT_EQ(cudaEventElapsedTime(&ms[i], events[2 * i].get(), events[2 * i + 1].get()),
              cudaSuccess);
  }
  std::sort(ms.begin(), ms.end());
  return ms[kRuns / 2];
}

// Every convolution timed with the heuristics' first plans, or with the plans chosen by
// measurement (ConvGraphOptions::measure), at a batch and type.
struct Timing {
  const char* name;
  bool measure;
  int64_t batch;
  DType dtype;
};

void PrintTo(const Timing& t, std::ostream* os) { *os << t.name; }

class ConvBnFusionTimingGpuTest : public ::testing::TestWithParam<Timing> {};

TEST_P(ConvBnFusionTimingGpuTest, DISABLED_ResNet50) {
  REPRISE_REQUIRE_GPU();
  const bool measure = GetParam().measure;
  const int64_t n = GetParam().batch;
  const DType dtype = GetParam().dtype;
  REPRISE_ASSERT_OK(runtime::UseDevice(0).status());
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::CudnnHandle cudnn, runtime::CudnnHandle::Create());
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Stream stream, runtime::Stream::Create());
  REPRISE_ASSERT_OK(cudnn.Bind(stream.get(), "timing"));
  // Buffers as large as layer1's activations (256·56·56·256 halves) hold every operand.
  constexpr size_t kBytes = size_t{256} * 56 * 56 * 256 * 2;
  std::vector<runtime::DeviceBuffer> buffers;
  for (int i = 0; i < 4; ++i) {
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer buffer,
                                 runtime::DeviceBuffer::Create(kBytes));
    // 0x2c2c: 0.0637 in float16, in every operand, scale and bias.
    REPRISE_ASSERT_OK(cudaMemset(buffer.data(), 0x2c, kBytes));
    buffers.push_back(std::move(buffer));
  }
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer workspace,
                               runtime::DeviceBuffer::Create(testing::kConvWorkspace));
  struct Named {
    const char* name;
    ConvShape shape;
  };
  const Named convs[] = {{"layer1 conv2 3x3", Bottleneck(n, dtype, 64, 56, 64, 3)},
                         {"layer1 conv3 1x1", Bottleneck(n, dtype, 64, 56, 256, 1)},
                         {"layer2 conv2 3x3", Bottleneck(n, dtype, 128, 28, 128, 3)},
                         {"layer2 conv3 1x1", Bottleneck(n, dtype, 128, 28, 512, 1)},
                         {"layer3 conv2 3x3", Bottleneck(n, dtype, 256, 14, 256, 3)},
                         {"layer3 conv3 1x1", Bottleneck(n, dtype, 256, 14, 1024, 1)},
                         {"layer4 conv2 3x3", Bottleneck(n, dtype, 512, 7, 512, 3)},
                         {"layer4 conv3 1x1", Bottleneck(n, dtype, 512, 7, 2048, 1)}};
  std::printf(
      "ms, median of %d (%s plans, batch %lld %s): fwd, fwd+stats, fwd sbr+stats, wgrad, "
      "wgrad sbr\n",
      kRuns, measure ? "measured" : "heuristics' first", static_cast<long long>(n),
      std::string(DTypeName(dtype)).c_str());
  for (const Named& c : convs) {
    runtime::ConvGraphBuffers fwd{.a = buffers[0].data(),
                                  .b = buffers[1].data(),
                                  .out = buffers[2].data(),
                                  .scale = buffers[3].data(),
                                  .bias = buffers[3].data(),
                                  .sum = buffers[3].data(),
                                  .sq_sum = static_cast<char*>(buffers[3].data()) + 8192};
    runtime::ConvGraphBuffers wgrad = fwd;  // a = x, b = dy, out = dw.
    const double t[] = {
        TimeConv(cudnn, stream.get(), ConvKind::kForward, c.shape, {}, fwd, workspace.data(),
                 measure),
        TimeConv(cudnn, stream.get(), ConvKind::kForward, c.shape, {.output_stats = true}, fwd,
                 workspace.data(), measure),
        TimeConv(cudnn, stream.get(), ConvKind::kForward, c.shape,
                 {.scale_bias_relu_input = true, .output_stats = true}, fwd, workspace.data(),
                 measure),
        TimeConv(cudnn, stream.get(), ConvKind::kBackwardFilter, c.shape, {}, wgrad,
                 workspace.data(), measure),
        TimeConv(cudnn, stream.get(), ConvKind::kBackwardFilter, c.shape,
                 {.scale_bias_relu_input = true}, wgrad, workspace.data(), measure)};
    std::printf("%-18s %8.4f %8.4f %8.4f %8.4f %8.4f   (%s)\n", c.name, t[0], t[1], t[2], t[3],
                t[4], c.shape.ToString().c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Plans, ConvBnFusionTimingGpuTest,
    ::testing::Values(Timing{"B256Float16Heuristics", false, 256, DType::kFloat16},
                      Timing{"B256Float16Measured", true, 256, DType::kFloat16},
                      Timing{"B32Float16Heuristics", false, 32, DType::kFloat16},
                      Timing{"B32Bfloat16Heuristics", false, 32, DType::kBFloat16}),
    [](const ::testing::TestParamInfo<Timing>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace reprise
