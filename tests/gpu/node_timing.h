// Times one node of a graph on the GPU through its own lowering, with every input and output in
// a device buffer of its own: a sanity bound on a kernel's speed at a real model's sizes (GPT-2's
// [16384, 50257] logits) without the memory of a whole plan or a CPU reference of that size.
#ifndef REPRISE_TESTS_GPU_NODE_TIMING_H_
#define REPRISE_TESTS_GPU_NODE_TIMING_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reprise/graph.h"

namespace reprise {

// Milliseconds per launch of node `name` of `g`, averaged over `repeats` launches after one
// warm-up. Float inputs hold the bytes 0x3c (small positive values in every float type), int32
// inputs zeros (valid labels and ids). NotFound for an unknown node.
absl::StatusOr<double> TimeNodeMs(const Graph& g, absl::string_view name, int repeats);

}  // namespace reprise

#endif  // REPRISE_TESTS_GPU_NODE_TIMING_H_
