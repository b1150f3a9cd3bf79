// KernelSequence without a GPU: its kernels launch in order, the first error stops the rest and is
// returned, and its description and workspace are those of the whole sequence.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/ops/gpu_kernel.h"

namespace reprise::ops {
namespace {

using ::testing::ElementsAre;

// Appends its name to `log` when launched; fails when told to.
class RecordingKernel : public GpuKernel {
 public:
  RecordingKernel(std::string name, std::vector<std::string>* log, bool fails = false)
      : name_(std::move(name)), log_(log), fails_(fails) {}
  absl::Status Launch(cudaStream_t) const override {
    log_->push_back(name_);
    return fails_ ? absl::InternalError(name_ + " failed") : absl::OkStatus();
  }
  std::string Describe() const override { return "nvrtc " + name_; }
  std::vector<std::string> GeneratedKernelNames() const override { return {name_}; }

 private:
  std::string name_;
  std::vector<std::string>* log_;
  bool fails_;
};

std::unique_ptr<GpuKernel> Sequence(std::vector<std::string>* log, bool first_fails) {
  std::vector<std::unique_ptr<GpuKernel>> kernels;
  kernels.push_back(std::make_unique<RecordingKernel>("find", log, first_fails));
  kernels.push_back(std::make_unique<RecordingKernel>("gather", log));
  return std::make_unique<KernelSequence>(std::move(kernels), 4096);
}

TEST(KernelSequenceTest, LaunchesInOrderAndDescribesTheWhole) {
  std::vector<std::string> log;
  std::unique_ptr<GpuKernel> sequence = Sequence(&log, false);
  ASSERT_TRUE(sequence->Launch(nullptr).ok());
  EXPECT_THAT(log, ElementsAre("find", "gather"));
  EXPECT_EQ(sequence->Describe(), "nvrtc find + nvrtc gather ws 4096");
  EXPECT_THAT(sequence->GeneratedKernelNames(), ElementsAre("find", "gather"));
  EXPECT_EQ(sequence->WorkspaceBytes(), 4096u);
}

TEST(KernelSequenceTest, TheFirstFailureStopsTheRest) {
  std::vector<std::string> log;
  const absl::Status status = Sequence(&log, true)->Launch(nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(), "find failed");
  EXPECT_THAT(log, ElementsAre("find"));
}

}  // namespace
}  // namespace reprise::ops
