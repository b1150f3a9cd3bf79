// Pointwise ops: each lowers to an NVRTC kernel generated from one expression, over float32,
// bfloat16 or float16 tensors (computed in float, rounded once at the store).
#include "absl/strings/str_cat.h"
#include "src/codegen/batched_kernels.h"
#include "src/codegen/generated_kernel.h"
#include "src/ops/batched.h"
#include "src/ops/cast.h"
#include "src/ops/gpu_element_type.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

// `make` builds the op's kernel for the element type of the node's tensors.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerPointwise(const LoweringContext& ctx,
                                                          const Node& node,
                                                          codegen::GeneratedKernel (*make)(DType)) {
  ASSIGN_OR_RETURN(const DType dtype, GpuElementType(node, ctx.input_specs));
  const codegen::GeneratedKernel kernel = make(dtype);
  const TensorSpec& out = node.outputs[0];
  const int64_t n = out.NumElements();
  const int64_t cols = out.shape.rank() == 0 ? 1 : out.shape.dim(out.shape.rank() - 1);
  KernelArgs args;
  for (void* p : ctx.inputs) args.Add(p);
  args.Add(ctx.outputs[0]).Add(static_cast<long long>(n)).Add(static_cast<long long>(cols));
  return NvrtcKernel::Create(ctx, node.name, kernel, GridFor(n, 256, *ctx.device), dim3(256), 0,
                             std::move(args));
}

absl::Status CheckSame(const TensorSpec& a, const TensorSpec& b, absl::string_view what) {
  if (!(a == b)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must have the same shape and dtype: ", a.ToString(), " and ", b.ToString()));
  }
  return absl::OkStatus();
}

// bias_add, and its ensemble form batched_bias_add (batched.h): x [K, R, C] and b [K, C], each
// model's bias added to its rows. The same rules with a leading model dimension (kLead = 1).

template <int kLead>
absl::StatusOr<std::vector<TensorSpec>> InferBiasAdd(const Attrs&,
                                                     absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  RETURN_IF_ERROR(CheckRank(in[0], 2 + kLead, "x"));
  RETURN_IF_ERROR(CheckRank(in[1], 1 + kLead, "bias"));
  RETURN_IF_ERROR(CheckFloat(in[0], "x"));
  if (in[1].dtype != in[0].dtype || in[1].shape.dim(kLead) != in[0].shape.dim(1 + kLead) ||
      (kLead == 1 && in[1].shape.dim(0) != in[0].shape.dim(0))) {
    return absl::InvalidArgumentError(
        absl::StrCat("bias ", in[1].ToString(), " does not match the ",
                     kLead == 1 ? "[models, columns]" : "columns", " of x ", in[0].ToString()));
  }
  return std::vector<TensorSpec>{in[0]};
}

absl::StatusOr<std::vector<Value>> GradBiasAdd(Graph& g, const Node& node,
                                               absl::Span<const Value> dout,
                                               const std::vector<bool>& needs) {
  const ir::OpDef& column_sum =
      node.op == &BatchedBiasAddOp() ? BatchedColumnSumOp() : ColumnSumOp();
  std::vector<Value> grads(2);
  if (needs[0]) grads[0] = dout[0];
  if (needs[1]) {
    // A parameter's bias gradient ends its chain, as a weight gradient does: role "wgrad" runs it
    // on the weight-gradient lane, off the data-gradient chain.
    Attrs attrs;
    if (IsParameterOrItsCast(g, node.inputs[1])) attrs["role"] = std::string("wgrad");
    ASSIGN_OR_RETURN(grads[1], g.AddOp1(column_sum, absl::StrCat(node.name, ".bias_grad"),
                                        {dout[0]}, std::move(attrs)));
  }
  return grads;
}

// Model k's rows take b[k]; without a model dimension, every row takes b.
absl::Status CpuBiasAdd(const Node&, absl::Span<ir::HostTensor* const> in,
                        absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto x = in[0]->data<T>(), b = in[1]->data<T>();
    auto y = out[0]->data<T>();
    const Shape& shape = in[0]->spec().shape;
    const int64_t cols = shape.dim(shape.rank() - 1);
    const int64_t per_model = shape.dim(shape.rank() - 2) * cols;
    for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
      y[i] = x[i] + b[(i / per_model) * cols + i % cols];
    }
    return absl::OkStatus();
  });
}

// Its kernel indexes the bias by model and column (the pointwise kernels by column only).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerBatchedBiasAdd(const LoweringContext& ctx,
                                                               const Node& node) {
  RETURN_IF_ERROR(RequireFloat32(node, ctx.input_specs));
  const Shape& shape = ctx.input_specs[0].shape;
  const long long n = shape.NumElements();
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.outputs[0]);
  args.Add(n).Add(static_cast<long long>(shape.dim(1))).Add(static_cast<long long>(shape.dim(2)));
  return NvrtcKernel::Create(ctx, node.name, codegen::BatchedBiasAdd(),
                             GridFor(n, 256, *ctx.device), dim3(256), 0, std::move(args));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerBiasAdd(const LoweringContext& ctx,
                                                        const Node& node) {
  return LowerPointwise(ctx, node, codegen::BiasAdd);
}

// relu ----------------------------------------------------------------------------------------

absl::StatusOr<std::vector<TensorSpec>> InferUnary(const Attrs&, absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  RETURN_IF_ERROR(CheckFloat(in[0], "x"));
  return std::vector<TensorSpec>{in[0]};
}

absl::StatusOr<std::vector<Value>> GradRelu(Graph& g, const Node& node,
                                            absl::Span<const Value> dout,
                                            const std::vector<bool>& needs) {
  std::vector<Value> grads(1);
  if (needs[0]) {
    // The mask comes from the output, so the input need not stay alive for the backward pass.
    ASSIGN_OR_RETURN(grads[0], g.AddOp1(ReluGradOp(), absl::StrCat(node.name, ".grad"),
                                        {dout[0], Value{node.id, 0}}));
  }
  return grads;
}

absl::Status CpuRelu(const Node&, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto x = in[0]->data<T>();
    auto y = out[0]->data<T>();
    // A NaN stays NaN, as torch.relu keeps it (x != x only for a NaN).
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] > T(0) || x[i] != x[i] ? x[i] : T(0);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerRelu(const LoweringContext& ctx, const Node& node) {
  return LowerPointwise(ctx, node, codegen::Relu);
}

// relu_grad -----------------------------------------------------------------------------------

absl::StatusOr<std::vector<TensorSpec>> InferBinarySame(const Attrs&,
                                                        absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  RETURN_IF_ERROR(CheckFloat(in[0], "first input"));
  RETURN_IF_ERROR(CheckSame(in[0], in[1], "both inputs"));
  return std::vector<TensorSpec>{in[0]};
}

absl::Status CpuReluGrad(const Node&, absl::Span<ir::HostTensor* const> in,
                         absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto dy = in[0]->data<T>(), y = in[1]->data<T>();
    auto dx = out[0]->data<T>();
    for (size_t i = 0; i < dy.size(); ++i) dx[i] = y[i] > T(0) ? dy[i] : T(0);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerReluGrad(const LoweringContext& ctx,
                                                         const Node& node) {
  return LowerPointwise(ctx, node, codegen::ReluGrad);
}

// add -----------------------------------------------------------------------------------------

absl::StatusOr<std::vector<Value>> GradAdd(Graph&, const Node&, absl::Span<const Value> dout,
                                           const std::vector<bool>& needs) {
  return std::vector<Value>{needs[0] ? dout[0] : Value{}, needs[1] ? dout[0] : Value{}};
}

absl::Status CpuAdd(const Node&, absl::Span<ir::HostTensor* const> in,
                    absl::Span<ir::HostTensor* const> out) {
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    auto a = in[0]->data<T>(), b = in[1]->data<T>();
    auto y = out[0]->data<T>();
    for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] + b[i];
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerAdd(const LoweringContext& ctx, const Node& node) {
  return LowerPointwise(ctx, node, codegen::Add);
}

}  // namespace

const ir::OpDef& BiasAddOp() {
  static const ir::OpDef op{
      .name = "bias_add",
      .infer = InferBiasAdd<0>,
      .grad = GradBiasAdd,
      .cpu = CpuBiasAdd,
      .lower = LowerBiasAdd,
      .pointwise = {"$0 + $1", {ir::Operand::kElement, ir::Operand::kRowVector}},
      .low_precision_lowering = true};
  return op;
}
// Pointwise by kind (cheap to recompute), but with no chainable expression: its bias operand is
// indexed by model and column, which fused pointwise kernels do not express.
const ir::OpDef& BatchedBiasAddOp() {
  static const ir::OpDef op{.name = "batched_bias_add",
                            .infer = InferBiasAdd<1>,
                            .grad = GradBiasAdd,
                            .cpu = CpuBiasAdd,
                            .lower = LowerBatchedBiasAdd};
  return op;
}

const ir::OpDef& ReluOp() {
  static const ir::OpDef op{
      .name = "relu",
      .infer = InferUnary,
      .grad = GradRelu,
      .cpu = CpuRelu,
      .lower = LowerRelu,
      .pointwise = {"($0 > 0.0f || $0 != $0 ? $0 : 0.0f)", {ir::Operand::kElement}},
      .low_precision_lowering = true};
  return op;
}
const ir::OpDef& ReluGradOp() {
  static const ir::OpDef op{
      .name = "relu_grad",
      .infer = InferBinarySame,
      .cpu = CpuReluGrad,
      .lower = LowerReluGrad,
      .pointwise = {"($1 > 0.0f ? $0 : 0.0f)", {ir::Operand::kElement, ir::Operand::kElement}},
      .low_precision_lowering = true};
  return op;
}
const ir::OpDef& AddOp() {
  static const ir::OpDef op{
      .name = "add",
      .infer = InferBinarySame,
      .grad = GradAdd,
      .cpu = CpuAdd,
      .lower = LowerAdd,
      .pointwise = {"$0 + $1", {ir::Operand::kElement, ir::Operand::kElement}},
      .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
