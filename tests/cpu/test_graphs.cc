#include "tests/cpu/test_graphs.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/initializer.h"
#include "src/ir/reference_executor.h"
#include "tests/cpu/reference_runs.h"

namespace reprise::testing {

Initializer TestInit() { return Initializer::Uniform(-1.0, 1.0); }

autodiff::TrainingGraph SmallResNet18Training(Layout layout) {
  auto net = models::BuildResNet(
      {.depth = 18, .batch = 2, .classes = 3, .image_size = 32, .layout = layout});
  EXPECT_TRUE(net.ok()) << net.status();
  auto training = autodiff::BuildTrainingGraph(net->graph, net->loss, {.learning_rate = 0.05f});
  EXPECT_TRUE(training.ok()) << training.status();
  return *std::move(training);
}

passes::CompiledStep CompileSmallResNet18(const passes::CompileOptions& options) {
  auto net = models::BuildResNet(
      {.depth = 18, .batch = 2, .classes = 3, .image_size = 32, .layout = Layout::kNHWC});
  EXPECT_TRUE(net.ok()) << net.status();
  auto compiled = passes::CompileStep(net->graph, net->loss, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return *std::move(compiled);
}

std::vector<double> SmallResNetReferenceLosses(const Graph& g, Value loss, bool float64, int steps,
                                               std::initializer_list<const char*> kinds,
                                               std::map<std::string, std::vector<double>>* leaves) {
  ir::ReferenceExecutor cpu(g, float64, 7);
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  std::vector<double> images(2 * 32 * 32 * 3), losses;
  for (int step = 0; step < steps; ++step) {
    for (double& v : images) v = normal(rng);
    EXPECT_TRUE(cpu.SetLeaf("images", images).ok());
    EXPECT_TRUE(cpu.SetLeaf("labels", std::vector<int32_t>{step % 3, 2}).ok());
    EXPECT_TRUE(cpu.Run().ok());
    const ir::HostTensor* value = *cpu.Tensor(loss);
    losses.push_back(float64 ? value->data<double>()[0] : value->data<float>()[0]);
  }
  if (leaves != nullptr) *leaves = ReferenceLeaves(g, cpu, float64, kinds);
  return losses;
}

ReferenceSteps ThreeReferenceSteps(const passes::CompiledStep& compiled) {
  std::map<std::string, std::vector<double>> parameters;
  const std::vector<double> losses =
      SmallResNetReferenceLosses(compiled.plan.graph(), compiled.plan.training.loss,
                                 /*float64=*/false, 3, {"parameter"}, &parameters);
  ReferenceSteps steps;
  steps.losses.assign(losses.begin(), losses.end());  // float32 values: exact both ways.
  for (const auto& [name, values] : parameters) {
    steps.parameters[name].assign(values.begin(), values.end());
  }
  return steps;
}

void ExpectGradientsMatchFiniteDifferences(const Graph& graph, Value loss,
                                           const std::vector<int32_t>& labels, uint64_t seed) {
  IntInputs int_inputs;
  if (!labels.empty()) int_inputs.push_back({"labels", labels});
  ExpectGradientsMatchFiniteDifferencesWithInputs(graph, loss, int_inputs, seed);
}

void ExpectGradientsMatchFiniteDifferencesWithInputs(const Graph& graph, Value loss,
                                                     const IntInputs& int_inputs, uint64_t seed) {
  auto training = autodiff::BuildBackward(graph, loss);
  ASSERT_TRUE(training.ok()) << training.status();
  ir::ReferenceExecutor exec(training->graph, /*float64=*/true, seed);
  for (const auto& [name, values] : int_inputs) {
    ASSERT_TRUE(exec.SetLeaf(name, values).ok()) << name;
  }
  for (int32_t id : graph.NodesOf("input")) {  // Random features: zeros would hide gradients.
    if (graph.node(id).outputs[0].dtype == DType::kInt32) continue;
    ir::FillInitial(TestInit(), seed, graph.node(id).name, **exec.Leaf(graph.node(id).name));
  }
  ASSERT_TRUE(exec.Run().ok());
  ASSERT_FALSE(training->parameters.empty());
  for (int32_t param : training->parameters) {
    const std::string name = training->graph.node(param).name;
    auto grad = exec.Tensor(training->gradients.at(param));
    ASSERT_TRUE(grad.ok());
    const std::vector<double> analytic((*grad)->data<double>().begin(),
                                       (*grad)->data<double>().end());
    auto w = exec.Leaf(name);
    ASSERT_TRUE(w.ok());
    auto values = (*w)->data<double>();
    const double h = 1e-6;
    for (size_t i = 0; i < values.size(); ++i) {
      const double saved = values[i];
      auto loss_at = [&](double x) {
        values[i] = x;
        EXPECT_TRUE(exec.Run().ok());
        return (*exec.Tensor(loss))->data<double>()[0];
      };
      const double numeric = (loss_at(saved + h) - loss_at(saved - h)) / (2 * h);
      values[i] = saved;
      EXPECT_NEAR(analytic[i], numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
          << name << "[" << i << "]";
    }
  }
}

}  // namespace reprise::testing
