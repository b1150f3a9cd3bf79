// The measured cuDNN plan records (src/runtime/plan_record.h): their text form round-trips,
// every malformed form is refused naming the line, their key changes with everything a choice
// depends on, and the kernel store keeps them in its lower layer across stores (processes), apart
// from kernels and from records of another kind or arch.
#include "src/runtime/plan_record.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "src/runtime/disk_cache.h"
#include "src/runtime/kernel_store.h"
#include "tests/cpu/cache_test_util.h"

namespace reprise::runtime {
namespace {

PlanRecord Sample() {
  return {.name = "eng12_k2=4_k25=1_k27=-1", .candidates = 8, .median_ms = 0.0625};
}

TEST(ConvPlanRecordTest, RoundTrips) {
  const std::string text = EncodeConvPlanRecord(Sample());
  EXPECT_EQ(text,
            "reprise conv plan 1\nname eng12_k2=4_k25=1_k27=-1\ncandidates 8\nmedian_ms 0.0625\n");
  absl::StatusOr<PlanRecord> back = DecodeConvPlanRecord(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, Sample());
}

TEST(ConvPlanRecordTest, RefusesEveryMalformedForm) {
  const std::string good = EncodeConvPlanRecord(Sample());
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? text : text.replace(at, from.size(), to);
  };
  const struct {
    std::string text;
    std::string says;
  } cases[] = {
      {"", "line 1: does not end with a line break"},
      {good.substr(0, good.size() - 1), "does not end with a line break"},
      {replaced("plan 1", "plan 2"), "line 1: expected 'reprise conv plan 1'"},
      {replaced("name eng12_k2=4_k25=1_k27=-1", "name "), "line 2: expected 'name <value>'"},
      {replaced("name eng12_k2=4_k25=1_k27=-1\n", ""), "line 2: expected 'name <value>'"},
      {replaced("name eng12", "name eng\n12"), "line 3: expected 'candidates <value>'"},
      {replaced("candidates 8", "candidates 0"), "line 3: candidates below 1"},
      {replaced("candidates 8", "candidates +8"), "line 3: candidates '+8' is not an integer"},
      {replaced("candidates 8", "candidates eight"), "is not an integer"},
      {replaced("candidates 8\n", ""), "line 3: expected 'candidates <value>'"},
      {replaced("median_ms 0.0625", "median_ms nan"), "line 4: median_ms 'nan'"},
      {replaced("median_ms 0.0625", "median_ms inf"), "is not a finite positive"},
      {replaced("median_ms 0.0625", "median_ms -1"), "is not a finite positive"},
      {replaced("median_ms 0.0625", "median_ms 0"), "is not a finite positive"},
      {replaced("median_ms 0.0625\n", ""), "line 4: missing 'median_ms'"},
      {good + "extra\n", "line 5: lines after 'median_ms'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    absl::StatusOr<PlanRecord> got = DecodeConvPlanRecord(c.text);
    ASSERT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
    EXPECT_NE(got.status().message().find(c.says), std::string::npos) << got.status();
  }
}

TEST(PlanRecordTest, MatmulRecordsRoundTripAndAreNotConvRecords) {
  const PlanRecord matmul{.name =
                              "algo66_tile29_stages35_splitk1_reduction0_swizzle0_custom0_"
                              "cluster3_inner0",
                          .candidates = 8,
                          .median_ms = 0.1004};
  const std::string text = EncodeMatmulPlanRecord(matmul);
  EXPECT_EQ(text.rfind("reprise matmul plan 1\nname algo66_tile29", 0), 0u) << text;
  absl::StatusOr<PlanRecord> back = DecodeMatmulPlanRecord(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, matmul);
  // Each form refuses the other's header, naming its own form.
  absl::StatusOr<PlanRecord> as_conv = DecodeConvPlanRecord(text);
  EXPECT_EQ(as_conv.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(as_conv.status().message().find("conv plan record, line 1"), std::string::npos)
      << as_conv.status();
  absl::StatusOr<PlanRecord> as_matmul = DecodeMatmulPlanRecord(EncodeConvPlanRecord(Sample()));
  EXPECT_EQ(as_matmul.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(as_matmul.status().message().find("matmul plan record, line 1"), std::string::npos)
      << as_matmul.status();
  // A name with a space is refused (a record names one configuration).
  std::string spaced = text;
  spaced.replace(spaced.find("_tile29"), 7, " tile29");
  EXPECT_NE(DecodeMatmulPlanRecord(spaced).status().message().find("line 2: the name has a space"),
            std::string::npos);
}

TEST(PlanRecordTest, MatmulKeyCoversWhatTheChoiceDependsOn) {
  const std::string key = MatmulPlanRecordKey("matmul [16x8]·[8x4] bf16", "H200 sm_90", 130100);
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key, MatmulPlanRecordKey("matmul [16x8]·[8x4] bf16", "H200 sm_90", 130100));
  EXPECT_NE(key, MatmulPlanRecordKey("matmul [16x8]·[8x5] bf16", "H200 sm_90", 130100));
  EXPECT_NE(key, MatmulPlanRecordKey("matmul [16x8]·[8x4] bf16", "H100 sm_90", 130100));
  EXPECT_NE(key, MatmulPlanRecordKey("matmul [16x8]·[8x4] bf16", "H200 sm_90", 130101));
  // Never a conv record's key for the same text.
  EXPECT_NE(key, ConvPlanRecordKey("matmul [16x8]·[8x4] bf16", "H200 sm_90", 130100, 0));
}

TEST(PlanRecordTest, GeluProductRecordsRoundTripAndAreNoOtherForm) {
  const PlanRecord gelu{.name = "cudnn:eng4_k24=2", .candidates = 2, .median_ms = 0.1223};
  const std::string text = EncodeGeluProductRecord(gelu);
  EXPECT_EQ(text.rfind("reprise gelu product 1\nname cudnn:eng4_k24=2\n", 0), 0u) << text;
  absl::StatusOr<PlanRecord> back = DecodeGeluProductRecord(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, gelu);
  absl::StatusOr<PlanRecord> as_matmul = DecodeMatmulPlanRecord(text);
  EXPECT_EQ(as_matmul.status().code(), absl::StatusCode::kDataLoss);
  absl::StatusOr<PlanRecord> as_gelu = DecodeGeluProductRecord(EncodeMatmulPlanRecord(gelu));
  EXPECT_EQ(as_gelu.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(as_gelu.status().message().find("gelu product record, line 1"), std::string::npos)
      << as_gelu.status();
}

TEST(PlanRecordTest, GeluProductKeyCoversBothLibraries) {
  const std::string key =
      GeluProductRecordKey("gelu bf16 [64x64]", "H100 sm_90", 91900, 13200, 130100);
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key, GeluProductRecordKey("gelu bf16 [64x64]", "H100 sm_90", 91900, 13200, 130100));
  EXPECT_NE(key, GeluProductRecordKey("gelu bf16 [64x72]", "H100 sm_90", 91900, 13200, 130100));
  EXPECT_NE(key, GeluProductRecordKey("gelu bf16 [64x64]", "H200 sm_90", 91900, 13200, 130100));
  EXPECT_NE(key, GeluProductRecordKey("gelu bf16 [64x64]", "H100 sm_90", 91901, 13200, 130100));
  EXPECT_NE(key, GeluProductRecordKey("gelu bf16 [64x64]", "H100 sm_90", 91900, 13201, 130100));
  EXPECT_NE(key, GeluProductRecordKey("gelu bf16 [64x64]", "H100 sm_90", 91900, 13200, 130101));
}

TEST(ConvPlanRecordTest, KeyCoversWhatTheChoiceDependsOn) {
  const std::string key = ConvPlanRecordKey("conv fwd x", "H200 sm_90", 91900, 13200);
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key, ConvPlanRecordKey("conv fwd x", "H200 sm_90", 91900, 13200));
  EXPECT_NE(key, ConvPlanRecordKey("conv fwd y", "H200 sm_90", 91900, 13200));
  EXPECT_NE(key, ConvPlanRecordKey("conv fwd x", "H100 sm_90", 91900, 13200));
  EXPECT_NE(key, ConvPlanRecordKey("conv fwd x", "H200 sm_90", 91901, 13200));
  EXPECT_NE(key, ConvPlanRecordKey("conv fwd x", "H200 sm_90", 91900, 13201));
}

TEST(ConvPlanRecordTest, KernelStoreKeepsRecordsOnDiskByKindAndArch) {
  testing::ScopedTempDir dir;
  const std::string key = ConvPlanRecordKey("conv fwd x", "H200 sm_90", 91900, 13200);
  const auto store_on = [&](const std::string& arch) {
    absl::StatusOr<std::unique_ptr<DiskCache>> disk = DiskCache::Open({.dir = dir.path()});
    EXPECT_TRUE(disk.ok()) << disk.status();
    return std::make_unique<KernelStore>(arch, disk.ok() ? *std::move(disk) : nullptr);
  };
  store_on("sm_90")->StoreRecord(key, kConvPlanRecordKind, EncodeConvPlanRecord(Sample()));
  // Another process on the same folder finds it; another kind or arch does not.
  std::unique_ptr<KernelStore> later = store_on("sm_90");
  std::optional<std::string> found = later->FindRecord(key, kConvPlanRecordKind);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(*found, EncodeConvPlanRecord(Sample()));
  EXPECT_FALSE(later->FindRecord(key, "another kind").has_value());
  EXPECT_FALSE(store_on("sm_100")->FindRecord(key, kConvPlanRecordKind).has_value());
  EXPECT_FALSE(later->FindRecord(std::string(64, 'a'), kConvPlanRecordKind).has_value());
  // Without a lower layer nothing is kept.
  KernelStore memory_only("sm_90");
  memory_only.StoreRecord(key, kConvPlanRecordKind, "x");
  EXPECT_FALSE(memory_only.FindRecord(key, kConvPlanRecordKind).has_value());
}

}  // namespace
}  // namespace reprise::runtime
