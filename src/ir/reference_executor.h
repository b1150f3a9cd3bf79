// ReferenceExecutor: runs a graph on the CPU with each op's reference implementation, in float32
// as declared or with every float tensor promoted to float64 (for gradient checks). Leaves
// (parameters, state, constants, inputs) persist between runs, so it can run whole training
// steps.
#ifndef REPRISE_SRC_IR_REFERENCE_EXECUTOR_H_
#define REPRISE_SRC_IR_REFERENCE_EXECUTOR_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "src/ir/host_tensor.h"

namespace reprise::ir {

class ReferenceExecutor {
 public:
  // `float64` promotes every f32 tensor to f64. Leaves start from their initializers with `seed`.
  ReferenceExecutor(const Graph& graph, bool float64, uint64_t seed);

  // The tensor holding `v` (leaves: their persistent value; others: the last run's result).
  absl::StatusOr<HostTensor*> Tensor(Value v);
  absl::StatusOr<HostTensor*> Leaf(absl::string_view name);
  // Copies `data` into a leaf named `name`, converting to its element type.
  absl::Status SetLeaf(absl::string_view name, absl::Span<const double> data);
  absl::Status SetLeaf(absl::string_view name, absl::Span<const int32_t> data);

  // Runs every non-leaf node in id order (a topological order).
  absl::Status Run();

 private:
  const Graph& graph_;
  std::vector<std::vector<HostTensor>> values_;  // [node][output]
};

}  // namespace reprise::ir

#endif  // REPRISE_SRC_IR_REFERENCE_EXECUTOR_H_
