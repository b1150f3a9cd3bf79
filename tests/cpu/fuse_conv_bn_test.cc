// The fuse pass's conv + batch norm rule (FuseOptions::conv_batch_norm_stats) on a ResNet in
// either layout: every convolution normalised by a training batch norm becomes one
// conv2d_bn_train node with that batch norm's add and ReLU, the backward is fused as before, and
// the fused step computes the same bits as the unfused one on the CPU reference. Off by default.
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/op_def.h"
#include "src/ir/reference_executor.h"
#include "src/ops/conv_bn.h"
#include "src/passes/fuse.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

std::map<std::string, int> OpCounts(const Graph& g) {
  std::map<std::string, int> counts;
  for (const Node& n : g.nodes()) {
    if (!ir::IsLeaf(n)) ++counts[std::string(n.op_name())];
  }
  return counts;
}

passes::FuseOptions WithConvStats() {
  passes::FuseOptions options;
  options.conv_batch_norm_stats = true;
  return options;
}

class FuseConvBatchNormTest : public ::testing::TestWithParam<Layout> {};

TEST_P(FuseConvBatchNormTest, ConvolutionsTakeTheirBatchNormsAddsAndRelus) {
  const autodiff::TrainingGraph t = testing::SmallResNet18Training(GetParam());
  auto fused = passes::Fuse(t, {t.loss}, WithConvStats());
  ASSERT_TRUE(fused.ok()) << fused.status();
  const std::map<std::string, int> counts = OpCounts(fused->training.graph);
  // The stem, two per basic block and the three downsampling shortcuts.
  EXPECT_EQ(counts.at("conv2d_bn_train"), 20);
  EXPECT_EQ(counts.count("conv2d"), 0u);
  EXPECT_EQ(counts.count("batch_norm_train"), 0u);
  EXPECT_EQ(counts.count("batch_norm_act_train"), 0u);
  EXPECT_EQ(counts.count("relu"), 0u);
  // The backward is the batch-norm rule's as without this one.
  EXPECT_EQ(counts.at("batch_norm_act_grad"), 17);
  EXPECT_EQ(counts.at("batch_norm_grad"), 3);
  int with_relu = 0, with_residual = 0;
  for (const Node& n : fused->training.graph.nodes()) {
    if (n.op != &ops::Conv2dBatchNormTrainOp()) continue;
    with_relu += ir::BoolAttrOr(n.attrs, "relu", false);
    with_residual += ir::BoolAttrOr(n.attrs, "residual", false);
    EXPECT_EQ(n.inputs.size(), ir::BoolAttrOr(n.attrs, "residual", false) ? 7u : 6u) << n.name;
  }
  EXPECT_EQ(with_relu, 17);
  EXPECT_EQ(with_residual, 8);

  auto plain = passes::Fuse(t, {t.loss}, {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(OpCounts(plain->training.graph).count("conv2d_bn_train"), 0u);
}

std::vector<double> LossesOf(const Graph& g, Value loss, bool float64,
                             std::map<std::string, std::vector<double>>* state) {
  ir::ReferenceExecutor cpu(g, float64, 7);
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  std::vector<double> x(2 * 32 * 32 * 3), losses;
  for (int step = 0; step < 2; ++step) {
    for (double& v : x) v = normal(rng);
    EXPECT_TRUE(cpu.SetLeaf("images", x).ok());
    EXPECT_TRUE(cpu.SetLeaf("labels", std::vector<int32_t>{step % 3, 2}).ok());
    EXPECT_TRUE(cpu.Run().ok());
    const ir::HostTensor* value = *cpu.Tensor(loss);
    losses.push_back(float64 ? value->data<double>()[0] : value->data<float>()[0]);
  }
  // Parameters and the running statistics the fused nodes update in place.
  for (const char* kind : {"parameter", "state"}) {
    for (int32_t id : g.NodesOf(kind)) {
      const ir::HostTensor* p = *cpu.Tensor({id, 0});
      std::vector<double>& out = (*state)[g.node(id).name];
      for (int64_t i = 0; i < p->size(); ++i) {
        out.push_back(float64 ? p->data<double>()[i] : p->data<float>()[i]);
      }
    }
  }
  return losses;
}

TEST_P(FuseConvBatchNormTest, FusedStepsGiveTheSameBitsOnTheCpuReference) {
  const autodiff::TrainingGraph t = testing::SmallResNet18Training(GetParam());
  auto fused = passes::Fuse(t, {t.loss}, WithConvStats());
  ASSERT_TRUE(fused.ok()) << fused.status();
  for (bool float64 : {false, true}) {
    std::map<std::string, std::vector<double>> plain_state, fused_state;
    EXPECT_EQ(LossesOf(t.graph, t.loss, float64, &plain_state),
              LossesOf(fused->training.graph, fused->training.loss, float64, &fused_state));
    EXPECT_EQ(plain_state, fused_state);
  }
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, FuseConvBatchNormTest,
                         ::testing::Values(Layout::kNHWC, Layout::kNCHW),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           return std::string(LayoutName(info.param));
                         });

}  // namespace
}  // namespace reprise
