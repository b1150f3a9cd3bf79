#include "src/runtime/lt_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/runtime/device.h"
#include "src/runtime/owners.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise::runtime {
namespace {

constexpr size_t kWorkspaceBytes = 32 << 20;

std::vector<float> RandomMatrix(int64_t elements, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(elements);
  for (float& v : values) v = uniform(rng);
  return values;
}

// C = op(A) op(B) in float64, with the same row-major storage conventions as MatmulShape.
std::vector<double> ReferenceMatmul(const MatmulShape& s, const std::vector<float>& a,
                                    const std::vector<float>& b) {
  std::vector<double> c(s.m * s.n);
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < s.k; ++p) {
        const double av = s.transpose_a ? a[p * s.m + i] : a[i * s.k + p];
        const double bv = s.transpose_b ? b[j * s.k + p] : b[p * s.n + j];
        sum += av * bv;
      }
      c[i * s.n + j] = sum;
    }
  }
  return c;
}

// Normwise: max |c - ref| / max |ref|. Elementwise ratios blow up where a sum cancels to ~0.
double RelativeError(const std::vector<float>& c, const std::vector<double>& ref) {
  double max_error = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_error = std::max(max_error, std::abs(c[i] - ref[i]));
    max_ref = std::max(max_ref, std::abs(ref[i]));
  }
  return max_error / max_ref;
}

// Inputs and output on the device for one shape, with fresh random inputs.
class Operands {
 public:
  static absl::StatusOr<Operands> Create(const MatmulShape& s, std::mt19937& rng) {
    Operands o;
    o.a_host = RandomMatrix(s.m * s.k, rng);
    o.b_host = RandomMatrix(s.k * s.n, rng);
    ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::Create(o.a_host.size() * sizeof(float)));
    ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(o.b_host.size() * sizeof(float)));
    ASSIGN_OR_RETURN(DeviceBuffer c, DeviceBuffer::Create(s.m * s.n * sizeof(float)));
    CUDA_RETURN_IF_ERROR(cudaMemcpy(a.data(), o.a_host.data(), a.bytes(), cudaMemcpyHostToDevice),
                         "copy A");
    CUDA_RETURN_IF_ERROR(cudaMemcpy(b.data(), o.b_host.data(), b.bytes(), cudaMemcpyHostToDevice),
                         "copy B");
    // Uploads on the legacy stream, which reprise's streams do not wait for (docs/testing.md).
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cudaStreamLegacy), "copy B");
    o.a.emplace(std::move(a));
    o.b.emplace(std::move(b));
    o.c.emplace(std::move(c));
    return o;
  }
  const float* A() const { return static_cast<const float*>(a->data()); }
  const float* B() const { return static_cast<const float*>(b->data()); }
  float* C() const { return static_cast<float*>(c->data()); }
  absl::StatusOr<std::vector<float>> ReadC() const {
    std::vector<float> out(c->bytes() / sizeof(float));
    CUDA_RETURN_IF_ERROR(cudaMemcpy(out.data(), c->data(), c->bytes(), cudaMemcpyDeviceToHost),
                         "copy C");
    return out;
  }

  std::vector<float> a_host, b_host;
  std::optional<DeviceBuffer> a, b, c;
};

// (m, n, k, transpose_a, transpose_b, allow_tf32)
using Case = std::tuple<int64_t, int64_t, int64_t, bool, bool, bool>;

class LtMatmulTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    REPRISE_REQUIRE_GPU();
    REPRISE_ASSERT_OK(UseDevice(0).status());
    REPRISE_ASSERT_OK_AND_ASSIGN(LtHandle handle, LtHandle::Create());
    handle_.emplace(std::move(handle));
    REPRISE_ASSERT_OK_AND_ASSIGN(DeviceBuffer workspace, DeviceBuffer::Create(kWorkspaceBytes));
    workspace_.emplace(std::move(workspace));
    REPRISE_ASSERT_OK_AND_ASSIGN(Stream stream, Stream::Create());
    stream_.emplace(std::move(stream));
  }
  MatmulShape Shape() const {
    const auto [m, n, k, ta, tb, tf32] = GetParam();
    return MatmulShape{m, n, k, ta, tb};
  }
  bool Tf32() const { return std::get<5>(GetParam()); }

  std::optional<LtHandle> handle_;
  std::optional<DeviceBuffer> workspace_;
  std::optional<Stream> stream_;
};

TEST_P(LtMatmulTest, MatchesFloat64ReferenceAndRepeatsBitwise) {
  const MatmulShape shape = Shape();
  std::mt19937 rng(1234);
  REPRISE_ASSERT_OK_AND_ASSIGN(Operands operands, Operands::Create(shape, rng));
  REPRISE_ASSERT_OK_AND_ASSIGN(LtMatmul matmul,
                               LtMatmul::Create(*handle_, shape, Tf32(), kWorkspaceBytes));

  REPRISE_ASSERT_OK(
      matmul.Run(stream_->get(), operands.A(), operands.B(), operands.C(), workspace_->data()));
  REPRISE_ASSERT_OK(cudaStreamSynchronize(stream_->get()));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> first, operands.ReadC());

  const double error =
      RelativeError(first, ReferenceMatmul(shape, operands.a_host, operands.b_host));
  EXPECT_LE(error, Tf32() ? 3e-3 : 1e-5) << matmul.Describe();

  REPRISE_ASSERT_OK(cudaMemsetAsync(operands.C(), 0, first.size() * sizeof(float), stream_->get()));
  REPRISE_ASSERT_OK(
      matmul.Run(stream_->get(), operands.A(), operands.B(), operands.C(), workspace_->data()));
  REPRISE_ASSERT_OK(cudaStreamSynchronize(stream_->get()));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> second, operands.ReadC());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0)
      << matmul.Describe() << " gave different bits on a second run";
}

// The measured choice (the fastest of the heuristic's first candidates) is as accurate, repeats
// its bits, and says it was measured.
TEST_P(LtMatmulTest, MeasuredChoiceMatchesFloat64ReferenceAndRepeatsBitwise) {
  const MatmulShape shape = Shape();
  std::mt19937 rng(77);
  REPRISE_ASSERT_OK_AND_ASSIGN(Operands operands, Operands::Create(shape, rng));
  REPRISE_ASSERT_OK_AND_ASSIGN(LtMatmul matmul,
                               LtMatmul::Create(*handle_, shape, Tf32(), kWorkspaceBytes, {}, 8));
  REPRISE_ASSERT_OK(matmul
                        .ChooseFastest(stream_->get(), operands.A(), operands.B(), operands.C(),
                                       workspace_->data(), 3)
                        .status());
  EXPECT_NE(matmul.Describe().find("measured: candidate"), std::string::npos) << matmul.Describe();
  EXPECT_LE(matmul.workspace_bytes(), kWorkspaceBytes);
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    REPRISE_ASSERT_OK(
        cudaMemsetAsync(operands.C(), 0, shape.m * shape.n * sizeof(float), stream_->get()));
    REPRISE_ASSERT_OK(
        matmul.Run(stream_->get(), operands.A(), operands.B(), operands.C(), workspace_->data()));
    REPRISE_ASSERT_OK(cudaStreamSynchronize(stream_->get()));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> c, operands.ReadC());
    runs.push_back(std::move(c));
  }
  EXPECT_LE(RelativeError(runs[0], ReferenceMatmul(shape, operands.a_host, operands.b_host)),
            Tf32() ? 3e-3 : 1e-5)
      << matmul.Describe();
  EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)), 0)
      << matmul.Describe();
}

// A measured choice's name (what its record keeps) rebuilds the same configuration on a fresh
// plan of the product: the same bits; names that are not of the form, or that cuBLASLt refuses for
// this product, are errors that say so.
TEST_P(LtMatmulTest, ConfigNameRebuildsTheChoiceAndBadNamesAreRefused) {
  const MatmulShape shape = Shape();
  std::mt19937 rng(5);
  REPRISE_ASSERT_OK_AND_ASSIGN(Operands operands, Operands::Create(shape, rng));
  REPRISE_ASSERT_OK_AND_ASSIGN(LtMatmul measured,
                               LtMatmul::Create(*handle_, shape, Tf32(), kWorkspaceBytes, {}, 8));
  REPRISE_ASSERT_OK_AND_ASSIGN(const float best_ms,
                               measured.ChooseFastest(stream_->get(), operands.A(), operands.B(),
                                                      operands.C(), workspace_->data(), 3, 2));
  EXPECT_GT(best_ms, 0.0f);
  const std::string name = measured.ConfigName();
  EXPECT_EQ(name.rfind("algo", 0), 0u) << name;
  REPRISE_ASSERT_OK_AND_ASSIGN(LtMatmul rebuilt,
                               LtMatmul::Create(*handle_, shape, Tf32(), kWorkspaceBytes));
  REPRISE_ASSERT_OK(rebuilt.UseConfigName(name));
  EXPECT_EQ(rebuilt.ConfigName(), name);
  EXPECT_NE(rebuilt.Describe().find("(record)"), std::string::npos) << rebuilt.Describe();
  std::vector<std::vector<float>> outputs;
  for (const LtMatmul* m : {&measured, &rebuilt}) {
    REPRISE_ASSERT_OK(cudaMemset(operands.C(), 0, shape.m * shape.n * sizeof(float)));
    REPRISE_ASSERT_OK(cudaStreamSynchronize(cudaStreamLegacy));
    REPRISE_ASSERT_OK(
        m->Run(stream_->get(), operands.A(), operands.B(), operands.C(), workspace_->data()));
    REPRISE_ASSERT_OK(cudaStreamSynchronize(stream_->get()));
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> c, operands.ReadC());
    outputs.push_back(std::move(c));
  }
  EXPECT_EQ(std::memcmp(outputs[0].data(), outputs[1].data(), outputs[0].size() * sizeof(float)),
            0);

  const std::string fields = name.substr(name.find('_'));  // "_tile..._inner..."
  for (const std::string& bad :
       {std::string(""), std::string("algo"), "algo+1" + fields, "algox" + fields, name + "_extra1",
        name.substr(0, name.rfind('_')), "tile1" + fields}) {
    EXPECT_EQ(rebuilt.UseConfigName(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  const absl::Status unknown = rebuilt.UseConfigName("algo99999" + fields);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound) << unknown;
  // The refused names left the rebuilt configuration as it was.
  EXPECT_EQ(rebuilt.ConfigName(), name);
}

// Run() must be capturable: the replayed graph gives the same bits as the eager run.
TEST_P(LtMatmulTest, CapturedRunMatchesEagerBitwise) {
  const MatmulShape shape = Shape();
  std::mt19937 rng(99);
  REPRISE_ASSERT_OK_AND_ASSIGN(Operands operands, Operands::Create(shape, rng));
  REPRISE_ASSERT_OK_AND_ASSIGN(LtMatmul matmul,
                               LtMatmul::Create(*handle_, shape, Tf32(), kWorkspaceBytes));
  REPRISE_ASSERT_OK(
      matmul.Run(stream_->get(), operands.A(), operands.B(), operands.C(), workspace_->data()));
  REPRISE_ASSERT_OK(cudaStreamSynchronize(stream_->get()));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> eager, operands.ReadC());
  REPRISE_ASSERT_OK(cudaMemset(operands.C(), 0, eager.size() * sizeof(float)));
  REPRISE_ASSERT_OK(cudaStreamSynchronize(cudaStreamLegacy));  // The memset runs on that stream.

  REPRISE_ASSERT_OK(cudaStreamBeginCapture(stream_->get(), cudaStreamCaptureModeThreadLocal));
  const absl::Status recorded =
      matmul.Run(stream_->get(), operands.A(), operands.B(), operands.C(), workspace_->data());
  cudaGraph_t raw = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_->get(), &raw);
  const Graph graph = Graph::Adopt(raw);
  REPRISE_ASSERT_OK(recorded);
  REPRISE_ASSERT_OK(ended);
  REPRISE_ASSERT_OK_AND_ASSIGN(GraphExec exec, GraphExec::Create(graph));
  REPRISE_ASSERT_OK(cudaGraphLaunch(exec.get(), stream_->get()));
  REPRISE_ASSERT_OK(cudaStreamSynchronize(stream_->get()));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<float> replayed, operands.ReadC());
  EXPECT_EQ(std::memcmp(eager.data(), replayed.data(), eager.size() * sizeof(float)), 0);
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const auto [m, n, k, ta, tb, tf32] = info.param;
  return absl::StrCat("m", m, "n", n, "k", k, ta ? "_At" : "_A", tb ? "Bt" : "B",
                      tf32 ? "_tf32" : "_fp32");
}

INSTANTIATE_TEST_SUITE_P(OddSizes, LtMatmulTest,
                         ::testing::Combine(::testing::Values(33), ::testing::Values(17),
                                            ::testing::Values(65), ::testing::Bool(),
                                            ::testing::Bool(), ::testing::Bool()),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(Square256, LtMatmulTest,
                         ::testing::Combine(::testing::Values(256), ::testing::Values(256),
                                            ::testing::Values(256), ::testing::Bool(),
                                            ::testing::Bool(), ::testing::Bool()),
                         CaseName);

class LtMatmulCreateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REPRISE_REQUIRE_GPU();
    REPRISE_ASSERT_OK(UseDevice(0).status());
  }
};

TEST_F(LtMatmulCreateTest, NonPositiveDimensionIsInvalidArgument) {
  REPRISE_ASSERT_OK_AND_ASSIGN(LtHandle handle, LtHandle::Create());
  absl::StatusOr<LtMatmul> matmul = LtMatmul::Create(handle, {4, 0, 4, false, false}, false, 0);
  ASSERT_FALSE(matmul.ok());
  EXPECT_EQ(matmul.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LtMatmulCreateTest, WorksWithoutWorkspace) {
  REPRISE_ASSERT_OK_AND_ASSIGN(LtHandle handle, LtHandle::Create());
  REPRISE_ASSERT_OK_AND_ASSIGN(LtMatmul matmul,
                               LtMatmul::Create(handle, {64, 64, 64, false, false}, false, 0));
  REPRISE_ASSERT_OK_AND_ASSIGN(DeviceBuffer a, DeviceBuffer::Create(64 * 64 * sizeof(float)));
  REPRISE_ASSERT_OK_AND_ASSIGN(DeviceBuffer b, DeviceBuffer::Create(64 * 64 * sizeof(float)));
  REPRISE_ASSERT_OK_AND_ASSIGN(DeviceBuffer c, DeviceBuffer::Create(64 * 64 * sizeof(float)));
  REPRISE_ASSERT_OK(cudaMemset(a.data(), 0, a.bytes()));
  REPRISE_ASSERT_OK(cudaMemset(b.data(), 0, b.bytes()));
  REPRISE_ASSERT_OK(matmul.Run(nullptr, static_cast<const float*>(a.data()),
                               static_cast<const float*>(b.data()), static_cast<float*>(c.data()),
                               nullptr));
  REPRISE_ASSERT_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace reprise::runtime
