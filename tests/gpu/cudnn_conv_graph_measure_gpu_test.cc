// Graph-API convolution plans chosen by measurement (ConvGraphOptions::measure) and kept on disk
// beside the kernels (src/runtime/plan_record.h): the measured plan matches the float64
// reference; a later process (the plan cache forgotten, a new kernel store on the same folder)
// rebuilds the recorded engine without timing anything and gives the same bits; a record naming a
// configuration cuDNN no longer offers is measured again, replaced and counted; measuring without
// buffers to run on is refused.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/runtime/cudnn_conv_graph.h"
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

ConvCase Case() { return testing::Layer2DgradCase("MeasuredDgrad"); }

class MeasuredConvPlan {
 public:
  MeasuredConvPlan() : t_(Case()), ref_(testing::ComputeConvReference(t_)) {}

  const ConvCase& t() const { return t_; }
  const testing::ConvReference& ref() const { return ref_; }

  runtime::ConvGraphOptions Options(const testing::ConvDevice& dev,
                                    runtime::KernelStore* records) const {
    return {.workspace_limit = testing::kConvWorkspace,
            .device = testing::DeviceKeyForTests(),
            .measure = true,
            .measure_buffers = dev.Buffers(ConvKind::kBackwardData),
            .measure_workspace = dev.workspace(),
            .records = records};
  }

 private:
  ConvCase t_;
  testing::ConvReference ref_;
};

absl::StatusOr<std::vector<double>> RunOnce(const testing::ConvDevice& dev,
                                            const runtime::CudnnConvGraph& conv, size_t count) {
  RETURN_IF_ERROR(dev.Clear(ConvKind::kBackwardData, count));
  RETURN_IF_ERROR(dev.cudnn().Bind(dev.stream(), "measured"));
  RETURN_IF_ERROR(
      conv.Run(dev.cudnn(), dev.Buffers(ConvKind::kBackwardData), dev.workspace(), "measured"));
  return dev.Read(ConvKind::kBackwardData, count);
}

TEST(ConvGraphMeasureGpuTest, MeasuredPlanIsRecordedAndRebuiltFromTheRecord) {
  REPRISE_REQUIRE_GPU();
  MeasuredConvPlan m;
  const runtime::ConvShape shape = testing::ShapeOf(m.t());
  REPRISE_ASSERT_OK(runtime::UseDevice(0).status());
  REPRISE_ASSERT_OK_AND_ASSIGN(testing::ConvDevice dev,
                               testing::ConvDevice::Create(m.t().dtype, m.ref()));
  testing::ScopedTempDir dir;

  // Measured now: timed candidates, one record written.
  runtime::CudnnConvGraph::ForgetPlans();
  std::unique_ptr<runtime::KernelStore> store = testing::StoreOn(dir.path());
  runtime::ConvGraphStats before = runtime::CudnnConvGraph::Stats();
  REPRISE_ASSERT_OK_AND_ASSIGN(
      runtime::CudnnConvGraph measured,
      runtime::CudnnConvGraph::Create(dev.cudnn(), ConvKind::kBackwardData, shape, {},
                                      m.Options(dev, store.get()), "measured"));
  runtime::ConvGraphStats after = runtime::CudnnConvGraph::Stats();
  std::cout << measured.Describe() << "\n";
  EXPECT_EQ(after.measured_plans, before.measured_plans + 1);
  EXPECT_GE(after.candidates_timed, before.candidates_timed + 1);
  EXPECT_LE(after.candidates_timed, before.candidates_timed + runtime::kConvMeasuredCandidates);
  EXPECT_NE(measured.Describe().find(" measured "), std::string::npos) << measured.Describe();
  EXPECT_EQ(measured.Describe().find("(record)"), std::string::npos) << measured.Describe();
  ASSERT_EQ(testing::EntryKeysIn(dir.path()).size(), 1u);
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<double> first,
                               RunOnce(dev, measured, m.ref().dx.size()));
  EXPECT_LE(testing::RelativeL2(first, m.ref().dx), testing::Tolerance(m.t()));

  // A later process: the same engine from the record, nothing timed, the same bits.
  runtime::CudnnConvGraph::ForgetPlans();
  store = testing::StoreOn(dir.path());
  before = runtime::CudnnConvGraph::Stats();
  REPRISE_ASSERT_OK_AND_ASSIGN(
      runtime::CudnnConvGraph recorded,
      runtime::CudnnConvGraph::Create(dev.cudnn(), ConvKind::kBackwardData, shape, {},
                                      m.Options(dev, store.get()), "recorded"));
  after = runtime::CudnnConvGraph::Stats();
  std::cout << recorded.Describe() << "\n";
  EXPECT_EQ(after.record_plans, before.record_plans + 1);
  EXPECT_EQ(after.measured_plans, before.measured_plans);
  EXPECT_EQ(after.candidates_timed, before.candidates_timed);
  // Its time booked by phase: the graph lowered, the one plan built, its first run.
  EXPECT_GT(after.lower_ms, before.lower_ms);
  EXPECT_GT(after.build_ms, before.build_ms);
  EXPECT_GT(after.warm_up_ms, before.warm_up_ms);
  EXPECT_EQ(after.TimingSince(before).rfind("cuDNN conv plans 1: lowering ", 0), 0u)
      << after.TimingSince(before);
  EXPECT_NE(recorded.Describe().find("(record)"), std::string::npos) << recorded.Describe();
  const std::string engine = measured.Describe().substr(0, measured.Describe().find(" measured"));
  EXPECT_EQ(recorded.Describe().rfind(engine, 0), 0u) << recorded.Describe() << " vs " << engine;
  REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<double> again,
                               RunOnce(dev, recorded, m.ref().dx.size()));
  EXPECT_EQ(again, first);

  // A record naming a configuration that is not among the candidates: measured again, replaced,
  // counted.
  const std::string key = testing::EntryKeysIn(dir.path()).front();
  REPRISE_ASSERT_OK_AND_ASSIGN(
      runtime::PlanRecord bad,
      runtime::DecodeConvPlanRecord(*store->FindRecord(key, runtime::kConvPlanRecordKind)));
  bad.name = "eng100000_k2=1";
  store->StoreRecord(key, runtime::kConvPlanRecordKind, runtime::EncodeConvPlanRecord(bad));
  runtime::CudnnConvGraph::ForgetPlans();
  store = testing::StoreOn(dir.path());
  before = runtime::CudnnConvGraph::Stats();
  REPRISE_ASSERT_OK_AND_ASSIGN(
      runtime::CudnnConvGraph remeasured,
      runtime::CudnnConvGraph::Create(dev.cudnn(), ConvKind::kBackwardData, shape, {},
                                      m.Options(dev, store.get()), "remeasured"));
  after = runtime::CudnnConvGraph::Stats();
  EXPECT_EQ(after.records_discarded, before.records_discarded + 1);
  EXPECT_EQ(after.measured_plans, before.measured_plans + 1);
  REPRISE_ASSERT_OK_AND_ASSIGN(
      runtime::PlanRecord replaced,
      runtime::DecodeConvPlanRecord(*store->FindRecord(key, runtime::kConvPlanRecordKind)));
  EXPECT_NE(replaced.name, bad.name);
  runtime::CudnnConvGraph::ForgetPlans();
}

TEST(ConvGraphMeasureGpuTest, MeasuringWithoutBuffersIsRefused) {
  REPRISE_REQUIRE_GPU();
  MeasuredConvPlan m;
  REPRISE_ASSERT_OK(runtime::UseDevice(0).status());
  REPRISE_ASSERT_OK_AND_ASSIGN(testing::ConvDevice dev,
                               testing::ConvDevice::Create(m.t().dtype, m.ref()));
  runtime::ConvGraphOptions options = m.Options(dev, nullptr);
  options.measure_buffers.out = nullptr;
  absl::StatusOr<runtime::CudnnConvGraph> conv = runtime::CudnnConvGraph::Create(
      dev.cudnn(), ConvKind::kBackwardData, testing::ShapeOf(m.t()), {}, options, "node 'c'");
  ASSERT_EQ(conv.status().code(), absl::StatusCode::kInvalidArgument) << conv.status();
  EXPECT_NE(conv.status().message().find("node 'c': measuring conv dgrad plans needs its operands"),
            std::string::npos)
      << conv.status();
  options = m.Options(dev, nullptr);
  options.measure_workspace = nullptr;
  conv = runtime::CudnnConvGraph::Create(dev.cudnn(), ConvKind::kBackwardData,
                                         testing::ShapeOf(m.t()), {}, options, "node 'c'");
  ASSERT_EQ(conv.status().code(), absl::StatusCode::kInvalidArgument) << conv.status();
  EXPECT_NE(conv.status().message().find("a workspace"), std::string::npos) << conv.status();
}

}  // namespace
}  // namespace reprise
