// Whole-step fusion of a ReLU MLP classifier: when the training graph is exactly a chain of
// Linear (+ ReLU) layers from one input to softmax cross-entropy, with SGD with momentum on every
// weight and bias, the whole step (forward, loss, backward and optimizer) becomes one
// mlp_train_step node: one persistent kernel instead of dozens of launches (src/ops/mlp_step.h).
#ifndef REPRISE_SRC_PASSES_FUSE_MLP_STEP_H_
#define REPRISE_SRC_PASSES_FUSE_MLP_STEP_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/autodiff/autodiff.h"
#include "src/codegen/mlp_step_kernel.h"
#include "src/passes/rewrite.h"

namespace reprise::passes {

// The non-finite guard of a training graph (src/autodiff/non_finite_guard.h) as the whole-step
// kernels run it: its policy, its counters (inputs of the fused node after the barrier), the check
// every update reads, and its non-leaf nodes (grad_nonfinite and the check, which counts).
struct WholeStepGuard {
  codegen::MlpGuard mode = codegen::MlpGuard::kNone;
  Value skipped_steps, record, check;
  int nodes = 0;
};
// The guard of `g` (mode kNone where it has none), or nullopt with the reason in `why` where its
// nodes are not the guard's usual three.
std::optional<WholeStepGuard> MatchWholeStepGuard(const Graph& g, std::string* why);

// A layer of a matched chain: its weight and bias parameter nodes ([out, in] and [out], or, in
// the batched form, [K, out, in] and [K, out]).
struct MlpChainLayer {
  int32_t weight = -1, bias = -1;
};
// The ops of one form of the chain (plain, or batched over an ensemble's models) and the words
// the reasons use for them.
struct MlpChainOps {
  const ir::OpDef* matmul = nullptr;
  const ir::OpDef* bias_add = nullptr;
  absl::string_view bias_add_name;  // "a bias add", "a batched bias add".
  absl::string_view product_name;   // "x·Wᵀ", "x·Wᵀ for every model".
};
// Walks the forward chain bias_add(matmul(h, Wᵀ), b) [<- relu <- bias_add(...)] back from
// `logits`, until `reached_input(h)` says h is the first layer's input or a layer's input is not
// a ReLU: the layers first to last, with that h in `*first` (the caller checks what it is); or
// nullopt with the reason in `why` where a layer is not of that form.
std::optional<std::vector<MlpChainLayer>> WalkMlpChain(const Graph& g, Value logits,
                                                       const MlpChainOps& form,
                                                       absl::FunctionRef<bool(Value)> reached_input,
                                                       Value* first, std::string* why);

// The step's sgd_momentum updates, by the parameter each writes, and its loss gradient (the node
// of `grad_op`, or nullptr), or the reason in `why` (nullopt) when an update is not plain SGD with
// momentum (Nesterov, clipping) or another optimizer runs. `guard`: the step's
// (MatchWholeStepGuard), whose own nodes the kernel makes itself.
struct WholeStepUpdates {
  absl::flat_hash_map<int32_t, const Node*> sgd_of;
  const Node* grad = nullptr;
};
std::optional<WholeStepUpdates> MatchWholeStepUpdates(const Graph& g, const WholeStepGuard& guard,
                                                      const ir::OpDef& grad_op, std::string* why);

// Appends the fused step's optimizer inputs to `inputs`: the hyperparameters every layer's
// update shares (sgd_momentum's inputs 3 to 5: learning rate, momentum, weight decay), then per
// layer its weight, bias and their velocities. False, with the reason in `why`, where a layer's
// parameter has no update or the updates' hyperparameters differ.
bool AppendWholeStepParameters(const Graph& g, const WholeStepUpdates& updates,
                               absl::Span<const MlpChainLayer> layers, std::vector<Value>& inputs,
                               std::string* why);

// A guarded whole-step kernel double-buffers its weights, biases and their velocities (every
// schedule that guards: codegen::MlpGuard): the spec of its shadow, a persistent
// state input after the guard's counters, for weights of these specs ([out, in], or [K, out, in]
// stacked) in layer order; nullopt where the kernel would not use one.
std::optional<TensorSpec> WholeStepShadowSpec(codegen::MlpGuard guard,
                                              const std::vector<TensorSpec>& weights,
                                              int64_t models);

// Above this many forward multiply-adds per step the fused kernel is slower than library GEMMs
// (measured on an H100: MLP 8x256 at batch 32, 19M, runs 60 us fused against 145 us; 4x1024 at
// batch 256, 268M, 397 us against 194).
inline constexpr int64_t kMlpStepMaxForwardMultiplyAdds = int64_t{64} << 20;
// "the forward pass has N multiply-adds; library GEMMs win above ..." for a count above the
// limit, counted with SaturatingAdd/SaturatingMul (INT64_MAX: more than int64 holds). `whose`:
// "the" or "each model's".
std::string TooManyMultiplyAdds(absl::string_view whose, int64_t multiply_adds);

// The group that replaces every non-leaf node of `training` (whose graph is `graph`, a copy to
// which this adds the kernel's barrier state), or nullopt with the reason in `why` when the
// graph is not such an MLP, keeps values other than the loss and the logits, or has shapes the
// kernel cannot run on `target`.
std::optional<NodeGroup> MatchMlpTrainStep(Graph& graph, const autodiff::TrainingGraph& training,
                                           absl::Span<const Value> kept,
                                           const codegen::MlpStepTarget& target, std::string* why);

// The same for an ensemble batched by src/passes/batch_ensemble.h (fuse_batched_mlp_step.cc):
// K models' chains of batched_matmul, batched_bias_add and relu to a batched softmax
// cross-entropy whose losses model_sum adds, each stacked parameter under SGD with momentum,
// become one batched_mlp_train_step. Inputs every model shares (model_tile) are read as they are.
// Ensembles of more than `max_models` models are declined (FuseOptions::whole_step_max_models
// says why). `why` starts with "ensemble: ".
std::optional<NodeGroup> MatchBatchedMlpTrainStep(Graph& graph,
                                                  const autodiff::TrainingGraph& training,
                                                  absl::Span<const Value> kept,
                                                  const codegen::MlpStepTarget& target,
                                                  int64_t max_models, std::string* why);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_FUSE_MLP_STEP_H_
