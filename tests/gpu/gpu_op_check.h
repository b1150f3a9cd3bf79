// Runs a small graph's nodes on the GPU and compares every output with the CPU reference.
#ifndef REPRISE_TESTS_GPU_GPU_OP_CHECK_H_
#define REPRISE_TESTS_GPU_GPU_OP_CHECK_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "reprise/graph.h"
#include "src/ir/reference_executor.h"
#include "src/ops/gpu_kernel.h"

namespace reprise {

// Runs every non-leaf node of `g` on the GPU (each its own launch, in schedule order) with
// leaves taken from `cpu`, then compares each node's outputs, and each in-place written leaf,
// with the CPU reference run of the same graph: relative L2 error at most `tolerance`.
// `unchecked` values are not compared (e.g. ones with padding the GPU leaves unspecified) and not
// kept, so an op may write over them (OpDef::output_overwrites_input).
// `deterministic` lowers as TrainOptions::numerics.deterministic does (other library algorithms);
// `allow_tf32` as TrainOptions::numerics.allow_tf32; every lowering we have is allowed (our own
// weight gradients too, which TrainOptions leaves off by default). With `described`, each launch's
// Describe() is appended to it, in launch order. Convolutions run through cuDNN's legacy API
// unless `graph_conv_api` (TrainOptions::kernels.conv_api = kGraph).
void ExpectGpuMatchesCpu(const Graph& g, ir::ReferenceExecutor& cpu, double tolerance,
                         const absl::flat_hash_set<Value>& unchecked = {},
                         bool deterministic = false, bool allow_tf32 = false,
                         std::vector<std::string>* described = nullptr,
                         bool graph_conv_api = false);

// The same with the lowering options given whole (for options the form above has no switch for).
void ExpectGpuMatchesCpuLowered(const Graph& g, ir::ReferenceExecutor& cpu, double tolerance,
                                const ops::LoweringOptions& lowering,
                                std::vector<std::string>* described = nullptr);

}  // namespace reprise

#endif  // REPRISE_TESTS_GPU_GPU_OP_CHECK_H_
