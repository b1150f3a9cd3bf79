// batched_matmul: K independent products C[k] = op(A[k])·op(B[k]) over stacked row-major
// operands, one strided-batched cuBLASLt call. Its gradient mirrors matmul's: a dgrad and a wgrad
// node, both batched, ordered by nothing but their data.
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

struct BatchedDims : ProductDims {
  int64_t batch;  // Products in the stack: the models.
};

absl::StatusOr<BatchedDims> DimsOf(const Attrs& attrs, const TensorSpec& a, const TensorSpec& b) {
  RETURN_IF_ERROR(CheckRank(a, 3, "A"));
  RETURN_IF_ERROR(CheckRank(b, 3, "B"));
  if (a.shape.dim(0) != b.shape.dim(0) || a.shape.dim(0) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("A ", a.ToString(), " and B ", b.ToString(),
                                                   " must stack the same positive model count"));
  }
  ASSIGN_OR_RETURN(const ProductDims product, ProductDimsOf(attrs, a, b, /*rank=*/3));
  BatchedDims d;
  static_cast<ProductDims&>(d) = product;
  d.batch = a.shape.dim(0);
  return d;
}

absl::StatusOr<std::vector<TensorSpec>> InferBatchedMatmul(const Attrs& attrs,
                                                           absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  ASSIGN_OR_RETURN(BatchedDims d, DimsOf(attrs, in[0], in[1]));
  return std::vector<TensorSpec>{{Shape{d.batch, d.m, d.n}, in[0].dtype}};
}

absl::StatusOr<Value> AddBatchedMatmul(Graph& g, const std::string& name, Value a, Value b, bool ta,
                                       bool tb, const char* role) {
  return g.AddOp1(BatchedMatmulOp(), name, {a, b},
                  {{"transpose_a", ta}, {"transpose_b", tb}, {"role", std::string(role)}});
}

// matmul's rule per model: dA = dC·op(B)ᵀ and dB = op(A)ᵀ·dC in A's and B's stored orientation.
absl::StatusOr<std::vector<Value>> GradBatchedMatmul(Graph& g, const Node& node,
                                                     absl::Span<const Value> dout,
                                                     const std::vector<bool>& needs) {
  const Value a = node.inputs[0], b = node.inputs[1], dc = dout[0];
  const bool ta = ir::BoolAttrOr(node.attrs, "transpose_a", false);
  const bool tb = ir::BoolAttrOr(node.attrs, "transpose_b", false);
  std::vector<Value> grads(2);
  const std::string dgrad = absl::StrCat(node.name, ".dgrad");
  const std::string wgrad = absl::StrCat(node.name, ".wgrad");
  if (needs[0]) {
    ASSIGN_OR_RETURN(grads[0], !ta ? AddBatchedMatmul(g, dgrad, dc, b, false, !tb, "dgrad")
                                   : AddBatchedMatmul(g, dgrad, b, dc, tb, true, "dgrad"));
  }
  if (needs[1]) {
    ASSIGN_OR_RETURN(grads[1], !tb ? AddBatchedMatmul(g, wgrad, a, dc, !ta, false, "wgrad")
                                   : AddBatchedMatmul(g, wgrad, dc, a, true, ta, "wgrad"));
  }
  return grads;
}

// matmul's reference per model (a double accumulator per entry).
absl::Status CpuBatchedMatmul(const Node& node, absl::Span<ir::HostTensor* const> in,
                              absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(BatchedDims d, DimsOf(node.attrs, in[0]->spec(), in[1]->spec()));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto a = in[0]->data<T>(), b = in[1]->data<T>();
    auto c = out[0]->data<T>();
    for (int64_t model = 0; model < d.batch; ++model) {
      ReferenceProduct(a.data() + model * d.m * d.k, b.data() + model * d.k * d.n,
                       c.data() + model * d.m * d.n, d.m, d.n, d.k, d.ta, d.tb);
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerBatchedMatmul(const LoweringContext& ctx,
                                                              const Node& node) {
  ASSIGN_OR_RETURN(BatchedDims d, DimsOf(node.attrs, ctx.input_specs[0], ctx.input_specs[1]));
  runtime::MatmulShape shape{d.m, d.n, d.k, d.ta, d.tb, ctx.input_specs[0].dtype};
  shape.batch = d.batch;
  runtime::MatmulEpilogue epilogue;
  if (node.op == &BatchedMatmulBiasOp()) {
    epilogue.kind = ir::BoolAttrOr(node.attrs, "relu", false)
                        ? runtime::MatmulEpilogue::Kind::kReluBias
                        : runtime::MatmulEpilogue::Kind::kBias;
    epilogue.bias = ctx.inputs[2];
  }
  return LowerLtMatmul(ctx, node, shape, epilogue);
}

// batched_matmul_bias: the fused forward of K linear layers.
absl::StatusOr<std::vector<TensorSpec>> InferBatchedMatmulBias(const Attrs& attrs,
                                                               absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  ASSIGN_OR_RETURN(BatchedDims d, DimsOf(attrs, in[0], in[1]));
  if (in[2].shape != Shape{d.batch, d.n} || in[2].dtype != in[0].dtype) {
    return absl::InvalidArgumentError(absl::StrCat("bias ", in[2].ToString(), " must be [", d.batch,
                                                   ", ", d.n, "] of A's dtype"));
  }
  return std::vector<TensorSpec>{{Shape{d.batch, d.m, d.n}, in[0].dtype}};
}

// The unfused ops' references in sequence.
absl::Status CpuBatchedMatmulBias(const Node& node, absl::Span<ir::HostTensor* const> in,
                                  absl::Span<ir::HostTensor* const> out) {
  ir::HostTensor product(out[0]->spec());
  ir::HostTensor* product_ptr = &product;
  RETURN_IF_ERROR(CpuBatchedMatmul(node, in.subspan(0, 2), absl::MakeSpan(&product_ptr, 1)));
  ir::HostTensor* bias_in[] = {&product, in[2]};
  const Node stub;
  if (!ir::BoolAttrOr(node.attrs, "relu", false))
    return BatchedBiasAddOp().cpu(stub, absl::MakeSpan(bias_in), out);
  ir::HostTensor biased(out[0]->spec());
  ir::HostTensor* biased_ptr = &biased;
  RETURN_IF_ERROR(
      BatchedBiasAddOp().cpu(stub, absl::MakeSpan(bias_in), absl::MakeSpan(&biased_ptr, 1)));
  return ReluOp().cpu(stub, absl::MakeSpan(&biased_ptr, 1), out);
}

}  // namespace

const ir::OpDef& BatchedMatmulOp() {
  static const ir::OpDef op{.name = "batched_matmul",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferBatchedMatmul,
                            .grad = GradBatchedMatmul,
                            .cpu = CpuBatchedMatmul,
                            .lower = LowerBatchedMatmul};
  return op;
}

const ir::OpDef& BatchedMatmulBiasOp() {
  static const ir::OpDef op{.name = "batched_matmul_bias",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferBatchedMatmulBias,
                            .cpu = CpuBatchedMatmulBias,
                            .lower = LowerBatchedMatmul};
  return op;
}

}  // namespace reprise::ops
