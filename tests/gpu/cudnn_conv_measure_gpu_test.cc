// The legacy convolution calls' measured algorithms kept on disk beside the kernels
// (src/runtime/cudnn_conv_record.h): the measured choice matches the float64 reference and is
// recorded; a later process (the process's algorithm cache cleared, a new kernel store on the same
// folder) takes the recorded algorithm without running cudnnFind and gives the same bits; a record
// that does not parse is measured again, replaced and counted.
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/runtime/cudnn_conv.h"
#include "src/runtime/cudnn_conv_record.h"
#include "src/runtime/device.h"
#include "src/runtime/kernel_store.h"
#include "src/runtime/plan_record.h"
#include "src/util/status_macros.h"
#include "tests/cpu/cache_test_util.h"
#include "tests/gpu/conv_graph_test_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

using runtime::ConvKind;
using testing::ConvCase;

// The shape of a residual block's sum, which runs in place on the legacy call with
// kernels.conv_sums_in_place.
ConvCase Case() { return testing::Layer2DgradCase("LegacyDgrad"); }

class LegacyMeasureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REPRISE_REQUIRE_GPU();
    REPRISE_ASSERT_OK(runtime::UseDevice(0).status());
    ref_ = testing::ComputeConvReference(Case());
    REPRISE_ASSERT_OK_AND_ASSIGN(dev_, testing::ConvDevice::Create(Case().dtype, ref_));
  }
  void TearDown() override { runtime::ConvAlgorithmCache::Global().Clear(); }

  // A Create as a new process would make it: the process's choices forgotten, a store on `dir`.
  absl::StatusOr<runtime::CudnnConv> Create(const std::string& dir, absl::string_view context) {
    runtime::ConvAlgorithmCache::Global().Clear();
    store_ = testing::StoreOn(dir);
    const runtime::ConvOptions options{.measure = true,
                                       .workspace_limit = testing::kConvWorkspace,
                                       .device = testing::DeviceKeyForTests(),
                                       .records = store_.get()};
    const runtime::CudnnConv::Buffers buffers{
        dev_->a(ConvKind::kBackwardData), dev_->b(ConvKind::kBackwardData),
        dev_->out(ConvKind::kBackwardData), dev_->workspace()};
    return runtime::CudnnConv::Create(dev_->cudnn(), ConvKind::kBackwardData,
                                      testing::ShapeOf(Case()), options, buffers, context);
  }

  absl::StatusOr<std::vector<double>> RunOnce(const runtime::CudnnConv& conv) {
    const size_t count = ref_.dx.size();
    RETURN_IF_ERROR(dev_->Clear(ConvKind::kBackwardData, count));
    RETURN_IF_ERROR(dev_->cudnn().Bind(dev_->stream(), "legacy"));
    RETURN_IF_ERROR(conv.Run(dev_->cudnn(), dev_->a(ConvKind::kBackwardData),
                             dev_->b(ConvKind::kBackwardData), dev_->out(ConvKind::kBackwardData),
                             dev_->workspace(), "legacy"));
    return dev_->Read(ConvKind::kBackwardData, count);
  }

  testing::ConvReference ref_;
  std::optional<testing::ConvDevice> dev_;
  std::unique_ptr<runtime::KernelStore> store_;
};

TEST_F(LegacyMeasureTest, MeasuredAlgorithmIsRecordedAndTakenFromTheRecordLater) {
  testing::ScopedTempDir dir;
  // Measured now: cudnnFind ran, one record written.
  runtime::ConvLegacyStats before = runtime::LegacyConvStats();
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::CudnnConv measured, Create(dir.path(), "measured"));
  runtime::ConvLegacyStats since = runtime::LegacyConvStats().Since(before);
  std::cout << measured.Describe() << "\n";
  EXPECT_EQ(since.measured, 1);
  EXPECT_EQ(since.from_records, 0);
  EXPECT_GT(since.measure_ms, 0);
  EXPECT_GE(measured.algorithm().candidates, 1);
  ASSERT_EQ(testing::EntryKeysIn(dir.path()).size(), 1u);
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<double> first, RunOnce(measured));
  EXPECT_LE(testing::RelativeL2(first, ref_.dx), testing::Tolerance(Case()));

  // A later process: the recorded algorithm, nothing timed, the same bits.
  before = runtime::LegacyConvStats();
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::CudnnConv recorded, Create(dir.path(), "recorded"));
  since = runtime::LegacyConvStats().Since(before);
  EXPECT_EQ(since.from_records, 1);
  EXPECT_EQ(since.measured, 0);
  EXPECT_EQ(recorded.Describe(), measured.Describe());
  EXPECT_EQ(recorded.algorithm().workspace_bytes, measured.algorithm().workspace_bytes);
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<double> again, RunOnce(recorded));
  EXPECT_EQ(again, first);

  // A record whose name does not parse: measured again, replaced, counted.
  const std::string key = testing::EntryKeysIn(dir.path()).front();
  REPRISE_ASSERT_OK_AND_ASSIGN(
      runtime::PlanRecord bad,
      runtime::DecodeConvPlanRecord(*store_->FindRecord(key, runtime::kConvAlgorithmRecordKind)));
  bad.name = "algo99_math1";
  store_->StoreRecord(key, runtime::kConvAlgorithmRecordKind, runtime::EncodeConvPlanRecord(bad));
  before = runtime::LegacyConvStats();
  REPRISE_ASSERT_OK_AND_ASSIGN(runtime::CudnnConv remeasured, Create(dir.path(), "remeasured"));
  since = runtime::LegacyConvStats().Since(before);
  EXPECT_EQ(since.records_discarded, 1);
  EXPECT_EQ(since.measured, 1);
  REPRISE_ASSERT_OK_AND_ASSIGN(
      runtime::PlanRecord replaced,
      runtime::DecodeConvPlanRecord(*store_->FindRecord(key, runtime::kConvAlgorithmRecordKind)));
  EXPECT_EQ(replaced.name, runtime::ConvAlgorithmRecordName(remeasured.algorithm()));
}

}  // namespace
}  // namespace reprise
