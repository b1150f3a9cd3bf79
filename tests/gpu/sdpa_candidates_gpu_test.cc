// TimeSdpaCandidates, the diagnostic of cuDNN's attention plans: it lists and times at least the
// plan Create() would choose, refuses bad arguments, and (disabled, run by hand) prints every plan
// cuDNN offers at GPT-2 124M's shapes with its time.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/cudnn_handle.h"
#include "src/runtime/cudnn_sdpa.h"
#include "src/runtime/owners.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using runtime::SdpaCandidate;
using runtime::SdpaPass;
using runtime::SdpaShape;

SdpaShape Gpt2Shape(int64_t batch, int64_t seq) {
  return SdpaShape{.batch = batch,
                   .heads = 12,
                   .seq = seq,
                   .head_dim = 64,
                   .dtype = DType::kBFloat16,
                   .row_stride = 3 * 12 * 64};
}

int TimedCandidates(const std::vector<SdpaCandidate>& candidates) {
  int timed = 0;
  for (const SdpaCandidate& c : candidates) timed += c.median_ms >= 0 ? 1 : 0;
  return timed;
}

TEST(SdpaCandidatesGpuTest, TimesAtLeastOnePlanOfEachPass) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::CudnnHandle cudnn, runtime::CudnnHandle::Create());
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Stream stream, runtime::Stream::Create());
  REPRISE_ASSERT_OK(cudnn.Bind(stream.get(), "test"));
  for (SdpaPass pass : {SdpaPass::kForward, SdpaPass::kBackward}) {
    REPRISE_ASSERT_OK_AND_ASSIGN(
        std::vector<SdpaCandidate> candidates,
        runtime::TimeSdpaCandidates(cudnn, pass, Gpt2Shape(1, 128), 3, "test"));
    EXPECT_GE(TimedCandidates(candidates), 1);
    for (const SdpaCandidate& c : candidates) {
      if (c.median_ms >= 0) {
        EXPECT_FALSE(c.engine.empty());
        EXPECT_GT(c.median_ms, 0);
      } else {
        EXPECT_FALSE(c.error.empty()) << c.engine;
      }
    }
  }
  const absl::StatusOr<std::vector<SdpaCandidate>> no_runs =
      runtime::TimeSdpaCandidates(cudnn, SdpaPass::kForward, Gpt2Shape(1, 128), 0, "test");
  EXPECT_EQ(no_runs.status().code(), absl::StatusCode::kInvalidArgument);
  SdpaShape odd = Gpt2Shape(1, 128);
  odd.head_dim = 60;
  EXPECT_EQ(runtime::TimeSdpaCandidates(cudnn, SdpaPass::kForward, odd, 3, "test").status().code(),
            absl::StatusCode::kUnimplemented);
}

// By hand: --gtest_also_run_disabled_tests --gtest_filter='*Gpt2Candidates*'.
TEST(SdpaCandidatesGpuTest, DISABLED_Gpt2Candidates) {
  REPRISE_REQUIRE_GPU();
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::CudnnHandle cudnn, runtime::CudnnHandle::Create());
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::Stream stream, runtime::Stream::Create());
  REPRISE_ASSERT_OK(cudnn.Bind(stream.get(), "test"));
  for (const SdpaShape& shape : {Gpt2Shape(16, 1024), Gpt2Shape(4, 256)}) {
    for (SdpaPass pass : {SdpaPass::kForward, SdpaPass::kBackward}) {
      REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<SdpaCandidate> candidates,
                                   runtime::TimeSdpaCandidates(cudnn, pass, shape, 21, "test"));
      for (const SdpaCandidate& c : candidates) {
        const std::string result =
            c.median_ms >= 0 ? absl::StrFormat("%.4f ms", c.median_ms) : c.error.substr(0, 160);
        std::printf("%s %s %-9s %-60s ws %10lld  %s\n", shape.ToString().c_str(),
                    pass == SdpaPass::kForward ? "fwd" : "bwd", c.implementation.c_str(),
                    c.engine.c_str(), static_cast<long long>(c.workspace_bytes), result.c_str());
      }
      EXPECT_GE(TimedCandidates(candidates), 1);
    }
  }
}

}  // namespace
}  // namespace reprise
