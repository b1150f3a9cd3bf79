// transpose: a permutation of a rank-4 tensor's dimensions, stored densely in the new order. The
// channels-last pass (src/passes/channels_last.h) uses it to move images, activations and
// convolution weights between PyTorch's NCHW and the NHWC that tensor-core convolutions prefer.
//
//   // x [N, C, H, W] -> y [N, H, W, C]
//   ASSIGN_OR_RETURN(Value y, g.AddOp1(ops::TransposeOp(), "x.to_nhwc", {x},
//                                      {{"perm", std::string(ops::kNchwToNhwc)}}));
#ifndef REPRISE_SRC_OPS_TRANSPOSE_H_
#define REPRISE_SRC_OPS_TRANSPOSE_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "reprise/graph.h"
#include "reprise/tensor.h"
#include "src/ir/op_def.h"

namespace reprise::ops {

// transpose: (x, rank 4) -> y with y.shape[i] = x.shape[perm[i]] and y[a0, a1, a2, a3] = x at the
// index whose dimension perm[i] is a_i. Attr "perm" (string): a permutation of 0..3 written like
// "0,2,3,1". float32, float64, int32, bfloat16 and float16 (the GPU kernels move raw 4-byte words
// for float32 and int32, 2-byte words for the 16-bit floats).
// Gradient: the transpose of dy by the inverse permutation.
const ir::OpDef& TransposeOp();

// The permutations between the image layouts. NCHW -> NHWC also takes a convolution weight from
// PyTorch's [K, C/groups, R, S] to the [K, R, S, C/groups] of NHWC convolutions.
inline constexpr char kNchwToNhwc[] = "0,2,3,1";
inline constexpr char kNhwcToNchw[] = "0,3,1,2";

using Permutation = std::array<int, 4>;

// The "perm" attribute; InvalidArgument naming the text unless it lists 0..3 each once.
absl::StatusOr<Permutation> PermAttr(const Attrs& attrs);
Permutation InversePermutation(const Permutation& perm);
std::string PermutationString(const Permutation& perm);  // "0,2,3,1"

// How the GPU lowering moves x, found once at lowering: extents of 1 are dropped and dimensions
// adjacent in both x and y merged, so that NCHW <-> NHWC (and a weight's [K, C, R, S] <-> [K, R,
// S, C]) become a batched 2-D transpose.
struct TransposeLaunch {
  enum class Kind : uint8_t {
    kTiled,   // y [batches, cols, rows] = x [batches, rows, cols] transposed per batch.
    kGather,  // Any other permutation (a plain copy included), one thread per element of y.
  };
  Kind kind = Kind::kGather;
  int64_t batches = 1, rows = 1, cols = 1;  // kTiled.
  // kGather: y's extents and, for each of y's dimensions, x's element stride along it.
  std::array<int64_t, 4> extents{1, 1, 1, 1};
  std::array<int64_t, 4> strides{0, 0, 0, 0};
};
TransposeLaunch PlanTranspose(const Shape& x, const Permutation& perm);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_TRANSPOSE_H_
