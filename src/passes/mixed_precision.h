// Mixed precision: the forward graph computed in a 16-bit float type with float32 master weights,
// as torch.autocast and NVIDIA's AMP do. The pass rewrites the forward graph (before autodiff, so
// gradients follow through the casts' own gradient rule and reach every parameter in float32):
//
//   - inputs and parameters keep their names and float32 types (bindings, GetParameter and
//     SaveWeights do not change); a float input or parameter read by a 16-bit op is read through
//     one cast "<name>.to_bf16" (or ".to_f16"), made once and shared by its readers;
//   - every op computes in the 16-bit type, except batch norm's and layer norm's per-channel
//     tensors (gamma, beta, running statistics: float32, as cuDNN and PyTorch keep them); the
//     softmax cross-entropy reads the 16-bit logits as they are (no float32 copy of a language
//     model's [tokens, vocabulary] logits), accumulates in float32 and gives a float32 loss and a
//     16-bit logits gradient (src/codegen/loss_kernels.h);
//   - a 16-bit value the user keeps (TrainOptions::fetch) is cast back to float32 for reading.
//
// The optimizer then updates float32 weights from the 16-bit gradients, widened exactly where they
// are read (the global norm, the non-finite checks and the multi-tensor updates take them as they
// are; the fuse pass folds their widening casts into the updates), and the fuse pass makes every
// parameter's 16-bit copy in one launch (cast_multi). A graph without float32 compute comes back
// unchanged.
#ifndef REPRISE_SRC_PASSES_MIXED_PRECISION_H_
#define REPRISE_SRC_PASSES_MIXED_PRECISION_H_

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/graph.h"

namespace reprise::passes {

struct MixedPrecisionGraph {
  Graph graph;
  Value loss;
  std::vector<Value> kept;                   // The `keep` values, mapped (float32 for reading).
  absl::flat_hash_map<Value, Value> values;  // Old value -> new value (kept ones: their f32 cast).
  int casts = 0;                             // Cast nodes added.
};

// Rewrites `graph` to compute in `compute` (kBFloat16 or kFloat16); float32 for `compute` returns
// the graph unchanged. InvalidArgument for another type, or when `loss` or a `keep` value is not
// in `graph`.
absl::StatusOr<MixedPrecisionGraph> ConvertToMixedPrecision(const Graph& graph, Value loss,
                                                            absl::Span<const Value> keep,
                                                            DType compute);

}  // namespace reprise::passes

#endif  // REPRISE_SRC_PASSES_MIXED_PRECISION_H_
