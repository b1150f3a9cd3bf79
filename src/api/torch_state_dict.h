// The names of a model's PyTorch state dict, read from the graph the user built (before autodiff
// and the optimizer add their state): what Trainer::SaveWeights writes with torch_compatible.
#ifndef REPRISE_SRC_API_TORCH_STATE_DICT_H_
#define REPRISE_SRC_API_TORCH_STATE_DICT_H_

#include <string>
#include <vector>

#include "reprise/graph.h"

namespace reprise {

struct TorchStateDictNames {
  // The graph's parameters and its own state tensors (batch-norm running statistics): torch's
  // parameters and buffers. Graph order. Not dropout's step counter "rng.step".
  std::vector<std::string> tensors;
  // One "<layer>.num_batches_tracked" per batch norm, named beside its "<layer>.running_mean"
  // (the batch norm node's name when the statistics are named otherwise). Graph order.
  std::vector<std::string> batch_counters;
};
TorchStateDictNames TorchStateDictNamesOf(const Graph& forward);

}  // namespace reprise

#endif  // REPRISE_SRC_API_TORCH_STATE_DICT_H_
