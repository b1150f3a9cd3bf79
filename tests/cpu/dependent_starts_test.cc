// Which launches of a step may start as programmatic dependent launches
// (capture::AllowDependentStarts), and how launches of several kernels chain their own
// (ops::KernelSequence).
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "capture/lowered_step.h"
#include "gtest/gtest.h"
#include "src/ops/gpu_kernel.h"

namespace reprise {
namespace {

// A launch that records what it was allowed; `own`: whether it lets dependents start early (ours
// do).
class FakeKernel : public ops::GpuKernel {
 public:
  FakeKernel(bool own, std::optional<bool>* allowed) : own_(own), allowed_(allowed) {}
  absl::Status Launch(cudaStream_t) const override { return absl::OkStatus(); }
  std::string Describe() const override { return own_ ? "ours" : "library"; }
  bool LetsDependentsStartEarly() const override { return own_; }
  void SetDependentStart(bool allowed) override { *allowed_ = allowed; }

 private:
  bool own_;
  std::optional<bool>* allowed_;
};

struct Step {
  std::vector<capture::LoweredLaunch> launches;
  std::vector<std::optional<bool>> allowed;
};

// copy_inputs (the library's copy), then: ours, library, ours, ours on lane 1, ours on lane 0
// after waiting for lane 1, ours, ours on lane 1.
std::unique_ptr<Step> MakeStep() {
  auto step = std::make_unique<Step>();
  const std::vector<std::pair<bool, int>> kinds = {{false, 0}, {true, 0}, {false, 0}, {true, 0},
                                                   {true, 1},  {true, 0}, {true, 0},  {true, 1}};
  step->allowed.resize(kinds.size());
  for (size_t i = 0; i < kinds.size(); ++i) {
    std::vector<int> waits;
    if (i == 5) waits.push_back(4);
    step->launches.push_back({absl::StrCat("n", i), kinds[i].second, waits,
                              std::make_unique<FakeKernel>(kinds[i].first, &step->allowed[i])});
  }
  return step;
}

TEST(DependentStartsTest, OnlyAfterALaunchThatLetsThemStartEarlyOnTheSameLaneWithNothingJoining) {
  std::unique_ptr<Step> step = MakeStep();
  capture::AllowDependentStarts(step->launches, /*after_libraries=*/false);
  const std::vector<std::optional<bool>> expected = {false, false, true, false,
                                                     false, false, true, true};
  EXPECT_EQ(step->allowed, expected);
}

TEST(DependentStartsTest, AfterLibrariesEverythingButTheStepsStart) {
  std::unique_ptr<Step> step = MakeStep();
  capture::AllowDependentStarts(step->launches, /*after_libraries=*/true);
  const std::vector<std::optional<bool>> expected = {false, true, true, true,
                                                     true,  true, true, true};
  EXPECT_EQ(step->allowed, expected);
}

TEST(DependentStartsTest, ASequenceChainsItsOwnKernelsAndForwardsItsEnds) {
  std::vector<std::optional<bool>> allowed(3);
  std::vector<std::unique_ptr<ops::GpuKernel>> parts;
  parts.push_back(std::make_unique<FakeKernel>(true, &allowed[0]));
  parts.push_back(std::make_unique<FakeKernel>(false, &allowed[1]));
  parts.push_back(std::make_unique<FakeKernel>(true, &allowed[2]));
  ops::KernelSequence sequence(std::move(parts), 0);
  // Inside: the library part after ours may start early, ours after the library's may not.
  EXPECT_EQ(allowed[1], true);
  EXPECT_EQ(allowed[2], false);
  EXPECT_FALSE(allowed[0].has_value());
  sequence.SetDependentStart(true);
  EXPECT_EQ(allowed[0], true);
  EXPECT_TRUE(sequence.LetsDependentsStartEarly());
}

}  // namespace
}  // namespace reprise
