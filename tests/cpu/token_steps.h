// Steps of a token model's training graph on the CPU reference, shared by the fusion tests that
// compare a fused step with the unfused one bit for bit.
#ifndef REPRISE_TESTS_CPU_TOKEN_STEPS_H_
#define REPRISE_TESTS_CPU_TOKEN_STEPS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "reprise/graph.h"
#include "reprise/models.h"
#include "src/ir/reference_executor.h"

namespace reprise::testing {

// The losses of each step and the parameters after the last, by name.
using CpuSteps = std::pair<std::vector<float>, std::map<std::string, std::vector<float>>>;

// Runs `steps` steps of `g` on the CPU reference (seed 5), feeding `tokens` int32 ids
// (i·7 + step) % `id_range` to the input named `ids` and (i·3 + 1) % `classes` to `labels`.
inline CpuSteps RunTokenSteps(const Graph& g, Value loss, int steps, const char* ids,
                              const char* labels, int64_t tokens, int64_t id_range,
                              int64_t classes) {
  ir::ReferenceExecutor cpu(g, /*float64=*/false, 5);
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    std::vector<int32_t> in(tokens), out(tokens);
    for (int64_t i = 0; i < tokens; ++i) {
      in[i] = static_cast<int32_t>((i * 7 + s) % id_range);
      out[i] = static_cast<int32_t>((i * 3 + 1) % classes);
    }
    EXPECT_TRUE(cpu.SetLeaf(ids, in).ok());
    EXPECT_TRUE(cpu.SetLeaf(labels, out).ok());
    EXPECT_TRUE(cpu.Run().ok());
    losses.push_back((*cpu.Tensor(loss))->data<float>()[0]);
  }
  std::map<std::string, std::vector<float>> parameters;
  for (int32_t id : g.NodesOf("parameter")) {
    auto values = (*cpu.Tensor({id, 0}))->data<float>();
    parameters[g.node(id).name].assign(values.begin(), values.end());
  }
  return {losses, parameters};
}

// The fusion tests' GPT-2: one layer, 2 x 8 tokens, a vocabulary of 100 (its logits padded to
// 128 columns), 16 wide, 2 heads.
inline constexpr int64_t kTinyGpt2Batch = 2, kTinyGpt2Seq = 8, kTinyGpt2Vocab = 100;
inline models::Gpt2Config TinyGpt2() {
  return {.batch = kTinyGpt2Batch,
          .seq = kTinyGpt2Seq,
          .max_positions = kTinyGpt2Seq,
          .vocab = kTinyGpt2Vocab,
          .layers = 1,
          .heads = 2,
          .width = 16};
}

// RunTokenSteps for a TinyGpt2 graph (ids up to 13, so that rows repeat tokens).
inline CpuSteps RunTinyGpt2Steps(const Graph& g, Value loss, int steps) {
  return RunTokenSteps(g, loss, steps, "tokens", "targets", kTinyGpt2Batch * kTinyGpt2Seq, 13,
                       kTinyGpt2Vocab);
}

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_CPU_TOKEN_STEPS_H_
