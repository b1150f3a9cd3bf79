// Convolutions planned through cuDNN's graph API (src/runtime/cudnn_graph_conv.h) against the
// legacy API's on the same operands: TF32 and bfloat16, every kind, the accumulating data
// gradient, the deterministic choice repeated and replayed from a captured CUDA graph bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/runtime/cudnn_conv.h"
#include "src/runtime/cudnn_handle.h"
#include "src/runtime/device.h"
#include "src/runtime/owners.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using runtime::ConvKind;

struct GraphConvCase {
  std::string name;
  DType dtype;
  int64_t n, c, h, w, k, r, stride, pad;
  double tolerance;  // Relative L2 difference between the two APIs' results.
};

void PrintTo(const GraphConvCase& c, std::ostream* os) { *os << c.name; }

runtime::ConvShape ShapeOf(const GraphConvCase& t) {
  const int64_t p = (t.h + 2 * t.pad - t.r) / t.stride + 1;
  return {.layout = Layout::kNHWC,
          .dtype = t.dtype,
          .n = t.n,
          .c = t.c,
          .h = t.h,
          .w = t.w,
          .k = t.k,
          .r = t.r,
          .s = t.r,
          .p = p,
          .q = p,
          .stride_h = t.stride,
          .stride_w = t.stride,
          .pad_h = t.pad,
          .pad_w = t.pad};
}

size_t ElementBytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

// Values in [-1, 1] as float32 or bfloat16 (truncated) bytes.
std::vector<uint8_t> RandomBytes(size_t elements, DType dtype, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<uint8_t> out(elements * ElementBytes(dtype));
  for (size_t i = 0; i < elements; ++i) {
    const float v = uniform(rng);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    if (dtype == DType::kFloat32) {
      std::memcpy(&out[4 * i], &bits, 4);
    } else {
      const uint16_t high = static_cast<uint16_t>(bits >> 16);
      std::memcpy(&out[2 * i], &high, 2);
    }
  }
  return out;
}

double ToDouble(const std::vector<uint8_t>& bytes, size_t i, DType dtype) {
  uint32_t bits = 0;
  if (dtype == DType::kFloat32) {
    std::memcpy(&bits, &bytes[4 * i], 4);
  } else {
    uint16_t high;
    std::memcpy(&high, &bytes[2 * i], 2);
    bits = static_cast<uint32_t>(high) << 16;
  }
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

class GraphConvGpuTest : public ::testing::TestWithParam<GraphConvCase> {};

TEST_P(GraphConvGpuTest, AgreesWithTheLegacyApiAndReplaysBitwise) {
  REPRISE_REQUIRE_GPU();
  const GraphConvCase& t = GetParam();
  const runtime::ConvShape shape = ShapeOf(t);
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceInfo device, runtime::UseDevice(0));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::CudnnHandle cudnn, runtime::CudnnHandle::Create());
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Stream stream, runtime::Stream::Create());
  const size_t eb = ElementBytes(t.dtype);
  const size_t x_elems = t.n * t.c * t.h * t.w, w_elems = t.k * t.c * t.r * t.r,
               y_elems = t.n * t.k * shape.p * shape.q;
  const size_t ws_bytes = 64 << 20;
  std::mt19937 rng(7);
  const std::vector<uint8_t> x_host = RandomBytes(x_elems, t.dtype, rng),
                             w_host = RandomBytes(w_elems, t.dtype, rng),
                             y_host = RandomBytes(y_elems, t.dtype, rng);
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer x, runtime::DeviceBuffer::Create(x_elems * eb));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer w, runtime::DeviceBuffer::Create(w_elems * eb));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer y, runtime::DeviceBuffer::Create(y_elems * eb));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer out,
                               runtime::DeviceBuffer::Create(std::max({x_elems, w_elems, y_elems}) * eb));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer ws, runtime::DeviceBuffer::Create(ws_bytes));
  REPRISE_ASSERT_OK(cudaMemcpy(x.data(), x_host.data(), x_host.size(), cudaMemcpyHostToDevice));
  REPRISE_ASSERT_OK(cudaMemcpy(w.data(), w_host.data(), w_host.size(), cudaMemcpyHostToDevice));
  REPRISE_ASSERT_OK(cudaMemcpy(y.data(), y_host.data(), y_host.size(), cudaMemcpyHostToDevice));

  for (const ConvKind kind :
       {ConvKind::kForward, ConvKind::kBackwardData, ConvKind::kBackwardFilter}) {
    SCOPED_TRACE(std::string(runtime::ConvKindName(kind)));
    for (const bool accumulate : {false, true}) {
      if (accumulate && kind != ConvKind::kBackwardData) continue;  // As the ops use it.
      SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
      const void* a = kind == ConvKind::kBackwardData ? y.data() : x.data();
      const void* b = kind == ConvKind::kBackwardFilter ? y.data() : w.data();
      const size_t out_elems = kind == ConvKind::kForward        ? y_elems
                               : kind == ConvKind::kBackwardData ? x_elems
                                                                 : w_elems;
      // The accumulating gradient starts from x's values.
      const auto run = [&](const runtime::CudnnConv& conv, bool graph_replay) {
        std::vector<uint8_t> result(out_elems * eb);
        EXPECT_TRUE(cudnn.Bind(stream.get(), "test").ok());
        if (accumulate) {
          EXPECT_EQ(cudaMemcpyAsync(out.data(), x.data(), out_elems * eb, cudaMemcpyDeviceToDevice,
                                    stream.get()),
                    cudaSuccess);
        }
        if (graph_replay) {
          EXPECT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal),
                    cudaSuccess);
          const absl::Status recorded =
              conv.Run(cudnn, a, b, out.data(), ws.data(), "captured", accumulate);
          cudaGraph_t raw = nullptr;
          EXPECT_EQ(cudaStreamEndCapture(stream.get(), &raw), cudaSuccess);
          runtime::Graph graph = runtime::Graph::Adopt(raw);
          EXPECT_TRUE(recorded.ok()) << recorded;
          absl::StatusOr<runtime::GraphExec> exec = runtime::GraphExec::Create(graph);
          EXPECT_TRUE(exec.ok()) << exec.status();
          if (exec.ok()) EXPECT_EQ(cudaGraphLaunch(exec->get(), stream.get()), cudaSuccess);
        } else {
          const absl::Status ran = conv.Run(cudnn, a, b, out.data(), ws.data(), "eager", accumulate);
          EXPECT_TRUE(ran.ok()) << ran;
        }
        EXPECT_EQ(cudaMemcpyAsync(result.data(), out.data(), result.size(),
                                  cudaMemcpyDeviceToHost, stream.get()),
                  cudaSuccess);
        EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
        return result;
      };
      runtime::ConvOptions graph_options{.allow_tf32 = true,
                                         .deterministic = true,
                                         .workspace_limit = ws_bytes,
                                         .device = device.name,
                                         .accumulate = accumulate};
      runtime::ConvOptions legacy_options = graph_options;
      legacy_options.graph_api = false;
      const runtime::CudnnConv::Buffers buffers{a, b, out.data(), ws.data()};
      REPRISE_ASSERT_OK_AND_ASSIGN(
          runtime::CudnnConv by_graph,
          runtime::CudnnConv::Create(cudnn, kind, shape, graph_options, buffers, "graph"));
      REPRISE_ASSERT_OK_AND_ASSIGN(
          runtime::CudnnConv by_legacy,
          runtime::CudnnConv::Create(cudnn, kind, shape, legacy_options, buffers, "legacy"));
      std::cout << t.name << " " << runtime::ConvKindName(kind) << ": " << by_graph.Describe()
                << " against " << by_legacy.Describe() << "\n";
      EXPECT_EQ(by_graph.Describe().rfind("cudnn graph conv ", 0), 0u) << by_graph.Describe();
      EXPECT_GE(by_graph.algorithm().engine, 0);
      EXPECT_EQ(by_legacy.algorithm().engine, -1);

      const std::vector<uint8_t> graph_out = run(by_graph, false), again = run(by_graph, false),
                                 replayed = run(by_graph, true), legacy_out = run(by_legacy, false);
      EXPECT_EQ(graph_out, again);
      EXPECT_EQ(graph_out, replayed);
      double err = 0, norm = 0;
      for (size_t i = 0; i < out_elems; ++i) {
        const double g = ToDouble(graph_out, i, t.dtype), l = ToDouble(legacy_out, i, t.dtype);
        err += (g - l) * (g - l);
        norm += l * l;
      }
      EXPECT_GT(norm, 0);
      EXPECT_LE(std::sqrt(err / norm), t.tolerance);

      // A plan built to overwrite its output refuses to accumulate, and the other way round.
      const absl::Status mismatched =
          by_graph.Run(cudnn, a, b, out.data(), ws.data(), "node 'mismatch'", !accumulate);
      EXPECT_TRUE(absl::IsFailedPrecondition(mismatched)) << mismatched;
      EXPECT_NE(mismatched.message().find("node 'mismatch'"), std::string::npos) << mismatched;
    }
  }
}

// Tolerances: TF32 rounds each operand to 10 mantissa bits, bfloat16 outputs to 8.
INSTANTIATE_TEST_SUITE_P(
    ResNetLayers, GraphConvGpuTest,
    ::testing::Values(GraphConvCase{"Tf32OneByOne", DType::kFloat32, 8, 64, 14, 14, 128, 1, 1, 0,
                                    2e-3},
                      GraphConvCase{"Tf32ThreeByThreeStride2", DType::kFloat32, 8, 32, 15, 15, 64,
                                    3, 2, 1, 2e-3},
                      GraphConvCase{"Bf16ThreeByThree", DType::kBFloat16, 8, 64, 14, 14, 64, 3, 1,
                                    1, 1e-2}),
    [](const ::testing::TestParamInfo<GraphConvCase>& info) { return info.param.name; });

// Strict fp32 and grouped convolutions keep the legacy API, and say so.
TEST(GraphConvGpuTest, StrictFloat32AndGroupsUseTheLegacyApi) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceInfo device, runtime::UseDevice(0));
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::CudnnHandle cudnn, runtime::CudnnHandle::Create());
  runtime::ConvShape shape = ShapeOf({"strict", DType::kFloat32, 2, 8, 9, 9, 16, 3, 1, 1, 0});
  const runtime::ConvOptions strict{.workspace_limit = 1 << 20, .device = device.name};
  REPRISE_ASSERT_OK_AND_ASSIGN(
      runtime::CudnnConv conv,
      runtime::CudnnConv::Create(cudnn, ConvKind::kForward, shape, strict, {}, "strict"));
  EXPECT_EQ(conv.Describe().rfind("cudnn conv fwd algo ", 0), 0u) << conv.Describe();
  shape.groups = 4;
  runtime::ConvOptions tf32 = strict;
  tf32.allow_tf32 = true;
  REPRISE_ASSERT_OK_AND_ASSIGN(
      runtime::CudnnConv grouped,
      runtime::CudnnConv::Create(cudnn, ConvKind::kForward, shape, tf32, {}, "grouped"));
  EXPECT_EQ(grouped.Describe().rfind("cudnn conv fwd algo ", 0), 0u) << grouped.Describe();
}

}  // namespace
}  // namespace reprise
