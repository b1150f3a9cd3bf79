// Shape buckets in one arena: shared parameters and state at one place for every bucket, nothing a
// bucket keeps overlapping anything else, and three buckets within 1.1x the largest alone.
#include "src/passes/bucket_plan.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "src/autodiff/autodiff.h"
#include "src/passes/plan.h"

namespace reprise {
namespace {

using passes::Buffer;
using passes::BufferClass;
using ::testing::AllOf;
using ::testing::HasSubstr;

// One bucket planned alone, as Trainer::Impl::Prepare plans it (fused, AdamW with clipping).
struct PlannedBucket {
  int64_t batch = 0;
  passes::Plan plan;
  std::vector<std::string> weights;  // Parameters and state of the unfused training graph.
  int64_t alone_bytes = 0;
};

PlannedBucket PlanBucket(const Graph& graph, Value loss, int64_t batch) {
  const OptimizerOptions adamw{.kind = OptimizerKind::kAdamW,
                               .learning_rate = 1e-3f,
                               .weight_decay = 0.01f,
                               .max_grad_norm = 1.0f};
  absl::StatusOr<autodiff::TrainingGraph> training =
      autodiff::BuildTrainingGraphWith(graph, loss, adamw);
  EXPECT_TRUE(training.ok()) << training.status();
  PlannedBucket bucket{.batch = batch};
  for (const char* op : {"parameter", "state"}) {
    for (int32_t id : training->graph.NodesOf(op)) {
      bucket.weights.push_back(training->graph.node(id).name);
    }
  }
  absl::StatusOr<passes::Plan> plan = passes::BuildPlan(*std::move(training), {});
  EXPECT_TRUE(plan.ok()) << plan.status();
  bucket.plan = *std::move(plan);
  bucket.alone_bytes = bucket.plan.memory.arena_bytes;
  return bucket;
}

std::vector<PlannedBucket> MlpBuckets(const std::vector<int64_t>& batches, int64_t width) {
  std::vector<PlannedBucket> buckets;
  for (int64_t batch : batches) {
    auto mlp = models::BuildMlp(
        {.batch = batch, .input_features = 64, .depth = 3, .width = width, .classes = 10});
    EXPECT_TRUE(mlp.ok()) << mlp.status();
    buckets.push_back(PlanBucket(mlp->graph, mlp->loss, batch));
  }
  return buckets;
}

std::vector<passes::BucketPlan> Views(std::vector<PlannedBucket>& buckets) {
  std::vector<passes::BucketPlan> views;
  for (PlannedBucket& b : buckets) {
    views.push_back(
        {absl::StrCat("bucket batch ", b.batch), &b.plan.graph(), &b.plan.memory, b.weights});
  }
  return views;
}

bool Overlap(const Buffer& a, const Buffer& b) {
  return a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}
bool Persistent(const Buffer& b) {
  return b.cls != BufferClass::kInput && b.cls != BufferClass::kActivation;
}

// Everything a bucket relies on between its steps or during one: within a bucket, no two buffers
// alive at once overlap; across buckets, only shared tensors (at the same place) and the
// overlapped region (inputs and transients, rewritten every step) meet.
void ExpectSound(const std::vector<PlannedBucket>& buckets, const passes::BucketArena& arena) {
  for (size_t k = 0; k < buckets.size(); ++k) {
    const passes::MemoryPlan& m = buckets[k].plan.memory;
    EXPECT_EQ(m.arena_bytes, arena.arena_bytes);
    EXPECT_EQ(m.input_offset, arena.overlap_offset);
    for (const Buffer& a : m.buffers) {
      EXPECT_GE(a.offset, 0);
      EXPECT_LE(a.offset + a.bytes, arena.arena_bytes);
      EXPECT_EQ(a.offset % passes::kBufferAlignment, 0);
      if (!Persistent(a)) {
        EXPECT_GE(a.offset, arena.overlap_offset);
      }
    }
    for (size_t i = 0; i < m.buffers.size(); ++i) {
      for (size_t j = i + 1; j < m.buffers.size(); ++j) {
        const Buffer &a = m.buffers[i], &b = m.buffers[j];
        const bool together = Persistent(a) || Persistent(b) || a.cls == BufferClass::kInput ||
                              b.cls == BufferClass::kInput ||
                              (a.first <= b.last && b.first <= a.last);
        if (together && a.bytes > 0 && b.bytes > 0 && !m.SharePlace(a, b)) {
          EXPECT_FALSE(Overlap(a, b))
              << "bucket " << buckets[k].batch << ": buffers " << i << " and " << j;
        }
      }
    }
    // A bucket's private persistent tensors meet nothing of any other bucket.
    for (size_t other = 0; other < buckets.size(); ++other) {
      if (other == k) continue;
      const passes::MemoryPlan& o = buckets[other].plan.memory;
      const Graph& g = buckets[k].plan.graph();
      const Graph& og = buckets[other].plan.graph();
      for (const Buffer& a : m.buffers) {
        if (!Persistent(a) || a.bytes == 0) continue;
        for (const Buffer& b : o.buffers) {
          if (b.bytes == 0 || !Overlap(a, b)) continue;
          const std::string& name = g.node(a.value.node).name;
          EXPECT_TRUE(Persistent(b) && a.offset == b.offset && name == og.node(b.value.node).name &&
                      a.offset < arena.shared_bytes)
              << "bucket " << buckets[k].batch << "'s '" << name << "' overlaps bucket "
              << buckets[other].batch << "'s '" << og.node(b.value.node).name << "'";
        }
      }
    }
  }
}

TEST(BucketPlanTest, ThreeMlpBucketsShareWeightsAndStayWithinATenthOfTheLargestAlone) {
  std::vector<PlannedBucket> buckets = MlpBuckets({32, 64, 128}, 256);
  std::vector<passes::BucketPlan> views = Views(buckets);
  absl::StatusOr<passes::BucketArena> arena = passes::PlaceBuckets(views);
  ASSERT_TRUE(arena.ok()) << arena.status();
  const int64_t largest = buckets.back().alone_bytes;
  EXPECT_EQ(arena->largest_alone_bytes, largest);
  EXPECT_LE(arena->arena_bytes, largest * 11 / 10)
      << "arena " << arena->arena_bytes << " bytes; batch 128 alone " << largest;
  // Far less than three arenas side by side.
  EXPECT_LT(arena->arena_bytes,
            buckets[0].alone_bytes + buckets[1].alone_bytes + buckets[2].alone_bytes);
  EXPECT_EQ(arena->arena_bytes, arena->overlap_offset + arena->overlap_bytes);
  EXPECT_EQ(arena->overlap_offset, arena->shared_bytes + arena->private_bytes);
  ExpectSound(buckets, *arena);
  // Every parameter, moment and the step counter at one place in every bucket.
  for (const std::string& name : buckets[0].weights) {
    std::vector<int64_t> offsets;
    for (const PlannedBucket& b : buckets) {
      const Buffer* buffer = b.plan.memory.Find({*b.plan.graph().FindNode(name), 0});
      ASSERT_NE(buffer, nullptr) << name;
      offsets.push_back(buffer->offset);
    }
    EXPECT_THAT(offsets, ::testing::Each(offsets[0])) << name;
    EXPECT_LT(offsets[0], arena->shared_bytes) << name;
  }
}

// A convolutional network's buckets share batch-norm statistics too.
TEST(BucketPlanTest, ResNetBucketsShareBatchNormStatisticsWithinTheBound) {
  std::vector<PlannedBucket> buckets;
  for (int64_t batch : {2, 4, 8}) {
    auto net = models::BuildResNet({.depth = 18, .batch = batch, .classes = 5, .image_size = 32});
    ASSERT_TRUE(net.ok()) << net.status();
    buckets.push_back(PlanBucket(net->graph, net->loss, batch));
  }
  std::vector<passes::BucketPlan> views = Views(buckets);
  absl::StatusOr<passes::BucketArena> arena = passes::PlaceBuckets(views);
  ASSERT_TRUE(arena.ok()) << arena.status();
  EXPECT_LE(arena->arena_bytes, buckets.back().alone_bytes * 11 / 10);
  ExpectSound(buckets, *arena);
}

TEST(BucketPlanTest, RefusesBucketsWhoseParametersDifferInShapeNamingTensorAndBuckets) {
  // A hidden width that follows the batch: the weights cannot be shared.
  std::vector<PlannedBucket> buckets;
  for (int64_t batch : {16, 32}) {
    auto mlp = models::BuildMlp(
        {.batch = batch, .input_features = 8, .depth = 1, .width = batch, .classes = 4});
    ASSERT_TRUE(mlp.ok());
    buckets.push_back(PlanBucket(mlp->graph, mlp->loss, batch));
  }
  std::vector<passes::BucketPlan> views = Views(buckets);
  absl::StatusOr<passes::BucketArena> arena = passes::PlaceBuckets(views);
  EXPECT_EQ(arena.status().code(), absl::StatusCode::kInvalidArgument) << arena.status();
  EXPECT_THAT(arena.status().message(),
              AllOf(HasSubstr("'fc0.weight'"), HasSubstr("f32[16, 8]"), HasSubstr("f32[32, 8]"),
                    HasSubstr("bucket batch 16"), HasSubstr("bucket batch 32")));
}

TEST(BucketPlanTest, RefusesBucketsWithDifferentParameters) {
  // Batch 16 has a layer "pre" that batch 8 lacks; "fc" is the same in both.
  std::vector<PlannedBucket> buckets;
  for (int64_t batch : {8, 16}) {
    Graph g;
    Value x = *g.AddInput("features", {Shape{batch, 8}, DType::kFloat32});
    Value labels = *g.AddInput("labels", {Shape{batch}, DType::kInt32});
    if (batch == 16) x = *nn::Linear(g, x, 8, "pre");
    Value logits = *nn::Linear(g, x, 4, "fc");
    buckets.push_back(PlanBucket(g, *nn::SoftmaxCrossEntropy(g, logits, labels), batch));
  }
  std::vector<passes::BucketPlan> views = Views(buckets);
  absl::StatusOr<passes::BucketArena> arena = passes::PlaceBuckets(views);
  EXPECT_EQ(arena.status().code(), absl::StatusCode::kInvalidArgument) << arena.status();
  EXPECT_THAT(
      arena.status().message(),
      AllOf(HasSubstr("'pre."), HasSubstr("is in bucket batch 16 but not in bucket batch 8"),
            HasSubstr("same parameters")));
}

TEST(BucketPlanTest, RefusesSharingWhatIsNoParameterOrState) {
  std::vector<PlannedBucket> buckets = MlpBuckets({4}, 8);
  buckets[0].weights.push_back("features");
  std::vector<passes::BucketPlan> views = Views(buckets);
  absl::StatusOr<passes::BucketArena> arena = passes::PlaceBuckets(views);
  EXPECT_EQ(arena.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(arena.status().message(), HasSubstr("'features'"));
  EXPECT_FALSE(passes::PlaceBuckets({}).ok());
}

// One bucket alone keeps its own arena size (no padding is added).
TEST(BucketPlanTest, OneBucketKeepsItsArena) {
  std::vector<PlannedBucket> buckets = MlpBuckets({32}, 64);
  std::vector<passes::BucketPlan> views = Views(buckets);
  absl::StatusOr<passes::BucketArena> arena = passes::PlaceBuckets(views);
  ASSERT_TRUE(arena.ok()) << arena.status();
  EXPECT_EQ(arena->arena_bytes, buckets[0].alone_bytes);
  ExpectSound(buckets, *arena);
}

}  // namespace
}  // namespace reprise
