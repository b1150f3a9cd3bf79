// The convolution ops' GPU lowerings (cuDNN with strict fp32 math, NVRTC channel kernels) against
// their CPU references, in both layouts and at ResNet's awkward shapes.
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "reprise/graph.h"
#include "src/ir/reference_executor.h"
#include "src/ops/conv.h"
#include "src/runtime/cudnn_conv.h"
#include "src/runtime/cudnn_handle.h"
#include "src/runtime/device.h"
#include "src/runtime/owners.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

Initializer Random() { return Initializer::Uniform(-1, 1); }

// Strict fp32 (no TF32) in a different summation order than the double-accumulated reference:
// errors stay near fp32 rounding.
constexpr double kTolerance = 1e-5;

struct ConvCase {
  std::string name;
  std::string layout;
  int64_t n, c, h, w, k, r, s;
  int64_t stride, pad, dilation, groups;
  bool deterministic = false;
};

Shape Activation(const ConvCase& t, int64_t c, int64_t h, int64_t w) {
  return t.layout == "NHWC" ? Shape{t.n, h, w, c} : Shape{t.n, c, h, w};
}

int64_t OutSize(int64_t in, int64_t kernel, const ConvCase& t) {
  return (in + 2 * t.pad - t.dilation * (kernel - 1) - 1) / t.stride + 1;
}

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

class ConvGpuTest : public ::testing::TestWithParam<ConvCase> {};

// One graph holds all five ops of a convolutional layer, each fed its own random leaves.
TEST_P(ConvGpuTest, EveryOpMatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  const ConvCase& t = GetParam();
  const int64_t p = OutSize(t.h, t.r, t), q = OutSize(t.w, t.s, t), cg = t.c / t.groups;
  Attrs attrs = {{"stride_h", t.stride}, {"stride_w", t.stride},     {"pad_h", t.pad},
                 {"pad_w", t.pad},       {"dilation_h", t.dilation}, {"dilation_w", t.dilation},
                 {"groups", t.groups},   {"layout", t.layout}};
  Graph g;
  Value x = *g.AddParameter("x", {Activation(t, t.c, t.h, t.w)}, Random());
  Value w = *g.AddParameter(
      "w", {t.layout == "NHWC" ? Shape{t.k, t.r, t.s, cg} : Shape{t.k, cg, t.r, t.s}}, Random());
  Value dy = *g.AddParameter("dy", {Activation(t, t.k, p, q)}, Random());
  Value b = *g.AddParameter("b", {Shape{t.k}}, Random());
  auto y = g.AddOp1(ops::Conv2dOp(), "conv", {x, w}, attrs);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(g.spec(*y).shape, g.spec(dy).shape);
  Attrs dgrad = attrs;
  dgrad["input_h"] = t.h;
  dgrad["input_w"] = t.w;
  dgrad["role"] = std::string("dgrad");
  ASSERT_TRUE(g.AddOp1(ops::Conv2dDgradOp(), "conv.dgrad", {dy, w}, dgrad).ok());
  Attrs wgrad = attrs;
  wgrad["kernel_h"] = t.r;
  wgrad["kernel_w"] = t.s;
  wgrad["role"] = std::string("wgrad");
  ASSERT_TRUE(g.AddOp1(ops::Conv2dWgradOp(), "conv.wgrad", {x, dy}, wgrad).ok());
  const Attrs layout = {{"layout", t.layout}};
  ASSERT_TRUE(g.AddOp1(ops::ChannelBiasAddOp(), "bias_add", {dy, b}, layout).ok());
  ASSERT_TRUE(g.AddOp1(ops::ChannelSumOp(), "bias_grad", {dy}, layout).ok());
  ir::ReferenceExecutor cpu(g, false, 11);
  ExpectGpuMatchesCpu(g, cpu, kTolerance, {}, t.deterministic);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvGpuTest,
    ::testing::Values(
        ConvCase{"Nchw3x3Pad1", "NCHW", 2, 8, 9, 9, 16, 3, 3, 1, 1, 1, 1},
        ConvCase{"Nhwc3x3Pad1", "NHWC", 2, 8, 9, 9, 16, 3, 3, 1, 1, 1, 1},
        ConvCase{"NchwGroupsStride2", "NCHW", 2, 8, 11, 11, 12, 3, 3, 2, 1, 1, 4},
        ConvCase{"NhwcGroupsStride2", "NHWC", 2, 8, 11, 11, 12, 3, 3, 2, 1, 1, 4},
        ConvCase{"NchwDilation2", "NCHW", 2, 6, 10, 10, 6, 3, 3, 1, 2, 2, 1},
        ConvCase{"NhwcDilation2", "NHWC", 2, 6, 10, 10, 6, 3, 3, 1, 2, 2, 1},
        // ResNet's downsampling shortcut and stem.
        ConvCase{"Nchw1x1Stride2", "NCHW", 4, 64, 28, 28, 128, 1, 1, 2, 0, 1, 1},
        ConvCase{"Nhwc1x1Stride2", "NHWC", 4, 64, 28, 28, 128, 1, 1, 2, 0, 1, 1},
        ConvCase{"Nchw7x7Stride2Pad3", "NCHW", 2, 3, 64, 64, 64, 7, 7, 2, 3, 1, 1},
        ConvCase{"Nhwc7x7Stride2Pad3", "NHWC", 2, 3, 64, 64, 64, 7, 7, 2, 3, 1, 1},
        // ResNet-18's layer3 at 64x64 batch 8, with the deterministic algorithms
        // its training tests use: 4x4 maps of 256 channels.
        ConvCase{"Nchw3x3At4x4Deterministic", "NCHW", 8, 256, 4, 4, 256, 3, 3, 1, 1, 1, 1, true},
        ConvCase{"Nhwc3x3At4x4Deterministic", "NHWC", 8, 256, 4, 4, 256, 3, 3, 1, 1, 1, 1, true},
        ConvCase{"Nchw3x3Stride2At8x8Deterministic", "NCHW", 8, 128, 8, 8, 256, 3, 3, 2, 1, 1, 1,
                 true},
        ConvCase{"Nchw1x1Stride2At8x8Deterministic", "NCHW", 8, 128, 8, 8, 256, 1, 1, 2, 0, 1, 1,
                 true},
        ConvCase{"Nchw3x3At4x4", "NCHW", 8, 256, 4, 4, 256, 3, 3, 1, 1, 1, 1}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

// The runtime directly: a measured, deterministic choice (cudnnFind*AlgorithmEx on real buffers)
// agrees with the heuristic one to fp32 rounding, gives the same bits on every run (also when
// replayed from a captured CUDA graph) and lands in the process-wide cache.
TEST(CudnnConvTest, MeasuredDeterministicAlgorithmsAgreeAndReplayBitwise) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceInfo device, runtime::UseDevice(0));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::CudnnHandle cudnn, runtime::CudnnHandle::Create());
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Stream stream, runtime::Stream::Create());
  runtime::ConvShape shape{.n = 4,
                           .c = 16,
                           .h = 14,
                           .w = 14,
                           .k = 32,
                           .r = 3,
                           .s = 3,
                           .p = 14,
                           .q = 14,
                           .pad_h = 1,
                           .pad_w = 1};
  const size_t x_bytes = 4 * 16 * 14 * 14 * sizeof(float), w_bytes = 32 * 16 * 9 * sizeof(float);
  const size_t y_bytes = 4 * 32 * 14 * 14 * sizeof(float), ws_bytes = 64 << 20;
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer x, runtime::DeviceBuffer::Create(x_bytes));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer w, runtime::DeviceBuffer::Create(w_bytes));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer dy, runtime::DeviceBuffer::Create(y_bytes));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer dw, runtime::DeviceBuffer::Create(w_bytes));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer ws, runtime::DeviceBuffer::Create(ws_bytes));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (auto [buffer, bytes] : {std::pair{&x, x_bytes}, std::pair{&dy, y_bytes}}) {
    std::vector<float> host(bytes / sizeof(float));
    for (float& v : host) v = uniform(rng);
    REPRISE_ASSERT_OK(cudaMemcpy(buffer->data(), host.data(), bytes, cudaMemcpyHostToDevice));
  }
  // Uploads on the legacy stream, which reprise's streams do not wait for (docs/testing.md).
  REPRISE_ASSERT_OK(cudaStreamSynchronize(cudaStreamLegacy));
  const runtime::CudnnConv::Buffers buffers{x.data(), dy.data(), dw.data(), ws.data()};
  const auto run = [&](const runtime::CudnnConv& conv) {
    std::vector<float> out(w_bytes / sizeof(float));
    EXPECT_TRUE(cudnn.Bind(stream.get(), "test").ok());
    EXPECT_TRUE(conv.Run(cudnn, x.data(), dy.data(), dw.data(), ws.data(), "test").ok());
    EXPECT_EQ(cudaMemcpyAsync(out.data(), dw.data(), w_bytes, cudaMemcpyDeviceToHost, stream.get()),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    return out;
  };
  runtime::ConvOptions heuristic{.workspace_limit = ws_bytes, .device = device.name};
  runtime::ConvOptions measured = heuristic;
  measured.measure = true;
  measured.deterministic = true;
  REPRISE_ASSERT_OK_AND_ASSIGN(
      runtime::CudnnConv by_heuristic,
      runtime::CudnnConv::Create(cudnn, runtime::ConvKind::kBackwardFilter, shape, heuristic,
                                 buffers, "heuristic wgrad"));
  REPRISE_ASSERT_OK_AND_ASSIGN(
      runtime::CudnnConv by_time,
      runtime::CudnnConv::Create(cudnn, runtime::ConvKind::kBackwardFilter, shape, measured,
                                 buffers, "measured wgrad"));
  EXPECT_EQ(by_time.Describe().rfind("cudnn conv wgrad algo ", 0), 0u) << by_time.Describe();
  EXPECT_EQ(by_time.algorithm().math, CUDNN_FMA_MATH);
  EXPECT_TRUE(runtime::ConvAlgorithmCache::Global()
                  .Find({.kind = runtime::ConvKind::kBackwardFilter,
                         .shape = shape,
                         .deterministic = true,
                         .measured = true,
                         .workspace_limit = ws_bytes,
                         .device = device.name})
                  .has_value());
  const std::vector<float> a = run(by_heuristic), b = run(by_time), c = run(by_time);
  double err = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (a[i] - b[i]) * (a[i] - b[i]);
    norm += a[i] * a[i];
  }
  EXPECT_LE(std::sqrt(err / norm), kTolerance);
  EXPECT_EQ(b, c);

  // Captured: Run() must enqueue without synchronising or allocating.
  REPRISE_ASSERT_OK(cudaMemsetAsync(dw.data(), 0, w_bytes, stream.get()));
  REPRISE_ASSERT_OK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
  const absl::Status recorded = by_time.Run(cudnn, x.data(), dy.data(), dw.data(), ws.data(), "");
  cudaGraph_t raw_graph = nullptr;
  REPRISE_ASSERT_OK(cudaStreamEndCapture(stream.get(), &raw_graph));
  runtime::Graph graph = runtime::Graph::Adopt(raw_graph);
  REPRISE_ASSERT_OK(recorded);
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::GraphExec exec, runtime::GraphExec::Create(graph));
  REPRISE_ASSERT_OK(cudaGraphLaunch(exec.get(), stream.get()));
  std::vector<float> replayed(w_bytes / sizeof(float));
  REPRISE_ASSERT_OK(
      cudaMemcpyAsync(replayed.data(), dw.data(), w_bytes, cudaMemcpyDeviceToHost, stream.get()));
  REPRISE_ASSERT_OK(cudaStreamSynchronize(stream.get()));
  EXPECT_EQ(replayed, b);
}

}  // namespace
}  // namespace reprise
