// The checks Trainer::Create applies to its options and SetInput to the values it binds, apart
// from the Trainer so that they are tested without a GPU: every option field Create reads, label
// ranges of the losses that index by them, and the optimizer's hyperparameter inputs
// (Trainer::SetLearningRate, SetInput("momentum"), ...).
#ifndef REPRISE_SRC_API_INPUT_CHECKS_H_
#define REPRISE_SRC_API_INPUT_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "reprise/trainer.h"

namespace reprise {

// What a loss accepts as labels: [0, classes), and nn::kPaddingLabel where `padding_allowed`
// (nn::MaskedSoftmaxCrossEntropy).
struct LabelRange {
  int64_t classes = 0;
  bool padding_allowed = false;
};

// An int32 input read as class labels by a loss or as row ids by an embedding table.
struct LabelUse {
  std::string input;     // The input's name.
  int64_t classes = 0;   // The loss's classes, or the table's rows.
  std::string consumer;  // The loss or embedding node.
  bool padding_allowed = false;
};
// Every such use in `training` (the unfused training graph), seen through the copies between the
// input and its reader (reshape, flatten, an ensemble's model_tile): GPT-2's [batch, seq] tokens
// reach the embedding and its targets the loss as [batch·seq] rows. Labels computed from
// anything else are no input's and are left out.
std::vector<LabelUse> LabelUsesOf(const Graph& training);

// InvalidArgument naming `input`, the first bad label, its index and `consumer` (the loss) unless
// every label is in `range`.
absl::Status CheckLabels(absl::string_view input, absl::string_view consumer, LabelRange range,
                         absl::Span<const int32_t> labels);

// InvalidArgument naming the input and the value when `value` is NaN, infinite or out of the
// range the optimizer reads `input` in (learning_rate, momentum, weight_decay, max_grad_norm:
// finite and at least 0; epsilon: finite and greater than 0; beta1, beta2: in [0, 1)). Other
// inputs: OK.
absl::Status CheckHyperparameterInput(absl::string_view input, float value);

// InvalidArgument naming the field and its value for an option Create cannot honour: an enum
// value outside its list, a NaN, infinite or out-of-range hyperparameter (sgd, optimizer,
// loss_scale), lanes outside [0, kMaxLanes], ensemble_min_models below 1,
// ensemble_whole_step_max_models below -1, a negative device, a compute_dtype other than f32,
// bf16 or f16.
absl::Status ValidateTrainOptions(const TrainOptions& options);

// InvalidArgument unless `loss` and every fetched value are values of `graph` (made by it or the
// graph it was copied from, Graph::Owns, and naming one of its nodes' outputs): a value of
// another graph would name whatever node has its number here.
absl::Status CheckValuesOfGraph(const Graph& graph, Value loss, absl::Span<const Value> fetch);

}  // namespace reprise

#endif  // REPRISE_SRC_API_INPUT_CHECKS_H_
