// Backward mirroring: a training step keeps every forward value its backward pass reads, from the
// forward pass to that read. Recomputing a cheap one just before its first backward reader
// (src/passes/mirror_rewrite.h) frees it in between, at the cost of a launch. This pass decides
// what to recompute by the benefit test: a group of cheap nodes is mirrored only where the
// activation peak, as the rest of the pipeline would plan it, actually falls.
//
// A group is the node producing a value the backward reads, plus the cheap forward nodes it needs
// that nothing else keeps alive (a ReLU after a batch norm takes the batch norm's apply along); it
// reads values that are kept anyway (a convolution's output, which the batch-norm gradient reads),
// leaves, or other groups' twins. So a fully connected layer's input (a ReLU or dropout output)
// can be recomputed while the layer itself is not, and a chain that would need more stored inputs
// than it frees (an RNN-cell-like add of two matmul outputs) is measured and not mirrored.
//
// The search: each candidate group alone is planned once (its saving in live bytes, and its
// recompute cost in bytes moved); then, best saving per byte first, a group is added where the
// live peak falls (never for a shift of where buffers happen to land), while that keeps happening
// (kAuto) or until the laid-out peak meets the budget (kBudget); then groups whose removal does
// not raise the live peak (kAuto) or break the budget (kBudget) are dropped again, for the least
// recomputation, and then those whose removal does not raise the laid-out peak (kAuto) or break
// the budget once laid out (kBudget). kAuto keeps the result only if the laid-out peak is lower
// than without it.
#ifndef REPRISE_SRC_PASSES_MIRROR_H_
#define REPRISE_SRC_PASSES_MIRROR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/mirror_options.h"
#include "src/autodiff/autodiff.h"

namespace reprise::passes {

// A training graph's activation peak, planned as the plan would plan it: the most transient
// bytes alive at any launch (what the feature maps need, whatever the placement: linear time),
// and, when `place` is asked for, the transient region the memory plan lays out (quadratic time).
struct PeakEstimate {
  int64_t live = 0;
  int64_t planned = -1;  // -1: not placed.
};
using PeakFunction =
    std::function<absl::StatusOr<PeakEstimate>(const autodiff::TrainingGraph&, bool place)>;

struct MirrorReport {
  int64_t peak_unmirrored = 0;  // Planned peaks.
  int64_t peak = 0;             // With the mirrored nodes recomputed.
  // (original, twin) node names.
  std::vector<std::pair<std::string, std::string>> mirrored;
  int evaluations = 0;  // Candidate graphs planned.
};

struct MirroredTraining {
  autodiff::TrainingGraph training;
  MirrorReport report;
};

// What no mirroring can free: the bytes of the forward values the backward pass reads that are not
// recomputed (convolution and matmul outputs, a batch norm's saved statistics; `kept` values live
// outside the activations and are not counted).
// All are alive when the backward pass starts, so every policy's activation peak is at least this
// (before fusion; ResNet-50 b64: 2,713 MiB of convolution outputs, the batch-norm gradients'
// inputs, against 5,010 MiB planned without mirroring). Linear time.
// InvalidArgument where that sum does not fit in int64.
absl::StatusOr<int64_t> MirrorFloorBytes(const autodiff::TrainingGraph& training,
                                         absl::Span<const Value> kept);

// Mirrors `training` (fresh from autodiff::BuildTrainingGraph) by `options`; `kept` values (the
// loss, fetched values) are never recomputed. kOff returns it as is (peaks not measured: 0).
// InvalidArgument for a negative budget, and for a budget below the smallest peak the search
// reaches, naming the budget, that peak and the unmirrored one.
absl::StatusOr<MirroredTraining> Mirror(const autodiff::TrainingGraph& training,
                                        absl::Span<const Value> kept, const MirrorOptions& options,
                                        const PeakFunction& peak);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_MIRROR_H_
