// The small GPT-2 the GPU tests train (2 layers, 128 wide, vocabulary 512, context 64), and its
// bfloat16 training with nanoGPT's AdamW (clipping, warm-up and cosine) and the guard,
// deterministic: for the tests that train it two ways and compare the bits.
#ifndef REPRISE_TESTS_GPU_SMALL_GPT2_H_
#define REPRISE_TESTS_GPU_SMALL_GPT2_H_

#include "reprise/reprise.h"

namespace reprise::testing {

inline constexpr models::Gpt2Config kSmallGpt2 = {.batch = 4,
                                                  .seq = 64,
                                                  .max_positions = 64,
                                                  .vocab = 512,
                                                  .layers = 2,
                                                  .heads = 4,
                                                  .width = 128};

inline TrainOptions SmallGpt2Bf16AdamW() {
  TrainOptions options;
  options.seed = 42;
  options.numerics.compute_dtype = DType::kBFloat16;
  options.numerics.deterministic = true;
  options.optimizer = OptimizerOptions{
      .kind = OptimizerKind::kAdamW,
      .learning_rate = 1e-3f,
      .beta1 = 0.9f,
      .beta2 = 0.95f,
      .weight_decay = 0.1f,
      .decay_rank1 = false,
      .max_grad_norm = 1.0f,
      .schedule = {.warmup_steps = 2, .decay = LrDecay::kCosine, .total_steps = 200}};
  return options;
}

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_GPU_SMALL_GPT2_H_
