// The fusions CudnnConvGraph offers (src/runtime/cudnn_conv_graph.h): on forward convolutions
// the per-channel sums of the output (genstats), the scale-bias-ReLU prologue on the input, and
// both; on weight gradients the prologue; against the float64 CPU references of the conv ops on
// the transformed input. Where cuDNN has no plan for a pattern, Create() must say so as
// Unimplemented; the pattern of cuDNN's own Hopper sample (NHWC float16) must be supported, with
// the prologue and without it (what conv2d_bn_train asks for, src/ops/conv_bn.h), and so must
// the float16 weight gradient with it (on an H200, cuDNN 9.19).
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/runtime/cudnn_conv_graph.h"
#include "src/runtime/device.h"
#include "src/runtime/owners.h"
#include "tests/gpu/conv_graph_test_util.h"
#include "tests/gpu/device_upload.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using runtime::ConvKind;
using testing::ConvCase;

struct FusionCase {
  ConvCase conv;
  runtime::ConvFusion fusion;
  bool required;  // cuDNN must have a plan.
  ConvKind kind = ConvKind::kForward;
};

void PrintTo(const FusionCase& c, std::ostream* os) { *os << c.conv.name; }

class ConvGraphFusionGpuTest : public ::testing::TestWithParam<FusionCase> {};

TEST_P(ConvGraphFusionGpuTest, MatchesCpuReference) {
  REPRISE_REQUIRE_GPU();
  const FusionCase& f = GetParam();
  const ConvCase& t = f.conv;
  const runtime::ConvShape shape = testing::ShapeOf(t);
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<double> scale(t.c), bias(t.c);
  for (int64_t c = 0; c < t.c; ++c) {
    scale[c] = testing::RoundTo(t.dtype, 0.5 + unit(rng));
    bias[c] = testing::RoundTo(t.dtype, unit(rng) - 0.5);
  }
  const auto prologue = [&](int64_t i, double x) {
    const int64_t c = testing::ChannelOf(t.layout, i, t.c, t.h * t.w);
    return std::max(x * scale[c] + bias[c], 0.0);
  };
  const testing::ConvReference ref = testing::ComputeConvReference(
      t,
      f.fusion.scale_bias_relu_input ? std::function<double(int64_t, double)>(prologue) : nullptr);
  std::vector<double> sum(t.k, 0.0), sq_sum(t.k, 0.0);
  for (size_t i = 0; i < ref.y.size(); ++i) {
    const int64_t k = testing::ChannelOf(t.layout, i, t.k, shape.p * shape.q);
    sum[k] += ref.y[i];
    sq_sum[k] += ref.y[i] * ref.y[i];
  }

  REPRISE_ASSERT_OK(runtime::UseDevice(0).status());
  REPRISE_ASSERT_OK_AND_ASSIGN(testing::ConvDevice dev, testing::ConvDevice::Create(t.dtype, ref));
  absl::StatusOr<runtime::CudnnConvGraph> conv =
      runtime::CudnnConvGraph::Create(dev.cudnn(), f.kind, shape, f.fusion,
                                      {.allow_tf32 = t.tf32,
                                       .workspace_limit = testing::kConvWorkspace,
                                       .device = testing::DeviceKeyForTests()},
                                      t.name);
  if (!conv.ok()) {
    std::cout << t.name << ": " << conv.status() << "\n";
    EXPECT_EQ(conv.status().code(), absl::StatusCode::kUnimplemented) << conv.status();
    EXPECT_FALSE(f.required) << conv.status();
    return;
  }
  std::cout << t.name << ": " << conv->Describe() << "\n";
  EXPECT_NE(conv->Describe().find(f.fusion.ToString()), std::string::npos);
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer scale_d,
                               testing::UploadToDevice(testing::Encode(t.dtype, scale)));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer bias_d,
                               testing::UploadToDevice(testing::Encode(t.dtype, bias)));
  const std::vector<double> nan(t.k, NAN);
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer sum_d,
                               testing::UploadToDevice(testing::Encode(DType::kFloat32, nan)));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer sq_sum_d,
                               testing::UploadToDevice(testing::Encode(DType::kFloat32, nan)));
  runtime::ConvGraphBuffers buffers = dev.Buffers(f.kind);
  buffers.scale = scale_d.data();
  buffers.bias = bias_d.data();
  buffers.sum = sum_d.data();
  buffers.sq_sum = sq_sum_d.data();
  // The forward's y, or the weight gradient's dw of the transformed input.
  const std::vector<double>& want = f.kind == ConvKind::kForward ? ref.y : ref.dw;
  REPRISE_ASSERT_OK(dev.Clear(f.kind, want.size()));
  REPRISE_ASSERT_OK(dev.cudnn().Bind(dev.stream(), t.name));
  REPRISE_ASSERT_OK(conv->Run(dev.cudnn(), buffers, dev.workspace(), t.name));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<double> got, dev.Read(f.kind, want.size()));
  EXPECT_LE(testing::RelativeL2(got, want), testing::Tolerance(t));
  if (f.fusion.output_stats) {
    std::vector<uint8_t> bytes(t.k * sizeof(float));
    REPRISE_ASSERT_OK(cudaMemcpy(bytes.data(), sum_d.data(), bytes.size(), cudaMemcpyDeviceToHost));
    const std::vector<double> got_sum = testing::Decode(DType::kFloat32, bytes);
    REPRISE_ASSERT_OK(
        cudaMemcpy(bytes.data(), sq_sum_d.data(), bytes.size(), cudaMemcpyDeviceToHost));
    const std::vector<double> got_sq_sum = testing::Decode(DType::kFloat32, bytes);
    // Sums of the float accumulators (or of the rounded outputs): the output's tolerance.
    EXPECT_LE(testing::RelativeL2(got_sum, sum), testing::Tolerance(t));
    EXPECT_LE(testing::RelativeL2(got_sq_sum, sq_sum), testing::Tolerance(t));
  }
}

ConvCase Conv(std::string name, Layout layout, DType dtype) {
  return {std::move(name), layout, dtype, false, 4, 64, 16, 16, 32, 3, 3, 1, 1, 1, 1};
}

INSTANTIATE_TEST_SUITE_P(
    Patterns, ConvGraphFusionGpuTest,
    ::testing::Values(
        FusionCase{Conv("NhwcF16SbrStats", Layout::kNHWC, DType::kFloat16),
                   {.scale_bias_relu_input = true, .output_stats = true},
                   true},
        FusionCase{
            Conv("NhwcF16Stats", Layout::kNHWC, DType::kFloat16), {.output_stats = true}, true},
        FusionCase{Conv("NhwcBf16SbrStats", Layout::kNHWC, DType::kBFloat16),
                   {.scale_bias_relu_input = true, .output_stats = true},
                   false},
        FusionCase{
            Conv("NhwcBf16Stats", Layout::kNHWC, DType::kBFloat16), {.output_stats = true}, false},
        FusionCase{Conv("NhwcBf16Sbr", Layout::kNHWC, DType::kBFloat16),
                   {.scale_bias_relu_input = true},
                   false},
        FusionCase{
            Conv("NchwF32Stats", Layout::kNCHW, DType::kFloat32), {.output_stats = true}, false},
        FusionCase{Conv("NhwcF32Sbr", Layout::kNHWC, DType::kFloat32),
                   {.scale_bias_relu_input = true},
                   false},
        FusionCase{Conv("NhwcF16WgradSbr", Layout::kNHWC, DType::kFloat16),
                   {.scale_bias_relu_input = true},
                   true,
                   ConvKind::kBackwardFilter},
        FusionCase{Conv("NhwcBf16WgradSbr", Layout::kNHWC, DType::kBFloat16),
                   {.scale_bias_relu_input = true},
                   false,
                   ConvKind::kBackwardFilter}),
    [](const ::testing::TestParamInfo<FusionCase>& info) { return info.param.conv.name; });

}  // namespace
}  // namespace reprise
