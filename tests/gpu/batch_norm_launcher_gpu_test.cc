// The channels-last batch-norm launchers called directly with the flags a fuse pass sets, with
// float32 data or, as mixed precision runs them, bfloat16 data beside float32 per-channel
// tensors: the forward with a residual and ReLU, the backward masked by the forward's ReLU output
// and writing the masked gradient, and batch_norm_apply's recompute. Checked against float64
// computed from the inputs (float32 outputs to 1e-5; every bfloat16 output within one bfloat16
// ulp of it; float32 statistics to 1e-5), for identical bits on a second run, and, bfloat16,
// against the float32 kernels on the same values (the same float arithmetic: equal statistics,
// outputs equal to the float32 ones rounded). batch_norm_gpu_test.cc runs the ops through the
// plan's lowering against the CPU reference, in float32 and in mixed precision.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/batch_norm.h"
#include "src/ops/batch_norm_act.h"
#include "src/ops/batch_norm_apply.h"
#include "src/ops/batch_norm_nhwc.h"
#include "src/runtime/kernel_store.h"
#include "src/runtime/owners.h"
#include "tests/gpu/gpu_op_check.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/launcher_gpu.h"

namespace reprise {
namespace {

struct Case {
  int64_t rows, channels;
  int offset;  // Elements by which the row-walked tensors start past an allocation's start.
};

std::string CaseName(const Case& k) {
  return absl::StrCat("rows", k.rows, "_c", k.channels,
                      k.offset ? absl::StrCat("_offset", k.offset) : "");
}

// Four channels per thread need C % 4 == 0 and rows aligned to four elements (16 bytes of
// float32, 8 of bfloat16).
bool ExpectVec4(const Case& k) { return k.channels % 4 == 0 && k.offset % 4 == 0; }

// Uniform values rounded to bfloat16, held as floats (exactly representable in both types).
std::vector<float> RandomBf16Values(int64_t n, float low, float high, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(n);
  for (float& f : v) f = ir::BFloat16ToFloat(ir::FloatToBFloat16(dist(rng)));
  return v;
}

std::vector<float> RandomFloats(int64_t n, float low, float high, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// What memory holds for element type E: float for float32, the 16 bits for bfloat16.
float Widen(float v) { return v; }
float Widen(uint16_t bits) { return ir::BFloat16ToFloat(bits); }
template <typename E>
E Narrow(float v) {
  if constexpr (std::is_same_v<E, float>) {
    return v;
  } else {
    return ir::FloatToBFloat16(v);
  }
}
template <typename E>
constexpr DType DTypeOf() {
  return std::is_same_v<E, float> ? DType::kFloat32 : DType::kBFloat16;
}

// An array on the device, `offset` elements into its allocation.
template <typename E>
struct DeviceArray {
  runtime::DeviceBuffer buffer;
  E* data = nullptr;
  int64_t size = 0;
};

template <typename E>
absl::StatusOr<DeviceArray<E>> Allocate(int64_t n, int offset) {
  ASSIGN_OR_RETURN(runtime::DeviceBuffer buffer,
                   runtime::DeviceBuffer::Create((n + offset) * sizeof(E)));
  E* data = static_cast<E*>(buffer.data()) + offset;
  return DeviceArray<E>{std::move(buffer), data, n};
}

template <typename E>
absl::Status Upload(const DeviceArray<E>& a, const std::vector<float>& values) {
  std::vector<E> host(values.size());
  for (size_t i = 0; i < values.size(); ++i) host[i] = Narrow<E>(values[i]);
  RETURN_IF_ERROR(runtime::CudaStatus(
      cudaMemcpy(a.data, host.data(), host.size() * sizeof(E), cudaMemcpyHostToDevice),
      "cudaMemcpy"));
  // Uploads on the legacy stream, which reprise's streams do not wait for (docs/testing.md).
  return runtime::CudaStatus(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
}

template <typename E>
std::vector<E> Download(const DeviceArray<E>& a) {
  std::vector<E> host(a.size);
  EXPECT_EQ(cudaMemcpy(host.data(), a.data, a.size * sizeof(E), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

// The inputs of one layer, as floats; for bfloat16 data the [rows, C] ones hold bfloat16 values.
struct Inputs {
  std::vector<float> x, residual, dy, gamma, beta, running_mean, running_var;
};

Inputs MakeInputs(int64_t m, int64_t c, DType data = DType::kBFloat16) {
  const int64_t n = m * c;
  auto rows = data == DType::kBFloat16 ? RandomBf16Values : RandomFloats;
  return {rows(n, -3, 5, 1),         rows(n, -1, 1, 2),
          rows(n, -1, 1, 3),         RandomFloats(c, 0.5, 1.5, 4),
          RandomFloats(c, -1, 1, 5), RandomFloats(c, -1, 1, 6),
          RandomFloats(c, 0.5, 2, 7)};
}

// Every output of one forward, backward and recompute.
template <typename E>
struct Results {
  std::vector<E> y, dx, masked, recomputed;
  std::vector<float> running_mean, running_var, saved_mean, saved_invstd, dgamma, dbeta;
  std::vector<uint32_t> keep_bits;  // With the ReLU's keep bits: the forward's.
};

template <typename E>
bool SameBits(const Results<E>& a, const Results<E>& b) {
  auto same = [](const auto& u, const auto& v) {
    return u.size() == v.size() && std::memcmp(u.data(), v.data(), u.size() * sizeof(u[0])) == 0;
  };
  return same(a.y, b.y) && same(a.dx, b.dx) && same(a.masked, b.masked) &&
         same(a.recomputed, b.recomputed) && same(a.running_mean, b.running_mean) &&
         same(a.running_var, b.running_var) && same(a.saved_mean, b.saved_mean) &&
         same(a.saved_invstd, b.saved_invstd) && same(a.dgamma, b.dgamma) && same(a.dbeta, b.dbeta);
}

// Lowers the forward (+residual +relu), the backward (+relu mask +masked_dy) and the recompute
// with element type E, runs all three twice from the same running statistics, and returns both
// runs. `describe` receives the forward's description. `finalize_in_stats`: the statistics
// kernels finalize in their last blocks (two launches a pass), else three launches.
template <typename E>
absl::StatusOr<std::array<Results<E>, 2>> RunTwice(const testing::LauncherGpu& gpu, int64_t m,
                                                   int64_t c, int offset, const Inputs& in,
                                                   std::string* describe, bool bits = false,
                                                   bool finalize_in_stats = true) {
  const int64_t n = m * c;
  // Row-walked: x, residual, y, dy, dx, masked, recomputed.
  std::vector<DeviceArray<E>> big;
  for (int i = 0; i < 7; ++i) {
    ASSIGN_OR_RETURN(DeviceArray<E> a, Allocate<E>(n, offset));
    big.push_back(std::move(a));
  }
  // Per channel: gamma, beta, running mean and var, saved mean and invstd, dgamma, dbeta.
  std::vector<DeviceArray<float>> small;
  for (int i = 0; i < 8; ++i) {
    ASSIGN_OR_RETURN(DeviceArray<float> a, Allocate<float>(c, 0));
    small.push_back(std::move(a));
  }
  const DeviceArray<E>&x = big[0], &residual = big[1], &y = big[2], &dy = big[3], &dx = big[4],
        &masked = big[5], &recomputed = big[6];
  const DeviceArray<float>&gamma = small[0], &beta = small[1], &rm = small[2], &rv = small[3],
        &mean = small[4], &invstd = small[5], &dgamma = small[6], &dbeta = small[7];
  ASSIGN_OR_RETURN(DeviceArray<uint32_t> keep_bits, Allocate<uint32_t>((n + 15) / 16, 0));
  RETURN_IF_ERROR(Upload(x, in.x));
  RETURN_IF_ERROR(Upload(residual, in.residual));
  RETURN_IF_ERROR(Upload(dy, in.dy));
  RETURN_IF_ERROR(Upload(gamma, in.gamma));
  RETURN_IF_ERROR(Upload(beta, in.beta));

  ops::LoweringContext ctx = gpu.Context();
  ctx.options.batch_norm_finalize_in_stats = finalize_in_stats;
  constexpr DType kType = DTypeOf<E>();
  ASSIGN_OR_RETURN(std::unique_ptr<ops::GpuKernel> forward,
                   ops::LowerNhwcBatchNormTrain(ctx, "bn",
                                                {.x = x.data,
                                                 .gamma = gamma.data,
                                                 .beta = beta.data,
                                                 .running_mean = rm.data,
                                                 .running_var = rv.data,
                                                 .residual = residual.data,
                                                 .y = y.data,
                                                 .saved_mean = mean.data,
                                                 .saved_invstd = invstd.data,
                                                 .rows = m,
                                                 .channels = c,
                                                 .relu = true,
                                                 .dtype = kType,
                                                 .keep_bits = bits ? keep_bits.data : nullptr}));
  ASSIGN_OR_RETURN(std::unique_ptr<ops::GpuKernel> backward,
                   ops::LowerNhwcBatchNormGrad(ctx, "bn.grad",
                                               {.dy = dy.data,
                                                .act_out = bits ? nullptr : y.data,
                                                .x = x.data,
                                                .gamma = gamma.data,
                                                .saved_mean = mean.data,
                                                .saved_invstd = invstd.data,
                                                .dx = dx.data,
                                                .dgamma = dgamma.data,
                                                .dbeta = dbeta.data,
                                                .masked_dy = masked.data,
                                                .act_bits = bits ? keep_bits.data : nullptr,
                                                .rows = m,
                                                .channels = c,
                                                .dtype = kType}));
  ASSIGN_OR_RETURN(std::unique_ptr<ops::GpuKernel> recompute,
                   ops::LowerNhwcBatchNormRecompute(ctx, "bn.twin",
                                                    {.x = x.data,
                                                     .gamma = gamma.data,
                                                     .beta = beta.data,
                                                     .saved_mean = mean.data,
                                                     .saved_invstd = invstd.data,
                                                     .residual = residual.data,
                                                     .y = recomputed.data,
                                                     .rows = m,
                                                     .channels = c,
                                                     .relu = true,
                                                     .dtype = kType}));
  *describe = forward->Describe();
  const size_t passes = finalize_in_stats ? 2 : 3;
  EXPECT_EQ(forward->GeneratedKernelNames().size(), passes);
  EXPECT_EQ(backward->GeneratedKernelNames().size(), passes);
  EXPECT_EQ(recompute->GeneratedKernelNames().size(), 1u);
  if (kType == DType::kBFloat16) {
    for (const auto* kernel : {forward.get(), backward.get(), recompute.get()}) {
      const std::vector<std::string> names = kernel->GeneratedKernelNames();
      // The tiled kernels are bfloat16 ones; finalize serves both types.
      EXPECT_TRUE(absl::EndsWith(names.front(), "_bf16")) << names.front();
      EXPECT_TRUE(absl::EndsWith(names.back(), "_bf16")) << names.back();
    }
  }

  std::array<Results<E>, 2> runs;
  for (Results<E>& r : runs) {
    RETURN_IF_ERROR(Upload(rm, in.running_mean));
    RETURN_IF_ERROR(Upload(rv, in.running_var));
    RETURN_IF_ERROR(forward->Launch(gpu.stream.get()));
    RETURN_IF_ERROR(backward->Launch(gpu.stream.get()));
    RETURN_IF_ERROR(recompute->Launch(gpu.stream.get()));
    RETURN_IF_ERROR(
        runtime::CudaStatus(cudaStreamSynchronize(gpu.stream.get()), "cudaStreamSynchronize"));
    r.y = Download(y);
    r.dx = Download(dx);
    r.masked = Download(masked);
    r.recomputed = Download(recomputed);
    r.running_mean = Download(rm);
    r.running_var = Download(rv);
    r.saved_mean = Download(mean);
    r.saved_invstd = Download(invstd);
    r.dgamma = Download(dgamma);
    r.dbeta = Download(dbeta);
    if (bits) r.keep_bits = Download(keep_bits);
  }
  return runs;
}

double RelativeL2(const std::vector<double>& got, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(err / std::max(norm, 1e-30));
}

template <typename E>
std::vector<double> AsDoubles(const std::vector<E>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = Widen(v[i]);
  return d;
}

// An output computed in float and stored as E, against float64: relative L2 error at most 1e-5
// for float32. For bfloat16 (rounded once) at most 1e-2, and every element within one bfloat16
// ulp of the float64 value (plus 1e-5 for the float arithmetic where the value nearly cancels).
template <typename E>
void ExpectNearFloat64(const std::vector<E>& got, const std::vector<double>& want,
                       const std::string& what) {
  const std::vector<double> g = AsDoubles(got);
  if constexpr (std::is_same_v<E, float>) {
    EXPECT_LE(RelativeL2(g, want), 1e-5) << what;
    return;
  }
  EXPECT_LE(RelativeL2(g, want), 1e-2) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double a = std::abs(want[i]);
    const double ulp = a < 0x1p-126 ? 0x1p-133 : std::ldexp(1.0, std::ilogb(a) - 7);
    if (std::abs(g[i] - want[i]) > ulp + 1e-5 && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "] = " << g[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// The forward, backward and recompute with data of type E against float64 computed from the
// inputs, and the same bits on a second run.
template <typename E>
void ExpectLaunchersMatchFloat64(const Case& k) {
  constexpr DType kType = DTypeOf<E>();
  const int64_t m = k.rows, c = k.channels, n = m * c;
  REPRISE_ASSERT_OK_AND_ASSIGN(testing::LauncherGpu gpu, testing::StartLauncherGpu());
  const Inputs in = MakeInputs(m, c, kType);
  std::string describe;
  REPRISE_ASSERT_OK_AND_ASSIGN(auto runs, RunTwice<E>(gpu, m, c, k.offset, in, &describe));
  EXPECT_NE(describe.find(ExpectVec4(k) ? "vec=4" : "vec=1"), std::string::npos) << describe;
  EXPECT_EQ(describe.find("nhwc bf16") != std::string::npos, kType == DType::kBFloat16) << describe;
  EXPECT_TRUE(SameBits(runs[0], runs[1]));
  const Results<E>& r = runs[0];
  // The recompute runs the forward's expression on the forward's statistics.
  EXPECT_EQ(r.recomputed, r.y);
  // Forward in float64 from the inputs.
  const std::vector<float>&x = in.x, &gamma = in.gamma, &beta = in.beta;
  std::vector<double> want_y(n), want_mean(c), want_invstd(c), want_rm(c), want_rv(c);
  for (int64_t j = 0; j < c; ++j) {
    double sum = 0, squares = 0;
    for (int64_t row = 0; row < m; ++row) sum += x[row * c + j];
    const double mean = sum / m;
    for (int64_t row = 0; row < m; ++row) {
      squares += (x[row * c + j] - mean) * (x[row * c + j] - mean);
    }
    const double var = squares / m, invstd = 1 / std::sqrt(var + 1e-5);
    for (int64_t row = 0; row < m; ++row) {
      const int64_t i = row * c + j;
      want_y[i] = std::max(0.0, (x[i] - mean) * invstd * gamma[j] + beta[j] + in.residual[i]);
    }
    want_mean[j] = mean;
    want_invstd[j] = invstd;
    want_rm[j] = 0.9 * in.running_mean[j] + 0.1 * mean;
    want_rv[j] = 0.9 * in.running_var[j] + 0.1 * var * m / (m - 1);
  }
  ExpectNearFloat64(r.y, want_y, "y");
  EXPECT_LE(RelativeL2(AsDoubles(r.saved_mean), want_mean), 1e-5);
  EXPECT_LE(RelativeL2(AsDoubles(r.saved_invstd), want_invstd), 1e-5);
  EXPECT_LE(RelativeL2(AsDoubles(r.running_mean), want_rm), 1e-5);
  EXPECT_LE(RelativeL2(AsDoubles(r.running_var), want_rv), 1e-5);

  // Backward in float64 from what the GPU's backward read: its stored y as the ReLU mask, its
  // saved statistics.
  std::vector<double> want_dx(n), want_masked(n), want_dgamma(c), want_dbeta(c);
  for (int64_t j = 0; j < c; ++j) {
    const double mean = r.saved_mean[j], invstd = r.saved_invstd[j];
    double sum = 0, dot = 0;
    for (int64_t row = 0; row < m; ++row) {
      const int64_t i = row * c + j;
      want_masked[i] = Widen(r.y[i]) > 0 ? in.dy[i] : 0;
      sum += want_masked[i];
      dot += want_masked[i] * (x[i] - mean) * invstd;
    }
    for (int64_t row = 0; row < m; ++row) {
      const int64_t i = row * c + j;
      const double xhat = (x[i] - mean) * invstd;
      want_dx[i] = gamma[j] * invstd * (want_masked[i] - (sum + xhat * dot) / m);
    }
    want_dgamma[j] = dot;
    want_dbeta[j] = sum;
  }
  ExpectNearFloat64(r.dx, want_dx, "dx");
  EXPECT_EQ(AsDoubles(r.masked), want_masked);  // dy's own values, or zero.
  EXPECT_LE(RelativeL2(AsDoubles(r.dgamma), want_dgamma), 1e-5);
  EXPECT_LE(RelativeL2(AsDoubles(r.dbeta), want_dbeta), 1e-5);
}

class NhwcBatchNormLauncherTest : public ::testing::TestWithParam<std::tuple<DType, Case>> {};

TEST_P(NhwcBatchNormLauncherTest, FusedFlagsMatchFloat64AndRepeatBitForBit) {
  REPRISE_REQUIRE_GPU();
  const auto [dtype, k] = GetParam();
  if (dtype == DType::kBFloat16) {
    ExpectLaunchersMatchFloat64<uint16_t>(k);
  } else {
    ExpectLaunchersMatchFloat64<float>(k);
  }
}

// float32: ResNet-50's widest layer and ResNet-18's, wide channels over few rows, scalar columns
// (C % 4 != 0), a misaligned start, few rows; bfloat16 the shapes of mixed-precision ResNet-18
// and ResNet-50, with starts one element and four elements (8 bytes) in.
INSTANTIATE_TEST_SUITE_P(Shapes, NhwcBatchNormLauncherTest,
                         ::testing::Values(std::tuple{DType::kFloat32, Case{32 * 56 * 56, 256, 0}},
                                           std::tuple{DType::kFloat32, Case{8 * 28 * 28, 64, 0}},
                                           std::tuple{DType::kFloat32, Case{98, 2048, 0}},
                                           std::tuple{DType::kFloat32, Case{1000, 10, 0}},
                                           std::tuple{DType::kFloat32, Case{300, 16, 1}},
                                           std::tuple{DType::kFloat32, Case{8, 512, 0}},
                                           std::tuple{DType::kFloat32, Case{32, 256, 0}},
                                           std::tuple{DType::kFloat32, Case{7, 3, 0}},
                                           std::tuple{DType::kBFloat16, Case{8 * 28 * 28, 64, 0}},
                                           std::tuple{DType::kBFloat16, Case{98, 2048, 0}},
                                           std::tuple{DType::kBFloat16, Case{300, 16, 1}},
                                           std::tuple{DType::kBFloat16, Case{300, 16, 4}},
                                           std::tuple{DType::kBFloat16, Case{8, 512, 0}},
                                           std::tuple{DType::kBFloat16, Case{1000, 10, 0}},
                                           std::tuple{DType::kBFloat16, Case{7, 3, 0}}),
                         [](const auto& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               CaseName(std::get<1>(info.param)));
                         });

// The bfloat16 kernels do the float32 kernels' arithmetic and only round at the stores: on the
// same (bfloat16-representable) values and the same vector width, every float32 statistic has the
// same bits, and every bfloat16 output is the float32 kernels' output rounded to nearest even.
class BatchNormBf16Test : public ::testing::TestWithParam<Case> {};

TEST_P(BatchNormBf16Test, EqualsTheFloat32KernelsRounded) {
  REPRISE_REQUIRE_GPU();
  const Case k = GetParam();
  const int64_t m = k.rows, c = k.channels;
  REPRISE_ASSERT_OK_AND_ASSIGN(testing::LauncherGpu gpu, testing::StartLauncherGpu());
  const Inputs in = MakeInputs(m, c);
  std::string bf16_describe, f32_describe;
  REPRISE_ASSERT_OK_AND_ASSIGN(auto bf16,
                               RunTwice<uint16_t>(gpu, m, c, k.offset, in, &bf16_describe));
  // One float of offset makes float32 rows unaligned for float4, as the bfloat16 case's offset
  // does for its 8-byte loads: both run the same vector width, hence the same summation order.
  REPRISE_ASSERT_OK_AND_ASSIGN(
      auto f32, RunTwice<float>(gpu, m, c, ExpectVec4(k) ? 0 : 1, in, &f32_describe));
  const char* vec = ExpectVec4(k) ? "vec=4" : "vec=1";
  ASSERT_NE(bf16_describe.find(vec), std::string::npos) << bf16_describe;
  ASSERT_NE(f32_describe.find(vec), std::string::npos) << f32_describe;
  EXPECT_EQ(f32_describe.find("bf16"), std::string::npos) << f32_describe;
  const Results<uint16_t>& b = bf16[0];
  const Results<float>& f = f32[0];
  auto bits = [](const std::vector<float>& v) {
    std::vector<uint32_t> out(v.size());
    std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
    return out;
  };
  EXPECT_EQ(bits(b.saved_mean), bits(f.saved_mean));
  EXPECT_EQ(bits(b.saved_invstd), bits(f.saved_invstd));
  EXPECT_EQ(bits(b.running_mean), bits(f.running_mean));
  EXPECT_EQ(bits(b.running_var), bits(f.running_var));
  EXPECT_EQ(bits(b.dgamma), bits(f.dgamma));
  EXPECT_EQ(bits(b.dbeta), bits(f.dbeta));
  auto rounded = [](const std::vector<float>& v) {
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = ir::FloatToBFloat16(v[i]);
    return bits;
  };
  EXPECT_EQ(b.y, rounded(f.y));
  EXPECT_EQ(b.dx, rounded(f.dx));
  EXPECT_EQ(b.masked, rounded(f.masked));
  EXPECT_EQ(b.recomputed, rounded(f.recomputed));
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormBf16Test,
                         ::testing::Values(Case{8 * 28 * 28, 64, 0}, Case{98, 2048, 0},
                                           Case{300, 16, 1}, Case{300, 16, 4}, Case{8, 512, 0},
                                           Case{1000, 10, 0}, Case{7, 3, 0}),
                         [](const auto& info) { return CaseName(info.param); });

// The statistics kernels finalizing in the blocks that finish last give the bits of the finalize
// kernels, and leave the lane's tickets zero (NCHW's one channel a tile runs through the plan's
// lowering in batch_norm_gpu_test.cc, with tickets, against the CPU reference).
class BatchNormFinalizeInStatsTest : public ::testing::TestWithParam<Case> {};

TEST_P(BatchNormFinalizeInStatsTest, GivesTheFinalizeKernelsBits) {
  REPRISE_REQUIRE_GPU();
  const Case& k = GetParam();
  REPRISE_ASSERT_OK_AND_ASSIGN(testing::LauncherGpu gpu, testing::StartLauncherGpu());
  const Inputs in = MakeInputs(k.rows, k.channels);
  std::string in_stats_describe, apart_describe;
  REPRISE_ASSERT_OK_AND_ASSIGN(auto in_stats, RunTwice<uint16_t>(gpu, k.rows, k.channels, k.offset,
                                                                 in, &in_stats_describe, true));
  REPRISE_ASSERT_OK_AND_ASSIGN(auto apart, RunTwice<uint16_t>(gpu, k.rows, k.channels, k.offset, in,
                                                              &apart_describe, true, false));
  EXPECT_NE(in_stats_describe.find("(2 kernels)"), std::string::npos) << in_stats_describe;
  EXPECT_NE(apart_describe.find("(3 kernels)"), std::string::npos) << apart_describe;
  EXPECT_TRUE(SameBits(in_stats[0], apart[0]));
  EXPECT_TRUE(SameBits(in_stats[0], in_stats[1]));
  std::vector<unsigned> tickets(testing::LauncherGpu::kTicketWords, 1u);
  ASSERT_EQ(cudaMemcpy(tickets.data(), gpu.tickets.data(), tickets.size() * sizeof(unsigned),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(std::count(tickets.begin(), tickets.end(), 0u), testing::LauncherGpu::kTicketWords);
}

// ResNet-50's b32 layer1 (512 chunks of one tile), layer3 (2 tiles of 196 chunks) and layer4 (16
// tiles of 33), a tile of 16 channels, one channel per thread, two rows (one chunk).
INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormFinalizeInStatsTest,
                         ::testing::Values(Case{32 * 56 * 56, 64, 0}, Case{32 * 14 * 14, 256, 0},
                                           Case{32 * 7 * 7, 2048, 0}, Case{1000, 16, 0},
                                           Case{300, 96, 1}, Case{2, 32, 0}),
                         [](const auto& info) { return CaseName(info.param); });

// The forward writing the ReLU's keep bits and the backward reading them give the bits of the
// backward reading the stored output: the same y, statistics, masked gradient and dx, with bit e of
// the mask set exactly where y[e] > 0 (as stored, in bfloat16 or float32).
class BatchNormKeepBitsTest : public ::testing::TestWithParam<std::tuple<DType, Case>> {};

template <typename E>
void ExpectKeepBitsGiveTheOutputsBits(const Case& k) {
  const int64_t m = k.rows, c = k.channels;
  REPRISE_ASSERT_OK_AND_ASSIGN(testing::LauncherGpu gpu, testing::StartLauncherGpu());
  const Inputs in = MakeInputs(m, c, DTypeOf<E>());
  std::string plain_describe, bits_describe;
  REPRISE_ASSERT_OK_AND_ASSIGN(auto plain, RunTwice<E>(gpu, m, c, k.offset, in, &plain_describe));
  REPRISE_ASSERT_OK_AND_ASSIGN(auto bits,
                               RunTwice<E>(gpu, m, c, k.offset, in, &bits_describe, true));
  EXPECT_NE(bits_describe.find("+keep_bits"), std::string::npos) << bits_describe;
  EXPECT_NE(bits_describe.find(ExpectVec4(k) ? "vec=4" : "vec=1"), std::string::npos);
  EXPECT_TRUE(SameBits(plain[0], bits[0]));
  EXPECT_EQ(bits[0].keep_bits, bits[1].keep_bits);
  const std::vector<uint32_t>& mask = bits[0].keep_bits;
  int64_t wrong = 0;
  for (int64_t e = 0; e < m * c; ++e) {
    const bool keep = (mask[e / 16] >> (8 * ((e / 4) % 4) + e % 4)) & 1u;
    if (keep != (Widen(bits[0].y[e]) > 0) && wrong++ < 5) ADD_FAILURE() << "bit " << e;
  }
  EXPECT_EQ(wrong, 0);
}

TEST_P(BatchNormKeepBitsTest, GiveTheBitsOfTheStoredOutput) {
  REPRISE_REQUIRE_GPU();
  const auto [dtype, k] = GetParam();
  if (dtype == DType::kBFloat16) {
    ExpectKeepBitsGiveTheOutputsBits<uint16_t>(k);
  } else {
    ExpectKeepBitsGiveTheOutputsBits<float>(k);
  }
}

// ResNet-50's b32 layer1 and layer4 widths, two rows, and starts one element in (one channel per
// thread, 32 threads to a word).
INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormKeepBitsTest,
                         ::testing::Values(std::tuple{DType::kBFloat16, Case{8 * 28 * 28, 64, 0}},
                                           std::tuple{DType::kBFloat16, Case{98, 2048, 0}},
                                           std::tuple{DType::kBFloat16, Case{2, 32, 0}},
                                           std::tuple{DType::kBFloat16, Case{300, 96, 1}},
                                           std::tuple{DType::kFloat32, Case{32 * 7 * 7, 512, 0}},
                                           std::tuple{DType::kFloat32, Case{300, 64, 1}}),
                         [](const auto& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               CaseName(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace reprise
