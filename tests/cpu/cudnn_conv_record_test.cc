// The legacy convolution calls' measured algorithm records (src/runtime/cudnn_conv_record.h):
// names round-trip and every malformed or out-of-range one is refused naming it, the key changes
// with everything the choice depends on, and the process's counts add up. No GPU needed.
#include "src/runtime/cudnn_conv_record.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/runtime/cudnn_conv_graph.h"

namespace reprise::runtime {
namespace {

TEST(ConvAlgorithmRecordTest, NamesRoundTrip) {
  const ConvAlgorithm chosen{.algo = 1, .math = CUDNN_TENSOR_OP_MATH, .workspace_bytes = 4096};
  EXPECT_EQ(ConvAlgorithmRecordName(chosen), "algo1_math1");
  absl::StatusOr<ConvAlgorithm> back =
      ParseConvAlgorithmRecordName(ConvKind::kBackwardData, "algo1_math1");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->algo, 1);
  EXPECT_EQ(back->math, CUDNN_TENSOR_OP_MATH);
  EXPECT_EQ(back->workspace_bytes, 0u);  // Asked of cuDNN again where the record is used.
  back = ParseConvAlgorithmRecordName(ConvKind::kForward, "algo7_math3");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->algo, 7);
  EXPECT_EQ(back->math, CUDNN_FMA_MATH);
}

TEST(ConvAlgorithmRecordTest, RefusesMalformedAndOutOfRangeNames) {
  const struct {
    ConvKind kind;
    std::string name;
    std::string why;
  } cases[] = {
      {ConvKind::kForward, "", "expected algo<N>_math<M>"},
      {ConvKind::kForward, "algo1", "expected algo<N>_math<M>"},
      {ConvKind::kForward, "algo_math1", "expected algo<N>_math<M>"},
      {ConvKind::kForward, "algo1_math", "expected algo<N>_math<M>"},
      {ConvKind::kForward, "algo+1_math1", "expected algo<N>_math<M>"},
      {ConvKind::kForward, "algo-1_math1", "expected algo<N>_math<M>"},
      {ConvKind::kForward, "algo 1_math1", "expected algo<N>_math<M>"},
      {ConvKind::kForward, "algo1_math1 ", "expected algo<N>_math<M>"},
      {ConvKind::kForward, "eng12_k2=4", "expected algo<N>_math<M>"},
      {ConvKind::kForward, "algo99999999_math1", "expected algo<N>_math<M>"},
      {ConvKind::kForward, "algo8_math1", "cuDNN defines algorithms 0 to 7"},
      {ConvKind::kBackwardData, "algo6_math0", "cuDNN defines algorithms 0 to 5"},
      {ConvKind::kBackwardFilter, "algo7_math0", "cuDNN defines algorithms 0 to 6"},
      {ConvKind::kBackwardFilter, "algo1_math4", "not one of cuDNN's math types"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<ConvAlgorithm> parsed = ParseConvAlgorithmRecordName(c.kind, c.name);
    ASSERT_FALSE(parsed.ok()) << "'" << c.name << "' parsed";
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss) << parsed.status();
    EXPECT_NE(parsed.status().message().find(absl::StrCat("name '", c.name, "': ", c.why)),
              std::string::npos)
        << parsed.status();
  }
}

TEST(ConvAlgorithmRecordTest, KeyChangesWithEverythingTheChoiceDependsOn) {
  ConvAlgorithmKey base{.kind = ConvKind::kBackwardData,
                        .shape = {.layout = Layout::kNHWC,
                                  .dtype = DType::kBFloat16,
                                  .n = 32,
                                  .c = 64,
                                  .h = 56,
                                  .w = 56,
                                  .k = 64,
                                  .r = 3,
                                  .s = 3,
                                  .p = 56,
                                  .q = 56,
                                  .pad_h = 1,
                                  .pad_w = 1},
                        .allow_tf32 = true,
                        .measured = true,
                        .workspace_limit = 1 << 26,
                        .device = "NVIDIA H100 80GB HBM3 sm_90"};
  std::set<std::string> keys = {ConvAlgorithmRecordKey(base)};
  EXPECT_EQ(ConvAlgorithmRecordKey(base), *keys.begin());  // Deterministic.
  const auto add = [&](ConvAlgorithmKey changed) {
    EXPECT_TRUE(keys.insert(ConvAlgorithmRecordKey(changed)).second);
  };
  ConvAlgorithmKey k = base;
  k.kind = ConvKind::kForward;
  add(k);
  k = base;
  k.shape.n = 256;
  add(k);
  k = base;
  k.shape.dtype = DType::kFloat32;
  add(k);
  k = base;
  k.allow_tf32 = false;
  add(k);
  k = base;
  k.deterministic = true;
  add(k);
  k = base;
  k.workspace_limit = 1 << 20;
  add(k);
  k = base;
  k.device = "NVIDIA H200 sm_90";
  add(k);
}

TEST(ConvAlgorithmRecordTest, ProcessCountsAddUp) {
  const ConvLegacyStats before = LegacyConvStats();
  CountLegacyConvChoice({.measured = 1, .measure_ms = 12.5});
  CountLegacyConvChoice({.from_records = 2});
  CountLegacyConvChoice({.records_discarded = 1});
  const ConvLegacyStats since = LegacyConvStats().Since(before);
  EXPECT_EQ(since.measured, 1);
  EXPECT_EQ(since.from_records, 2);
  EXPECT_EQ(since.records_discarded, 1);
  EXPECT_DOUBLE_EQ(since.measure_ms, 12.5);
}

TEST(ConvGraphStatsTest, TimingSinceSaysWhereThePlansTimeWent) {
  const ConvGraphStats before{.heuristic_plans = 3, .lower_ms = 10, .build_ms = 5, .warm_up_ms = 1};
  EXPECT_EQ(before.TimingSince(before), "");
  const ConvGraphStats after{.heuristic_plans = 4,
                             .record_plans = 2,
                             .lower_ms = 40,
                             .build_ms = 35,
                             .warm_up_ms = 7,
                             .slowest_build = "conv wgrad eng0",
                             .slowest_build_ms = 21};
  EXPECT_EQ(after.TimingSince(before),
            "cuDNN conv plans 3: lowering 30 ms, builds 30 (slowest 21: conv wgrad eng0), "
            "first runs 6");
}

}  // namespace
}  // namespace reprise::runtime
