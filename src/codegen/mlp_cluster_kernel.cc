#include "src/codegen/mlp_cluster_kernel.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/codegen/mlp_cluster_layout.h"
#include "src/codegen/mlp_guard_source.h"

namespace reprise::codegen {
namespace {

#include "src/codegen/mlp_cluster_device.inc"
#include "src/codegen/mlp_cluster_guard_device.inc"
#include "src/codegen/mlp_guard_device.inc"
#include "src/codegen/mlp_primitives_device.inc"

using namespace mlp_cluster;  // NOLINT: the layout shared with the planner.

std::string B(bool v) { return v ? "true" : "false"; }

// Writes the kernel body: statements appended to `code`.
class ClusterBody {
 public:
  // `exchanges`: Share calls per model (kGroups with two areas; see Exchanges()).
  ClusterBody(const MlpStepPlan& plan, std::string& code, int exchanges = 0)
      : plan_(plan),
        s_(LayoutFor(plan, plan.cluster)),
        d_(plan.widths),
        groups_(plan.groups > 0),
        guarded_(plan.target.guard != MlpGuard::kNone),
        copies_(guarded_ && !plan.double_buffered),
        double_buffered_(guarded_ && plan.double_buffered),
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
  // (expressions) are padding (`padded`: some are, for some block). Guarded, the update goes in
  // place after the step-start values are copied out (copies_), or into the other buffers
  // (n<param><l>k) of a double-buffered plan.
  std::string SgdOf(int l, const std::string& w_smem, const std::string& offset,
                    const std::string& rows, const std::string& cols, bool padded) const {
    const bool vec2 = plan_.target.aligned && d_[l] % 2 == 0;
    const std::string sgd = absl::StrCat(
        "Sgd<", B(padded), ", ", B(vec2), ">{", w_smem, ", ", s_.w_ld[l], ", ", Next("w", l), " + ",
        offset, ", vw", l, "k + ", offset, ", ", d_[l], ", ", rows, ", ", cols, ", lr_, mu_, wd_}");
    if (!guarded_) return sgd;
    return absl::StrCat("SgdGuarded<", B(padded), ", ", B(vec2), ", ", B(copies_), ">{", sgd, ", ",
                        Next("vw", l), " + ", offset, ", ", Copy("sw", l, offset), ", ",
                        Copy("svw", l, offset), ", bad, stopped}");
  }
  // Where layer l's update of `param` goes: the other buffer's, double-buffered; else in place.
  std::string Next(const char* param, int l) const {
    return absl::StrCat(double_buffered_ ? "n" : "", param, l, "k");
  }
  // A step-start copy's address (nullptr where nothing is copied).
  std::string Copy(const char* copy, int l, const std::string& offset) const {
    return copies_ ? absl::StrCat(copy, l, "k + ", offset) : std::string("nullptr");
  }
  // The bias gradient of layer l (the column sums of dz, `ld` apart) and its SGD (guarded, as
  // SgdOf's), for columns from `first` (an expression) of which `cols` exist.
  std::string BiasStep(int l, const std::string& dz, int64_t ld, const std::string& bias,
                       const std::string& first, const std::string& cols) const {
    if (guarded_) {
      return absl::StrCat("BiasSgdGuarded<", B(copies_), ", ", s_.rows, ">(", dz, ", ", ld, ", ",
                          bias, ", ", Next("b", l), " + ", first, ", vb", l, "k + ", first, ", ",
                          Next("vb", l), " + ", first, ", ", Copy("sb", l, first), ", ",
                          Copy("svb", l, first), ", ", cols, ", lr_, mu_, wd_, bad, stopped);");
    }
    return absl::StrCat("BiasSgd<", s_.rows, ">(", dz, ", ", ld, ", ", bias, ", b", l, "k + ",
                        first, ", vb", l, "k + ", first, ", ", cols, ", lr_, mu_, wd_);");
  }
  // Guarded, after every group's last model: the block's arrival on the guard word; the last
  // block counts the step and, where it skips, restores every parameter (double-buffered: flips
  // the parity word where it does not).
  void GuardEnd();
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
  const bool groups_;           // kGroups: exchanges through the workspace, group barriers.
  const bool guarded_;          // Under the non-finite guard (kCluster: double-buffered only).
  const bool copies_;           // Guarded, not double-buffered: step-start copies to the workspace.
  const bool double_buffered_;  // Guarded, with a shadow: updates to the other buffers.
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
  const std::string w_rows = absl::StrCat(w_smem, " + q * ", chunk * s_.w_ld[l], ", ", s_.w_ld[l]);
  if (guarded_) {
    Line(absl::StrCat("  SgdRowsGuarded<", B(copies_), ">(sgd, ", stage, ", ", stage_ld, ", ",
                      w_rows, ", ", Next("w", l), " + at, ", Next("vw", l), " + at, ",
                      Copy("sw", l, "at"), ", ", Copy("svw", l, "at"), ", ", gld, ", rows_q, ",
                      cols, ", lr_, mu_, wd_, bad, stopped);"));
  } else {
    Line(absl::StrCat("  sgd.Step(", stage, ", ", stage_ld, ", ", w_rows, ", w", l, "k + at, vw", l,
                      "k + at, ", gld, ", rows_q, ", cols, ", lr_, mu_, wd_);"));
  }
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
  Line(absl::StrCat("if (rank == 0) ",
                    BiasStep(l, z, s_.z_ld, Smem(s_.bias[l]), "0", absl::StrCat(d_[layers]))));
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
    Line(BiasStep(l, absl::StrCat(full, " + c", l + 1), s_.full_ld, Smem(s_.bias[l]),
                  absl::StrCat("c", l + 1),
                  absl::StrCat("Valid(", d_[l + 1], ", c", l + 1, ", ", s_.chunk(l + 1), ")")));
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
  Line(BiasStep(l, slice, s_.slice_ld, Smem(s_.bias[l]), absl::StrCat("c", l + 1),
                absl::StrCat("Valid(", d_[l + 1], ", c", l + 1, ", ", s_.chunk(l + 1), ")")));
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
  if (guarded_) {
    if (double_buffered_) absl::StrAppend(&code_, ParityPointersSource(plan_));
    Line(absl::StrCat("int* const bad = reinterpret_cast<int*>(", Smem(s_.guard), ");"));
    Line(absl::StrCat("const mlpg::Counters counters = mlpg::GuardBegin<",
                      B(plan_.target.guard == MlpGuard::kStop),
                      ">(bad, nullptr, skipped_steps, record);"));
    Line("const int stopped = counters.stopped;");
  }
  if (groups_) {
    // Group g trains models g, g + groups, ...: the grid is a multiple of kRanks.
    Line("const int rank = blockIdx.x % kRanks, group = blockIdx.x / kRanks;");
    Line("unsigned* const group_word = barrier + 2 + group;");
    Line(absl::StrCat("float* const area = ws + ", plan_.area_offset,
                      " + static_cast<size_t>(group) * ",
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
    // Model k's parameters and velocities: in place, or (double-buffered) the current ones, read,
    // and the other buffer's, n<param><l>k, written.
    for (const auto& [name, stride] :
         {std::pair{"w", weights}, std::pair{"vw", weights}, std::pair{"b", int64_t{d_[l + 1]}},
          std::pair{"vb", int64_t{d_[l + 1]}}}) {
      Line(absl::StrCat("float* const ", name, l, "k = ", name, l, double_buffered_ ? "_now" : "",
                        " + static_cast<size_t>(k) * ", stride, ";"));
      if (double_buffered_) {
        Line(absl::StrCat("float* const n", name, l, "k = ", name, l,
                          "_next + static_cast<size_t>(k) * ", stride, ";"));
      }
    }
    if (!copies_) continue;
    // The step-start copies of W_l, b_l and their velocities (plan.grad_w_offset, ...).
    struct Start {
      const char* name;
      int64_t offset, stride;
    };
    const int64_t biases = d_[l + 1];
    for (const Start& s : {Start{"sw", plan_.grad_w_offset[l], weights},
                           Start{"svw", plan_.start_vw_offset[l], weights},
                           Start{"sb", plan_.grad_b_offset[l], biases},
                           Start{"svb", plan_.start_vb_offset[l], biases}}) {
      Line(absl::StrCat("float* const ", s.name, l, "k = ws + ", s.offset,
                        " + static_cast<size_t>(k) * ", s.stride, ";"));
    }
  }
  // c_l: the first of this block's columns of h_l (its slice). Not every layer count reads every
  // c_l (NVRTC would warn of the others).
  for (int l = 0; l < layers; ++l) {
    Line(absl::StrCat("[[maybe_unused]] const int c", l, " = rank * ", s_.chunk(l), ";"));
  }
  Line(absl::StrCat("[[maybe_unused]] const int c", layers, " = 0;"));
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
                    Smem(s_.row_loss), ", k, kModels, model_loss, loss, barrier + 1, ",
                    guarded_ ? "bad" : "nullptr", ");"));
  if (groups_) {
    // The next model's loads overwrite only this block's shared memory, which no other block
    // reads; its first Share waits for the group's reads of the exchange area.
    Line("SyncThreads();\n  }");
    if (guarded_) GuardEnd();
    return;
  }
  Line("// No block leaves while another may still read its shared memory.");
  ClusterSync();
  // Every block of every cluster, later waves' too, arrives before the last one flips the parity.
  if (guarded_) GuardEnd();
}

void ClusterBody::GuardEnd() {
  Line("{  // The non-finite guard: the last block to finish decides (no block waits).");
  Line(absl::StrCat("  if (mlpg::GuardFinish(barrier + ", kMlpStepGuardWord,
                    ", bad, counters, skipped_steps, record, ",
                    double_buffered_ ? absl::StrCat("barrier + ", kMlpStepParityWord, ", flip")
                                     : std::string("nullptr, false"),
                    ")) {"));
  absl::StrAppend(&code_, GuardRestoreSource(plan_));
  Line("  }");
  Line("}");
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
  const bool guarded = plan.target.guard != MlpGuard::kNone;
  if (guarded) absl::StrAppend(&code, kMlpClusterGuardLibrary, kMlpGuardLibrary);
  const char* name = batched ? "reprise_batched_mlp_step" : "reprise_mlp_step";
  absl::StrAppend(&code, "\n",
                  MlpStepKernelSignature(name, layers, plan.target.threads, batched, phase_clock,
                                         guarded, plan.target.shadow));
  std::string scratch;  // A first pass counts the exchanges per model.
  ClusterBody counting(plan, scratch);
  counting.Emit(batched, shared_features, shared_labels, phase_clock);
  ClusterBody(plan, code, counting.Exchanges())
      .Emit(batched, shared_features, shared_labels, phase_clock);
  absl::StrAppend(&code, "}\n");
  return {name, std::move(code)};
}

}  // namespace reprise::codegen
