// Small graphs and checks the CPU tests share.
#ifndef REPRISE_TESTS_CPU_TEST_GRAPHS_H_
#define REPRISE_TESTS_CPU_TEST_GRAPHS_H_

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "reprise/graph.h"
#include "src/autodiff/autodiff.h"
#include "src/passes/pipeline.h"

namespace reprise::testing {

// Checks every parameter gradient that autodiff builds for `loss` against central finite
// differences of the loss, all in float64 on the CPU reference. `labels` feeds the int32 input
// named "labels"; float inputs get random values.
void ExpectGradientsMatchFiniteDifferences(const Graph& graph, Value loss,
                                           const std::vector<int32_t>& labels, uint64_t seed);
// The same with every int32 input named in `int_inputs` fed its values (e.g. a language model's
// "tokens" and "targets").
using IntInputs = std::vector<std::pair<std::string, std::vector<int32_t>>>;
void ExpectGradientsMatchFiniteDifferencesWithInputs(const Graph& graph, Value loss,
                                                     const IntInputs& int_inputs, uint64_t seed);

// Uniform(-1, 1): test parameters with values well away from zero on both sides.
Initializer TestInit();

// The training graph (SGD, learning rate 0.05) of a ResNet-18 small enough for the CPU
// reference: batch 2, 32x32 images, 3 classes, in `layout`.
autodiff::TrainingGraph SmallResNet18Training(Layout layout);

// The same ResNet-18, channels-last, compiled by the step compiler with `options`.
passes::CompiledStep CompileSmallResNet18(const passes::CompileOptions& options);

// `steps` steps of a small ResNet-18's training graph `g` on the CPU reference (float64 where
// `float64`, else float32), fed the same random images and labels whatever the graph: each step's
// loss, and in `*leaves` (unless null) every leaf of the kinds named after them (ReferenceLeaves).
std::vector<double> SmallResNetReferenceLosses(const Graph& g, Value loss, bool float64, int steps,
                                               std::initializer_list<const char*> kinds,
                                               std::map<std::string, std::vector<double>>* leaves);

// A compiled one's losses over three steps (float32, as above) and every parameter after them,
// by name.
struct ReferenceSteps {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> parameters;
};
ReferenceSteps ThreeReferenceSteps(const passes::CompiledStep& compiled);

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_CPU_TEST_GRAPHS_H_
