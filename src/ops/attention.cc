// causal_attention and causal_attention_grad: shape rules, gradient rule and CPU references (the
// GPU lowerings are in attention_lowering.cc).
#include "src/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/ops/attention_internal.h"
#include "src/ops/op_helpers.h"
#include "src/util/status_macros.h"

namespace reprise::ops {

// Shape rules ----------------------------------------------------------------------------------

absl::StatusOr<AttentionDims> ForwardDims(const Attrs& attrs, absl::Span<const TensorSpec> in) {
  if (in.size() != 1 && in.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "takes qkv [B, T, 3*C] or q, k, v [B, T, C] (1 or 3 inputs), got ", in.size()));
  }
  ASSIGN_OR_RETURN(const int64_t heads, ir::IntAttr(attrs, "heads"));
  if (heads < 1) return absl::InvalidArgumentError(absl::StrCat("heads must be >= 1, got ", heads));
  AttentionDims dims;
  dims.packed = in.size() == 1;
  const char* what = dims.packed ? "qkv" : "q";
  RETURN_IF_ERROR(CheckFloat(in[0], what));
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i] != in[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat(i == 1 ? "k" : "v", " is ", in[i].ToString(), "; q is ", in[0].ToString()));
    }
  }
  const Shape& shape = in[0].shape;
  if (shape.rank() == 3) {
    dims.batch = shape.dim(0);
    dims.seq = shape.dim(1);
  } else if (shape.rank() == 2) {
    // [B·T, width], as a matmul leaves it: attr seq says where one sequence ends.
    dims.flat = true;
    absl::StatusOr<int64_t> seq = ir::IntAttr(attrs, "seq");
    if (!seq.ok() || *seq < 1 || shape.dim(0) % *seq != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", in[0].ToString(),
                       " is [batch * seq, width]: it needs an int attribute seq "
                       ">= 1 that divides ",
                       shape.dim(0)));
    }
    dims.seq = *seq;
    dims.batch = shape.dim(0) / *seq;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be [batch, seq, width] or [batch * seq, width], got ", in[0].ToString()));
  }
  const int64_t width = shape.dim(shape.rank() - 1);
  // heads is bounded by the width before it is tripled, which could overflow.
  const int64_t parts = heads > width ? width + 1 : dims.packed ? 3 * heads : heads;
  if (width < parts || width % parts != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", in[0].ToString(), ": its last dimension must split into ",
                     dims.packed ? "3 x " : "", heads, " heads of equal width"));
  }
  dims.heads = heads;
  dims.head_dim = width / parts;
  dims.dtype = in[0].dtype;
  if (dims.batch < 1 || dims.seq < 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is empty: ", in[0].ToString()));
  }
  return dims;
}

absl::StatusOr<AttentionDims> GradDims(const Attrs& attrs, absl::Span<const TensorSpec> in) {
  if (in.size() != 4 && in.size() != 6) {
    return absl::InvalidArgumentError(absl::StrCat(
        "takes (qkv, y, stats, dy) or (q, k, v, y, stats, dy), got ", in.size(), " inputs"));
  }
  const size_t n = in.size() - 3;
  ASSIGN_OR_RETURN(const AttentionDims dims, ForwardDims(attrs, in.subspan(0, n)));
  const TensorSpec expected[] = {dims.y_spec(), dims.stats_spec(), dims.y_spec()};
  const char* names[] = {"y", "stats", "dy"};
  for (int i = 0; i < 3; ++i) {
    if (in[n + i] != expected[i]) {
      return absl::InvalidArgumentError(absl::StrCat(names[i], " is ", in[n + i].ToString(),
                                                     ", expected ", expected[i].ToString()));
    }
  }
  return dims;
}

namespace {

absl::StatusOr<std::vector<TensorSpec>> InferForward(const Attrs& attrs,
                                                     absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(const AttentionDims dims, ForwardDims(attrs, in));
  return std::vector<TensorSpec>{dims.y_spec(), dims.stats_spec()};
}

absl::StatusOr<std::vector<TensorSpec>> InferGrad(const Attrs& attrs,
                                                  absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(const AttentionDims dims, GradDims(attrs, in));
  return std::vector<TensorSpec>(dims.num_qkv(), in[0]);
}

// Gradient rule ---------------------------------------------------------------------------------

// One causal_attention_grad node reads the forward's inputs, its output and saved statistics.
absl::StatusOr<std::vector<Value>> GradForward(Graph& g, const Node& node,
                                               absl::Span<const Value> dout,
                                               const std::vector<bool>& needs) {
  if (dout[1].valid()) {
    return absl::UnimplementedError(absl::StrCat(
        "node '", node.name, "': a gradient flows into the saved statistics (output 1) of ",
        "causal_attention, which have no gradient rule"));
  }
  std::vector<Value> grads(node.inputs.size());
  if (!dout[0].valid() || std::none_of(needs.begin(), needs.end(), [](bool b) { return b; })) {
    return grads;
  }
  std::vector<Value> inputs = node.inputs;
  inputs.push_back(Value{node.id, 0});
  inputs.push_back(Value{node.id, 1});
  inputs.push_back(dout[0]);
  Attrs attrs = node.attrs;
  ASSIGN_OR_RETURN(std::vector<Value> d, g.AddOp(CausalAttentionGradOp(),
                                                 absl::StrCat(node.name, ".grad"), inputs, attrs));
  for (size_t i = 0; i < grads.size(); ++i) {
    if (needs[i]) grads[i] = d[i];
  }
  return grads;
}

// CPU reference ---------------------------------------------------------------------------------

// Element (b, t, h, d) of q, k or v (base pointers already at each one's first element) and of
// y-shaped tensors, for the dimensions of one node.
struct Index {
  const AttentionDims& dims;
  int64_t Qkv(int64_t b, int64_t t, int64_t h) const {
    return (b * dims.seq + t) * dims.row() + h * dims.head_dim;
  }
  int64_t Y(int64_t b, int64_t t, int64_t h) const {
    return (b * dims.seq + t) * dims.width() + h * dims.head_dim;
  }
};

// The forward in double for one (batch, head): scores s_ij = scale·q_i·k_j for j <= i, then
// softmax and the weighted sum of v.
template <typename T>
void ForwardHead(const AttentionDims& dims, int64_t b, int64_t h, const T* q, const T* k,
                 const T* v, T* y, T* stats) {
  const Index at{dims};
  const int64_t D = dims.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> p(dims.seq);
  for (int64_t i = 0; i < dims.seq; ++i) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j <= i; ++j) {
      double s = 0;
      for (int64_t d = 0; d < D; ++d) {
        s += static_cast<double>(q[at.Qkv(b, i, h) + d]) *
             static_cast<double>(k[at.Qkv(b, j, h) + d]);
      }
      p[j] = scale * s;
      m = std::max(m, p[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - m));
    for (int64_t d = 0; d < D; ++d) {
      double acc = 0;
      for (int64_t j = 0; j <= i; ++j) acc += p[j] * static_cast<double>(v[at.Qkv(b, j, h) + d]);
      y[at.Y(b, i, h) + d] = static_cast<T>(acc / sum);
    }
    stats[(b * dims.heads + h) * dims.seq + i] = static_cast<T>(m + std::log(sum));
  }
}

// The backward for one (batch, head), with P recomputed from the saved statistics:
// p_ij = exp(s_ij - lse_i), dp_ij = dy_i·v_j, ds_ij = p_ij (dp_ij - dy_i·y_i),
// dq_i = scale Σ_j ds_ij k_j, dk_j = scale Σ_i ds_ij q_i, dv_j = Σ_i p_ij dy_i.
template <typename T>
void BackwardHead(const AttentionDims& dims, int64_t b, int64_t h, const T* q, const T* k,
                  const T* v, const T* y, const T* stats, const T* dy, T* dq, T* dk, T* dv) {
  const Index at{dims};
  const int64_t D = dims.head_dim, S = dims.seq;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> gq(S * D, 0.0), gk(S * D, 0.0), gv(S * D, 0.0);
  auto x = [](T value) { return static_cast<double>(value); };
  for (int64_t i = 0; i < S; ++i) {
    const double lse = x(stats[(b * dims.heads + h) * S + i]);
    double delta = 0;
    for (int64_t d = 0; d < D; ++d) delta += x(dy[at.Y(b, i, h) + d]) * x(y[at.Y(b, i, h) + d]);
    for (int64_t j = 0; j <= i; ++j) {
      double s = 0, dp = 0;
      for (int64_t d = 0; d < D; ++d) {
        s += x(q[at.Qkv(b, i, h) + d]) * x(k[at.Qkv(b, j, h) + d]);
        dp += x(dy[at.Y(b, i, h) + d]) * x(v[at.Qkv(b, j, h) + d]);
      }
      const double p = std::exp(scale * s - lse);
      const double ds = p * (dp - delta);
      for (int64_t d = 0; d < D; ++d) {
        gq[i * D + d] += scale * ds * x(k[at.Qkv(b, j, h) + d]);
        gk[j * D + d] += scale * ds * x(q[at.Qkv(b, i, h) + d]);
        gv[j * D + d] += p * x(dy[at.Y(b, i, h) + d]);
      }
    }
  }
  for (int64_t t = 0; t < S; ++t) {
    for (int64_t d = 0; d < D; ++d) {
      dq[at.Qkv(b, t, h) + d] = static_cast<T>(gq[t * D + d]);
      dk[at.Qkv(b, t, h) + d] = static_cast<T>(gk[t * D + d]);
      dv[at.Qkv(b, t, h) + d] = static_cast<T>(gv[t * D + d]);
    }
  }
}

// q, k and v of a node's first inputs (packed: offsets into one tensor).
template <typename P, typename Tensors>
void QkvPointers(const AttentionDims& dims, Tensors tensors, P* out[3]) {
  for (int i = 0; i < 3; ++i) {
    if (dims.packed) {
      out[i] =
          tensors[0]->template data<std::remove_const_t<P>>().data() + (i == 0   ? 0
                                                                        : i == 1 ? dims.k_offset()
                                                                                 : dims.v_offset());
    } else {
      out[i] = tensors[i]->template data<std::remove_const_t<P>>().data();
    }
  }
}

absl::Status CpuForward(const Node& node, absl::Span<ir::HostTensor* const> in,
                        absl::Span<ir::HostTensor* const> out) {
  std::vector<TensorSpec> specs;
  for (const ir::HostTensor* t : in) specs.push_back(t->spec());
  ASSIGN_OR_RETURN(const AttentionDims dims, ForwardDims(node.attrs, specs));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    T* qkv[3];
    QkvPointers<T>(dims, in, qkv);
    T* y = out[0]->data<T>().data();
    T* stats = out[1]->data<T>().data();
    for (int64_t b = 0; b < dims.batch; ++b) {
      for (int64_t h = 0; h < dims.heads; ++h) {
        ForwardHead<T>(dims, b, h, qkv[0], qkv[1], qkv[2], y, stats);
      }
    }
    return absl::OkStatus();
  });
}

absl::Status CpuGrad(const Node& node, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  std::vector<TensorSpec> specs;
  for (const ir::HostTensor* t : in) specs.push_back(t->spec());
  ASSIGN_OR_RETURN(const AttentionDims dims, GradDims(node.attrs, specs));
  const int n = dims.num_qkv();
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    T* qkv[3];
    T* grads[3];
    QkvPointers<T>(dims, in, qkv);
    QkvPointers<T>(dims, out, grads);
    const T* y = in[n]->data<T>().data();
    const T* stats = in[n + 1]->data<T>().data();
    const T* dy = in[n + 2]->data<T>().data();
    for (int64_t b = 0; b < dims.batch; ++b) {
      for (int64_t h = 0; h < dims.heads; ++h) {
        BackwardHead<T>(dims, b, h, qkv[0], qkv[1], qkv[2], y, stats, dy, grads[0], grads[1],
                        grads[2]);
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace

size_t AttentionWorkspaceBound(const Graph& graph) {
  size_t bound = 0;
  for (const Node& node : graph.nodes()) {
    if (node.op != &CausalAttentionGradOp()) continue;
    std::vector<TensorSpec> specs;
    for (const Value& v : node.inputs) specs.push_back(graph.spec(v));
    absl::StatusOr<AttentionDims> dims = GradDims(node.attrs, specs);
    if (!dims.ok()) continue;  // Lowering reports it.
    const size_t rows = dims->batch * dims->heads, seq = dims->seq;
    const size_t accumulators = rows * seq * (dims->head_dim + 2) * sizeof(float);
    const size_t scores = rows * ((seq + 63) / 64 * 64) * ((seq + 127) / 128 * 128) * 2;
    bound = std::max(bound, 2 * (accumulators + scores) + (size_t{16} << 20));
  }
  return bound;
}

const ir::OpDef& CausalAttentionOp() {
  static const ir::OpDef op{.name = "causal_attention",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferForward,
                            .grad = GradForward,
                            .cpu = CpuForward,
                            .lower = LowerCausalAttention,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& CausalAttentionGradOp() {
  static const ir::OpDef op{.name = "causal_attention_grad",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferGrad,
                            .cpu = CpuGrad,
                            .lower = LowerCausalAttentionGrad,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
