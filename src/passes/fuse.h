// Fuse: fewer, larger launches for the same step. Replaces groups of training-graph nodes by fused
// ops (src/ops/ops.h, src/ops/fused_pointwise.h):
//   matmul -> bias_add [-> relu]             => matmul_bias (cuBLASLt epilogue)
//   and where that relu's gradient reads a matmul and feeds a bias gradient (a hidden layer):
//     matmul -> bias_add -> relu             => matmul_bias_relu_mask (also keeps a ReLU bit mask)
//     matmul -> relu_grad -> column_sum      => matmul_drelu_bgrad (cuBLASLt DRELU_BGRAD)
//   matmul -> bias_add -> gelu               => matmul_bias_gelu_aux (cuBLASLt GELU_AUX_BIAS,
//                                               also keeping the pre-activation)
//   matmul -> gelu_grad                      => matmul_dgelu (cuBLASLt DGELU;
//                                               FuseOptions::gelu_backward_epilogue)
//   matmul -> bias_add -> add(·, residual)   => matmul_bias_residual (cuBLASLt BIAS, beta = 1)
//   wgrad matmul(dYᵀ, X) + column_sum(dY)    => matmul_bgrad (cuBLASLt BGRADB)
//   add(layer_norm_grad's dx, other gradient) => layer_norm_grad_add (one kernel)
//   add -> layer_norm (no epilogue took the add) => add_layer_norm (one pass)
//   add(embedding_grad, other [resize_rows])  => embedding_grad_add (one pass over the table)
//   softmax_cross_entropy + its gradient     => softmax_cross_entropy_with_grad (one kernel)
//   NHWC batch_norm_train [-> add] -> relu    => batch_norm_act_train (src/ops/batch_norm_act.h)
//   relu_grad -> NHWC batch_norm_grad        => batch_norm_act_grad
//   batch_norm_apply [-> add] -> relu          => batch_norm_apply with relu (mirrored batch norms)
//   and a stage's mirrored block outputs, each relu(batch_norm_apply + the one before), from a
//   shortcut's batch_norm_apply on          => batch_norm_apply_chain (one pass)
//   chains of pointwise ops [+ column_sum]   => fused_pointwise (one generated kernel)
//   grad_nonfinite + grad_sum_squares of the same gradients => grad_sum_squares_nonfinite
//   every sgd_momentum sharing hyperparameters => sgd_momentum_multi (one launch per 32 tensors)
//   or, checked by the guard (sgd_one_launch), => sgd_multi, and with grad_nonfinite and
//   loss_scale_check => sgd_multi with attr checks (the check in the update's launch)
//   every adam sharing hyperparameters but the weight decay, with the lr_schedule and
//     clip_coefficient that only they read  => adam_multi (one launch; the scheduled rate and the
//                                              clip coefficient computed in it)
// or, for a small ReLU MLP, the whole step        => mlp_train_step (one persistent kernel)
// or, for an ensemble of them batched, the whole step => batched_mlp_train_step (the same kernel
//   running every model's tiles)
// A value the rest of the step or the user reads stays materialised; nothing else does.
#ifndef REPRISE_SRC_PASSES_FUSE_H_
#define REPRISE_SRC_PASSES_FUSE_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/autodiff/autodiff.h"
#include "src/codegen/mlp_step_kernel.h"

namespace reprise::passes {

struct FuseOptions {
  // A small ReLU MLP's whole step as one persistent kernel (src/passes/fuse_mlp_step.h), planned
  // for `mlp_step_target` (default: an H100); when it applies, nothing else is left to fuse.
  bool whole_mlp_step = true;
  // An ensemble's whole step only up to this many models: on an H100
  // (docs/results/history/2026-11-23_bc4e85d.md) it beat the batched per-layer step at K = 4
  // (0.052 vs 0.065 ms) and lost at K = 32 (0.129 vs 0.113) and K = 128 (0.382 vs 0.315). With
  // TF32 (the cluster kernel, H100, docs/results/history/2026-11-28_a482790.md) it wins at K = 8
  // (0.036 vs 0.053) and loses at 32 (0.084 vs 0.078); the trainer then allows 8.
  int64_t whole_step_max_models = 4;
  codegen::MlpStepTarget mlp_step_target;
  bool gemm_epilogues = true;
  // With gemm_epilogues: a hidden ReLU layer's backward (relu_grad, bias gradient) in the
  // epilogue of the data-gradient matmul before it, float32 only. Off by default, as
  // TrainOptions::kernels.relu_backward_epilogues says why.
  bool relu_backward_epilogues = false;
  // With gemm_epilogues: transformer layers' GELU (forward and backward) and residual adds in
  // the epilogues of their products (src/passes/fuse_gelu_rules.cc).
  bool gelu_epilogues = true;
  // With gelu_epilogues, the backward too: GELU's derivative in the DGELU epilogue of the
  // data-gradient product (matmul_dgelu), the bias gradient's column sums on the weight-gradient
  // lane. Off, the plain product and one fused pointwise kernel (GELU's derivative and the column
  // sums) run on the data-gradient lane instead.
  bool gelu_backward_epilogue = true;
  bool residual_epilogues = true;
  // With gemm_epilogues: a layer's bias gradient (column_sum of dY), where no pointwise chain ends
  // in it, summed by its weight gradient's product as it reads dY (matmul_bgrad, cuBLASLt's
  // BGRADB) instead of a launch of its own. Off by default: on an H200 at GPT-2 124M's shapes in
  // bfloat16 the BGRADB product took 0.141 ms against 0.101 ms plain plus 0.031 ms for the column
  // sum, and the step at B=4, T=256 went from 3.78 to 3.92 ms (docs/benchmarks_gpt2.md).
  bool weight_gradient_bias_sums = false;
  // A layer norm fused with the residual add before it, and its input gradient summed with the
  // residual stream's, each in the layer norm's kernel.
  bool layer_norm_residual = true;
  // With layer_norm_residual: a column_sum of a layer norm's dx (a projection's bias gradient) in
  // the layer norm's backward kernel (layer_norm_grad_column_sum).
  bool layer_norm_bias_sums = true;
  // A tied embedding's two gradients summed in the embedding gradient's kernel
  // (embedding_grad_add, src/passes/fuse_embedding_rules.cc).
  bool embedding_gradient_sums = true;
  // With embedding_gradient_sums: where nothing else reads the other gradient after it, the sum
  // is written over it (embedding_grad_accumulate), touching only the rows tokens name, instead
  // of a pass over the whole table.
  bool embedding_gradient_in_place = true;
  // With multi_tensor_optimizer: the non-finite guard's check in the gradient norm's pass over the
  // gradients (grad_sum_squares_nonfinite).
  bool nonfinite_check_with_norm = true;
  bool loss_with_grad = true;
  // With loss_with_grad, at 2 or more: an output layer's product, its loss with the gradient and
  // its data gradient as one head_loss_chunks of this many row slices, whose loss passes run on a
  // second stream beside the other slices' products (src/ops/ops.h). 0 or 1: apart. -1: two
  // slices where the logits hold at least head_loss_chunks_min_elements, apart below.
  int head_loss_chunks = -1;
  int64_t head_loss_chunks_min_elements = int64_t{1} << 28;
  bool batch_norm_activations = true;
  // With batch_norm_activations: a residual block's ReLU (channels-last, channels a multiple of
  // 16) writes a keep mask (a bit per element, four to a byte) beside its output, which its
  // gradient reads instead of the 16- or 32-bit output
  // (TrainOptions::kernels.batch_norm_relu_bits).
  bool batch_norm_relu_bits = true;
  // With batch_norm_activations: a ReLU's gradient whose dy is the sum of two gradients (a
  // residual block's input gradient: its first convolution's data gradient and the skip's) reads
  // both summands and adds them as it loads them (batch_norm_act_grad's dy_addend), where it
  // writes the masked gradient anyway; the sum is never written, and no convolution adds in
  // place (TrainOptions::kernels.residual_sums_in_batch_norm).
  bool batch_norm_grad_sums = false;
  // With batch_norm_grad_sums: only sums of at least this many elements; smaller ones stay with
  // the convolution (conv_dgrad_accumulate). 0: every sum a batch-norm gradient can take
  // (TrainOptions::kernels.residual_sums_min_elements).
  int64_t batch_norm_grad_sums_min_elements = 0;
  // With batch_norm_activations: a convolution whose output only a training batch norm (and the
  // backward) reads, with that batch norm and its add and ReLU, as one conv2d_bn_train node
  // (src/ops/conv_bn.h), whose statistics cuDNN's graph API sums in the convolution's epilogue.
  // Off by default: TrainOptions::kernels.conv_batch_norm_stats.
  bool conv_batch_norm_stats = false;
  // A residual block's input gradient, conv2d_dgrad + add, as one cuDNN call accumulating in
  // place (conv2d_dgrad_accumulate, the legacy API's beta = 1).
  bool conv_dgrad_accumulate = true;
  // With conv_dgrad_accumulate: the sum written into memory of its own instead
  // (conv2d_dgrad_add), for cuDNN's graph API, which promises no in-place sum
  // (unless TrainOptions::kernels.conv_sums_in_place).
  bool conv_dgrad_add_apart = false;
  bool pointwise_chains = true;
  bool multi_tensor_optimizer = true;
  // With multi_tensor_optimizer, in mixed precision: the updates read the 16-bit gradients,
  // widening them exactly on load, instead of a cast per parameter writing a float32 copy.
  bool fold_gradient_casts = true;
  // With multi_tensor_optimizer: SGD updates that wait for every gradient anyway (clipped, or
  // checked by loss scaling or the non-finite guard) in one sgd_multi launch, whatever their
  // weight decays and gradient types, instead of sgd_momentum_multi's launch per 32 tensors
  // (TrainOptions::kernels.sgd_one_launch).
  bool sgd_one_launch = true;
  // With sgd_one_launch: the non-finite guard's check and verdict (grad_nonfinite,
  // loss_scale_check) in that update's own launch (src/passes/fuse_checked_sgd.h;
  // TrainOptions::kernels.sgd_checks_in_launch).
  bool sgd_checks_in_launch = true;
  // In mixed precision: the float32 parameters' 16-bit copies made in one launch (cast_multi)
  // where the first was made, instead of one launch per parameter.
  bool multi_tensor_casts = true;
  // With multi_tensor_casts and adam_multi or sgd_multi: those copies kept between steps and
  // written by the update (src/passes/parameter_copies.h) instead of made at every step's start
  // (TrainOptions::kernels.update_writes_parameter_copies).
  bool update_writes_copies = true;
};

struct FusedTraining {
  autodiff::TrainingGraph training;
  absl::flat_hash_map<Value, Value> values;  // Value of the input graph -> value here.
  // Each fused node: its name and the nodes it replaced, for dumps.
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;
  std::string whole_step_declined;  // Why the whole-step kernel did not apply, if it did not.
};

// `kept` are values of `training` that must stay readable (the loss, fetched values).
absl::StatusOr<FusedTraining> Fuse(const autodiff::TrainingGraph& training,
                                   absl::Span<const Value> kept, const FuseOptions& options);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_FUSE_H_
