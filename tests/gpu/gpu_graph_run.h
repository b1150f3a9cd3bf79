// Runs a small graph's nodes on the GPU and hands back chosen values, so that a test can compare
// two GPU runs with each other (a fused graph against its unfused original), not only each with
// the CPU reference as ExpectGpuMatchesCpu (gpu_op_check.h) does.
#ifndef REPRISE_TESTS_GPU_GPU_GRAPH_RUN_H_
#define REPRISE_TESTS_GPU_GPU_GRAPH_RUN_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "src/ir/host_tensor.h"
#include "src/ir/reference_executor.h"

namespace reprise {

// Runs every non-leaf node of `g` on the GPU (each its own launch, in schedule order, synchronised
// after each) with the leaves' values taken from `leaves`, and returns the value of each of
// `fetch`, in order, in its own element type. `deterministic` lowers as
// TrainOptions::numerics.deterministic does.
absl::StatusOr<std::vector<ir::HostTensor>> RunOnGpu(const Graph& g, ir::ReferenceExecutor& leaves,
                                                     absl::Span<const Value> fetch,
                                                     bool deterministic = false);

// Relative L2 distance of two float tensors of one shape (any float types), as doubles:
// ||a - b|| / max(||b||, 1e-30).
double RelativeL2(const ir::HostTensor& a, const ir::HostTensor& b);

}  // namespace reprise

#endif  // REPRISE_TESTS_GPU_GPU_GRAPH_RUN_H_
