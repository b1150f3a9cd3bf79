#include "src/api/torch_state_dict.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/op_def.h"
#include "src/ops/batch_norm.h"

namespace reprise {

TorchStateDictNames TorchStateDictNamesOf(const Graph& forward) {
  TorchStateDictNames names;
  for (const Node& node : forward.nodes()) {
    if (node.op == &ir::ParameterOp() || node.op == &ir::StateOp()) {
      // Dropout's step counter is the random ops' state, which torch keeps outside the module.
      if (node.name != autodiff::kStepCounter) names.tensors.push_back(node.name);
      continue;
    }
    if (node.op != &ops::BatchNormTrainOp() && node.op != &ops::BatchNormInferOp()) continue;
    // Inputs: x, gamma, beta, running mean, running variance.
    absl::string_view layer = node.name;
    constexpr absl::string_view kMean = ".running_mean";
    if (node.inputs.size() > 3) {
      absl::string_view mean = forward.node(node.inputs[3].node).name;
      if (absl::EndsWith(mean, kMean)) layer = mean.substr(0, mean.size() - kMean.size());
    }
    names.batch_counters.push_back(absl::StrCat(layer, ".num_batches_tracked"));
  }
  return names;
}

}  // namespace reprise
