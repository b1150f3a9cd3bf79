// matmul_bias_gelu_aux, matmul_dgelu, matmul_bgrad and matmul_bias_residual: shape rules, CPU
// references (the replaced ops' references in sequence, so a fused step computes what the unfused
// one does) and the cuBLASLt lowering with the matching epilogue.
#include "src/ops/matmul_gelu.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/gelu_kernels.h"
#include "src/codegen/generated_kernel.h"
#include "src/ops/column_sum_launch.h"
#include "src/ops/gelu_product_cudnn.h"
#include "src/ops/gelu_product_race.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/lt_matmul_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/ops/transformer_ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

// InvalidArgument unless `v` is `expected`, naming what it is.
absl::Status CheckSpec(const TensorSpec& v, const TensorSpec& expected, absl::string_view what) {
  if (v == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", v.ToString(), " must be ", expected.ToString()));
}

absl::StatusOr<std::vector<TensorSpec>> InferGeluAux(const Attrs& attrs,
                                                     absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  ASSIGN_OR_RETURN(ProductDims d, ProductDimsOf(attrs, in[0], in[1], 2));
  RETURN_IF_ERROR(CheckSpec(in[2], {Shape{d.n}, in[0].dtype}, "bias"));
  const TensorSpec out{Shape{d.m, d.n}, in[0].dtype};
  return std::vector<TensorSpec>{out, out};
}

absl::StatusOr<std::vector<TensorSpec>> InferDGelu(const Attrs& attrs,
                                                   absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  ASSIGN_OR_RETURN(ProductDims d, ProductDimsOf(attrs, in[0], in[1], 2));
  const TensorSpec out{Shape{d.m, d.n}, in[0].dtype};
  RETURN_IF_ERROR(CheckSpec(in[2], out, "the GELU input"));
  return std::vector<TensorSpec>{out};
}

absl::StatusOr<std::vector<TensorSpec>> InferBiasGrad(const Attrs& attrs,
                                                      absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  if (!ir::BoolAttrOr(attrs, "transpose_a", false)) {
    return absl::InvalidArgumentError(
        "matmul_bgrad sums A's columns: A must be read transposed (transpose_a = true)");
  }
  ASSIGN_OR_RETURN(ProductDims d, ProductDimsOf(attrs, in[0], in[1], 2));
  return std::vector<TensorSpec>{{Shape{d.m, d.n}, in[0].dtype}, {Shape{d.m}, in[0].dtype}};
}

absl::StatusOr<std::vector<TensorSpec>> InferResidual(const Attrs& attrs,
                                                      absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 4));
  ASSIGN_OR_RETURN(ProductDims d, ProductDimsOf(attrs, in[0], in[1], 2));
  RETURN_IF_ERROR(CheckSpec(in[2], {Shape{d.n}, in[0].dtype}, "bias"));
  const TensorSpec out{Shape{d.m, d.n}, in[0].dtype};
  RETURN_IF_ERROR(CheckSpec(in[3], out, "the residual"));
  return std::vector<TensorSpec>{out};
}

// The product op(A)·op(B) as the matmul reference computes it (summed in double, rounded once).
absl::StatusOr<ir::HostTensor> Product(const Node& node, const ir::HostTensor& a,
                                       const ir::HostTensor& b) {
  ASSIGN_OR_RETURN(ProductDims d, ProductDimsOf(node.attrs, a.spec(), b.spec(), 2));
  ir::HostTensor c(TensorSpec{Shape{d.m, d.n}, a.dtype()});
  RETURN_IF_ERROR(DispatchFloat(a.dtype(), [&]<typename T>() {
    ReferenceProduct(a.data<T>().data(), b.data<T>().data(), c.data<T>().data(), d.m, d.n, d.k,
                     d.ta, d.tb);
    return absl::OkStatus();
  }));
  return c;
}

// Runs `op`'s reference on `in` into `out`.
absl::Status Run(const ir::OpDef& op, std::vector<ir::HostTensor*> in,
                 std::vector<ir::HostTensor*> out) {
  const Node stub;
  return op.cpu(stub, in, out);
}

absl::Status CpuGeluAux(const Node& node, absl::Span<ir::HostTensor* const> in,
                        absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(ir::HostTensor product, Product(node, *in[0], *in[1]));
  RETURN_IF_ERROR(Run(BiasAddOp(), {&product, in[2]}, {out[1]}));
  return Run(GeluOp(), {out[1]}, {out[0]});
}

absl::Status CpuDGelu(const Node& node, absl::Span<ir::HostTensor* const> in,
                      absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(ir::HostTensor product, Product(node, *in[0], *in[1]));
  return Run(GeluGradOp(), {&product, in[2]}, {out[0]});
}

absl::Status CpuBiasGrad(const Node& node, absl::Span<ir::HostTensor* const> in,
                         absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(*out[0], Product(node, *in[0], *in[1]));
  return Run(ColumnSumOp(), {in[0]}, {out[1]});
}

absl::Status CpuResidual(const Node& node, absl::Span<ir::HostTensor* const> in,
                         absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(ir::HostTensor product, Product(node, *in[0], *in[1]));
  ir::HostTensor biased(product.spec());
  RETURN_IF_ERROR(Run(BiasAddOp(), {&product, in[2]}, {&biased}));
  return Run(AddOp(), {&biased, in[3]}, {out[0]});
}

// When cuBLASLt offers no algorithm for a GELU epilogue at this shape and type: the product with a
// bias epilogue (forward) or none (backward), then our own GELU or GELU-derivative kernel, as the
// unfused ops compute them. Describe() shows which form runs.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerUnfusedGelu(const LoweringContext& ctx,
                                                            const Node& node,
                                                            const runtime::MatmulShape& shape) {
  const bool forward = node.op == &MatmulBiasGeluAuxOp();
  const long long rows = shape.m, cols = shape.n, n = rows * cols;
  LoweringContext product_ctx = ctx;
  runtime::MatmulEpilogue epilogue;
  if (forward) {  // The biased product into the pre-activation.
    epilogue.kind = runtime::MatmulEpilogue::Kind::kBias;
    epilogue.bias = ctx.inputs[2];
    product_ctx.outputs = {ctx.outputs[1]};
  }
  std::vector<std::unique_ptr<GpuKernel>> kernels;
  ASSIGN_OR_RETURN(kernels.emplace_back(), LowerLtMatmul(product_ctx, node, shape, epilogue));
  const size_t workspace = kernels.back()->WorkspaceBytes();
  const dim3 grid = GridFor(n, 256, *ctx.device);
  KernelArgs act;
  if (forward) {
    act.Add(ctx.outputs[1]).Add(ctx.outputs[0]).Add(n).Add(cols);
  } else {  // dz = dz·gelu'(pre) in place: each element read before it is written.
    act.Add(ctx.outputs[0]).Add(ctx.inputs[2]).Add(ctx.outputs[0]).Add(n).Add(cols);
  }
  ASSIGN_OR_RETURN(
      kernels.emplace_back(),
      NvrtcKernel::Create(ctx, node.name,
                          forward ? codegen::Gelu(shape.dtype) : codegen::GeluGrad(shape.dtype),
                          grid, dim3(256), 0, std::move(act)));
  return std::unique_ptr<GpuKernel>(new KernelSequence(std::move(kernels), workspace));
}

// matmul_bgrad where cuBLASLt offers no BGRADB algorithm: the plain product, then our column sums
// of A (the partial sums may reuse the product's workspace: the launches run one after another).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerBiasGradApart(const LoweringContext& ctx,
                                                              const Node& node,
                                                              const runtime::MatmulShape& shape) {
  std::vector<std::unique_ptr<GpuKernel>> kernels;
  ASSIGN_OR_RETURN(kernels.emplace_back(), LowerLtMatmul(ctx, node, shape, {}));
  const size_t workspace = kernels.back()->WorkspaceBytes();
  KernelArgs sum;
  sum.Add(ctx.inputs[0]);
  ASSIGN_OR_RETURN(
      ColumnSumLaunches launches,
      LowerColumnSums(ctx, node.name, codegen::ColumnSum(shape.dtype), shape.dtype, std::move(sum),
                      {ctx.inputs[0]}, ctx.outputs[1], shape.k, shape.m));
  for (auto& kernel : launches.kernels) kernels.push_back(std::move(kernel));
  return std::unique_ptr<GpuKernel>(
      new KernelSequence(std::move(kernels), std::max(workspace, launches.workspace_bytes)));
}

// The GELU products on cuBLASLt's epilogues, or the forward one on cuDNN's graph API where the
// options say so (cuDNN's data-gradient form measured slower than cuBLASLt's DGELU:
// KernelTuning::gelu_product_library): raced against cuBLASLt's where measuring
// (src/ops/gelu_product_race.h), or cuDNN's plan asked for. Where cuDNN has no plan for the
// shape, cuBLASLt's, described with cuDNN's reason; where cuBLASLt has no epilogue algorithm
// either, the plain product and our GELU kernel.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerGeluProduct(
    const LoweringContext& ctx, const Node& node, const runtime::MatmulShape& shape,
    const runtime::MatmulEpilogue& epilogue) {
  using Library = LoweringOptions::GeluProductLibrary;
  const Library library = ctx.options.gelu_product_library;
  absl::StatusOr<std::unique_ptr<GpuKernel>> fused;
  std::string cudnn_note;
  if (node.op != &MatmulBiasGeluAuxOp() || library == Library::kCublasLt ||
      (library == Library::kFastest && !ctx.options.measure_matmul_algorithms)) {
    fused = LowerLtMatmul(ctx, node, shape, epilogue);
  } else if (library == Library::kFastest) {
    fused = RaceGeluProduct(ctx, node, shape, epilogue);
  } else {
    absl::StatusOr<CudnnGeluLowering> cudnn = LowerCudnnGeluProduct(ctx, node, shape);
    if (cudnn.ok()) return std::move(cudnn->kernel);
    if (!absl::IsUnimplemented(cudnn.status())) return cudnn.status();
    cudnn_note = CudnnRefusalNote(cudnn.status());
    fused = LowerLtMatmul(ctx, node, shape, epilogue);
  }
  if (!fused.ok() && fused.status().code() == absl::StatusCode::kNotFound) {
    fused = LowerUnfusedGelu(ctx, node, shape);
  }
  if (!fused.ok() || cudnn_note.empty()) return fused;
  return std::unique_ptr<GpuKernel>(new NotedKernel(*std::move(fused), std::move(cudnn_note)));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> Lower(const LoweringContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(ProductDims d,
                   ProductDimsOf(node.attrs, ctx.input_specs[0], ctx.input_specs[1], 2));
  runtime::MatmulShape shape{d.m, d.n, d.k, d.ta, d.tb, ctx.input_specs[0].dtype};
  using Kind = runtime::MatmulEpilogue::Kind;
  runtime::MatmulEpilogue epilogue;
  if (node.op == &MatmulBiasGeluAuxOp()) {
    epilogue.kind = Kind::kGeluAuxBias;
    epilogue.bias = ctx.inputs[2];
    epilogue.gelu_input = ctx.outputs[1];
  } else if (node.op == &MatmulDGeluOp()) {
    epilogue.kind = Kind::kDGelu;
    epilogue.gelu_input = ctx.inputs[2];
  } else if (node.op == &MatmulBiasGradOp()) {
    epilogue.kind = Kind::kBiasGradB;
    epilogue.bias = ctx.outputs[1];
    absl::StatusOr<std::unique_ptr<GpuKernel>> fused = LowerLtMatmul(ctx, node, shape, epilogue);
    if (fused.ok() || fused.status().code() != absl::StatusCode::kNotFound) return fused;
    return LowerBiasGradApart(ctx, node, shape);
  } else {
    epilogue.kind = Kind::kBiasResidual;
    epilogue.bias = ctx.inputs[2];
    epilogue.residual = ctx.inputs[3];
    return LowerLtMatmul(ctx, node, shape, epilogue);
  }
  return LowerGeluProduct(ctx, node, shape, epilogue);
}

}  // namespace

const ir::OpDef& MatmulBiasGeluAuxOp() {
  static const ir::OpDef op{.name = "matmul_bias_gelu_aux",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferGeluAux,
                            .cpu = CpuGeluAux,
                            .lower = Lower,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& MatmulDGeluOp() {
  static const ir::OpDef op{.name = "matmul_dgelu",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferDGelu,
                            .cpu = CpuDGelu,
                            .lower = Lower,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& MatmulBiasGradOp() {
  static const ir::OpDef op{.name = "matmul_bgrad",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferBiasGrad,
                            .cpu = CpuBiasGrad,
                            .lower = Lower,
                            .low_precision_lowering = true};
  return op;
}

const ir::OpDef& MatmulBiasResidualOp() {
  static const ir::OpDef op{.name = "matmul_bias_residual",
                            .kind = ir::OpKind::kMatmul,
                            .infer = InferResidual,
                            .cpu = CpuResidual,
                            .lower = Lower,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
