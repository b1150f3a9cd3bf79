// What the CPU tests that train on the reference executor share: a small MLP's batch of each step
// (fuse_test, fuse_optimizer_test, sixteen_bit_gradients_test), and the parameters and state a
// run leaves.
#ifndef REPRISE_TESTS_CPU_REFERENCE_RUNS_H_
#define REPRISE_TESTS_CPU_REFERENCE_RUNS_H_

#include <cstdint>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/ir/reference_executor.h"

namespace reprise::testing {

// Step `s`'s batch: "features" uniform in [-1, 1) drawn from `rng`, "labels" (i·7 + s) mod 10.
inline void SetMlpBatch(ir::ReferenceExecutor& cpu, std::mt19937& rng, int s) {
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<double> x((*cpu.Leaf("features"))->spec().NumElements());
  for (double& v : x) v = uniform(rng);
  std::vector<int32_t> labels((*cpu.Leaf("labels"))->spec().NumElements());
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>((i * 7 + s) % 10);
  EXPECT_TRUE(cpu.SetLeaf("features", x).ok());
  EXPECT_TRUE(cpu.SetLeaf("labels", labels).ok());
}

// Every leaf of `g` of the kinds named ("parameter", "state") as the reference holds it (float64
// where `float64`, else float32), widened to double, by name.
inline std::map<std::string, std::vector<double>> ReferenceLeaves(
    const Graph& g, ir::ReferenceExecutor& cpu, bool float64,
    std::initializer_list<const char*> kinds = {"parameter"}) {
  std::map<std::string, std::vector<double>> out;
  for (const char* kind : kinds) {
    for (int32_t id : g.NodesOf(kind)) {
      const ir::HostTensor* p = *cpu.Tensor({id, 0});
      std::vector<double>& values = out[g.node(id).name];
      for (int64_t i = 0; i < p->size(); ++i) {
        values.push_back(float64 ? p->data<double>()[i] : p->data<float>()[i]);
      }
    }
  }
  return out;
}

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_CPU_REFERENCE_RUNS_H_
