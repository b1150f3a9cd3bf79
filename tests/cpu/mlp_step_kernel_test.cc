// The fused MLP-step kernel generator without a GPU: plans stay within shared memory, every
// generated kernel compiles with NVRTC for sm_90 (tiny odd shapes, one layer, unaligned tensors,
// the two benchmark MLPs), and the workspace layout is the documented one.
#include "src/codegen/mlp_step_kernel.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/codegen/mlp_cluster_kernel.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/kernel_store.h"

namespace reprise {
namespace {

using ::testing::HasSubstr;

struct Shape {
  int64_t batch;
  std::vector<int64_t> widths;  // F, out_0, ..., out_{L-1}.
  bool aligned;
};

// Each shape planned for strict f32, then with TF32 tensor cores allowed.
template <class T>
std::vector<std::pair<T, bool>> WithAndWithoutTf32(const std::vector<T>& shapes) {
  std::vector<std::pair<T, bool>> all;
  for (bool tf32 : {false, true}) {
    for (const T& s : shapes) all.emplace_back(s, tf32);
  }
  return all;
}

// NVRTC's log of a generated kernel holds no warning (an unused variable, a narrowing): the
// generators emit only what each shape reads.
void ExpectNoWarnings(const runtime::CompiledKernel& compiled) {
  EXPECT_EQ(compiled.log.find("warning"), std::string::npos) << compiled.log;
}

TEST(MlpStepKernelTest, GeneratedKernelCompilesForSm90) {
  const std::vector<Shape> shapes = {
      {32, {256, 256, 256, 256, 256, 256, 256, 256, 256, 10}, true},
      {5, {3, 7, 7, 3}, true},
      {5, {3, 7, 7, 3}, false},
      {256, {1024, 1024, 1024, 1024, 1024, 10}, true},
      {7, {12, 4}, true},
      {1, {1, 1, 2}, false},
  };
  for (const auto& [s, tf32] : WithAndWithoutTf32(shapes)) {
    codegen::MlpStepTarget target;
    target.aligned = s.aligned;
    target.tf32 = tf32;
    target.schedule = codegen::MlpSchedule::kLayerPhases;
    auto plan = codegen::PlanMlpStep(s.batch, s.widths, target);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_LE(plan->shared_bytes, target.max_shared_bytes);
    const int layers = plan->layers();
    EXPECT_EQ(plan->phases, layers == 1 ? 2 : 2 * layers - 1);
    EXPECT_EQ(plan->barriers, plan->phases - 1);
    const codegen::GeneratedKernel kernel = codegen::MlpStepKernel(*plan);
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    EXPECT_FALSE(compiled->cubin.empty());
    ExpectNoWarnings(*compiled);
  }
}

TEST(MlpStepKernelTest, TilesCoverEveryGemmOfTheStep) {
  codegen::MlpStepTarget layer_phases;
  layer_phases.schedule = codegen::MlpSchedule::kLayerPhases;
  auto plan = codegen::PlanMlpStep(32, {256, 256, 256, 10}, layer_phases);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->forward.size(), 2u);
  for (const codegen::MlpGemmTile& t : plan->forward) {
    EXPECT_EQ(t.tiles, (32 + t.tm - 1) / t.tm * ((256 + t.tn - 1) / t.tn));
    EXPECT_LE(t.tiles, 132);  // One round on an H100.
  }
  EXPECT_GT(plan->dgrad[1].tiles, 0);  // Layer 2's dgrad is in the head; layer 0 has none.
  for (int l = 0; l < 3; ++l) EXPECT_GT(plan->wgrad[l].tiles, 0) << l;
  EXPECT_EQ(plan->head_rows, 1);
}

TEST(MlpStepKernelTest, WorkspaceHoldsActivationsGradientsAndRowLosses) {
  // Rows 32: losses 32; h_1 8192; dz_0 8192, dz_1 320; each rounded up to 32 floats.
  EXPECT_EQ(codegen::MlpStepWorkspaceFloats(32, {256, 256, 10}), 32 + 8192 + 8192 + 320);
  EXPECT_EQ(codegen::MlpStepWorkspaceFloats(5, {3, 7, 3}), 32 + 64 + 64 + 32);
  auto plan = codegen::PlanMlpStep(5, {3, 7, 3}, codegen::MlpStepTarget{});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->workspace_floats, 32 + 64 + 64 + 32);
  EXPECT_EQ(plan->h_offset[1] % 32, 0);
  EXPECT_EQ(plan->dz_offset[1] % 32, 0);
  EXPECT_EQ(plan->row_loss_offset % 32, 0);
}

TEST(MlpStepKernelTest, LimitsAreUnimplementedAndSayWhich) {
  const codegen::MlpStepTarget h100;
  auto too_many_classes = codegen::PlanMlpStep(8, {1024, 1024, 56}, h100);
  EXPECT_EQ(too_many_classes.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(too_many_classes.status().message(), HasSubstr("56 classes x 1024 inputs"));
  EXPECT_TRUE(codegen::PlanMlpStep(8, {1024, 1024, 55}, h100).ok());
  auto big_batch = codegen::PlanMlpStep(65537, {4, 4, 2}, h100);
  EXPECT_THAT(big_batch.status().message(), HasSubstr("batch 65537"));
  EXPECT_EQ(codegen::PlanMlpStep(0, {4, 2}, h100).status().code(),
            absl::StatusCode::kInvalidArgument);
}

struct EnsembleShape {
  int64_t models;
  int64_t batch;
  std::vector<int64_t> widths;
  bool aligned, shared_features, shared_labels;
};

// The ensemble form: K models' tasks per phase, shared or stacked inputs, odd and unaligned
// shapes, one layer, the issue's benchmark at K = 4, 32 and 128.
TEST(MlpStepKernelTest, BatchedKernelCompilesForSm90) {
  const std::vector<EnsembleShape> shapes = {
      {32, 64, {64, 256, 256, 10}, true, false, false},
      {4, 64, {64, 256, 256, 10}, true, false, false},
      {128, 64, {64, 256, 256, 10}, true, false, false},
      {3, 5, {3, 7, 7, 3}, false, false, false},
      {2, 5, {3, 7, 7, 3}, true, true, true},
      {5, 7, {12, 4}, true, true, false},
      {2, 1, {1, 1, 2}, false, false, true},
  };
  for (const auto& [s, tf32] : WithAndWithoutTf32(shapes)) {
    for (codegen::MlpSchedule schedule :
         {codegen::MlpSchedule::kLayerPhases, codegen::MlpSchedule::kRowChain}) {
      codegen::MlpStepTarget target;
      target.aligned = s.aligned;
      target.tf32 = tf32;
      target.schedule = schedule;
      auto plan = codegen::PlanMlpStep(s.batch, s.widths, target, s.models);
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_EQ(plan->row_chain, schedule == codegen::MlpSchedule::kRowChain);
      EXPECT_EQ(plan->models, s.models);
      EXPECT_LE(plan->shared_bytes, target.max_shared_bytes);
      const codegen::GeneratedKernel kernel =
          codegen::BatchedMlpStepKernel(*plan, s.shared_features, s.shared_labels);
      EXPECT_EQ(kernel.name, "reprise_batched_mlp_step");
      auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
      ASSERT_TRUE(compiled.ok()) << s.models << " models of batch " << s.batch
                                 << (tf32 ? ", TF32" : "")
                                 << (plan->row_chain ? ", row chain: " : ": ") << compiled.status();
      EXPECT_FALSE(compiled->cubin.empty());
      ExpectNoWarnings(*compiled);
    }
  }
}

// The row chain: two phases whatever the depth; phase 0's GEMM tiles span exactly one row block
// (head_rows rows), so a task's rows pass through every layer; the default takes it for
// ensembles of kRowChainMinModels models or more that do not fit the cluster schedule; asked for
// where no row block fits, it is a clear error.
TEST(MlpStepKernelTest, RowChainPlansTwoPhasesOfRowBlockTiles) {
  codegen::MlpStepTarget target;
  target.schedule = codegen::MlpSchedule::kRowChain;
  for (bool tf32 : {false, true}) {
    target.tf32 = tf32;
    auto plan = codegen::PlanMlpStep(64, {64, 256, 256, 256, 10}, target, 32);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(plan->row_chain);
    EXPECT_EQ(plan->phases, 2);
    EXPECT_EQ(plan->barriers, 1);
    for (int l = 0; l < 3; ++l) EXPECT_EQ(plan->forward[l].tm, plan->head_rows) << l;
    for (int l = 1; l < 3; ++l) EXPECT_EQ(plan->dgrad[l].tm, plan->head_rows) << l;
    EXPECT_EQ(plan->wgrad.size(), 4u);
  }
  // The default: for ensembles of kGroupsMinModels or more, groups wherever a model fits in 8
  // blocks' shared memory; for TF32 ensembles of kClusterMinModels or more, clusters there;
  // otherwise (strict f32 and fewer models, or 1024 wide: 4 MB of W_1) the row chain from
  // kRowChainMinModels models, else layer phases.
  for (bool tf32 : {false, true}) {
    codegen::MlpStepTarget automatic;
    automatic.tf32 = tf32;
    for (int64_t models : {1, 7, 8, 31, 32, 128}) {
      auto plan = codegen::PlanMlpStep(64, {64, 256, 256, 10}, automatic, models);
      ASSERT_TRUE(plan.ok()) << plan.status();
      const bool grouped = models >= codegen::kGroupsMinModels;
      const bool clustered = grouped || (tf32 && models >= codegen::kClusterMinModels);
      EXPECT_EQ(plan->cluster > 0, clustered) << models;
      EXPECT_EQ(plan->groups > 0, grouped) << models;
      EXPECT_EQ(plan->row_chain, !clustered && models >= codegen::kRowChainMinModels) << models;
      auto wide = codegen::PlanMlpStep(64, {64, 1024, 1024, 10}, automatic, models);
      ASSERT_TRUE(wide.ok()) << wide.status();
      EXPECT_EQ(wide->cluster, 0) << models;
      EXPECT_EQ(wide->row_chain, models >= codegen::kRowChainMinModels) << models;
    }
  }
  target.chain_rows = 24;
  EXPECT_EQ(codegen::PlanMlpStep(64, {64, 256, 10}, target, 32).status().code(),
            absl::StatusCode::kInvalidArgument);
  target.chain_rows = 16;
  auto sixteen = codegen::PlanMlpStep(64, {64, 256, 256, 10}, target, 32);
  ASSERT_TRUE(sixteen.ok()) << sixteen.status();
  EXPECT_EQ(sixteen->head_rows, 16);
  target.chain_rows = 0;
  target.max_shared_bytes = 8 * 1024;
  const auto too_small = codegen::PlanMlpStep(64, {64, 256, 256, 10}, target, 32);
  EXPECT_EQ(too_small.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(too_small.status().message(), HasSubstr("row-chain"));
}

// Layer phases: at the issue's shapes every large phase has K * tiles tasks enough to keep an
// H100's 132 SMs busy, in rounds that are nearly full.
TEST(MlpStepKernelTest, EnsembleTilesFillTheGrid) {
  codegen::MlpStepTarget h100;
  h100.schedule = codegen::MlpSchedule::kLayerPhases;
  for (int64_t models : {4, 32, 128}) {
    auto plan = codegen::PlanMlpStep(64, {64, 256, 256, 10}, h100, models);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const int64_t forward1 = models * plan->forward[1].tiles;
    const int64_t backward0 = models * (plan->dgrad[1].tiles + plan->wgrad[2].tiles);
    const int64_t backward1 = models * (plan->wgrad[1].tiles + plan->wgrad[0].tiles);
    const int64_t head = models * ((64 + plan->head_rows - 1) / plan->head_rows);
    for (int64_t tasks : {forward1, backward0, backward1, head}) {
      const int64_t rounds = (tasks + h100.grid - 1) / h100.grid;
      EXPECT_GE(tasks, 0.9 * h100.grid) << models << " models";
      EXPECT_LE(rounds * h100.grid, 1.25 * tasks) << models << " models, " << tasks << " tasks";
    }
  }
}

// TF32 moves the large GEMMs onto tensor cores (16 x 8 fragments) and leaves strict f32 plans
// on exact FMAs; odd reductions are zero-padded to the 8-deep steps.
TEST(MlpStepKernelTest, Tf32PlansPutTheLargeGemmsOnTensorCores) {
  codegen::MlpStepTarget target;
  target.schedule = codegen::MlpSchedule::kLayerPhases;
  for (int64_t models : {1, 32}) {
    target.tf32 = false;
    auto f32 = codegen::PlanMlpStep(64, {64, 256, 256, 10}, target, models);
    target.tf32 = true;
    auto tf32 = codegen::PlanMlpStep(64, {64, 256, 256, 10}, target, models);
    ASSERT_TRUE(f32.ok() && tf32.ok());
    for (const auto* tiles : {&f32->forward, &f32->wgrad}) {
      for (const codegen::MlpGemmTile& t : *tiles) EXPECT_FALSE(t.mma);
    }
    EXPECT_TRUE(tf32->forward[1].mma) << models;
    EXPECT_TRUE(tf32->dgrad[1].mma) << models;
    EXPECT_TRUE(tf32->wgrad[1].mma) << models;
    for (const auto* tiles : {&tf32->forward, &tf32->dgrad, &tf32->wgrad}) {
      for (const codegen::MlpGemmTile& t : *tiles) {
        if (!t.mma) continue;
        EXPECT_EQ(t.tm % (16 * t.rm), 0);
        EXPECT_EQ(t.tn % (8 * t.rn), 0);
        EXPECT_LE((t.tm / (16 * t.rm)) * (t.tn / (8 * t.rn)) * t.split, target.threads / 32);
      }
    }
  }
}

TEST(MlpStepKernelTest, EnsembleWorkspaceStacksEveryBufferPerModel) {
  // K = 3, rows 3 * 5 = 15: losses 32; h_1 [15, 7] 128; dz_0 128, dz_1 [15, 3] 64.
  EXPECT_EQ(codegen::MlpStepWorkspaceFloats(5, {3, 7, 3}, 3), 32 + 128 + 128 + 64);
  auto plan = codegen::PlanMlpStep(5, {3, 7, 3}, codegen::MlpStepTarget{}, 3);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->workspace_floats, 32 + 128 + 128 + 64);
  EXPECT_EQ(plan->h_offset[1], 0);
  EXPECT_EQ(plan->dz_offset[0], 128);
  EXPECT_EQ(plan->dz_offset[1], 256);
  EXPECT_EQ(plan->row_loss_offset, 320);
  // The cooperative schedules' loss sums need one float of shared memory per model (at least 32).
  codegen::MlpStepTarget layer_phases;
  layer_phases.schedule = codegen::MlpSchedule::kLayerPhases;
  auto few = codegen::PlanMlpStep(5, {3, 7, 3}, layer_phases, 3);
  auto many = codegen::PlanMlpStep(5, {3, 7, 3}, layer_phases, 1000);
  ASSERT_TRUE(few.ok() && many.ok()) << many.status();
  EXPECT_GE(many->shared_bytes - few->shared_bytes, (1000 - 32) * 4);
  EXPECT_EQ(codegen::PlanMlpStep(5, {3, 7, 3}, codegen::MlpStepTarget{}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  const auto too_many = codegen::PlanMlpStep(5, {3, 7, 3}, codegen::MlpStepTarget{}, 8193);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(too_many.status().message(), HasSubstr("8193 models"));
}

// The cluster schedule: the ensemble test's shapes, a single MLP, and a four-layer unaligned one
// (column-, row-, column-parallel, then a row-parallel head) plan within shared memory and compile,
// f32 and TF32.
// The plan of `schedule` for shape `s`, and whether its kernel compiles for sm_90.
absl::StatusOr<codegen::MlpStepPlan> PlanOf(const EnsembleShape& s, bool tf32,
                                            codegen::MlpSchedule schedule) {
  codegen::MlpStepTarget target;
  target.aligned = s.aligned;
  target.tf32 = tf32;
  target.schedule = schedule;
  return codegen::PlanMlpStep(s.batch, s.widths, target, s.models);
}
void ExpectCompiles(const codegen::MlpStepPlan& plan, const EnsembleShape& s, bool tf32) {
  const codegen::GeneratedKernel kernel =
      s.models == 1 ? codegen::MlpStepKernel(plan)
                    : codegen::BatchedMlpStepKernel(plan, s.shared_features, s.shared_labels);
  auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
  ASSERT_TRUE(compiled.ok()) << s.models << " models of batch " << s.batch
                             << (tf32 ? ", TF32: " : ": ") << compiled.status();
  EXPECT_FALSE(compiled->cubin.empty());
  ExpectNoWarnings(*compiled);
}

TEST(MlpStepKernelTest, ClusterKernelCompilesForSm90) {
  const std::vector<EnsembleShape> shapes = {
      {32, 64, {64, 256, 256, 10}, true, false, false},
      {4, 64, {64, 256, 256, 10}, true, false, false},
      {3, 5, {3, 7, 7, 3}, false, false, false},
      {2, 5, {3, 7, 7, 3}, true, true, true},
      {5, 7, {12, 4}, true, true, false},
      {2, 1, {1, 1, 2}, false, false, true},
      {6, 17, {33, 45, 45, 45, 7}, false, false, false},
      {1, 32, {256, 256, 256, 256, 10}, true, false, false},
  };
  for (const auto& [s, tf32] : WithAndWithoutTf32(shapes)) {
    auto plan = PlanOf(s, tf32, codegen::MlpSchedule::kCluster);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_GE(plan->cluster, 1);
    EXPECT_LE(plan->cluster, 8);
    EXPECT_EQ(plan->grid(), s.models * plan->cluster);
    EXPECT_LE(plan->shared_bytes, plan->target.max_shared_bytes);
    ExpectCompiles(*plan, s, tf32);
  }
}

// The group schedule: the cluster kernel's layout in one cooperative launch, every model at once
// where the grid holds a group per model (32 issue-9 models on an H100's 132 SMs), else in
// rounds; each group's exchange area fits in the workspace; the kernels compile.
TEST(MlpStepKernelTest, GroupKernelsCompileForSm90AndFitTheGridAndWorkspace) {
  const std::vector<EnsembleShape> shapes = {
      {32, 64, {64, 256, 256, 10}, true, false, false},
      {128, 64, {64, 256, 256, 10}, true, false, false},
      {3, 5, {3, 7, 7, 3}, false, true, true},
      {6, 17, {33, 45, 45, 45, 7}, false, false, false},
      {2, 9, {6, 8, 4}, true, true, true},
  };
  for (const auto& [s, tf32] : WithAndWithoutTf32(shapes)) {
    auto plan = PlanOf(s, tf32, codegen::MlpSchedule::kGroups);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_GE(plan->groups, 1);
    EXPECT_LE(plan->groups, s.models);
    EXPECT_LE(plan->grid(), plan->target.grid);
    EXPECT_EQ(plan->grid(), plan->groups * plan->cluster);
    EXPECT_LE(plan->groups * plan->exchange_areas * codegen::GroupAreaFloats(*plan),
              plan->workspace_floats);
    EXPECT_LE(plan->groups + 2, codegen::kMlpStepBarrierWords);
    ExpectCompiles(*plan, s, tf32);
  }
  codegen::MlpStepTarget h100;
  h100.schedule = codegen::MlpSchedule::kGroups;
  auto issue9 = codegen::PlanMlpStep(64, {64, 256, 256, 10}, h100, 32);
  ASSERT_TRUE(issue9.ok()) << issue9.status();
  EXPECT_EQ(issue9->cluster, 4);
  EXPECT_EQ(issue9->groups, 32);  // One wave: hardware clusters of 4 hold 30.
  // A lone layer's workspace (its loss gradient) holds no exchange area of 16 x 16 floats.
  const auto lone = codegen::PlanMlpStep(9, {6, 4}, h100, 2);
  EXPECT_EQ(lone.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(lone.status().message(), HasSubstr("exchange area"));
}

// Occurrences of `needle` in `text`.
int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// From 32 models the workspace holds two exchange areas per group: consecutive exchanges
// alternate, so each needs one group barrier (after its publish) instead of two, except a
// model's first where a model has an odd count. Only groups stage the weight step through
// h_{l+1}'s buffer: a cluster's head reads that buffer remotely with no barrier after.
TEST(MlpStepKernelTest, GroupExchangesAlternateAreasAndOnlyGroupsStageTheWeightStep) {
  codegen::MlpStepTarget target;
  target.tf32 = true;
  target.schedule = codegen::MlpSchedule::kGroups;
  const std::string kBarrier = "GroupSync(group_word, rank);";
  struct Case {
    int models;
    std::vector<int64_t> widths;
    int areas, barriers;  // Two exchanges per model with two hidden layers, one with one.
  };
  for (const Case& c : std::vector<Case>{{32, {64, 256, 256, 10}, 2, 2},
                                         {4, {64, 256, 256, 10}, 1, 4},
                                         {32, {64, 512, 10}, 2, 2}}) {
    auto plan = codegen::PlanMlpStep(64, c.widths, target, c.models);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->exchange_areas, c.areas) << c.models << " models";
    const std::string code = codegen::BatchedMlpStepKernel(*plan, false, false).code;
    EXPECT_EQ(Count(code, kBarrier), c.barriers) << c.models << " models";
    if (c.widths.size() == 4) EXPECT_GT(Count(code, "SgdRows<"), 0);
  }
  target.schedule = codegen::MlpSchedule::kCluster;
  auto clusters = codegen::PlanMlpStep(64, {64, 256, 256, 10}, target, 32);
  ASSERT_TRUE(clusters.ok()) << clusters.status();
  EXPECT_EQ(Count(codegen::BatchedMlpStepKernel(*clusters, false, false).code, "SgdRows<"), 0);
}

// Blocks per model: the fewest whose shared memory fits, doubled while the models fill at most a
// quarter of the grid; a model too large for 8 blocks is a clear error.
TEST(MlpStepKernelTest, ClusterSizeFollowsSharedMemoryAndModels) {
  codegen::MlpStepTarget h100;
  h100.schedule = codegen::MlpSchedule::kCluster;
  for (const auto& [models, ranks] :
       std::vector<std::pair<int64_t, int>>{{4, 8}, {32, 4}, {128, 4}}) {
    auto plan = codegen::PlanMlpStep(64, {64, 256, 256, 10}, h100, models);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->cluster, ranks) << models << " models";
  }
  auto tiny = codegen::PlanMlpStep(5, {3, 7, 7, 3}, h100, 64);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->cluster, 1);  // 64 models fill half the grid already.
  // Eight 256 x 256 weights are 2 MB: 256 KB per block at 8 blocks.
  const auto too_big =
      codegen::PlanMlpStep(32, {256, 256, 256, 256, 256, 256, 256, 256, 256, 10}, h100, 1);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(too_big.status().message(), HasSubstr("cluster schedule"));
  h100.threads = 128;
  EXPECT_EQ(codegen::PlanMlpStep(64, {64, 256, 256, 10}, h100, 4).status().code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace reprise
