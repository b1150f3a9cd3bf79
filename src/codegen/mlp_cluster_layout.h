// The cluster schedule's layout of one block's shared memory and its register tiles, shared by
// its planner (mlp_cluster_plan.cc) and its source generator (mlp_cluster_kernel.cc).
#ifndef REPRISE_SRC_CODEGEN_MLP_CLUSTER_LAYOUT_H_
#define REPRISE_SRC_CODEGEN_MLP_CLUSTER_LAYOUT_H_

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "src/codegen/mlp_step_kernel.h"

namespace reprise::codegen::mlp_cluster {

inline constexpr int kMaxRanks = 8;  // The portable cluster size.

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Where everything lives in one block's shared memory (floats), for `ranks` blocks per model.
struct Layout {
  int ranks = 1;
  int layers = 0;
  int64_t rows = 0;                // The batch, padded to 16.
  std::vector<int64_t> padded;     // [l], l = 0..L: widths padded (hidden: to 16 ranks).
  std::vector<bool> row_parallel;  // [l], l = 0..L-1; the head's: its input is sliced.
  std::vector<int64_t> w, w_ld, bias;
  std::vector<int64_t> h, h_ld;     // [l], l = 1..L-1: this block's slice of h_l.
  int64_t full = 0, full_ld = 0;    // A whole activation or gradient, or partial products.
  int64_t slice = 0, slice_ld = 0;  // This block's slice of a data gradient.
  int64_t z = 0, z_ld = 0;          // Logits, then their gradient.
  int64_t partial_logits = -1;      // A row-parallel head's partial logits.
  int64_t row_loss = 0;
  int64_t guard = -1;  // Guarded: the block's non-finite flag (an int).
  int64_t floats = 0;

  int64_t chunk(int l) const { return padded[l] / ranks; }
  // kGroups: one block's slot of its group's exchange area: any exchanged activation, partial
  // product or slice, unpadded ([rows][width]).
  int64_t slot() const { return rows * *std::max_element(padded.begin(), padded.end()); }
};

// The layout for `plan` at `ranks` blocks per model.
Layout LayoutFor(const MlpStepPlan& plan, int ranks);

// Register tiles (rm, rn) for an m x n x p product of the kernel: the cheapest by a count of
// issued instructions (tensor cores: per warp, the products spread over 8 warps; SIMT: per thread,
// with a floor for the FMA latency that few accumulators cannot hide).
std::pair<int, int> TileFor(int64_t m, int64_t n, int64_t p, bool mma);

}  // namespace reprise::codegen::mlp_cluster

#endif  // REPRISE_SRC_CODEGEN_MLP_CLUSTER_LAYOUT_H_
