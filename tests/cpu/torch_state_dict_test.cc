// TorchStateDictNamesOf: the tensors SaveWeights writes with torch_compatible are exactly a torch
// module's state_dict() keys (parameters, buffers, num_batches_tracked), without optimizer state.
#include "src/api/torch_state_dict.h"

#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "src/autodiff/autodiff.h"
#include "src/ops/batch_norm.h"

namespace reprise {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::set<std::string> AllNames(const TorchStateDictNames& names) {
  std::set<std::string> all(names.tensors.begin(), names.tensors.end());
  all.insert(names.batch_counters.begin(), names.batch_counters.end());
  EXPECT_EQ(all.size(), names.tensors.size() + names.batch_counters.size()) << "a repeated name";
  return all;
}

// torchvision.models.resnet18().state_dict().keys(), built from its structure.
std::set<std::string> TorchvisionResNet18Keys() {
  std::set<std::string> keys;
  const auto conv = [&](const std::string& name) { keys.insert(name + ".weight"); };
  const auto bn = [&](const std::string& name) {
    for (const char* suffix :
         {".weight", ".bias", ".running_mean", ".running_var", ".num_batches_tracked"}) {
      keys.insert(name + suffix);
    }
  };
  conv("conv1");
  bn("bn1");
  for (int layer = 1; layer <= 4; ++layer) {
    for (int block = 0; block < 2; ++block) {
      const std::string prefix = "layer" + std::to_string(layer) + "." + std::to_string(block);
      conv(prefix + ".conv1");
      bn(prefix + ".bn1");
      conv(prefix + ".conv2");
      bn(prefix + ".bn2");
      if (layer > 1 && block == 0) {
        conv(prefix + ".downsample.0");
        bn(prefix + ".downsample.1");
      }
    }
  }
  keys.insert("fc.weight");
  keys.insert("fc.bias");
  return keys;
}

TEST(TorchStateDictTest, ResNet18IsTorchvisionsStateDict) {
  auto net = models::BuildResNet({.depth = 18, .batch = 2, .image_size = 32});
  ASSERT_TRUE(net.ok()) << net.status();
  const TorchStateDictNames names = TorchStateDictNamesOf(net->graph);
  EXPECT_EQ(AllNames(names), TorchvisionResNet18Keys());
  EXPECT_EQ(names.tensors.size(), 62u + 2 * 20u);
  EXPECT_EQ(names.batch_counters.size(), 20u);
}

TEST(TorchStateDictTest, LeavesOutTheOptimizersStateAndTheStepCounter) {
  auto net = models::BuildResNet({.depth = 18, .batch = 2, .image_size = 32});
  ASSERT_TRUE(net.ok()) << net.status();
  // The training graph has "<param>.momentum" and "rng.step" state; the user's graph has not.
  auto training = autodiff::BuildTrainingGraphWith(net->graph, net->loss, OptimizerOptions{});
  ASSERT_TRUE(training.ok()) << training.status();
  std::set<std::string> training_state;
  for (int32_t id : training->graph.NodesOf("state")) {
    training_state.insert(training->graph.node(id).name);
  }
  ASSERT_TRUE(training_state.contains("conv1.weight.momentum"));
  const std::set<std::string> torch = AllNames(TorchStateDictNamesOf(net->graph));
  for (const std::string& name : training_state) {
    const bool optimizer_state = name.ends_with(".momentum") || name == autodiff::kStepCounter;
    EXPECT_EQ(torch.contains(name), !optimizer_state) << name;
  }
}

TEST(TorchStateDictTest, MlpHasParametersOnly) {
  auto mlp = models::BuildMlp({.batch = 4, .input_features = 3, .depth = 1, .width = 8});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  const TorchStateDictNames names = TorchStateDictNamesOf(mlp->graph);
  EXPECT_THAT(names.tensors, ElementsAre("fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias"));
  EXPECT_THAT(names.batch_counters, IsEmpty());
}

TEST(TorchStateDictTest, DropoutsStepCounterIsNoBuffer) {
  Graph g;
  auto x = g.AddInput("x", {Shape{4, 8}});
  ASSERT_TRUE(x.ok());
  auto h = nn::Linear(g, *x, 8, "fc");
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(nn::Dropout(g, *h, 0.5, "drop").ok());
  ASSERT_TRUE(g.FindNode(autodiff::kStepCounter).ok());
  EXPECT_THAT(TorchStateDictNamesOf(g).tensors, ElementsAre("fc.weight", "fc.bias"));
}

TEST(TorchStateDictTest, CounterSitsBesideTheRunningStatistics) {
  Graph g;
  auto x = g.AddInput("x", {Shape{2, 3, 4, 4}});
  ASSERT_TRUE(x.ok());
  ASSERT_TRUE(nn::BatchNorm(g, *x, "features.1").ok());
  EXPECT_THAT(TorchStateDictNamesOf(g).batch_counters,
              ElementsAre("features.1.num_batches_tracked"));
}

TEST(TorchStateDictTest, StatisticsNamedOtherwiseGiveTheCounterTheBatchNormsName) {
  Graph g;
  const TensorSpec channels{Shape{3}};
  auto x = g.AddInput("x", {Shape{2, 3, 4, 4}});
  auto gamma = g.AddParameter("gamma", channels, Initializer::Constant(1));
  auto beta = g.AddParameter("beta", channels, Initializer::Zeros());
  auto mean = g.AddState("mean", channels, Initializer::Zeros());
  auto var = g.AddState("var", channels, Initializer::Constant(1));
  ASSERT_TRUE(x.ok() && gamma.ok() && beta.ok() && mean.ok() && var.ok());
  auto y = g.AddOp(ops::BatchNormTrainOp(), "norm", {*x, *gamma, *beta, *mean, *var},
                   {{"epsilon", 1e-5}, {"momentum", 0.1}, {"layout", std::string("NCHW")}});
  ASSERT_TRUE(y.ok()) << y.status();
  const TorchStateDictNames names = TorchStateDictNamesOf(g);
  EXPECT_THAT(names.tensors, ElementsAre("gamma", "beta", "mean", "var"));
  EXPECT_THAT(names.batch_counters, ElementsAre("norm.num_batches_tracked"));
}

}  // namespace
}  // namespace reprise
