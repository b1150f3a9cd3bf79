// Bucket selection and its errors (BucketSelector, host-only), the pad helpers, the bucketed
// report's text and JSON, and BucketedTrainer::Create's checks that come before the device.
#include "src/api/bucket_select.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/bucketed_trainer.h"
#include "reprise/models.h"
#include "tests/cpu/json_reader.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

BucketSelector ThreeBuckets() {
  absl::StatusOr<BucketSelector> s = BucketSelector::Create({128, 32, 64});
  EXPECT_TRUE(s.ok()) << s.status();
  // features f32[B, 10], labels i32[B], learning_rate f32[].
  EXPECT_TRUE(s->AddInput("features", {320, 640, 1280}).ok());
  EXPECT_TRUE(s->AddInput("labels", {32, 64, 128}).ok());
  EXPECT_TRUE(s->AddInput("learning_rate", {1, 1, 1}).ok());
  return *std::move(s);
}

TEST(BucketSelectTest, BatchesAreSortedAndMustBePositiveAndDistinct) {
  EXPECT_THAT(ThreeBuckets().batches(), ElementsAre(32, 64, 128));
  for (const std::vector<int64_t>& bad :
       std::vector<std::vector<int64_t>>{{}, {8, 0}, {8, 16, 8}}) {
    absl::StatusOr<BucketSelector> s = BucketSelector::Create(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_THAT(BucketSelector::Create({8, 16, 8}).status().message(),
              HasSubstr("positive and distinct, got 8, 16, 8"));
}

TEST(BucketSelectTest, PadToBucketTakesTheSmallestBucketThatHoldsTheRows) {
  const BucketSelector s = ThreeBuckets();
  EXPECT_EQ(*s.PadToBucket(1), 32);
  EXPECT_EQ(*s.PadToBucket(32), 32);
  EXPECT_EQ(*s.PadToBucket(33), 64);
  EXPECT_EQ(*s.PadToBucket(100), 128);
  EXPECT_EQ(*s.PadToBucket(128), 128);
  absl::StatusOr<int64_t> too_many = s.PadToBucket(129);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(too_many.status().message(), HasSubstr("the buckets are 32, 64, 128"));
  EXPECT_EQ(s.PadToBucket(0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BucketSelectTest, IndexOfABatchThatIsNoBucketListsTheBuckets) {
  const BucketSelector s = ThreeBuckets();
  EXPECT_EQ(*s.Index(64), 1);
  absl::StatusOr<int> none = s.Index(48);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(),
              HasSubstr("batch 48 is no bucket; the buckets are 32, 64, 128"));
}

TEST(BucketSelectTest, ABatchedInputSelectsTheBucketOfItsSize) {
  BucketSelector s = ThreeBuckets();
  EXPECT_EQ(s.next(), 0);
  EXPECT_EQ(s.last(), -1);
  EXPECT_EQ(*s.BucketOfInput("features", 640), 1);
  s.Bound("features", 1);
  EXPECT_EQ(*s.BucketOfInput("labels", 64), 1);
  s.Bound("labels", 1);
  EXPECT_EQ(s.next(), 1);
  // Scalars and unknown names go to every bucket.
  EXPECT_EQ(*s.BucketOfInput("learning_rate", 1), -1);
  EXPECT_EQ(*s.BucketOfInput("no_such_input", 7), -1);
  s.Stepped();
  EXPECT_EQ(s.last(), 1);
  // The next step may be of another bucket.
  EXPECT_EQ(*s.BucketOfInput("labels", 128), 2);
  s.Bound("labels", 2);
  EXPECT_EQ(s.next(), 2);
}

TEST(BucketSelectTest, ASizeOfNoBucketIsRefusedListingEveryBucketsSize) {
  const BucketSelector s = ThreeBuckets();
  absl::StatusOr<int> bad = s.BucketOfInput("features", 500);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              AllOf(HasSubstr("input 'features' got 500 values"),
                    HasSubstr("320 (batch 32), 640 (batch 64), 1280 (batch 128)"),
                    HasSubstr("PadToBucket")));
}

TEST(BucketSelectTest, InputsOfOneStepMustBeOfOneBucket) {
  BucketSelector s = ThreeBuckets();
  s.Bound("features", *s.BucketOfInput("features", 1280));
  absl::StatusOr<int> mixed = s.BucketOfInput("labels", 32);
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mixed.status().message(), AllOf(HasSubstr("'labels' has batch 32's size"),
                                              HasSubstr("'features' was bound for batch 128")));
  // Binding the same input again may change the bucket; a step or a selection starts afresh.
  EXPECT_EQ(*s.BucketOfInput("features", 320), 0);
  s.Select(1);
  EXPECT_EQ(s.next(), 1);
  EXPECT_EQ(*s.BucketOfInput("labels", 32), 0);
}

TEST(BucketSelectTest, AnInputThatChangesInSomeBucketsOnlyIsRefused) {
  absl::StatusOr<BucketSelector> s = BucketSelector::Create({8, 16, 32});
  ASSERT_TRUE(s.ok());
  const absl::Status status = s->AddInput("mask", {8, 8, 32});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("'mask'"), HasSubstr("8, 8, 32")));
  EXPECT_FALSE(s->AddInput("x", {1, 2}).ok());  // One size per bucket.
}

TEST(BucketSelectTest, PadRowsAppendsFillRows) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};  // 3 rows of 2.
  EXPECT_THAT(*PadRows(x, 3, 5, -1.0f), ElementsAre(1, 2, 3, 4, 5, 6, -1, -1, -1, -1));
  EXPECT_THAT(*PadRows(x, 3, 3), ElementsAre(1, 2, 3, 4, 5, 6));
  const std::vector<int32_t> y = {7, 8, 9};
  EXPECT_THAT(*PadRows(y, 3, 4, 0), ElementsAre(7, 8, 9, 0));
  EXPECT_EQ(PadRows(x, 4, 8).status().code(), absl::StatusCode::kInvalidArgument);  // 6 % 4.
  EXPECT_EQ(PadRows(x, 3, 2).status().code(), absl::StatusCode::kInvalidArgument);  // Shrinks.
  EXPECT_EQ(PadRows(x, 0, 2).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BucketSelectTest, CreateChecksBatchesAndFetchBeforeTheDevice) {
  const BucketBuilder build = [](int64_t batch) -> absl::StatusOr<BucketModel> {
    absl::StatusOr<models::Mlp> mlp = models::BuildMlp({.batch = batch, .depth = 1, .width = 8});
    if (!mlp.ok()) return mlp.status();
    return BucketModel{std::move(mlp->graph), mlp->loss};
  };
  EXPECT_EQ(BucketedTrainer::Create(build, {}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(BucketedTrainer::Create(build, {32, 32}, {}).status().message(),
              HasSubstr("distinct"));
  TrainOptions fetching;
  fetching.fetch = {Value{0, 0}};
  EXPECT_THAT(BucketedTrainer::Create(build, {16, 32}, fetching).status().message(),
              HasSubstr("TrainOptions::fetch"));
  // The builder's errors name the bucket.
  const BucketBuilder failing = [](int64_t batch) -> absl::StatusOr<BucketModel> {
    if (batch == 64) return absl::InvalidArgumentError("no model for this batch");
    absl::StatusOr<models::Mlp> mlp = models::BuildMlp({.batch = batch, .depth = 1, .width = 8});
    if (!mlp.ok()) return mlp.status();
    return BucketModel{std::move(mlp->graph), mlp->loss};
  };
  const absl::Status status = BucketedTrainer::Create(failing, {64}, {}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("bucket batch 64: no model for this batch"));
}

BucketedReport TwoBucketReport() {
  BucketedReport report;
  report.memory = {.arena_bytes = 1100,
                   .shared_bytes = 500,
                   .private_bytes = 100,
                   .overlap_bytes = 500,
                   .largest_alone_bytes = 1000};
  for (int64_t batch : {32, 64}) {
    BucketedReport::Bucket& b = report.buckets.emplace_back();
    b.batch = batch;
    b.report.stats.steps = batch / 8;
    b.report.stats.graph_captures = 1;
    b.report.stats.graph_instantiations = 1;
    b.report.graphs.push_back(
        {absl::StrCat("step[batch=", batch, "]"), {{"kernel", 12}, {"memcpy", 1}}, batch / 8});
  }
  return report;
}

TEST(BucketSelectTest, ReportTextListsEveryBucketsGraphAndReplays) {
  const std::string text = TwoBucketReport().ToText();
  EXPECT_THAT(text, AllOf(HasSubstr("buckets batch 32, 64"), HasSubstr("(x1.100)"),
                          HasSubstr("bucket batch 32:"), HasSubstr("graph 'step[batch=32]'"),
                          HasSubstr("replays 4"), HasSubstr("bucket batch 64:"),
                          HasSubstr("graph 'step[batch=64]'"), HasSubstr("replays 8")));
}

TEST(BucketSelectTest, ReportJsonParsesWithEveryBucketsGraph) {
  absl::StatusOr<testing::JsonValue> json = testing::ParseJson(TwoBucketReport().ToJson());
  ASSERT_TRUE(json.ok()) << json.status();
  const testing::JsonValue& v = *json;
  EXPECT_EQ(v["memory_bytes"]["arena"].integer, 1100);
  EXPECT_EQ(v["memory_bytes"]["largest_alone"].integer, 1000);
  const std::vector<testing::JsonValue>& buckets = v["buckets"].array;
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[1]["batch"].integer, 64);
  ASSERT_EQ(buckets[1]["graphs"].array.size(), 1u);
  const testing::JsonValue& graph = buckets[1]["graphs"].array[0];
  EXPECT_EQ(graph["name"].string, "step[batch=64]");
  EXPECT_EQ(graph["nodes"].integer, 13);
  EXPECT_EQ(graph["replays"].integer, 8);
  EXPECT_EQ(buckets[0]["steps"].integer, 4);
  EXPECT_EQ(buckets[0]["reinstantiations"].integer, 0);
}

}  // namespace
}  // namespace reprise
