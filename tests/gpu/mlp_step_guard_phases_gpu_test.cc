// Not a check: where the whole-step MLP kernel's non-finite guard spends its time. The same plan,
// unguarded, guarded with step-start copies and guarded double-buffered, launched with the phase
// clock (BatchedMlpStepKernel's `phase_clock`), prints per phase the median over launches of the
// time from the last block leaving the previous phase (or the first block starting) to the last
// block leaving this one, the gap from one launch's last block to the next's first, and the
// back-to-back time per launch of the kernels without the clock.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/codegen/mlp_step_kernel.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/mlp_step.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/kernel_store.h"
#include "src/runtime/owners.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

struct PhaseCase {
  const char* name;
  int models;
  int64_t batch;
  std::vector<int64_t> widths;  // d_0 .. d_L.
};

class MlpStepGuardPhasesGpuTest : public ::testing::TestWithParam<PhaseCase> {
 protected:
  void SetUp() override {
    REPRISE_REQUIRE_GPU();
    REPRISE_ASSERT_OK_AND_ASSIGN(device_, runtime::UseDevice(0));
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Stream stream, runtime::Stream::Create());
    stream_.emplace(std::move(stream));
    static runtime::KernelStore* const store = new runtime::KernelStore(device_.ArchFlag());
    kernels_ = store;
  }

  // A device buffer of `floats` 4-byte values, uniform in [-scale, scale] (0: zeros).
  void* Buffer(int64_t floats, float scale = 0, int seed = 0) {
    std::vector<float> host(floats, 0.0f);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-scale, scale);
    if (scale > 0) {
      for (float& v : host) v = uniform(rng);
    }
    absl::StatusOr<runtime::DeviceBuffer> b = runtime::DeviceBuffer::Create(floats * 4);
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return nullptr;
    EXPECT_EQ(cudaMemcpy(b->data(), host.data(), floats * 4, cudaMemcpyHostToDevice), cudaSuccess);
    buffers_.push_back(*std::move(b));
    return buffers_.back().data();
  }

  // The kernel of `plan` on its own fresh buffers, stamping into `clock` where not null.
  // `rewrites`: (text, replacement) pairs applied to the kernel's source, for the diagnostic forms.
  absl::StatusOr<std::unique_ptr<ops::GpuKernel>> Lower(
      const codegen::MlpStepPlan& plan, void* clock,
      const std::vector<std::pair<std::string, std::string>>& rewrites) {
    const PhaseCase& p = GetParam();
    const int64_t k = p.models, b = p.batch;
    ops::KernelArgs args;
    args.Add(Buffer(k * b * p.widths[0], 1.0f, 1));
    std::vector<int32_t> labels(k * b);
    for (int64_t i = 0; i < k * b; ++i) labels[i] = static_cast<int32_t>(i * 7 % p.widths.back());
    void* y = Buffer(k * b);
    if (cudaMemcpy(y, labels.data(), labels.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess) {
      return absl::InternalError("labels upload");
    }
    args.Add(y);
    for (float scalar : {1.0f, 0.01f, 0.9f, 0.0f}) {  // dloss, lr, momentum, weight decay.
      void* s = Buffer(1);
      if (cudaMemcpy(s, &scalar, 4, cudaMemcpyHostToDevice) != cudaSuccess) {
        return absl::InternalError("scalar upload");
      }
      args.Add(s);
    }
    for (size_t l = 0; l + 1 < p.widths.size(); ++l) {
      const int64_t out = p.widths[l + 1], in = p.widths[l];
      args.Add(Buffer(k * out * in, 0.06f, 10 + static_cast<int>(l)));
      args.Add(Buffer(k * out));
      args.Add(Buffer(k * out * in));
      args.Add(Buffer(k * out));
    }
    args.Add(Buffer(codegen::kMlpStepBarrierWords));
    const bool guarded = plan.target.guard != codegen::MlpGuard::kNone;
    if (guarded) {
      args.Add(Buffer(1));  // skipped_steps
      args.Add(Buffer(2));  // record
      if (plan.target.shadow) args.Add(Buffer(codegen::MlpStepShadowFloats(p.widths, k)));
    }
    args.Add(Buffer(1));                        // loss
    args.Add(Buffer(k));                        // model losses
    args.Add(Buffer(k * b * p.widths.back()));  // logits
    args.Add(Buffer(plan.workspace_floats));
    if (clock != nullptr) args.Add(clock);
    ops::LoweringContext ctx;
    ctx.kernels = kernels_;
    ctx.device = &device_;
    codegen::GeneratedKernel kernel =
        codegen::BatchedMlpStepKernel(plan, false, false, clock != nullptr);
    for (const auto& [text, replacement] : rewrites) {
      const size_t at = kernel.code.find(text);
      if (at == std::string::npos) return absl::NotFoundError(absl::StrCat("no '", text, "'"));
      for (size_t i = at; i != std::string::npos; i = kernel.code.find(text, i)) {
        kernel.code.replace(i, text.size(), replacement);
        i += replacement.size();
      }
    }
    return ops::LaunchForMlpStep(ctx, guarded ? "guarded" : "unguarded", plan, std::move(kernel),
                                 std::move(args));
  }

  absl::Status Launch(const ops::GpuKernel& kernel, int times) {
    for (int i = 0; i < times; ++i) RETURN_IF_ERROR(kernel.Launch(stream_->get()));
    return runtime::CudaStatus(cudaStreamSynchronize(stream_->get()), "cudaStreamSynchronize",
                               "phase times");
  }

  runtime::DeviceInfo device_;
  std::optional<runtime::Stream> stream_;
  runtime::KernelStore* kernels_ = nullptr;
  std::vector<runtime::DeviceBuffer> buffers_;
};

TEST_P(MlpStepGuardPhasesGpuTest, DISABLED_GuardedAgainstUnguarded) {
  constexpr int kLaunches = 200;
  const PhaseCase& p = GetParam();
  // Unguarded, guarded with step-start copies, guarded double-buffered, and two diagnostic
  // rewrites of the double-buffered kernel (timing only: they train wrongly): without the
  // gradients' finiteness checks, and with each update written over the values it read.
  using Rewrites = std::vector<std::pair<std::string, std::string>>;
  const Rewrites no_checks = {
      {"if constexpr (kGuard) check = __fmaf_rn(v, 0.0f, check);", ""},
      {"if constexpr (kGuard) check = __fmaf_rn(bias_sum, 0.0f, check);", ""}};
  const Rewrites in_place = {
      {"constexpr bool kDoubleBuffer = true;", "constexpr bool kDoubleBuffer = false;"}};
  struct Form {
    codegen::MlpGuard guard;
    bool shadow;
    const char* name;
    Rewrites rewrites;
  };
  const std::vector<Form> forms = {
      {codegen::MlpGuard::kNone, false, "unguarded", {}},
      {codegen::MlpGuard::kSkip, false, "copying", {}},
      {codegen::MlpGuard::kSkip, true, "double-buffered", {}},
      {codegen::MlpGuard::kSkip, true, "double-buffered-no-checks", no_checks},
      {codegen::MlpGuard::kSkip, true, "double-buffered-in-place", in_place}};
  for (const Form& f : forms) {
    const codegen::MlpGuard guard = f.guard;
    const bool shadow = f.shadow;
    codegen::MlpStepTarget target = ops::MlpTrainStepTargetFor(device_);
    target.tf32 = true;
    target.guard = guard;
    target.shadow = shadow;
    const char* form = f.name;
    REPRISE_ASSERT_OK_AND_ASSIGN(const codegen::MlpStepPlan plan,
                                 codegen::PlanMlpStep(p.batch, p.widths, target, p.models));
    if (plan.cluster > 0) GTEST_SKIP() << "the cluster schedule has no grid phases";
    const int grid = plan.grid(), stamps = plan.phases + 1;
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer clock,
                                 runtime::DeviceBuffer::Create(stamps * grid * 8));
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::DeviceBuffer next_clock,
                                 runtime::DeviceBuffer::Create(stamps * grid * 8));
    REPRISE_ASSERT_OK_AND_ASSIGN(auto plain, Lower(plan, nullptr, f.rewrites));
    REPRISE_ASSERT_OK_AND_ASSIGN(auto stamped, Lower(plan, clock.data(), f.rewrites));
    // The same step on the same buffers but another clock: the gap between two launches.
    REPRISE_ASSERT_OK_AND_ASSIGN(auto next, Lower(plan, next_clock.data(), f.rewrites));
    REPRISE_ASSERT_OK(Launch(*plain, 20));
    REPRISE_ASSERT_OK(Launch(*stamped, 5));
    std::vector<std::vector<double>> us(stamps);
    std::vector<uint64_t> t(stamps * grid);
    for (int i = 0; i < kLaunches / 4; ++i) {
      REPRISE_ASSERT_OK(Launch(*stamped, 1));
      REPRISE_ASSERT_OK(cudaMemcpy(t.data(), clock.data(), t.size() * 8, cudaMemcpyDeviceToHost));
      uint64_t previous = *std::min_element(t.begin(), t.begin() + grid);
      const uint64_t start = previous;
      for (int s = 1; s < stamps; ++s) {
        const uint64_t end = *std::max_element(t.begin() + s * grid, t.begin() + (s + 1) * grid);
        us[s - 1].push_back((end - previous) / 1e3);
        previous = end;
      }
      us[stamps - 1].push_back((previous - start) / 1e3);
    }
    // From the last block's last stamp of one launch to the first block's start of the next.
    std::vector<double> gaps;
    std::vector<uint64_t> t2(t.size());
    for (int i = 0; i < kLaunches / 4; ++i) {
      REPRISE_ASSERT_OK(stamped->Launch(stream_->get()));
      REPRISE_ASSERT_OK(Launch(*next, 1));
      REPRISE_ASSERT_OK(cudaMemcpy(t.data(), clock.data(), t.size() * 8, cudaMemcpyDeviceToHost));
      REPRISE_ASSERT_OK(
          cudaMemcpy(t2.data(), next_clock.data(), t2.size() * 8, cudaMemcpyDeviceToHost));
      const uint64_t end = *std::max_element(t.end() - grid, t.end());
      const uint64_t start = *std::min_element(t2.begin(), t2.begin() + grid);
      gaps.push_back((static_cast<double>(start) - static_cast<double>(end)) / 1e3);
    }
    std::sort(gaps.begin(), gaps.end());
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Event begin, runtime::Event::Create(cudaEventDefault));
    REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Event end, runtime::Event::Create(cudaEventDefault));
    REPRISE_ASSERT_OK(cudaEventRecord(begin.get(), stream_->get()));
    REPRISE_ASSERT_OK(Launch(*plain, kLaunches));
    REPRISE_ASSERT_OK(cudaEventRecord(end.get(), stream_->get()));
    REPRISE_ASSERT_OK(cudaEventSynchronize(end.get()));
    REPRISE_ASSERT_OK_AND_ASSIGN(const float ms, runtime::ElapsedMs(begin, end));
    std::printf("GUARD PHASES %s %s (%s, %d phases, %d blocks): %.2f us per launch back to back\n",
                p.name, form, plain->Describe().c_str(), plan.phases, grid, 1e3 * ms / kLaunches);
    std::printf("GUARD PHASES %s %s: %.2f us from one launch's end to the next's start\n", p.name,
                form, gaps[gaps.size() / 2]);
    std::printf("GUARD PHASES %s %s medians (us, the last: the whole kernel):", p.name, form);
    for (std::vector<double>& v : us) {
      std::sort(v.begin(), v.end());
      std::printf(" %.2f", v[v.size() / 2]);
    }
    std::printf("\n");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlpStepGuardPhasesGpuTest,
    ::testing::Values(PhaseCase{"Mlp8x256b32", 1, 32, {256, 256, 256, 256, 256, 256, 256, 256, 10}},
                      PhaseCase{"Ensemble4Issue9", 4, 64, {64, 256, 256, 10}}),
    [](const ::testing::TestParamInfo<PhaseCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace reprise
