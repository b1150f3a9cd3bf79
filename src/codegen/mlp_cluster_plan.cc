// The cluster and group schedules' planning (PlanCluster, mlp_cluster_kernel.h): one block's
// shared-memory layout, the blocks per model, and the groups' exchange areas.
#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/mlp_cluster_kernel.h"
#include "src/codegen/mlp_cluster_layout.h"

namespace reprise::codegen {
namespace mlp_cluster {

Layout LayoutFor(const MlpStepPlan& plan, int ranks) {
  const auto& d = plan.widths;
  Layout s;
  s.ranks = ranks;
  s.layers = plan.layers();
  const int layers = s.layers;
  s.rows = RoundUp(plan.batch, 16);
  for (int l = 0; l <= layers; ++l) {
    const bool sliced = (l > 0 && l < layers) || (l == 0 && layers == 1);
    s.padded.push_back(RoundUp(d[l], sliced ? 16 * ranks : 16));
  }
  for (int l = 0; l < layers; ++l) s.row_parallel.push_back(l > 0 && !s.row_parallel[l - 1]);
  auto take = [&](int64_t n) {
    const int64_t at = s.floats;
    s.floats += RoundUp(n, 4);
    return at;
  };
  for (int l = 0; l < layers; ++l) {
    const bool head = l == layers - 1;
    const int64_t out =
        head ? s.padded[l + 1] : (s.row_parallel[l] ? s.padded[l + 1] : s.chunk(l + 1));
    const int64_t in = s.row_parallel[l] ? s.chunk(l) : s.padded[l];
    s.w_ld.push_back(in + 4);
    s.w.push_back(take(out * (in + 4)));
    s.bias.push_back(take(head ? s.padded[l + 1] : s.chunk(l + 1)));
  }
  int64_t widest = 0, widest_slice = 0;
  for (int l = 0; l < layers; ++l) widest = std::max(widest, s.padded[l]);
  s.full_ld = widest + 4;
  s.full = take(s.rows * s.full_ld);
  s.h.assign(layers, 0);
  s.h_ld.assign(layers, 0);
  for (int l = 1; l < layers; ++l) {
    s.h_ld[l] = s.chunk(l) + 4;
    s.h[l] = take(s.rows * s.h_ld[l]);
    widest_slice = std::max(widest_slice, s.chunk(l));
  }
  s.slice_ld = widest_slice + 4;
  s.slice = take(s.rows * s.slice_ld);
  s.z_ld = s.padded[layers] + 4;
  s.z = take(s.rows * s.z_ld);
  if (s.row_parallel[layers - 1]) s.partial_logits = take(s.rows * s.z_ld);
  s.row_loss = take(s.rows);
  if (plan.target.guard != MlpGuard::kNone) s.guard = take(1);
  return s;
}

std::pair<int, int> TileFor(int64_t m, int64_t n, int64_t p, bool mma) {
  double best = std::numeric_limits<double>::infinity();
  std::pair<int, int> choice = {1, 1};
  for (int rm : {1, 2, 4}) {
    for (int rn : {1, 2, 4}) {
      const int64_t tm = 16 * rm, tn = (mma ? 8 : 16) * rn;
      if (m % tm != 0 || n % tn != 0) continue;
      const int64_t tiles = (m / tm) * (n / tn);
      double cost;
      if (mma) {
        const int64_t rounds = (tiles + 7) / 8;
        cost = static_cast<double>(rounds) * (p / 8) * (2.0 * rm * rn + 2.0 * (4 * rm + 2 * rn));
      } else {
        cost = static_cast<double>(tiles) * p * std::max(rm * rn + rm + rn, 8);
      }
      if (cost < best) {
        best = cost;
        choice = {rm, rn};
      }
    }
  }
  return choice;
}

}  // namespace mlp_cluster

namespace {

using mlp_cluster::kMaxRanks;
using mlp_cluster::Layout;
using mlp_cluster::LayoutFor;

// kGroups: a group's exchange area at `ranks` blocks per model, a slot per block.
int64_t AreaFloats(const MlpStepPlan& plan, int ranks) {
  const Layout s = LayoutFor(plan, ranks);
  return s.ranks * s.slot();
}

}  // namespace

int64_t GroupAreaFloats(const MlpStepPlan& plan) { return AreaFloats(plan, plan.cluster); }

int64_t GroupsWorkspaceFloats(int64_t batch, const std::vector<int64_t>& widths, int64_t models) {
  MlpStepPlan plan;
  plan.batch = static_cast<int>(batch);
  plan.widths.assign(widths.begin(), widths.end());
  return 2 * AreaFloats(plan, 4) * std::min<int64_t>(models, kMlpStepGuardWord - 2);
}

absl::Status PlanCluster(MlpStepPlan& plan, bool groups) {
  // A model's cluster updates its weights without waiting for the others (a later wave's): under
  // the guard, only into the shadow, which the last block to finish makes current.
  if (!groups && plan.target.guard != MlpGuard::kNone && !plan.target.shadow) {
    return absl::UnimplementedError(
        "the cluster schedule runs the non-finite guard only double-buffered (a shadow input): "
        "a model's cluster updates its weights without waiting for the others' gradients");
  }
  if (plan.target.threads != 256) {
    return absl::UnimplementedError(absl::StrCat(
        "the cluster schedule runs 256 threads per block, the target has ", plan.target.threads));
  }
  int ranks = 0;
  int64_t needed = 0;
  for (int r = 1; r <= kMaxRanks; r *= 2) {
    needed = LayoutFor(plan, r).floats * 4;
    if (needed <= plan.target.max_shared_bytes) {
      ranks = r;
      break;
    }
  }
  if (ranks == 0) {
    return absl::UnimplementedError(absl::StrCat(
        "the cluster schedule needs ", needed, " bytes of shared memory per block at ", kMaxRanks,
        " blocks per model; a block may have ", plan.target.max_shared_bytes));
  }
  const int fewest = ranks;
  while (ranks < kMaxRanks && int64_t{plan.models} * ranks * 4 <= plan.target.grid) ranks *= 2;
  // A group's exchange area is a slot per block of the widths padded to 16 blocks: fewer blocks
  // where the workspace would not hold one.
  // The exchange areas' room: the workspace, or with step-start copies what they leave from
  // plan.area_offset on (SearchMlpStepPlan: before them where that is 0).
  const bool copies = plan.target.guard != MlpGuard::kNone && !plan.target.shadow;
  const int64_t room = !copies                ? plan.workspace_floats
                       : plan.area_offset > 0 ? plan.workspace_floats - plan.area_offset
                                              : plan.grad_w_offset[0];
  while (groups && ranks > fewest && AreaFloats(plan, ranks) > room) ranks /= 2;
  // The guard word counts finished blocks in 16 bits (mlpg::GuardFinish); a cooperative grid of
  // groups is far below that.
  if (!groups && plan.target.guard != MlpGuard::kNone && int64_t{plan.models} * ranks > 0xffff) {
    return absl::UnimplementedError(
        absl::StrCat("the guarded cluster schedule launches at most 65535 blocks; ", plan.models,
                     " models take ", int64_t{plan.models} * ranks));
  }
  plan.cluster = ranks;
  plan.shared_bytes = LayoutFor(plan, ranks).floats * 4;
  plan.phases = 2 * plan.layers();  // Stamped sections: loads, each forward, head, each backward.
  plan.barriers = 0;
  plan.groups = 0;
  plan.exchange_areas = 0;
  if (!groups) return absl::OkStatus();
  const int64_t area = GroupAreaFloats(plan);
  // Group barriers take barrier words 2 on, below the guard's word and, double-buffered, the
  // parity's (PlanMlpStep lays the shadow out after this).
  const bool parity = plan.target.guard != MlpGuard::kNone && plan.target.shadow;
  const int64_t fit =
      std::min<int64_t>({plan.models, plan.target.grid / ranks,
                         (parity ? kMlpStepParityWord : kMlpStepGuardWord) - 2, room / area});
  if (fit < 1) {
    return absl::UnimplementedError(absl::StrCat(
        "the group schedule needs ", ranks, " co-resident blocks per model (the grid has ",
        plan.target.grid, ") and an exchange area of ", area,
        " floats per group (the workspace has ", room, " past the step-start copies)"));
  }
  plan.groups = static_cast<int>(fit);
  plan.exchange_areas = room >= 2 * fit * area ? 2 : 1;
  return absl::OkStatus();
}

}  // namespace reprise::codegen
