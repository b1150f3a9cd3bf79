// The channels-last batch-norm launchers called directly, with the flags a fuse pass sets: the
// forward with a residual and ReLU, the backward masked by the forward's ReLU output and writing
// the masked gradient. Checked against a float64 host computation, and for identical bits on a
// second run; the backward that takes a ReLU's mask from x gives the bits of the one reading it.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/ops/batch_norm_nhwc.h"
#include "src/runtime/kernel_store.h"
#include "src/runtime/owners.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/launcher_gpu.h"

namespace reprise {
namespace {

struct DirectCase {
  int64_t rows, channels;
  int offset;  // Floats by which the row-walked tensors start past an allocation's start.
};

std::string CaseName(const ::testing::TestParamInfo<DirectCase>& info) {
  const DirectCase& k = info.param;
  return absl::StrCat("rows", k.rows, "_c", k.channels, k.offset ? "_misaligned" : "");
}

std::vector<float> Random(int64_t n, float low, float high, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// A float array on the device, `offset` floats into its allocation.
struct DeviceArray {
  runtime::DeviceBuffer buffer;
  float* data;
  int64_t size;
};

absl::StatusOr<DeviceArray> Allocate(int64_t n, int offset) {
  ASSIGN_OR_RETURN(runtime::DeviceBuffer buffer,
                   runtime::DeviceBuffer::Create((n + offset) * sizeof(float)));
  float* data = static_cast<float*>(buffer.data()) + offset;
  return DeviceArray{std::move(buffer), data, n};
}

absl::Status Upload(const DeviceArray& a, const std::vector<float>& host) {
  RETURN_IF_ERROR(runtime::CudaStatus(
      cudaMemcpy(a.data, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
      "cudaMemcpy"));
  // Pageable cudaMemcpy and cudaMemset may still be in flight on the legacy stream, which a
  // non-blocking stream's launches do not wait for.
  return runtime::CudaStatus(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
}

std::vector<float> Download(const DeviceArray& a) {
  std::vector<float> host(a.size);
  EXPECT_EQ(cudaMemcpy(host.data(), a.data, a.size * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

double RelativeL2(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(err / std::max(norm, 1e-30));
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// `count` arrays of n floats (`offset` floats into their allocations) and `per_channel` of c.
absl::Status AllocateArrays(int count, int64_t n, int offset, int per_channel, int64_t c,
                            std::vector<DeviceArray>& big, std::vector<DeviceArray>& small) {
  for (int i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(DeviceArray a, Allocate(n, offset));
    big.push_back(std::move(a));
  }
  for (int i = 0; i < per_channel; ++i) {
    ASSIGN_OR_RETURN(DeviceArray a, Allocate(c, 0));
    small.push_back(std::move(a));
  }
  return absl::OkStatus();
}

class NhwcBatchNormDirectTest : public ::testing::TestWithParam<DirectCase> {};

TEST_P(NhwcBatchNormDirectTest, FusedFlagsMatchFloat64AndRepeatBitForBit) {
  REPRISE_REQUIRE_GPU();
  const DirectCase k = GetParam();
  const int64_t m = k.rows, c = k.channels, n = m * c;
  REPRISE_ASSERT_OK_AND_ASSIGN(const testing::LauncherGpu launcher, testing::StartLauncherGpu());
  const runtime::Stream& stream = launcher.stream;
  const std::vector<float> x = Random(n, -3, 5, 1), residual = Random(n, -1, 1, 2),
                           dy = Random(n, -1, 1, 3), gamma = Random(c, 0.5, 1.5, 4),
                           beta = Random(c, -1, 1, 5), running_mean = Random(c, -1, 1, 6),
                           running_var = Random(c, 0.5, 2, 7);
  std::vector<DeviceArray> big, small;  // Row-walked [m, c] and per-channel [c] arrays.
  REPRISE_ASSERT_OK(AllocateArrays(6, n, k.offset, 8, c, big, small));
  const DeviceArray &d_x = big[0], &d_residual = big[1], &d_y = big[2], &d_dy = big[3],
                    &d_dx = big[4], &d_masked = big[5];
  const DeviceArray &d_gamma = small[0], &d_beta = small[1], &d_rm = small[2], &d_rv = small[3],
                    &d_mean = small[4], &d_invstd = small[5], &d_dgamma = small[6],
                    &d_dbeta = small[7];
  for (auto [a, host] : {std::pair{&d_x, &x},
                         {&d_residual, &residual},
                         {&d_dy, &dy},
                         {&d_gamma, &gamma},
                         {&d_beta, &beta}}) {
    REPRISE_ASSERT_OK(Upload(*a, *host));
  }

  const ops::LoweringContext ctx = launcher.Context();
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<ops::GpuKernel> forward,
                               ops::LowerNhwcBatchNormTrain(ctx, "bn",
                                                            {.x = d_x.data,
                                                             .gamma = d_gamma.data,
                                                             .beta = d_beta.data,
                                                             .running_mean = d_rm.data,
                                                             .running_var = d_rv.data,
                                                             .residual = d_residual.data,
                                                             .y = d_y.data,
                                                             .saved_mean = d_mean.data,
                                                             .saved_invstd = d_invstd.data,
                                                             .rows = m,
                                                             .channels = c,
                                                             .relu = true}));
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<ops::GpuKernel> backward,
                               ops::LowerNhwcBatchNormGrad(ctx, "bn.grad",
                                                           {.dy = d_dy.data,
                                                            .act_out = d_y.data,
                                                            .x = d_x.data,
                                                            .gamma = d_gamma.data,
                                                            .saved_mean = d_mean.data,
                                                            .saved_invstd = d_invstd.data,
                                                            .dx = d_dx.data,
                                                            .dgamma = d_dgamma.data,
                                                            .dbeta = d_dbeta.data,
                                                            .masked_dy = d_masked.data,
                                                            .rows = m,
                                                            .channels = c}));
  const bool vec4 = c % 4 == 0 && k.offset == 0;
  EXPECT_NE(forward->Describe().find(vec4 ? "vec=4" : "vec=1"), std::string::npos)
      << forward->Describe();
  EXPECT_EQ(forward->GeneratedKernelNames().size(), 3u);
  EXPECT_EQ(backward->GeneratedKernelNames().size(), 3u);

  // Both passes from the same starting running statistics; every output downloaded.
  auto run = [&]() -> std::vector<std::vector<float>> {
    EXPECT_TRUE(Upload(d_rm, running_mean).ok());
    EXPECT_TRUE(Upload(d_rv, running_var).ok());
    EXPECT_TRUE(forward->Launch(stream.get()).ok());
    EXPECT_TRUE(backward->Launch(stream.get()).ok());
    EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    std::vector<std::vector<float>> out;
    for (const DeviceArray* a : {&d_y, &d_dx, &d_masked}) out.push_back(Download(*a));
    for (const DeviceArray& a : small) out.push_back(Download(a));
    return out;
  };
  const std::vector<std::vector<float>> first = run(), second = run();
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(SameBits(first[i], second[i])) << i;
  const std::vector<float>&y = first[0], &dx = first[1], &masked = first[2], &got_rm = first[5],
        &got_rv = first[6], &saved_mean = first[7], &saved_invstd = first[8], &dgamma = first[9],
        &dbeta = first[10];

  // Forward in float64.
  std::vector<double> want_y(n), want_mean(c), want_invstd(c), want_rm(c), want_rv(c);
  for (int64_t j = 0; j < c; ++j) {
    double sum = 0, squares = 0;
    for (int64_t r = 0; r < m; ++r) sum += x[r * c + j];
    const double mean = sum / m;
    for (int64_t r = 0; r < m; ++r) squares += (x[r * c + j] - mean) * (x[r * c + j] - mean);
    const double var = squares / m, invstd = 1 / std::sqrt(var + 1e-5);
    for (int64_t r = 0; r < m; ++r) {
      const int64_t i = r * c + j;
      want_y[i] = std::max(0.0, (x[i] - mean) * invstd * gamma[j] + beta[j] + residual[i]);
    }
    want_mean[j] = mean;
    want_invstd[j] = invstd;
    want_rm[j] = 0.9 * running_mean[j] + 0.1 * mean;
    want_rv[j] = 0.9 * running_var[j] + 0.1 * var * m / (m - 1);
  }
  EXPECT_LE(RelativeL2(y, want_y), 1e-5);
  EXPECT_LE(RelativeL2(saved_mean, want_mean), 1e-5);
  EXPECT_LE(RelativeL2(saved_invstd, want_invstd), 1e-5);
  EXPECT_LE(RelativeL2(got_rm, want_rm), 1e-5);
  EXPECT_LE(RelativeL2(got_rv, want_rv), 1e-5);

  // Backward in float64 from what the GPU's backward read: its y as the ReLU mask, its saved
  // statistics.
  std::vector<double> want_dx(n), want_masked(n), want_dgamma(c), want_dbeta(c);
  for (int64_t j = 0; j < c; ++j) {
    const double mean = saved_mean[j], invstd = saved_invstd[j];
    double sum = 0, dot = 0;
    for (int64_t r = 0; r < m; ++r) {
      const int64_t i = r * c + j;
      want_masked[i] = y[i] > 0 ? dy[i] : 0;
      sum += want_masked[i];
      dot += want_masked[i] * (x[i] - mean) * invstd;
    }
    for (int64_t r = 0; r < m; ++r) {
      const int64_t i = r * c + j;
      const double xhat = (x[i] - mean) * invstd;
      want_dx[i] = gamma[j] * invstd * (want_masked[i] - (sum + xhat * dot) / m);
    }
    want_dgamma[j] = dot;
    want_dbeta[j] = sum;
  }
  EXPECT_LE(RelativeL2(dx, want_dx), 1e-5);
  EXPECT_LE(RelativeL2(masked, want_masked), 0.0);
  EXPECT_LE(RelativeL2(dgamma, want_dgamma), 1e-5);
  EXPECT_LE(RelativeL2(dbeta, want_dbeta), 1e-5);
}

// A ReLU right after the batch norm: the backward that recomputes the mask from x (and beta)
// gives the bits of the one that reads the stored output, which it never reads.
TEST_P(NhwcBatchNormDirectTest, ReluMaskFromXGivesTheBitsOfTheStoredOutput) {
  REPRISE_REQUIRE_GPU();
  const DirectCase k = GetParam();
  const int64_t m = k.rows, c = k.channels, n = m * c;
  REPRISE_ASSERT_OK_AND_ASSIGN(const testing::LauncherGpu launcher, testing::StartLauncherGpu());
  const runtime::Stream& stream = launcher.stream;
  const std::vector<float> x = Random(n, -3, 5, 11), dy = Random(n, -1, 1, 13),
                           gamma = Random(c, 0.5, 1.5, 14), beta = Random(c, -1, 1, 15);
  std::vector<DeviceArray> big, small;
  REPRISE_ASSERT_OK(AllocateArrays(4, n, k.offset, 8, c, big, small));
  const DeviceArray &d_x = big[0], &d_y = big[1], &d_dy = big[2], &d_dx = big[3];
  const DeviceArray &d_gamma = small[0], &d_beta = small[1], &d_rm = small[2], &d_rv = small[3],
                    &d_mean = small[4], &d_invstd = small[5], &d_dgamma = small[6],
                    &d_dbeta = small[7];
  for (auto [a, host] : {std::pair{&d_x, &x}, {&d_dy, &dy}, {&d_gamma, &gamma}, {&d_beta, &beta}}) {
    REPRISE_ASSERT_OK(Upload(*a, *host));
  }
  const ops::LoweringContext ctx = launcher.Context();
  REPRISE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<ops::GpuKernel> forward,
                               ops::LowerNhwcBatchNormTrain(ctx, "bn",
                                                            {.x = d_x.data,
                                                             .gamma = d_gamma.data,
                                                             .beta = d_beta.data,
                                                             .running_mean = d_rm.data,
                                                             .running_var = d_rv.data,
                                                             .y = d_y.data,
                                                             .saved_mean = d_mean.data,
                                                             .saved_invstd = d_invstd.data,
                                                             .rows = m,
                                                             .channels = c,
                                                             .relu = true}));
  REPRISE_ASSERT_OK(forward->Launch(stream.get()));
  // The backward's arguments with the mask taken from the stored output and/or from x.
  auto backward_args = [&](bool from_output, bool from_x) {
    return ops::NhwcBatchNormBackward{.dy = d_dy.data,
                                      .act_out = from_output ? d_y.data : nullptr,
                                      .relu_beta = from_x ? d_beta.data : nullptr,
                                      .x = d_x.data,
                                      .gamma = d_gamma.data,
                                      .saved_mean = d_mean.data,
                                      .saved_invstd = d_invstd.data,
                                      .dx = d_dx.data,
                                      .dgamma = d_dgamma.data,
                                      .dbeta = d_dbeta.data,
                                      .rows = m,
                                      .channels = c};
  };
  std::vector<std::vector<float>> results;
  for (bool from_x : {false, true}) {
    REPRISE_ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<ops::GpuKernel> backward,
        ops::LowerNhwcBatchNormGrad(ctx, "bn.grad", backward_args(!from_x, from_x)));
    EXPECT_EQ(backward->Describe().find("relu_mask_from_x") != std::string::npos, from_x)
        << backward->Describe();
    REPRISE_ASSERT_OK(backward->Launch(stream.get()));
    REPRISE_ASSERT_OK(cudaStreamSynchronize(stream.get()));
    results.push_back(Download(d_dx));
    results.push_back(Download(d_dgamma));
    results.push_back(Download(d_dbeta));
  }
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(SameBits(results[i], results[3 + i])) << i;
  // Both masks at once is refused.
  EXPECT_EQ(ops::LowerNhwcBatchNormGrad(ctx, "bn.grad", backward_args(true, true)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Shapes, NhwcBatchNormDirectTest,
                         ::testing::Values(DirectCase{32 * 56 * 56, 256, 0},
                                           DirectCase{8 * 28 * 28, 64, 0}, DirectCase{98, 2048, 0},
                                           DirectCase{1000, 10, 0}, DirectCase{300, 16, 1},
                                           DirectCase{8, 512, 0}, DirectCase{32, 256, 0},
                                           DirectCase{7, 3, 0}),
                         CaseName);

}  // namespace
}  // namespace reprise
