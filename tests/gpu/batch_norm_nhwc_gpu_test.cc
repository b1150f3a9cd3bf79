// The channels-last batch-norm backward called directly after a ReLU: the one that takes the
// ReLU's mask from x gives the bits of the one reading the stored output. The forward and
// backward with the other flags a fuse pass sets, against float64, are in
// batch_norm_launcher_gpu_test.cc.
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
  // Uploads on the legacy stream, which reprise's streams do not wait for (docs/testing.md).
  return runtime::CudaStatus(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
}

std::vector<float> Download(const DeviceArray& a) {
  std::vector<float> host(a.size);
  EXPECT_EQ(cudaMemcpy(host.data(), a.data, a.size * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
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
