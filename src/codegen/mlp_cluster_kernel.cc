#include "src/codegen/mlp_cluster_kernel.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace reprise::codegen {
namespace {

#include "src/codegen/mlp_cluster_device.inc"
#include "src/codegen/mlp_primitives_device.inc"

constexpr int kMaxRanks = 8;  // The portable cluster size.

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
std::string B(bool v) { return v ? "true" : "false"; }

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
  int64_t floats = 0;

  int64_t chunk(int l) const { return padded[l] / ranks; }
  // kGroups: one block's slot of its group's exchange area: any exchanged activation, partial
  // product or slice, unpadded ([rows][width]).
  int64_t slot() const { return rows * *std::max_element(padded.begin(), padded.end()); }
};

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
  return s;
}

// Register tiles (rm, rn) for an m x n x p product of the kernel: the cheapest by a count of
// issued instructions (tensor cores: per warp, the products spread over 8 warps; SIMT: per thread,
// with a floor for the FMA latency that few accumulators cannot hide).
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

}  // namespace

namespace {

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
  while (groups && ranks > fewest && AreaFloats(plan, ranks) > plan.workspace_floats) ranks /= 2;
  plan.cluster = ranks;
  plan.shared_bytes = LayoutFor(plan, ranks).floats * 4;
  plan.phases = 2 * plan.layers();  // Stamped sections: loads, each forward, head, each backward.
  plan.barriers = 0;
  plan.groups = 0;
  plan.exchange_areas = 0;
  if (!groups) return absl::OkStatus();
  const int64_t area = GroupAreaFloats(plan);
  const int64_t fit = std::min<int64_t>(
      {plan.models, plan.target.grid / ranks, kMlpStepGuardWord - 2, plan.workspace_floats / area});
  if (fit < 1) {
    return absl::UnimplementedError(absl::StrCat(
        "the group schedule needs ", ranks, " co-resident blocks per model (the grid has ",
        plan.target.grid, ") and an exchange area of ", area,
        " floats per group (the workspace has ", plan.workspace_floats, ")"));
  }
  plan.groups = static_cast<int>(fit);
  plan.exchange_areas = plan.workspace_floats >= 2 * fit * area ? 2 : 1;
  return absl::OkStatus();
}

namespace {

// Writes the kernel body: statements appended to `code`.
class ClusterBody {
 public:
  // `exchanges`: Share calls per model (kGroups with two areas; see Exchanges()).
  ClusterBody(const MlpStepPlan& plan, std::string& code, int exchanges = 0)
      : plan_(plan),
        s_(LayoutFor(plan, plan.cluster)),
        d_(plan.widths),
        groups_(plan.groups > 0),
        exchanges_per_model_(exchanges),
        code_(code) {}

  void Emit(bool batched, bool shared_features, bool shared_labels, bool phase_clock);
  int Exchanges() const { return exchanges_; }

 private:
  // A product's type: out(m, n) = sum over p of A(m, p) B(p, n) (see mlpc::Gemm).
  // a_h, b_h: that operand is a hidden activation h_l (l >= 1, a slice or gathered), stored
  // rounded to TF32 where the products run on tensor cores (Rounded).
  std::string Gemm(int64_t m, int64_t n, int64_t p, int64_t lda, bool at, int64_t ldb, bool bt,
                   bool a_h = false, bool b_h = false) const {
    const bool mma = plan_.target.tf32;
    const auto [rm, rn] = TileFor(m, n, p, mma);
    return absl::StrCat("Gemm<", m, ", ", n, ", ", p, ", ", lda, ", ", B(at), ", ", ldb, ", ",
                        B(bt), ", ", rm, ", ", rn, ", ", B(mma), ", ", B(a_h && Rounded()), ", ",
                        B(b_h && Rounded()), ">");
  }
  // Hidden activations are stored rounded to TF32 (BiasRelu<true>) with tensor-core products:
  // only products (which round them anyway), copies and ReLU masks read them.
  bool Rounded() const { return plan_.target.tf32; }
  std::string BiasRelu(int64_t h, int64_t ld, int64_t bias) const {
    return absl::StrCat("BiasRelu<", B(Rounded()), ">{", Smem(h), ", ", ld, ", ", Smem(bias), "}");
  }
  std::string Smem(int64_t offset) const { return absl::StrCat("(sm + ", offset, ")"); }
  std::string Buf(const char* name, int l) const { return absl::StrCat(name, l); }
  bool Vec(int64_t global_ld) const { return plan_.target.aligned && global_ld % 4 == 0; }
  void Line(const std::string& s) { absl::StrAppend(&code_, "  ", s, "\n"); }
  void Sync() { Line("SyncThreads();"); }
  void ClusterSync() { Line("SyncThreads();\n  ClusterSync();"); }
  // Before the other blocks read `cols` columns of this block's rows x `ld` buffer at `src`:
  // clusters read it in place after a cluster barrier; a group, once every block is done with
  // the exchange area, copies it into this block's slot and meets at its barrier.
  void Share(const std::string& src, int64_t ld, int64_t cols) {
    if (!groups_) {
      ClusterSync();
      return;
    }
    // Exchange e uses area e % 2 (of two): the group's last barrier, of the exchange before,
    // came after every block's reads of this area, except where a model's first exchange follows
    // the previous model's last in the same area (an odd count per model).
    const int e = exchanges_++;
    const bool alternate = plan_.exchange_areas == 2;
    if (!alternate || (e == 0 && exchanges_per_model_ % 2 == 1)) {
      Line("GroupSync(group_word, rank);  // Every block is done with the exchange area.");
    } else {
      Sync();  // This block's threads have written what it publishes.
    }
    area_ = alternate && e % 2 == 1 ? absl::StrCat("(area + ", GroupAreaFloats(plan_), ")")
                                    : std::string("area");
    Line(absl::StrCat("Publish<", s_.rows, ", ", cols, ", ", ld, ">(", area_, " + rank * ",
                      s_.slot(), ", ", src, ");"));
    Line("GroupSync(group_word, rank);");
  }
  // After the other blocks' reads of a shared buffer: a cluster's blocks overwrite it only after
  // a barrier; a group's next Share waits for them itself, but this block's threads still meet
  // before they read what the exchange wrote.
  void SharedReadsDone() {
    if (groups_) {
      Sync();
    } else {
      ClusterSync();
    }
  }
  // The reduce-scatter of the blocks' partial products (rows x `width`, in `full`), columns from
  // c`column`, into the epilogue `e`.
  std::string Reduce(int64_t cols, int64_t width, int column, const std::string& e) const {
    if (groups_) {
      return absl::StrCat("ReduceArea<", s_.rows, ", ", cols, ", ", width, ">(", area_, ", ",
                          s_.slot(), ", c", column, ", ", e, ");");
    }
    return absl::StrCat("ReduceColumns<", s_.rows, ", ", cols, ", ", s_.full_ld, ">(",
                        Smem(s_.full), ", c", column, ", ", e, ");");
  }
  // All-gather of the blocks' `chunk`-column slices (this block's at `slice`, leading dimension
  // `ld`) into `full`.
  void Gather(const std::string& slice, int64_t ld, int64_t chunk) {
    if (!groups_) {
      Line(absl::StrCat("GatherColumns<", s_.rows, ", ", chunk, ", ", ld, ", ", s_.full_ld, ">(",
                        Smem(s_.full), ", ", slice, ");"));
      return;
    }
    Share(slice, ld, chunk);
    Line(absl::StrCat("GatherArea<", s_.rows, ", ", chunk, ", ", s_.full_ld, ">(", Smem(s_.full),
                      ", ", area_, ", ", s_.slot(), ");"));
  }
  // SGD on W_l's outputs of an m x n product whose rows and columns past `rows` and `cols`
  // (expressions) are padding (`padded`: some are, for some block).
  std::string SgdOf(int l, const std::string& w_smem, const std::string& offset,
                    const std::string& rows, const std::string& cols, bool padded) const {
    const bool vec2 = plan_.target.aligned && d_[l] % 2 == 0;
    return absl::StrCat("Sgd<", B(padded), ", ", B(vec2), ">{", w_smem, ", ", s_.w_ld[l], ", w", l,
                        "k + ", offset, ", vw", l, "k + ", offset, ", ", d_[l], ", ", rows, ", ",
                        cols, ", lr_, mu_, wd_}");
  }
  // Rows per pass of W_l's m x n weight gradient through h_{l+1}'s buffer (free in layer l's
  // backward): the most that divide m and fit; 0 where none fits, and for clusters, whose other
  // blocks may still be reading that buffer (the head gathers it with no cluster barrier after).
  int64_t StageRows(int l, int64_t m, int64_t n) const;
  // W_l's weight gradient, the m x n product of A(m, p) = a[p a_ld + m] and b (b_ld), p over the
  // batch rows, and its SGD, the weights' rows from `offset` (global, m gld + n) and w_smem (step
  // start) on: in chunks of StageRows rows and SgdRows where that is not 0 (they overwrite the
  // buffer), else in the product's Sgd epilogue. b_h: b is a hidden activation (see Gemm).
  void WeightStep(int l, const std::string& a, int64_t a_ld, const std::string& b, int64_t b_ld,
                  int64_t m, int64_t n, const std::string& w_smem, const std::string& offset,
                  const std::string& rows, const std::string& cols, bool padded, bool b_h);
  void Loads();
  void LoadFeatures();
  void Forward(int l);
  void Head();
  void Backward(int l);

  const MlpStepPlan& plan_;
  const Layout s_;
  const std::vector<int>& d_;
  const bool groups_;  // kGroups: exchanges through the workspace, group barriers.
  const int exchanges_per_model_;
  int exchanges_ = 0;          // Share calls emitted so far.
  std::string area_ = "area";  // The exchange area of the latest Share.
  std::string& code_;
};

void ClusterBody::LoadFeatures() {
  Line(absl::StrCat("LoadTile<", s_.rows, ", ", s_.padded[0], ", ", s_.full_ld, ", ", B(Vec(d_[0])),
                    ">(", Smem(s_.full), ", xk, ", d_[0], ", ", plan_.batch, ", ", d_[0], ");"));
}

void ClusterBody::Loads() {
  const int layers = s_.layers;
  // Two groups of copies: layer 0's weights and the features first, so that its forward starts
  // while the rest arrive.
  for (int l = 0; l < layers; ++l) {
    const bool head = l == layers - 1;
    const int64_t in = d_[l], out = d_[l + 1];
    std::string rows, cols, src;
    int64_t tile_rows, tile_cols;
    if (s_.row_parallel[l]) {  // All outputs, this block's input columns.
      tile_rows = s_.padded[l + 1];
      tile_cols = s_.chunk(l);
      src = absl::StrCat("w", l, "k + c", l);
      rows = absl::StrCat(out);
      cols = absl::StrCat("Valid(", in, ", c", l, ", ", s_.chunk(l), ")");
    } else if (head) {  // The whole head.
      tile_rows = s_.padded[l + 1];
      tile_cols = s_.padded[l];
      src = absl::StrCat("w", l, "k");
      rows = absl::StrCat(out);
      cols = absl::StrCat(in);
    } else {  // This block's output rows, all inputs.
      tile_rows = s_.chunk(l + 1);
      tile_cols = s_.padded[l];
      src = absl::StrCat("w", l, "k + static_cast<size_t>(c", l + 1, ") * ", in);
      rows = absl::StrCat("Valid(", out, ", c", l + 1, ", ", s_.chunk(l + 1), ")");
      cols = absl::StrCat(in);
    }
    Line(absl::StrCat("LoadTile<", tile_rows, ", ", tile_cols, ", ", s_.w_ld[l], ", ", B(Vec(in)),
                      ">(", Smem(s_.w[l]), ", ", src, ", ", in, ", ", rows, ", ", cols, ");"));
    if (head) {
      Line(absl::StrCat("LoadTile<1, ", s_.padded[l + 1], ", ", s_.padded[l + 1], ", ", B(Vec(out)),
                        ">(", Smem(s_.bias[l]), ", b", l, "k, 0, 1, ", out, ");"));
    } else {
      Line(absl::StrCat("LoadTile<1, ", s_.chunk(l + 1), ", ", s_.chunk(l + 1), ", ", B(Vec(out)),
                        ">(", Smem(s_.bias[l]), ", b", l, "k + c", l + 1, ", 0, 1, Valid(", out,
                        ", c", l + 1, ", ", s_.chunk(l + 1), "));"));
    }
    if (l == 0) {
      LoadFeatures();
      Line("CpAsyncCommit();");
    }
  }
  Line("CpAsyncCommit();");
  Line(layers == 1 ? "CpAsyncWaitAll();" : "CpAsyncWaitPrior();");
  // No cluster barrier yet: every read of another block's shared memory comes after one.
  Sync();
}

int64_t ClusterBody::StageRows(int l, int64_t m, int64_t n) const {
  int64_t chunk = 0;
  if (!groups_ || l + 1 >= s_.layers) return chunk;
  const int64_t stage_floats = s_.rows * s_.h_ld[l + 1];
  for (int64_t r = 16; r <= m; r += 16) {
    if (m % r == 0 && r * (n + 4) <= stage_floats) chunk = r;
  }
  return chunk;
}

void ClusterBody::WeightStep(int l, const std::string& a, int64_t a_ld, const std::string& b,
                             int64_t b_ld, int64_t m, int64_t n, const std::string& w_smem,
                             const std::string& offset, const std::string& rows,
                             const std::string& cols, bool padded, bool b_h) {
  const int64_t chunk = StageRows(l, m, n), stage_ld = n + 4;
  if (chunk == 0) {
    Line(absl::StrCat(Gemm(m, n, s_.rows, a_ld, true, b_ld, false, false, b_h), "::Run(", a, ", ",
                      b, ", ", SgdOf(l, w_smem, offset, rows, cols, padded), ");"));
    return;
  }
  const std::string stage = Smem(s_.h[l + 1]);
  const int64_t gld = d_[l];
  Line(absl::StrCat("#pragma unroll 1\n  for (int q = 0; q < ", m / chunk, "; ++q) {"));
  Line(absl::StrCat("  const size_t at = ", offset, " + static_cast<size_t>(q) * ", chunk * gld,
                    ";"));
  Line(absl::StrCat("  const int rows_q = ", rows, " - q * ", chunk, ";"));
  Line(absl::StrCat("  SgdRows<", chunk, ", ", n, ", ", B(Vec(gld)), "> sgd;"));
  Line(absl::StrCat("  sgd.Load(vw", l, "k + at, ", gld, ", rows_q, ", cols, ");"));
  Line(absl::StrCat("  ", Gemm(chunk, n, s_.rows, a_ld, true, b_ld, false, false, b_h), "::Run(", a,
                    " + q * ", chunk, ", ", b, ", Store{", stage, ", ", stage_ld, "});"));
  Line("  SyncThreads();");
  Line(absl::StrCat("  sgd.Step(", stage, ", ", stage_ld, ", ", w_smem, " + q * ",
                    chunk * s_.w_ld[l], ", ", s_.w_ld[l], ", w", l, "k + at, vw", l, "k + at, ",
                    gld, ", rows_q, ", cols, ", lr_, mu_, wd_);"));
  Line("  SyncThreads();  // The stage is read: the next chunk may overwrite it.");
  Line("}");
}

void ClusterBody::Forward(int l) {
  const int64_t rows = s_.rows;
  Line(absl::StrCat("// Forward of layer ", l,
                    s_.row_parallel[l] ? " (row-parallel)." : " (column-parallel)."));
  if (!s_.row_parallel[l]) {
    if (l > 0) {
      Gather(Smem(s_.h[l]), s_.h_ld[l], s_.chunk(l));
      Sync();
    }
    Line(absl::StrCat(Gemm(rows, s_.chunk(l + 1), s_.padded[l], s_.full_ld, false, s_.w_ld[l], true,
                           /*a_h=*/l > 0),
                      "::Run(", Smem(s_.full), ", ", Smem(s_.w[l]), ", ",
                      BiasRelu(s_.h[l + 1], s_.h_ld[l + 1], s_.bias[l]), ");"));
    if (l == 0) Line("CpAsyncWaitAll();  // The other layers' weights.");
    Sync();
    return;
  }
  Line(absl::StrCat(Gemm(rows, s_.padded[l + 1], s_.chunk(l), s_.h_ld[l], false, s_.w_ld[l], true,
                         /*a_h=*/true),
                    "::Run(", Smem(s_.h[l]), ", ", Smem(s_.w[l]), ", Store{", Smem(s_.full), ", ",
                    s_.full_ld, "});"));
  Share(Smem(s_.full), s_.full_ld, s_.padded[l + 1]);
  Line(Reduce(s_.chunk(l + 1), s_.padded[l + 1], l + 1,
              BiasRelu(s_.h[l + 1], s_.h_ld[l + 1], s_.bias[l])));
  Line("// Every block has read the partial products: they may be overwritten.");
  SharedReadsDone();
}

void ClusterBody::Head() {
  const int layers = s_.layers, l = layers - 1;
  const int64_t rows = s_.rows, classes = s_.padded[layers];
  const std::string z = Smem(s_.z), w = Smem(s_.w[l]);
  Line("// The head: logits, loss and its gradient.");
  std::string input;  // Its input: whole (in `full`) or this block's slice.
  if (!s_.row_parallel[l]) {
    if (l > 0) {
      Gather(Smem(s_.h[l]), s_.h_ld[l], s_.chunk(l));
      Sync();
    }
    Line(absl::StrCat(Gemm(rows, classes, s_.padded[l], s_.full_ld, false, s_.w_ld[l], true,
                           /*a_h=*/l > 0),
                      "::Run(", Smem(s_.full), ", ", w, ", BiasAdd{", z, ", ", s_.z_ld, ", ",
                      Smem(s_.bias[l]), "});"));
  } else {
    const std::string partial = Smem(s_.partial_logits);
    Line(absl::StrCat(Gemm(rows, classes, s_.chunk(l), s_.h_ld[l], false, s_.w_ld[l], true,
                           /*a_h=*/true),
                      "::Run(", Smem(s_.h[l]), ", ", w, ", Store{", partial, ", ", s_.z_ld, "});"));
    Share(partial, s_.z_ld, classes);
    // Partial logit (m, n) of block r: in its shared memory, or in its slot of the group's area.
    auto part = [&](const char* r) {
      return groups_ ? absl::StrCat("LoadCg(", area_, " + ", r, " * ", s_.slot(), " + m * ",
                                    classes, " + n)")
                     : absl::StrCat("Remote(", partial, " + m * ", s_.z_ld, " + n, ", r, ")[0]");
    };
    Line(absl::StrCat("for (int i = threadIdx.x; i < ", rows * classes,
                      "; i += kThreads) {\n    const int m = i / ", classes, ", n = i - m * ",
                      classes, ";\n    float v = ", part("0"),
                      ";\n    for (int r = 1; r < kRanks; ++r) v += ", part("r"), ";\n    ", z,
                      "[m * ", s_.z_ld, " + n] = v + ", Smem(s_.bias[l]), "[n];\n  }"));
  }
  Sync();
  Line(absl::StrCat("SoftmaxCrossEntropy<", plan_.batch, ", ", rows, ", ", d_[layers], ", ",
                    classes, ", ", s_.z_ld, ">(", z, ", yk, dloss[0] / static_cast<float>(",
                    plan_.batch, "), ", Smem(s_.row_loss), ", rank == 0 ? logitsk : nullptr);"));
  Sync();
  // Weight gradient of this block's input columns of the head.
  // Its input's columns c_l..: this block's slice of h_l (of x, for a lone head, from `full`).
  const int64_t cols = s_.chunk(l);
  const std::string b_operand = l > 0 ? Smem(s_.h[l]) : absl::StrCat("(", Smem(s_.full), " + c0)");
  const int64_t b_ld = l > 0 ? s_.h_ld[l] : s_.full_ld;
  const std::string w_old = s_.row_parallel[l] ? w : absl::StrCat("(", w, " + c", l, ")");
  Line(absl::StrCat(Gemm(classes, cols, rows, s_.z_ld, true, b_ld, false, false, /*b_h=*/l > 0),
                    "::Run(", z, ", ", b_operand, ", ",
                    SgdOf(l, w_old, absl::StrCat("c", l), absl::StrCat(d_[layers]),
                          absl::StrCat("Valid(", d_[l], ", c", l, ", ", cols, ")"),
                          d_[layers] != classes || d_[l] != s_.padded[l]),
                    ");"));
  Line(absl::StrCat("if (rank == 0) BiasSgd<", rows, ">(", z, ", ", s_.z_ld, ", ", Smem(s_.bias[l]),
                    ", b", l, "k, vb", l, "k, ", d_[layers], ", lr_, mu_, wd_);"));
  if (l == 0) return;
  // The data gradient into the head's input: whole in place of its input, or this block's slice.
  if (!s_.row_parallel[l]) {
    Line(absl::StrCat(Gemm(rows, s_.padded[l], classes, s_.z_ld, false, s_.w_ld[l], false),
                      "::Run(", z, ", ", w, ", Masked{", Smem(s_.full), ", ", s_.full_ld, ", ",
                      Smem(s_.full), ", ", s_.full_ld, "});"));
  } else {
    Line(absl::StrCat(Gemm(rows, s_.chunk(l), classes, s_.z_ld, false, s_.w_ld[l], false), "::Run(",
                      z, ", ", w, ", Masked{", Smem(s_.slice), ", ", s_.slice_ld, ", ",
                      Smem(s_.h[l]), ", ", s_.h_ld[l], "});"));
  }
  Sync();
}

void ClusterBody::Backward(int l) {
  const int64_t rows = s_.rows;
  const std::string full = Smem(s_.full), slice = Smem(s_.slice), w = Smem(s_.w[l]);
  Line(absl::StrCat("// Backward of layer ", l, "."));
  if (s_.row_parallel[l]) {
    // dz_l is whole (in `full`); its input h_l is this block's slice. l >= 1 here: the data
    // gradient of this block's input columns is local. It reads the step-start weights, so where
    // the weight step is staged it comes first.
    auto dgrad = [&] {
      Line(absl::StrCat(
          Gemm(rows, s_.chunk(l), s_.padded[l + 1], s_.full_ld, false, s_.w_ld[l], false), "::Run(",
          full, ", ", w, ", Masked{", slice, ", ", s_.slice_ld, ", ", Smem(s_.h[l]), ", ",
          s_.h_ld[l], "});"));
    };
    const bool staged = StageRows(l, s_.padded[l + 1], s_.chunk(l)) > 0;
    if (staged) dgrad();
    WeightStep(l, full, s_.full_ld, Smem(s_.h[l]), s_.h_ld[l], s_.padded[l + 1], s_.chunk(l), w,
               absl::StrCat("c", l), absl::StrCat(d_[l + 1]),
               absl::StrCat("Valid(", d_[l], ", c", l, ", ", s_.chunk(l), ")"),
               d_[l + 1] != s_.padded[l + 1] || d_[l] != s_.padded[l], /*b_h=*/true);
    Line(absl::StrCat("BiasSgd<", rows, ">(", full, " + c", l + 1, ", ", s_.full_ld, ", ",
                      Smem(s_.bias[l]), ", b", l, "k + c", l + 1, ", vb", l, "k + c", l + 1,
                      ", Valid(", d_[l + 1], ", c", l + 1, ", ", s_.chunk(l + 1),
                      "), lr_, mu_, wd_);"));
    if (!staged) dgrad();
    Sync();
    return;
  }
  // Column-parallel: dz_l is this block's slice (in `slice`); its input is whole.
  if (l == 0) {
    LoadFeatures();
    Line("CpAsyncCommit();");
    Line("CpAsyncWaitAll();");
  } else {
    Gather(Smem(s_.h[l]), s_.h_ld[l], s_.chunk(l));
  }
  Sync();
  WeightStep(l, slice, s_.slice_ld, full, s_.full_ld, s_.chunk(l + 1), s_.padded[l], w,
             absl::StrCat("static_cast<size_t>(c", l + 1, ") * ", d_[l]),
             absl::StrCat("Valid(", d_[l + 1], ", c", l + 1, ", ", s_.chunk(l + 1), ")"),
             absl::StrCat(d_[l]), d_[l + 1] != s_.padded[l + 1] || d_[l] != s_.padded[l],
             /*b_h=*/l > 0);
  Line(absl::StrCat("BiasSgd<", rows, ">(", slice, ", ", s_.slice_ld, ", ", Smem(s_.bias[l]), ", b",
                    l, "k + c", l + 1, ", vb", l, "k + c", l + 1, ", Valid(", d_[l + 1], ", c",
                    l + 1, ", ", s_.chunk(l + 1), "), lr_, mu_, wd_);"));
  if (l == 0) return;
  Sync();  // The weight gradient has read `full`.
  Line(
      absl::StrCat(Gemm(rows, s_.padded[l], s_.chunk(l + 1), s_.slice_ld, false, s_.w_ld[l], false),
                   "::Run(", slice, ", ", w, ", Store{", full, ", ", s_.full_ld, "});"));
  Share(full, s_.full_ld, s_.padded[l]);
  Line(Reduce(s_.chunk(l), s_.padded[l], l,
              absl::StrCat("Masked{", slice, ", ", s_.slice_ld, ", ", Smem(s_.h[l]), ", ",
                           s_.h_ld[l], "}")));
  SharedReadsDone();
  Gather(slice, s_.slice_ld, s_.chunk(l));
  Line("// Every block has gathered the slices: they may be overwritten.");
  SharedReadsDone();
}

void ClusterBody::Emit(bool batched, bool shared_features, bool shared_labels, bool phase_clock) {
  const int layers = s_.layers;
  const int64_t batch = plan_.batch;
  Line("using namespace mlpc;");
  Line("float* const sm = SharedBase();");
  if (groups_) {
    // Group g trains models g, g + groups, ...: the grid is a multiple of kRanks.
    Line("const int rank = blockIdx.x % kRanks, group = blockIdx.x / kRanks;");
    Line("unsigned* const group_word = barrier + 2 + group;");
    Line(absl::StrCat("float* const area = ws + static_cast<size_t>(group) * ",
                      plan_.exchange_areas * GroupAreaFloats(plan_), ";"));
    Line("for (int k = group; k < kModels; k += gridDim.x / kRanks) {");
  } else {
    Line("const int rank = static_cast<int>(Rank());");
    Line("const int k = blockIdx.x / kRanks;");
  }
  Line("const float lr_ = lr[0], mu_ = momentum[0], wd_ = weight_decay[0];");
  if (phase_clock) Line("StampPhase(phase_clock, 0);");
  if (!batched) Line("float* const model_loss = nullptr;");
  Line(absl::StrCat("const float* const xk = x + static_cast<size_t>(k) * ",
                    shared_features ? 0 : batch * d_[0], ";"));
  Line(absl::StrCat("const int* const yk = labels + static_cast<size_t>(k) * ",
                    shared_labels ? 0 : batch, ";"));
  Line(absl::StrCat("float* const logitsk = logits + static_cast<size_t>(k) * ", batch * d_[layers],
                    ";"));
  for (int l = 0; l < layers; ++l) {
    const int64_t weights = int64_t{d_[l + 1]} * d_[l];
    for (const char* name : {"w", "vw"}) {
      Line(absl::StrCat("float* const ", name, l, "k = ", name, l, " + static_cast<size_t>(k) * ",
                        weights, ";"));
    }
    for (const char* name : {"b", "vb"}) {
      Line(absl::StrCat("float* const ", name, l, "k = ", name, l, " + static_cast<size_t>(k) * ",
                        d_[l + 1], ";"));
    }
  }
  // c_l: the first of this block's columns of h_l (its slice).
  for (int l = 0; l < layers; ++l) {
    Line(absl::StrCat("const int c", l, " = rank * ", s_.chunk(l), ";"));
  }
  Line(absl::StrCat("const int c", layers, " = 0;"));
  int stamps = 0;
  auto stamp = [&]() {
    if (phase_clock) Line(absl::StrCat("StampPhase(phase_clock, ", ++stamps, ");"));
  };
  Loads();
  stamp();
  for (int l = 0; l + 1 < layers; ++l) {
    Forward(l);
    stamp();
  }
  Head();
  stamp();
  for (int l = layers - 2; l >= 0; --l) {
    Backward(l);
    stamp();
  }
  Line(absl::StrCat("if (rank == 0 && threadIdx.x == 0) ModelLoss<", plan_.batch, ">(",
                    Smem(s_.row_loss), ", k, kModels, model_loss, loss, barrier + 1);"));
  if (groups_) {
    // The next model's loads overwrite only this block's shared memory, which no other block
    // reads; its first Share waits for the group's reads of the exchange area.
    Line("SyncThreads();\n  }");
    return;
  }
  Line("// No block leaves while another may still read its shared memory.");
  ClusterSync();
}

}  // namespace

GeneratedKernel ClusterStepKernel(const MlpStepPlan& plan, bool batched, bool shared_features,
                                  bool shared_labels, bool phase_clock) {
  const int layers = plan.layers();
  std::string code = kMlpPrimitives;
  absl::StrAppend(&code, "\nnamespace mlpc {\nconstexpr int kThreads = ", plan.target.threads,
                  ";\nconstexpr int kRanks = ", plan.cluster,
                  ";\nconstexpr int kModels = ", plan.models,
                  ";\n// Of `size` columns from `start`, those below `total`.\n"
                  "MLP_DEV int Valid(int total, int start, int size) {\n"
                  "  const int v = total - start;\n  return v < 0 ? 0 : v > size ? size : v;\n}\n"
                  "}  // namespace mlpc\n",
                  kMlpClusterLibrary);
  const char* name = batched ? "reprise_batched_mlp_step" : "reprise_mlp_step";
  absl::StrAppend(&code, "\n",
                  MlpStepKernelSignature(name, layers, plan.target.threads, batched, phase_clock));
  std::string scratch;  // A first pass counts the exchanges per model.
  ClusterBody counting(plan, scratch);
  counting.Emit(batched, shared_features, shared_labels, phase_clock);
  ClusterBody(plan, code, counting.Exchanges())
      .Emit(batched, shared_features, shared_labels, phase_clock);
  absl::StrAppend(&code, "}\n");
  return {name, std::move(code)};
}

}  // namespace reprise::codegen
