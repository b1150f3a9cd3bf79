// Optimizer choices for TrainOptions::optimizer: SGD with momentum (optionally Nesterov), Adam and
// AdamW, global gradient-norm clipping and a learning-rate schedule. What changes from step to
// step (the scheduled rate, Adam's bias correction, the clip coefficient) is computed on the
// device from the device-side step counter and the gradients, so a captured step replays with no
// host work and no graph update.
//
//   TrainOptions options;
//   options.optimizer = OptimizerOptions{.kind = OptimizerKind::kAdamW,
//                                        .learning_rate = 1e-3f,
//                                        .weight_decay = 0.01f,
//                                        .decay_rank1 = false,  // No decay on biases, BN.
//                                        .max_grad_norm = 1.0f,
//                                        .schedule = {.warmup_steps = 100,
//                                                     .decay = LrDecay::kCosine,
//                                                     .total_steps = 10000}};
#ifndef REPRISE_INCLUDE_REPRISE_OPTIMIZER_H_
#define REPRISE_INCLUDE_REPRISE_OPTIMIZER_H_

#include <cstdint>

namespace reprise {

// Plain SGD with momentum: the OptimizerOptions of kind kSgd with these three numbers
// (autodiff::FromSgd); TrainOptions::optimizer's default is this SGD with these defaults.
struct SgdOptions {
  float learning_rate = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;  // Added to the gradient as weight_decay · w (PyTorch's SGD).
};

enum class OptimizerKind : uint8_t {
  kSgd,  // PyTorch's torch.optim.SGD (dampening 0): v = μ·v + g; w -= lr·v (or Nesterov's step).
  kAdam,   // torch.optim.Adam: weight decay is added to the gradient (L2).
  kAdamW,  // torch.optim.AdamW: weight decay is decoupled, w *= 1 - lr·weight_decay.
};

// How the rate decays after the warm-up.
enum class LrDecay : uint8_t {
  kConstant,  // The base rate.
  kCosine,    // From the base rate to min_lr_factor times it, over total_steps (half a cosine).
  kStep,      // Times gamma every step_size steps.
};

// The learning rate of update s (s = 0 for the first Step(), counted on the device) is the base
// rate (TrainOptions' learning_rate, or Trainer::SetLearningRate) times
//   (s + 1) / warmup_steps                                      while s < warmup_steps;
// after that, with d = s - warmup_steps:
//   kConstant  1
//   kCosine    m + (1 - m)·(1 + cos(π·min(1, d / (total_steps - warmup_steps)))) / 2,
//              m = min_lr_factor (PyTorch's CosineAnnealingLR with eta_min = m·lr)
//   kStep      gamma^floor(d / step_size) (PyTorch's StepLR).
// The schedule is fixed when the trainer is created; only the base rate is bound per step.
struct LrSchedule {
  int64_t warmup_steps = 0;  // 0: no warm-up.
  LrDecay decay = LrDecay::kConstant;
  int64_t total_steps = 0;  // kCosine: steps from the first to the floor, warm-up included.
  float min_lr_factor = 0;  // kCosine: the floor, as a fraction of the base rate, in [0, 1].
  int64_t step_size = 0;    // kStep: steps between decays, at least 1.
  float gamma = 0.1f;       // kStep: the factor per decay, in (0, 1].
};

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;
  float learning_rate = 0.01f;  // The base rate: a bound input (Trainer::SetLearningRate).
  // kSgd.
  float momentum = 0.9f;  // At least 0.
  bool nesterov = false;  // Nesterov's momentum (needs momentum > 0).
  // kAdam, kAdamW. Betas in [0, 1), epsilon finite and greater than 0 (at 0, a parameter whose
  // gradient has been 0 so far, such as an embedding row no batch read, would update by 0 / 0).
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  // At least 0. kSgd and kAdam add weight_decay·w to the gradient; kAdamW multiplies w by
  // 1 - lr·weight_decay before the update.
  float weight_decay = 0;
  // Whether rank-1 parameters (biases, batch-norm scales and shifts) are decayed too. true is
  // PyTorch's default of one parameter group; false is the usual AdamW setup of a second group
  // with weight_decay 0.
  bool decay_rank1 = true;
  // Global gradient-norm clipping: every gradient is scaled by min(1, max_grad_norm / (‖g‖ +
  // 1e-6)), ‖g‖ the 2-norm over all gradients together (torch.nn.utils.clip_grad_norm_). 0: off.
  float max_grad_norm = 0;
  LrSchedule schedule;
};

// Loss scaling, as PyTorch's torch.amp.GradScaler does it, all on the device inside the step: the
// backward starts from d(loss) = scale instead of 1, so that small float16 gradients do not flush
// to zero; one check over every gradient then finds any inf or NaN, and the optimizer multiplies
// the gradients by 1 / scale (the clipping norm is taken of these unscaled gradients) or, when
// one was not finite, skips the whole update: parameters, optimizer state and the device step
// counter stay as they were. A skipped step therefore does not count as an update: Adam's bias
// correction and the learning-rate schedule read the count of applied updates (PyTorch's Adam does
// not advance its step either; a PyTorch LR scheduler stepped every iteration would), and the
// random ops, whose masks follow the same counter, draw the skipped step's masks again. After the
// update the scale moves on: times backoff_factor after an overflow, times growth_factor after
// growth_interval clean steps in a row (a growth that would overflow float32 is not taken).
enum class LossScaling : uint8_t {
  kAuto,     // kDynamic when the trainer computes in float16, kOff otherwise.
  kOff,      // d(loss) = 1; nothing is checked or skipped.
  kStatic,   // The scale stays init_scale; steps with non-finite gradients are still skipped.
  kDynamic,  // The scale follows overflows as above.
};

// PyTorch's GradScaler defaults.
struct LossScaleOptions {
  LossScaling mode = LossScaling::kAuto;
  float init_scale = 65536.0f;     // Finite, greater than 0.
  float growth_factor = 2.0f;      // kDynamic: greater than 1.
  float backoff_factor = 0.5f;     // kDynamic: in (0, 1).
  int64_t growth_interval = 2000;  // kDynamic: at least 1.
};

}  // namespace reprise

#endif  // REPRISE_INCLUDE_REPRISE_OPTIMIZER_H_
