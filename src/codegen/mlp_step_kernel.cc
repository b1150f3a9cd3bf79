#include "src/codegen/mlp_step_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "src/codegen/mlp_cluster_kernel.h"
#include "src/codegen/mlp_guard_source.h"
#include "src/codegen/mlp_step_layout.h"
#include "src/util/status_macros.h"

namespace reprise::codegen {
namespace {

using namespace mlp_layout;  // NOLINT: the host mirrors of the device layout.

// Host mirrors of the device library's padding rules (mlp_step_device.inc).
int64_t PadRow(int64_t x) { return Ceil4(x) % 32 == 0 ? Ceil4(x) + 4 : Ceil4(x); }
int64_t PadRowMma(int64_t x) { return Ceil4(x) % 8 == 0 ? Ceil4(x) + 4 : Ceil4(x); }
int64_t PadColMma(int64_t x) { return Ceil8(x) % 16 == 8 ? Ceil8(x) : Ceil8(x) + 8; }

int64_t GemmSmemFloats(int kind, int64_t p, const MlpGemmTile& t) {
  const bool aip = kind != kWgrad, bip = kind == kFwd;
  const int64_t pcp = t.mma ? Ceil8(t.pc) : Ceil4(t.pc);
  const int64_t lda =
      aip ? (t.mma ? PadRowMma(pcp) : PadRow(pcp)) : (t.mma ? PadColMma(t.tm) : Ceil4(t.tm));
  const int64_t a = aip ? t.tm * lda : pcp * lda;
  const int64_t ldb =
      bip ? (t.mma ? PadRowMma(pcp) : PadRow(pcp)) : (t.mma ? PadColMma(t.tn) : Ceil4(t.tn));
  const int64_t b = bip ? t.tn * ldb : pcp * ldb;
  const int64_t stages = CeilDiv(p, t.pc) > 1 ? 2 : 1;
  const int64_t lde = Ceil4(t.tn);
  const int64_t ext = kind == kFwd     ? lde
                      : kind == kDgrad ? t.tm * lde
                                       : 2 * t.tm * lde + 2 * Ceil4(t.tm);
  return stages * (a + b) + Ceil4(int64_t{t.split} * t.tm * t.tn) + ext;
}

int64_t HeadSplit(int64_t rows, int64_t k, int64_t c, int threads) {
  return std::max<int64_t>(1, std::min<int64_t>(threads / (rows * c), Ceil4(k) / 4));
}

int64_t HeadSmemFloats(int64_t rows, int64_t k, int64_t c, int threads) {
  const int64_t ldk = PadRow(k), ldc = Ceil4(c);
  return rows * ldk + c * ldk + Ceil4(HeadSplit(rows, k, c, threads) * rows * c) + rows * ldc +
         ldc + Ceil4(2 * rows);
}

// The largest reduction chunk (all of p, else 512 down to `step`) with which tile t fits in
// `budget` floats; `slices` of the reduction, at most one per `step` of the chunk. False: none
// fits.
bool FitChunk(int kind, int64_t p, int step, int slices, int64_t budget, MlpGemmTile& t) {
  std::vector<int64_t> chunks = {p};
  for (int64_t pc : {512, 256, 128, 64, 32, 16, 8, 4}) {
    if (pc < p && pc % step == 0) chunks.push_back(pc);
  }
  for (int64_t pc : chunks) {
    t.pc = static_cast<int>(pc);
    t.split = static_cast<int>(std::min<int64_t>(slices, CeilDiv(pc, step)));
    if (GemmSmemFloats(kind, p, t) <= budget) return true;
  }
  return false;
}

// Completes a tm x tn tile (register tile, split, chunk) or returns nullopt where it cannot fit.
std::optional<MlpGemmTile> MakeTile(int kind, int64_t m, int64_t n, int64_t p, int tm, int tn,
                                    int threads, int64_t budget) {
  MlpGemmTile t;
  t.tm = tm;
  t.tn = tn;
  const int outputs = tm * tn;
  if (outputs > 32 * threads) return std::nullopt;
  if (outputs > threads) {
    const int q = outputs / threads;
    t.rn = std::min(tn, std::min(q, 4));
    t.rm = q / t.rn;
    if (t.rm > tm) {
      t.rm = tm;
      t.rn = q / tm;
    }
    if (t.rm > 8 || t.rn > 8) return std::nullopt;
  }
  const int slices = std::max(1, threads / ((tm / t.rm) * (tn / t.rn)));
  t.tiles = static_cast<int>(CeilDiv(m, tm) * CeilDiv(n, tn));
  if (!FitChunk(kind, p, 4, slices, budget, t)) return std::nullopt;
  return t;
}

// The same on TF32 tensor cores: tm a multiple of 16, tn of 8, each warp owning rm x rn
// fragments of 16 x 8 outputs; warps left over split the reduction.
std::optional<MlpGemmTile> MakeMmaTile(int kind, int64_t m, int64_t n, int64_t p, int tm, int tn,
                                       int rm, int rn, int threads, int64_t budget) {
  if (tm % (16 * rm) != 0 || tn % (8 * rn) != 0) return std::nullopt;
  const int warps = threads / 32, used = (tm / (16 * rm)) * (tn / (8 * rn));
  if (used > warps) return std::nullopt;
  MlpGemmTile t;
  t.mma = true;
  t.tm = tm;
  t.tn = tn;
  t.rm = rm;
  t.rn = rn;
  t.tiles = static_cast<int>(CeilDiv(m, tm) * CeilDiv(n, tn));
  if (!FitChunk(kind, p, 8, warps / used, budget, t)) return std::nullopt;
  return t;
}

// SM cycles of a task's products. SIMT: FMA issue (inflated for small register tiles, whose
// shared-memory reads dominate) or one thread's FMA chain. Tensor cores: the fragments' shared-
// memory reads (one wavefront per warp-wide read), the mma.sync issue, or one warp's chain.
double ComputeCycles(int64_t p, const MlpGemmTile& t) {
  if (!t.mma) {
    const double pp = static_cast<double>(Ceil4(p));
    const double issue = t.tm * t.tn * pp / 128.0 * (1.0 + double(t.rm + t.rn) / (t.rm * t.rn));
    const double chain = pp / t.split * 4.0;
    return std::max(issue, chain);
  }
  const double steps = static_cast<double>(Ceil8(p)) / 8.0;
  const double fragments = (t.tm / 16) * (t.tn / 8);
  const double reads = fragments / (t.rm * t.rn) * steps * (4.0 * t.rm + 2.0 * t.rn);
  const double issue = fragments * steps * 2.0;
  const double chain = steps / t.split * (40.0 + 4.0 * t.rm * t.rn);
  return std::max({reads, issue, chain});
}

// A rough model, in SM cycles, of one task: a fixed latency, the block barriers of each chunk,
// the products and L2 reads (early operands are mostly hidden behind the grid barrier when there
// is one chunk).
double TaskCost(int64_t p, bool a_late, const MlpGemmTile& t) {
  const double pp = static_cast<double>(Ceil4(p));
  const double compute = ComputeCycles(p, t);
  const double a_bytes = t.tm * pp * 4, b_bytes = t.tn * pp * 4;
  const double late = a_late ? a_bytes : 0, early = (a_late ? 0 : a_bytes) + b_bytes;
  const bool one_chunk = t.pc >= p;
  const double load = (late + early * (one_chunk ? 0.25 : 1.0)) / 64.0;
  const double syncs = 200.0 * CeilDiv(p, t.pc);
  return 1300.0 + syncs + (one_chunk ? compute + load : std::max(compute, load));
}

struct Candidate {
  MlpGemmTile tile;
  double cost = 0;  // Of one task.
};

// A GEMM of one phase: what it computes and every tiling that fits.
struct PhaseGemm {
  int kind;
  int64_t m, n, p;
  bool a_late;
  std::string what;
  std::vector<Candidate> candidates;
};

absl::Status FindCandidates(PhaseGemm& g, const MlpStepTarget& target, int64_t budget) {
  for (int tm = 1; tm <= 128 && tm < 2 * g.m; tm *= 2) {
    for (int tn = 1; tn <= 128 && tn < 2 * g.n; tn *= 2) {
      std::optional<MlpGemmTile> t =
          MakeTile(g.kind, g.m, g.n, g.p, tm, tn, target.threads, budget);
      if (t.has_value()) g.candidates.push_back({*t, TaskCost(g.p, g.a_late, *t)});
    }
  }
  if (target.tf32) {
    for (int tm = 16; tm <= 128 && tm < 2 * g.m; tm *= 2) {
      for (int tn = 8; tn <= 128 && tn < 2 * g.n; tn *= 2) {
        for (int rm = 1; rm <= 4; rm *= 2) {
          for (int rn = 1; rn * rm <= 8; rn *= 2) {
            std::optional<MlpGemmTile> t =
                MakeMmaTile(g.kind, g.m, g.n, g.p, tm, tn, rm, rn, target.threads, budget);
            if (t.has_value()) g.candidates.push_back({*t, TaskCost(g.p, g.a_late, *t)});
          }
        }
      }
    }
  }
  if (g.candidates.empty()) {
    return absl::UnimplementedError(absl::StrCat(g.what, " [", g.m, " x ", g.n, ", reduction ", g.p,
                                                 "]: no tile fits in ", budget * 4,
                                                 " bytes of shared memory"));
  }
  return absl::OkStatus();
}

// The busiest block's time when block b runs tasks b, b + grid, ... of [first's, second's], each
// GEMM's tiles once per model.
double Makespan(const Candidate& first, const Candidate* second, int grid, int models) {
  const int64_t t1 = int64_t{models} * first.tile.tiles;
  const int64_t total = t1 + int64_t{models} * (second ? second->tile.tiles : 0);
  // Tasks of block b below n: those t < n with t = b mod grid.
  auto count = [&](int64_t n, int64_t b) { return n > b ? (n - 1 - b) / grid + 1 : 0; };
  double worst = 0;
  for (int64_t b = 0; b < std::min<int64_t>(grid, total); ++b) {
    const int64_t n1 = count(t1, b), n2 = count(total, b) - n1;
    worst = std::max(worst, n1 * first.cost + (n2 > 0 ? n2 * second->cost : 0.0));
  }
  return worst;
}

// Tiles for the one or two GEMMs that share a phase, chosen together.
absl::Status ChoosePhaseTiles(std::vector<PhaseGemm>& gemms, const MlpStepTarget& target,
                              int64_t budget, int models, std::vector<MlpGemmTile>* chosen) {
  for (PhaseGemm& g : gemms) RETURN_IF_ERROR(FindCandidates(g, target, budget));
  double best = std::numeric_limits<double>::infinity();
  chosen->assign(gemms.size(), {});
  for (const Candidate& c1 : gemms[0].candidates) {
    if (gemms.size() == 1) {
      const double cost = Makespan(c1, nullptr, target.grid, models);
      if (cost < best) best = cost, (*chosen)[0] = c1.tile;
      continue;
    }
    for (const Candidate& c2 : gemms[1].candidates) {
      const double cost = Makespan(c1, &c2, target.grid, models);
      if (cost < best) best = cost, (*chosen)[0] = c1.tile, (*chosen)[1] = c2.tile;
    }
  }
  return absl::OkStatus();
}

// The kLayerPhases schedule's tiles (see MlpSchedule); `smem` grows to the floats they need.
absl::Status PlanLayerPhases(MlpStepPlan& plan, int64_t budget, int64_t& smem) {
  const int layers = plan.layers();
  const int64_t batch = plan.batch, models = plan.models;
  const MlpStepTarget& target = plan.target;
  const std::vector<int64_t> d(plan.widths.begin(), plan.widths.end());
  plan.forward.resize(std::max(0, layers - 1));
  for (int l = 0; l + 1 < layers; ++l) {
    std::vector<PhaseGemm> gemms = {
        {kFwd, batch, d[l + 1], d[l], l > 0, absl::StrCat("forward GEMM of layer ", l), {}}};
    std::vector<MlpGemmTile> tiles;
    RETURN_IF_ERROR(ChoosePhaseTiles(gemms, target, budget, plan.models, &tiles));
    plan.forward[l] = tiles[0];
    smem = std::max(smem, GemmSmemFloats(kFwd, d[l], tiles[0]));
  }
  const int64_t k = d[layers - 1], c = d[layers];
  // Rows per head task: each model's rows in about grid / K equal tasks.
  const int64_t head_tasks = std::max<int64_t>(1, target.grid / models);
  int rows = static_cast<int>(std::min<int64_t>(batch, CeilDiv(batch, head_tasks)));
  while (rows > 1 && HeadSmemFloats(rows, k, c, target.threads) > budget) rows = (rows + 1) / 2;
  if (HeadSmemFloats(rows, k, c, target.threads) > budget) {
    return absl::UnimplementedError(
        absl::StrCat("the last layer (", c, " classes x ", k, " inputs) needs ",
                     HeadSmemFloats(rows, k, c, target.threads) * 4 + 128,
                     " bytes of shared memory per block; the fused MLP step keeps all of W_",
                     layers - 1, " in one block and has ", target.max_shared_bytes));
  }
  plan.head_rows = rows;
  smem = std::max(smem, HeadSmemFloats(rows, k, c, target.threads));

  plan.dgrad.resize(layers);
  plan.wgrad.resize(layers);
  // Backward phase b runs dgrad of layer L-2-b beside wgrad of layer L-1-b while L-2-b >= 1; the
  // last one runs wgrad of layers 1 and 0 (L = 1: wgrad of layer 0 alone).
  for (int b = 0; b < std::max(1, layers - 1); ++b) {
    const int dl = layers - 2 - b, wl = layers - 1 - b;
    std::vector<PhaseGemm> gemms;
    std::vector<int> wgrad_layers = {wl};
    if (dl >= 1) {
      gemms.push_back({kDgrad,
                       batch,
                       d[dl],
                       d[dl + 1],
                       true,
                       absl::StrCat("data-gradient GEMM of layer ", dl),
                       {}});
    } else if (layers >= 2) {
      wgrad_layers.push_back(0);
    }
    for (int l : wgrad_layers) {
      gemms.push_back({kWgrad,
                       d[l + 1],
                       d[l],
                       batch,
                       WgradLate(l, layers),
                       absl::StrCat("weight-gradient GEMM of layer ", l),
                       {}});
    }
    std::vector<MlpGemmTile> tiles;
    RETURN_IF_ERROR(ChoosePhaseTiles(gemms, target, budget, plan.models, &tiles));
    size_t next = 0;
    if (dl >= 1) {
      plan.dgrad[dl] = tiles[next++];
      smem = std::max(smem, GemmSmemFloats(kDgrad, d[dl + 1], plan.dgrad[dl]));
    }
    for (int l : wgrad_layers) {
      plan.wgrad[l] = tiles[next++];
      smem = std::max(smem, GemmSmemFloats(kWgrad, batch, plan.wgrad[l]));
    }
  }
  plan.phases = layers >= 2 ? 2 * layers - 1 : 2;
  plan.barriers = plan.phases - 1;
  return absl::OkStatus();
}

// Head task cost in the units of TaskCost: its logits and data-gradient products (SIMT, through
// shared memory) and a fixed latency per dependent step.
double HeadCost(int64_t rows, int64_t k, int64_t c, int threads) {
  return 2600.0 + 2.0 * static_cast<double>(rows * k * c) / threads * 8.0;
}

// The cheapest of `g`'s candidates whose tiles span `rows` rows, costed as all of one row
// block's tiles run one after another. nullopt: none fits.
std::optional<Candidate> RowBlockTile(const PhaseGemm& g, int rows) {
  std::optional<Candidate> best;
  for (const Candidate& c : g.candidates) {
    if (c.tile.tm != rows) continue;
    const double cost = static_cast<double>(CeilDiv(g.n, c.tile.tn)) * c.cost;
    if (!best.has_value() || cost < best->cost) best = Candidate{c.tile, cost};
  }
  return best;
}

// The kRowChain schedule (see MlpSchedule): the row block (head_rows) whose phase 0 the model
// finds shortest, then each weight gradient's tiling of least total cost. Unimplemented where no
// row block fits.
absl::Status PlanRowChain(MlpStepPlan& plan, int64_t budget, int64_t& smem) {
  const int layers = plan.layers();
  const int64_t batch = plan.batch;
  const MlpStepTarget& target = plan.target;
  const std::vector<int64_t> d(plan.widths.begin(), plan.widths.end());
  const int64_t k = d[layers - 1], c = d[layers];
  // Every tiling of each phase-0 GEMM, found once; each row count then keeps those of its rows.
  // A GEMM with no tiling that fits leaves its list empty, and no row count fits.
  std::vector<PhaseGemm> forward_gemms, dgrad_gemms;
  for (int l = 0; l + 1 < layers; ++l) {
    forward_gemms.push_back(
        {kFwd, batch, d[l + 1], d[l], true, absl::StrCat("forward GEMM of layer ", l), {}});
    (void)FindCandidates(forward_gemms.back(), target, budget);
  }
  for (int l = 1; l + 1 < layers; ++l) {
    dgrad_gemms.push_back(
        {kDgrad, batch, d[l], d[l + 1], true, absl::StrCat("data-gradient GEMM of layer ", l), {}});
    (void)FindCandidates(dgrad_gemms.back(), target, budget);
  }
  double best = std::numeric_limits<double>::infinity();
  for (int rows = 1; rows <= 128 && rows < 2 * batch; rows *= 2) {
    if (HeadSmemFloats(rows, k, c, target.threads) > budget) break;
    if (target.chain_rows > 0 && rows != target.chain_rows) continue;
    double task = HeadCost(rows, k, c, target.threads);
    std::vector<MlpGemmTile> forward(std::max(0, layers - 1)), dgrad(layers);
    bool fits = true;
    for (int l = 0; fits && l + 1 < layers; ++l) {
      const std::optional<Candidate> t = RowBlockTile(forward_gemms[l], rows);
      fits = t.has_value();
      if (fits) forward[l] = t->tile, task += t->cost;
    }
    for (int l = 1; fits && l + 1 < layers; ++l) {
      const std::optional<Candidate> t = RowBlockTile(dgrad_gemms[l - 1], rows);
      fits = t.has_value();
      if (fits) dgrad[l] = t->tile, task += t->cost;
    }
    if (!fits) continue;
    const double makespan =
        static_cast<double>(CeilDiv(plan.models * CeilDiv(batch, rows), target.grid)) * task;
    if (makespan < best) {
      best = makespan;
      plan.head_rows = rows;
      plan.forward = std::move(forward);
      plan.dgrad = std::move(dgrad);
    }
  }
  if (best == std::numeric_limits<double>::infinity()) {
    return absl::UnimplementedError(absl::StrCat(
        "the row-chain MLP step: no block of batch rows fits the head and every layer's tiles in ",
        budget * 4, " bytes of shared memory"));
  }
  smem = std::max(smem, HeadSmemFloats(plan.head_rows, k, c, target.threads));
  for (int l = 0; l + 1 < layers; ++l) {
    smem = std::max(smem, GemmSmemFloats(kFwd, d[l], plan.forward[l]));
    if (l >= 1) smem = std::max(smem, GemmSmemFloats(kDgrad, d[l + 1], plan.dgrad[l]));
  }
  plan.wgrad.resize(layers);
  for (int l = 0; l < layers; ++l) {
    PhaseGemm g{
        kWgrad, d[l + 1], d[l], batch, true, absl::StrCat("weight-gradient GEMM of layer ", l), {}};
    RETURN_IF_ERROR(FindCandidates(g, target, budget));
    const Candidate* pick = &g.candidates[0];
    for (const Candidate& cand : g.candidates) {
      if (cand.tile.tiles * cand.cost < pick->tile.tiles * pick->cost) pick = &cand;
    }
    plan.wgrad[l] = pick->tile;
    smem = std::max(smem, GemmSmemFloats(kWgrad, batch, plan.wgrad[l]));
  }
  plan.row_chain = true;
  plan.phases = 2;
  plan.barriers = 1;
  return absl::OkStatus();
}

}  // namespace

int64_t MlpStepWorkspaceFloats(int64_t batch, const std::vector<int64_t>& widths, int64_t models,
                               bool start_copies) {
  const int64_t layers = static_cast<int64_t>(widths.size()) - 1;
  const int64_t rows = models * batch;
  int64_t total = Align32(rows);  // Row losses.
  for (int64_t l = 1; l < layers; ++l) total += Align32(rows * widths[l]);
  for (int64_t l = 0; l < layers; ++l) total += Align32(rows * widths[l + 1]);
  for (int64_t l = 0; start_copies && l < layers; ++l) {  // Parameters and velocities (the plan).
    total += 2 * (Align32(models * widths[l + 1] * widths[l]) + Align32(models * widths[l + 1]));
  }
  if (models >= kGroupsMinModels) {
    const int64_t groups = GroupsWorkspaceFloats(batch, widths, models);
    total = start_copies ? total + groups : std::max(total, groups);
  }
  return total;
}

namespace {
absl::StatusOr<MlpStepPlan> SearchMlpStepPlan(int64_t batch, const std::vector<int64_t>& widths,
                                              const MlpStepTarget& target, int64_t models);
}  // namespace

// The tile search takes tens of ms, and the fuse pass, shape inference and lowering each ask for
// the same plan, so plans are remembered for the process, by shapes and target.
absl::StatusOr<MlpStepPlan> PlanMlpStep(int64_t batch, const std::vector<int64_t>& widths,
                                        const MlpStepTarget& target, int64_t models) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* plans = new absl::flat_hash_map<std::string, absl::StatusOr<MlpStepPlan>>();
  const std::string key =
      absl::StrCat(models, "x", batch, "|", absl::StrJoin(widths, ","), "|", target.grid, ",",
                   target.threads, ",", target.max_shared_bytes, ",", target.aligned, ",",
                   target.tf32, ",", static_cast<int>(target.schedule), ",", target.chain_rows, ",",
                   static_cast<int>(target.guard), ",", target.shadow);
  {
    absl::MutexLock lock(&mu);
    if (auto it = plans->find(key); it != plans->end()) return it->second;
  }
  absl::StatusOr<MlpStepPlan> plan = SearchMlpStepPlan(batch, widths, target, models);
  absl::MutexLock lock(&mu);
  return plans->emplace(key, std::move(plan)).first->second;
}

namespace {
absl::StatusOr<MlpStepPlan> SearchMlpStepPlan(int64_t batch, const std::vector<int64_t>& widths,
                                              const MlpStepTarget& target, int64_t models) {
  const int layers = static_cast<int>(widths.size()) - 1;
  if (layers < 1 || batch < 1 || models < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("an MLP step needs a batch, a model and at least one layer; got batch ", batch,
                     ", ", models, " models and ", widths.size(), " widths"));
  }
  if (target.grid < 1 ||
      (target.threads != 128 && target.threads != 256 && target.threads != 512)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad MLP step target: grid ", target.grid, ", threads ", target.threads));
  }
  if (target.chain_rows != 0 && (target.chain_rows < 0 || target.chain_rows > 128 ||
                                 (target.chain_rows & (target.chain_rows - 1)) != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MLP step chain_rows must be 0 (planned) or a power of two up to 128, got ",
                     target.chain_rows));
  }
  constexpr int64_t kMaxExtent = 65536;
  constexpr int64_t kMaxElements = std::numeric_limits<int32_t>::max();
  if (batch > kMaxExtent) {
    return absl::UnimplementedError(
        absl::StrCat("batch ", batch, " exceeds the fused MLP step's limit of ", kMaxExtent));
  }
  constexpr int64_t kMaxModels = 8192;  // Their losses are summed in shared memory (32 KB).
  if (models > kMaxModels) {
    return absl::UnimplementedError(
        absl::StrCat(models, " models exceed the fused MLP step's limit of ", kMaxModels));
  }
  for (int l = 0; l <= layers; ++l) {
    if (widths[l] < 1 || widths[l] > kMaxExtent) {
      return absl::UnimplementedError(absl::StrCat("width ", widths[l], " of layer boundary ", l,
                                                   " is outside the fused MLP step's [1, ",
                                                   kMaxExtent, "]"));
    }
    if (l < layers && widths[l] * widths[l + 1] > kMaxElements) {
      return absl::UnimplementedError(absl::StrCat("W_", l, " has more than 2^31 - 1 elements"));
    }
  }
  if (batch * widths[0] > kMaxElements) {
    return absl::UnimplementedError("a model's features have more than 2^31 - 1 elements");
  }
  MlpStepPlan plan;
  plan.models = static_cast<int>(models);
  plan.batch = static_cast<int>(batch);
  for (int64_t w : widths) plan.widths.push_back(static_cast<int>(w));
  plan.target = target;
  const bool guarded = target.guard != MlpGuard::kNone;
  const bool copies = guarded && !target.shadow;  // Double-buffered (a shadow): no copies.
  plan.workspace_floats = MlpStepWorkspaceFloats(batch, widths, models, copies);
  if (plan.workspace_floats > kMaxElements) {
    return absl::UnimplementedError(
        absl::StrCat("the workspace (", plan.workspace_floats, " floats) exceeds 2^31 - 1"));
  }
  plan.h_offset.assign(layers, 0);
  plan.dz_offset.assign(layers, 0);
  int64_t offset = 0;
  for (int l = 1; l < layers; ++l) {
    plan.h_offset[l] = offset;
    offset += Align32(models * batch * widths[l]);
  }
  for (int l = 0; l < layers; ++l) {
    plan.dz_offset[l] = offset;
    offset += Align32(models * batch * widths[l + 1]);
  }
  plan.row_loss_offset = offset;
  offset += Align32(models * batch);
  if (copies) {
    for (auto* v :
         {&plan.grad_w_offset, &plan.grad_b_offset, &plan.start_vw_offset, &plan.start_vb_offset}) {
      v->assign(layers, 0);
    }
    for (int l = 0; l < layers; ++l) {
      const int64_t weights = Align32(models * widths[l + 1] * widths[l]);
      const int64_t biases = Align32(models * widths[l + 1]);
      plan.grad_w_offset[l] = offset;
      plan.grad_b_offset[l] = offset + weights;
      plan.start_vw_offset[l] = offset + weights + biases;
      plan.start_vb_offset[l] = offset + 2 * weights + biases;
      offset += 2 * (weights + biases);
    }
  }

  // kGroups' exchange areas: where the workspace has the most room that the copies do not
  // take, before them (the other schedules' activations, unused by the groups) or after them.
  if (copies && plan.workspace_floats - offset >= plan.grad_w_offset[0]) plan.area_offset = offset;
  const bool auto_cluster = target.schedule == MlpSchedule::kAuto && !copies && target.tf32 &&
                            models >= kClusterMinModels;
  const bool auto_groups = target.schedule == MlpSchedule::kAuto && models >= kGroupsMinModels;
  if (target.schedule == MlpSchedule::kGroups || auto_groups) {
    MlpStepPlan grouped = plan;
    const absl::Status status = PlanCluster(grouped, /*groups=*/true);
    if (status.ok()) {
      if (guarded && target.shadow) LayOutShadow(grouped);
      return grouped;
    }
    if (target.schedule == MlpSchedule::kGroups) return status;
  }
  if (target.schedule == MlpSchedule::kCluster || auto_cluster) {
    const absl::Status clustered = PlanCluster(plan);
    if (clustered.ok()) {
      if (guarded) LayOutShadow(plan);
      return plan;
    }
    if (target.schedule == MlpSchedule::kCluster) return clustered;
  }
  const int64_t scratch = LossScratch(models) + (guarded ? kGuardScratch : 0);
  const int64_t budget = target.max_shared_bytes / 4 - scratch;
  int64_t smem = 0;
  const bool chain = target.schedule == MlpSchedule::kRowChain ||
                     (target.schedule == MlpSchedule::kAuto && models >= kRowChainMinModels);
  // The arguments' shared area serves one model's phases only: an ensemble's tasks take a copy
  // per model (GemmArgs::Model) either way, and reading the phase's arguments from shared memory
  // for it made the 4-model ensemble's step slower (H200, 0.0312 -> 0.0326 ms).
  const bool shared_args = models == 1;
  plan.arg_floats = shared_args ? ArgFloats(layers, /*row_chain=*/true) : 0;
  absl::Status chained = chain ? PlanRowChain(plan, budget - plan.arg_floats, smem)
                               : absl::UnimplementedError("the row chain was not asked for");
  if (!chained.ok()) {
    if (target.schedule == MlpSchedule::kRowChain) return chained;
    smem = 0;
    plan.arg_floats = shared_args ? ArgFloats(layers, /*row_chain=*/false) : 0;
    RETURN_IF_ERROR(PlanLayerPhases(plan, budget - plan.arg_floats, smem));
  }
  smem = Ceil4(smem);  // The scratch after the tiles, and the arguments after it, 16-byte aligned.
  // Tasks of a phase are counted in int on the device.
  int64_t most_tiles = plan.head_rows > 0 ? CeilDiv(batch, plan.head_rows) : 0;
  for (const auto* tiles : {&plan.forward, &plan.dgrad, &plan.wgrad}) {
    for (const MlpGemmTile& t : *tiles) most_tiles = std::max<int64_t>(most_tiles, t.tiles);
  }
  if (models * 2 * most_tiles > kMaxElements) {
    return absl::UnimplementedError(
        absl::StrCat(models, " models of ", most_tiles, " tiles exceed 2^31 - 1 tasks per phase"));
  }
  plan.shared_bytes = (smem + scratch + plan.arg_floats) * 4;
  if (guarded) {
    // The guard word counts finished blocks in 16 bits (and flagged ones in the other 16).
    if (target.grid > 0xffff) {
      return absl::UnimplementedError(
          absl::StrCat("the guarded fused MLP step runs at most 65535 "
                       "blocks, the target has ",
                       target.grid));
    }
    ++plan.phases;  // The guard's section after the last phase (stamped; no barrier).
    if (target.shadow) {
      LayOutShadow(plan);
      plan.deferred_verdict = plan.barriers >= 1;
    }
  }
  return plan;
}
}  // namespace

}  // namespace reprise::codegen
