// matmul: C = op(A)·op(B) on row-major 2-D tensors, and its ensemble form batched_matmul
// (batched.h): K products stacked along a leading model dimension, one strided-batched cuBLASLt
// call. Both share every rule here, the stacked ones with operands of rank 3 (ProductDims). The
// gradient is two separate product nodes of the same op, the data gradient (of input 0) and the
// weight gradient (of input 1), so that nothing but their data orders them.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/ops/batched.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/lt_matmul_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/runtime/lt_matmul.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

// The rank of the node's operands: 3 for the ensemble ops, whose tensors lead with the models.
int RankOf(const Node& node) {
  return node.op == &BatchedMatmulOp() || node.op == &BatchedMatmulBiasOp() ? 3 : 2;
}

absl::StatusOr<ProductDims> DimsOf(const Node& node, const TensorSpec& a, const TensorSpec& b) {
  return ProductDimsOf(node.attrs, a, b, RankOf(node));
}

template <int kRank>
absl::StatusOr<std::vector<TensorSpec>> InferMatmul(const Attrs& attrs,
                                                    absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  ASSIGN_OR_RETURN(ProductDims d, ProductDimsOf(attrs, in[0], in[1], kRank));
  return std::vector<TensorSpec>{{d.Stack({d.m, d.n}), in[0].dtype}};
}

absl::StatusOr<Value> AddMatmul(Graph& g, const ir::OpDef& op, const std::string& name, Value a,
                                Value b, bool ta, bool tb, const char* role) {
  return g.AddOp1(op, name, {a, b},
                  {{"transpose_a", ta}, {"transpose_b", tb}, {"role", std::string(role)}});
}

// With C = op(A)·op(B): dA = dC·op(B)ᵀ and dB = op(A)ᵀ·dC, each written back in A's and B's
// stored orientation, by the node's own op (per model for the stacked one).
absl::StatusOr<std::vector<Value>> GradMatmul(Graph& g, const Node& node,
                                              absl::Span<const Value> dout,
                                              const std::vector<bool>& needs) {
  const Value a = node.inputs[0], b = node.inputs[1], dc = dout[0];
  const bool ta = ir::BoolAttrOr(node.attrs, "transpose_a", false);
  const bool tb = ir::BoolAttrOr(node.attrs, "transpose_b", false);
  const ir::OpDef& op = *node.op;
  std::vector<Value> grads(2);
  const std::string dgrad = absl::StrCat(node.name, ".dgrad");
  const std::string wgrad = absl::StrCat(node.name, ".wgrad");
  if (needs[0]) {
    ASSIGN_OR_RETURN(grads[0], !ta ? AddMatmul(g, op, dgrad, dc, b, false, !tb, "dgrad")
                                   : AddMatmul(g, op, dgrad, b, dc, tb, true, "dgrad"));
  }
  if (needs[1]) {
    ASSIGN_OR_RETURN(grads[1], !tb ? AddMatmul(g, op, wgrad, a, dc, !ta, false, "wgrad")
                                   : AddMatmul(g, op, wgrad, dc, a, true, ta, "wgrad"));
  }
  return grads;
}

absl::Status CpuMatmul(const Node& node, absl::Span<ir::HostTensor* const> in,
                       absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(ProductDims d, DimsOf(node, in[0]->spec(), in[1]->spec()));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    ReferenceProducts(d, in[0]->data<T>().data(), in[1]->data<T>().data(),
                      out[0]->data<T>().data());
    return absl::OkStatus();
  });
}

// One lowering for the whole family: the op says which epilogue, and where its extra operands
// (bias, ReLU mask, bias gradient) live.
runtime::MatmulEpilogue EpilogueOf(const LoweringContext& ctx, const Node& node) {
  using Kind = runtime::MatmulEpilogue::Kind;
  runtime::MatmulEpilogue epilogue;
  if (node.op == &MatmulBiasOp() || node.op == &BatchedMatmulBiasOp()) {
    epilogue.kind = ir::BoolAttrOr(node.attrs, "relu", false) ? Kind::kReluBias : Kind::kBias;
    epilogue.bias = ctx.inputs[2];
  } else if (node.op == &MatmulBiasReluMaskOp()) {
    epilogue.kind = Kind::kReluMaskBias;
    epilogue.bias = ctx.inputs[2];
    epilogue.relu_mask = ctx.outputs[1];
  } else if (node.op == &MatmulDReluBiasGradOp()) {
    epilogue.kind = Kind::kDReluBiasGrad;
    epilogue.relu_mask = ctx.inputs[2];
    epilogue.bias = ctx.outputs[1];
  }
  return epilogue;
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerMatmul(const LoweringContext& ctx,
                                                       const Node& node) {
  ASSIGN_OR_RETURN(ProductDims d, DimsOf(node, ctx.input_specs[0], ctx.input_specs[1]));
  return LowerLtMatmul(ctx, node, d.Matmul(ctx.input_specs[0].dtype), EpilogueOf(ctx, node));
}

// matmul_bias: the fused forward of a linear layer, C = op(A)·op(B) + bias [then relu]; stacked,
// bias [K, n] holds each model's.
template <int kRank>
absl::StatusOr<std::vector<TensorSpec>> InferMatmulBias(const Attrs& attrs,
                                                        absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  ASSIGN_OR_RETURN(ProductDims d, ProductDimsOf(attrs, in[0], in[1], kRank));
  if (in[2].shape != d.Stack({d.n}) || in[2].dtype != in[0].dtype) {
    return absl::InvalidArgumentError(absl::StrCat("bias ", in[2].ToString(), " must be ",
                                                   d.Stack({d.n}).ToString(),
                                                   " (one value per output column) of A's dtype"));
  }
  return std::vector<TensorSpec>{{d.Stack({d.m, d.n}), in[0].dtype}};
}

// The reference is the unfused ops' references in sequence.
absl::Status CpuMatmulBias(const Node& node, absl::Span<ir::HostTensor* const> in,
                           absl::Span<ir::HostTensor* const> out) {
  ir::HostTensor product(out[0]->spec());
  ir::HostTensor* product_ptr = &product;
  RETURN_IF_ERROR(CpuMatmul(node, in.subspan(0, 2), absl::MakeSpan(&product_ptr, 1)));
  ir::HostTensor* bias_in[] = {&product, in[2]};
  const Node stub;
  const ir::OpDef& bias_add = RankOf(node) == 3 ? BatchedBiasAddOp() : BiasAddOp();
  const bool relu = node.op == &MatmulBiasReluMaskOp() || ir::BoolAttrOr(node.attrs, "relu", false);
  if (!relu) return bias_add.cpu(stub, absl::MakeSpan(bias_in), out.subspan(0, 1));
  ir::HostTensor biased(out[0]->spec());
  ir::HostTensor* biased_ptr = &biased;
  RETURN_IF_ERROR(bias_add.cpu(stub, absl::MakeSpan(bias_in), absl::MakeSpan(&biased_ptr, 1)));
  return ReluOp().cpu(stub, absl::MakeSpan(&biased_ptr, 1), out.subspan(0, 1));
}

// ReLU bit masks (runtime::MatmulEpilogue): int32 [m, ReluMaskWords(n)], bit j % 32 of word j / 32
// of row i set when y[i, j] > 0; the padding bits are zero here and unspecified on the GPU.
TensorSpec ReluMaskSpec(int64_t m, int64_t n) {
  return {Shape{m, runtime::ReluMaskWords(n)}, DType::kInt32};
}

// matmul_bias_relu_mask: matmul_bias with relu, which also keeps the mask for the backward.
absl::StatusOr<std::vector<TensorSpec>> InferMatmulBiasReluMask(const Attrs& attrs,
                                                                absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(std::vector<TensorSpec> out, InferMatmulBias<2>(attrs, in));
  out.push_back(ReluMaskSpec(out[0].shape.dim(0), out[0].shape.dim(1)));
  return out;
}

absl::Status CpuMatmulBiasReluMask(const Node& node, absl::Span<ir::HostTensor* const> in,
                                   absl::Span<ir::HostTensor* const> out) {
  RETURN_IF_ERROR(CpuMatmulBias(node, in, out));
  const int64_t m = out[0]->spec().shape.dim(0), n = out[0]->spec().shape.dim(1);
  const int64_t words = runtime::ReluMaskWords(n);
  auto mask = out[1]->data<int32_t>();
  std::fill(mask.begin(), mask.end(), 0);
  return DispatchFloat(out[0]->dtype(), [&]<typename T>() {
    auto y = out[0]->data<T>();
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        if (!(y[i * n + j] > T(0))) continue;
        int32_t& word = mask[i * words + j / 32];
        word = static_cast<int32_t>(static_cast<uint32_t>(word) | (1u << (j % 32)));
      }
    }
    return absl::OkStatus();
  });
}

// matmul_drelu_bgrad: (A, B, mask) -> (dz, db): a hidden layer's backward fused into the data
// gradient product dh = op(A)·op(B) that feeds it: dz = mask ? dh : 0 (relu_grad) and db the
// column sums of dz (column_sum). Attrs transpose_a, transpose_b.
absl::StatusOr<std::vector<TensorSpec>> InferMatmulDReluBiasGrad(const Attrs& attrs,
                                                                 absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  ASSIGN_OR_RETURN(ProductDims d, ProductDimsOf(attrs, in[0], in[1], 2));
  if (!(in[2] == ReluMaskSpec(d.m, d.n))) {
    return absl::InvalidArgumentError(absl::StrCat("the ReLU mask ", in[2].ToString(), " must be ",
                                                   ReluMaskSpec(d.m, d.n).ToString()));
  }
  return std::vector<TensorSpec>{{Shape{d.m, d.n}, in[0].dtype}, {Shape{d.n}, in[0].dtype}};
}

absl::Status CpuMatmulDReluBiasGrad(const Node& node, absl::Span<ir::HostTensor* const> in,
                                    absl::Span<ir::HostTensor* const> out) {
  RETURN_IF_ERROR(CpuMatmul(node, in.subspan(0, 2), out.subspan(0, 1)));
  const int64_t m = out[0]->spec().shape.dim(0), n = out[0]->spec().shape.dim(1);
  const int64_t words = runtime::ReluMaskWords(n);
  auto mask = in[2]->data<int32_t>();
  RETURN_IF_ERROR(DispatchFloat(out[0]->dtype(), [&]<typename T>() {
    auto dz = out[0]->data<T>();
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const uint32_t word = static_cast<uint32_t>(mask[i * words + j / 32]);
        if (((word >> (j % 32)) & 1u) == 0) dz[i * n + j] = T(0);
      }
    }
    return absl::OkStatus();
  }));
  const Node stub;
  return ColumnSumOp().cpu(stub, out.subspan(0, 1), out.subspan(1, 1));
}

}  // namespace

const ir::OpDef& MatmulBiasOp() {
  static const ir::OpDef op{.name = "matmul_bias",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferMatmulBias<2>,
                            .cpu = CpuMatmulBias,
                            .lower = LowerMatmul,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& MatmulBiasReluMaskOp() {
  static const ir::OpDef op{.name = "matmul_bias_relu_mask",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferMatmulBiasReluMask,
                            .cpu = CpuMatmulBiasReluMask,
                            .lower = LowerMatmul};
  return op;
}

const ir::OpDef& MatmulDReluBiasGradOp() {
  static const ir::OpDef op{.name = "matmul_drelu_bgrad",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferMatmulDReluBiasGrad,
                            .cpu = CpuMatmulDReluBiasGrad,
                            .lower = LowerMatmul};
  return op;
}

const ir::OpDef& MatmulOp() {
  static const ir::OpDef op{.name = "matmul",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferMatmul<2>,
                            .grad = GradMatmul,
                            .cpu = CpuMatmul,
                            .lower = LowerMatmul,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& BatchedMatmulOp() {
  static const ir::OpDef op{.name = "batched_matmul",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferMatmul<3>,
                            .grad = GradMatmul,
                            .cpu = CpuMatmul,
                            .lower = LowerMatmul};
  return op;
}

const ir::OpDef& BatchedMatmulBiasOp() {
  static const ir::OpDef op{.name = "batched_matmul_bias",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferMatmulBias<3>,
                            .cpu = CpuMatmulBias,
                            .lower = LowerMatmul};
  return op;
}

}  // namespace reprise::ops
