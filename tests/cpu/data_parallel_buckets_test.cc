// Data parallelism on the plan: gradients bucketed in the order the backward pass makes them, one
// all_reduce per bucket on the communication lane right after the launch that makes its last
// gradient, each update after its bucket's all-reduce and nothing of the backward pass after any,
// each bucket's gradients (and averages) side by side in the arena; for an MLP and ResNet-18.
#include <algorithm>
#include <map>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/bucketed_trainer.h"
#include "reprise/models.h"
#include "src/api/model_dump.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/op_def.h"
#include "src/ops/all_reduce.h"
#include "src/passes/gradient_buckets.h"
#include "src/passes/mixed_precision.h"
#include "src/passes/plan.h"
#include "src/util/status_macros.h"

namespace reprise {
namespace {

using passes::GradientBucket;
using ::testing::HasSubstr;

autodiff::TrainingGraph MlpTraining(int64_t depth = 4, int64_t width = 64) {
  auto mlp = models::BuildMlp(
      {.batch = 8, .input_features = 32, .depth = depth, .width = width, .classes = 10});
  EXPECT_TRUE(mlp.ok()) << mlp.status();
  return *autodiff::BuildTrainingGraph(mlp->graph, mlp->loss, {});
}

autodiff::TrainingGraph ResNet18Training() {
  auto net = models::BuildResNet({.depth = 18, .batch = 2, .classes = 3, .image_size = 32});
  EXPECT_TRUE(net.ok()) << net.status();
  return *autodiff::BuildTrainingGraph(net->graph, net->loss, {});
}

// "fc3.weight" -> 3.
int LayerOf(const std::string& name) { return std::stoi(name.substr(2, name.find('.') - 2)); }

TEST(GradientBucketsTest, OneGradientPerBucketComesLastLayerFirst) {
  const autodiff::TrainingGraph t = MlpTraining();
  auto buckets = passes::AssignGradientBuckets(t, 1);
  ASSERT_TRUE(buckets.ok()) << buckets.status();
  ASSERT_EQ(buckets->size(), t.parameters.size());
  int previous_layer = 1 << 20, previous_ready = -1;
  for (const GradientBucket& b : *buckets) {
    ASSERT_EQ(b.parameters.size(), 1u);
    const int layer = LayerOf(b.parameters[0]);
    EXPECT_LE(layer, previous_layer) << b.parameters[0];  // Reverse layer order.
    EXPECT_GT(b.ready, previous_ready) << b.parameters[0];
    previous_layer = layer;
    previous_ready = b.ready;
  }
  EXPECT_EQ(LayerOf(buckets->front().parameters[0]), 4);
  EXPECT_EQ(LayerOf(buckets->back().parameters[0]), 0);
}

TEST(GradientBucketsTest, ABucketClosesOnceItHoldsTheSizeAndEveryGradientIsInOne) {
  const autodiff::TrainingGraph t = MlpTraining(6, 96);
  const int64_t cap = 40000;  // About one hidden layer's weight gradient (96 x 96 x 4 bytes).
  auto buckets = passes::AssignGradientBuckets(t, cap);
  ASSERT_TRUE(buckets.ok()) << buckets.status();
  ASSERT_GT(buckets->size(), 2u);
  absl::flat_hash_set<Value> seen;
  for (size_t i = 0; i < buckets->size(); ++i) {
    const GradientBucket& b = (*buckets)[i];
    int64_t bytes = 0;
    for (const Value& v : b.gradients) {
      EXPECT_TRUE(seen.insert(v).second);
      bytes += t.graph.spec(v).bytes();
    }
    EXPECT_EQ(bytes, b.bytes);
    const int64_t last = t.graph.spec(b.gradients.back()).bytes();
    if (i + 1 < buckets->size()) EXPECT_GE(b.bytes, cap) << i;  // Closed by size.
    EXPECT_LT(b.bytes - last, cap) << i;                        // Not before.
  }
  EXPECT_EQ(seen.size(), t.parameters.size());
  auto one = passes::AssignGradientBuckets(t, int64_t{25} << 20);  // The default: one bucket.
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->size(), 1u);
  EXPECT_THAT(passes::AssignGradientBuckets(t, 0).status().message(), HasSubstr("bucket_bytes"));
}

TEST(GradientBucketsTest, AveragedGradientsFeedTheOptimizerAndTheBackwardKeepsItsOwn) {
  const autodiff::TrainingGraph t = MlpTraining();
  auto buckets = passes::AssignGradientBuckets(t, 10000);
  ASSERT_TRUE(buckets.ok());
  auto averaged = passes::AverageGradients(t, *buckets);
  ASSERT_TRUE(averaged.ok()) << averaged.status();
  const Graph& g = averaged->graph;
  EXPECT_EQ(g.num_nodes(), t.graph.num_nodes() + static_cast<int>(buckets->size()));
  for (int32_t id = 0; id < t.forward_nodes; ++id)
    EXPECT_EQ(g.node(id).name, t.graph.node(id).name);
  for (int32_t p : averaged->parameters) {
    const Node& producer = g.node(averaged->gradients.at(p).node);
    EXPECT_EQ(producer.op, &ops::AllReduceOp()) << g.node(p).name;
  }
  for (const Node& node : g.nodes()) {
    const bool optimizer =
        std::count(averaged->optimizer_nodes.begin(), averaged->optimizer_nodes.end(), node.id) > 0;
    for (const Value& v : node.inputs) {
      if (g.node(v.node).op == &ops::AllReduceOp()) {
        EXPECT_TRUE(optimizer) << node.name << " reads an average";
      }
    }
  }
  GradientBucket stray = (*buckets)[0];
  stray.gradients.push_back(t.loss);
  EXPECT_THAT(passes::AverageGradients(t, {stray}).status().message(),
              HasSubstr("no parameter's gradient"));
}

// Builds the data-parallel plan as the Trainer does.
passes::Plan DataParallelPlan(const autodiff::TrainingGraph& t, int64_t bucket_bytes, int lanes,
                              std::vector<GradientBucket>* buckets = nullptr) {
  auto b = passes::AssignGradientBuckets(t, bucket_bytes);
  EXPECT_TRUE(b.ok()) << b.status();
  if (buckets != nullptr) *buckets = *b;
  auto averaged = passes::AverageGradients(t, *b);
  EXPECT_TRUE(averaged.ok()) << averaged.status();
  passes::PlanOptions options{.fuse = true, .lanes = lanes};
  options.fusion.whole_mlp_step = false;
  auto plan = passes::BuildPlan(*std::move(averaged), {}, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

int64_t AlignUp(int64_t x) {
  return (x + passes::kBufferAlignment - 1) / passes::kBufferAlignment * passes::kBufferAlignment;
}

// What every data-parallel plan owes, checked launch by launch.
void ExpectDataParallelSchedule(const passes::Plan& plan, int buckets) {
  const Graph& g = plan.graph();
  const auto& launches = plan.launches;
  const int comm_lane = plan.lanes() - 1;
  std::vector<int> position(g.num_nodes(), -1);
  for (int i = 0; i < static_cast<int>(launches.size()); ++i) position[launches[i].node] = i;
  const passes::HappensBefore before(launches);
  // The memory plan's reuse waits leave the communication lane alone, both ways.
  const auto scheduled = passes::Schedule(g, {.lanes = plan.compute_lanes()});
  ASSERT_TRUE(scheduled.ok()) << scheduled.status();
  ASSERT_EQ(scheduled->size(), launches.size());
  for (int i = 0; i < static_cast<int>(launches.size()); ++i) {
    ASSERT_EQ((*scheduled)[i].lane, launches[i].lane) << g.node(launches[i].node).name;
    const std::vector<int>& waits = launches[i].waits;
    for (size_t k = (*scheduled)[i].waits.size(); k < waits.size(); ++k) {
      EXPECT_NE(launches[i].lane, comm_lane) << g.node(launches[i].node).name;
      EXPECT_NE(launches[waits[k]].lane, comm_lane) << g.node(launches[i].node).name;
    }
  }
  std::vector<int> all_reduces;
  for (int i = 0; i < static_cast<int>(launches.size()); ++i) {
    const Node& node = g.node(launches[i].node);
    if (node.op != &ops::AllReduceOp()) continue;
    all_reduces.push_back(i);
    EXPECT_EQ(launches[i].lane, comm_lane) << node.name;
    // Right after the launch that makes the bucket's last gradient.
    int last_producer = -1;
    for (const Value& v : node.inputs) last_producer = std::max(last_producer, position[v.node]);
    for (int between = last_producer + 1; between < i; ++between) {  // Other collectives only.
      EXPECT_EQ(g.node(launches[between].node).op, &ops::AllReduceOp()) << node.name;
    }
    EXPECT_GT(i, last_producer) << node.name;
    // Its inputs side by side, its outputs likewise, in the same layout.
    for (size_t k = 1; k < node.inputs.size(); ++k) {
      const passes::Buffer* prev = plan.memory.Find(node.inputs[k - 1]);
      const passes::Buffer* cur = plan.memory.Find(node.inputs[k]);
      EXPECT_EQ(cur->offset, prev->offset + AlignUp(prev->bytes)) << node.name << " input " << k;
      EXPECT_EQ(plan.memory.Find({node.id, static_cast<int>(k)})->offset -
                    plan.memory.Find({node.id, 0})->offset,
                cur->offset - plan.memory.Find(node.inputs[0])->offset)
          << node.name << " output " << k;
    }
  }
  EXPECT_EQ(static_cast<int>(all_reduces.size()), buckets);
  for (int i = 0; i < static_cast<int>(launches.size()); ++i) {
    const Node& node = g.node(launches[i].node);
    // Every launch runs after what it reads (an update after its bucket's all-reduce).
    for (const Value& v : node.inputs) {
      if (position[v.node] >= 0) {
        EXPECT_TRUE(before(position[v.node], i)) << g.node(v.node).name << " -> " << node.name;
      }
    }
    if (node.op->kind == ir::OpKind::kOptimizer) {
      EXPECT_EQ(launches[i].lane, comm_lane) << node.name;
    }
    if (launches[i].lane == comm_lane) continue;
    // The compute lanes, the whole backward pass, never wait for communication.
    for (int a : all_reduces) {
      EXPECT_FALSE(before(a, i)) << node.name << " waits for " << g.node(launches[a].node).name;
    }
  }
  // No two buffers that may be alive at once share bytes.
  for (size_t a = 0; a < plan.memory.buffers.size(); ++a) {
    const passes::Buffer& x = plan.memory.buffers[a];
    if (x.cls != passes::BufferClass::kActivation) continue;
    for (size_t b = a + 1; b < plan.memory.buffers.size(); ++b) {
      const passes::Buffer& y = plan.memory.buffers[b];
      if (y.cls != passes::BufferClass::kActivation) continue;
      const bool overlap = x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
      if (!overlap || plan.memory.SharePlace(x, y)) continue;  // Or written over the other.
      auto dead_before = [&](const passes::Buffer& d, int launch) {
        for (int use : d.uses) {
          if (!before(use, launch)) return false;
        }
        return true;
      };
      EXPECT_TRUE(dead_before(x, y.first) || dead_before(y, x.first))
          << g.node(x.value.node).name << " and " << g.node(y.value.node).name;
    }
  }
}

TEST(DataParallelPlanTest, MlpAllReducesRunOnTheirLaneAsSoonAsTheirBucketIsMade) {
  const autodiff::TrainingGraph t = MlpTraining(6, 96);
  for (int lanes : {1, 2}) {
    std::vector<GradientBucket> buckets;
    const passes::Plan plan = DataParallelPlan(t, 40000, lanes, &buckets);
    EXPECT_EQ(plan.lanes(), lanes + 1);
    ExpectDataParallelSchedule(plan, static_cast<int>(buckets.size()));
  }
}

TEST(DataParallelPlanTest, EachBucketHasItsOwnMultiTensorUpdate) {
  const autodiff::TrainingGraph t = MlpTraining(6, 96);
  std::vector<GradientBucket> buckets;
  const passes::Plan plan = DataParallelPlan(t, 40000, 2, &buckets);
  const Graph& g = plan.graph();
  int updates = 0;
  for (const passes::ScheduledLaunch& l : plan.launches) {
    const Node& node = g.node(l.node);
    if (node.op->kind != ir::OpKind::kOptimizer || !absl::StartsWith(node.name, "sgd")) continue;
    ++updates;
    absl::flat_hash_set<int32_t> sources;
    for (const Value& v : node.inputs) {
      if (g.node(v.node).op == &ops::AllReduceOp()) sources.insert(v.node);
    }
    EXPECT_EQ(sources.size(), 1u) << node.name;
  }
  // Buckets of a single tensor keep a plain update; the others have one multi-tensor update each.
  EXPECT_GE(updates, static_cast<int>(buckets.size()));
}

TEST(DataParallelPlanTest, MixedPrecisionAveragesBfloat16GradientsThenWidensThem) {
  auto mlp = models::BuildMlp({.batch = 8, .input_features = 32, .depth = 3, .width = 64});
  ASSERT_TRUE(mlp.ok());
  auto mixed = passes::ConvertToMixedPrecision(mlp->graph, mlp->loss, {}, DType::kBFloat16);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  const autodiff::TrainingGraph t = *autodiff::BuildTrainingGraph(mixed->graph, mixed->loss, {});
  std::vector<GradientBucket> buckets;
  const passes::Plan plan = DataParallelPlan(t, 8000, 2, &buckets);
  ASSERT_GT(buckets.size(), 1u);
  for (const GradientBucket& b : buckets) {
    EXPECT_EQ(b.dtype, DType::kBFloat16) << b.parameters[0];
    for (int32_t cast : b.widen) EXPECT_GE(cast, 0) << b.parameters[0];
  }
  // In the plan: every averaged value is widened to float32, by a cast on the communication lane
  // or (fused) inside the multi-tensor update that reads it.
  const Graph& g = plan.graph();
  int widened = 0;
  for (const passes::ScheduledLaunch& l : plan.launches) {
    const Node& node = g.node(l.node);
    for (const Value& v : node.inputs) {
      if (g.node(v.node).op != &ops::AllReduceOp()) continue;
      ++widened;
      if (node.op->kind == ir::OpKind::kOptimizer) {
        EXPECT_EQ(node.op_name(), "sgd_momentum_multi") << node.name;
        EXPECT_EQ(g.spec(v).dtype, DType::kBFloat16) << node.name;
      } else {
        EXPECT_EQ(l.lane, plan.lanes() - 1) << node.name;
        EXPECT_EQ(node.outputs[0].dtype, DType::kFloat32) << node.name;
      }
    }
  }
  EXPECT_EQ(widened, static_cast<int>(t.parameters.size()));
  ExpectDataParallelSchedule(plan, static_cast<int>(buckets.size()));
}

TEST(DataParallelPlanTest, ResNet18BucketsStartAtTheClassifierAndEndAtTheStem) {
  const autodiff::TrainingGraph t = ResNet18Training();
  for (int lanes : {2, 3}) {
    std::vector<GradientBucket> buckets;
    const passes::Plan plan = DataParallelPlan(t, int64_t{1} << 20, lanes, &buckets);
    ASSERT_GT(buckets.size(), 3u);
    EXPECT_THAT(buckets.front().parameters.front(), HasSubstr("fc."));
    EXPECT_THAT(buckets.back().parameters, ::testing::Contains("conv1.weight"));
    ExpectDataParallelSchedule(plan, static_cast<int>(buckets.size()));
  }
}

TEST(DataParallelPlanTest, ThePlanDumpShowsEachAllReduceOnTheCommunicationLane) {
  DumpRequest request;
  request.mlp = {.batch = 8, .input_features = 32, .depth = 3, .width = 64};
  request.lanes = 2;
  request.data_parallel_bucket_bytes = 10000;
  auto text = DumpModel(request);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, ::testing::ContainsRegex("lane 2 [^\n]*grad_allreduce.0 = all_reduce"));
  EXPECT_THAT(*text, ::testing::ContainsRegex("lane 2 [^\n]*grad_allreduce.1 = all_reduce"));
  request.stage = "cuda-graph";
  EXPECT_THAT(ValidateDumpRequest(request).message(), HasSubstr("--data_parallel_bucket_mb"));
}

TEST(DataParallelPlanTest, ShapeBucketsRefuseDataParallelism) {
  TrainOptions options;
  options.parallel.data_parallel = DataParallel{};
  auto trainer = BucketedTrainer::Create(
      [](int64_t batch) -> absl::StatusOr<BucketModel> {
        ASSIGN_OR_RETURN(models::Mlp mlp, models::BuildMlp({.batch = batch}));
        return BucketModel{std::move(mlp.graph), mlp.loss};
      },
      {8, 16}, options);
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(trainer.status().message(), HasSubstr("data_parallel"));
}

}  // namespace
}  // namespace reprise
