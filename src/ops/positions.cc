// add_positions and add_positions_grad: a position table's first T rows added to every sequence of
// a batch flattened to rows, and the table's gradient summed over the sequences in order.
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/embedding_kernels.h"
#include "src/codegen/vector16.h"
#include "src/ops/gpu_element_type.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/transformer_ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

struct PositionRows {
  int64_t rows = 0, cols = 0, positions = 0;
};

// x [..., C] as [rows, C] rows, checked against `positions` T and a table of `table_rows` P.
absl::StatusOr<PositionRows> PositionRowsOf(const Attrs& attrs, const TensorSpec& x,
                                            int64_t table_rows) {
  ASSIGN_OR_RETURN(const int64_t positions, ir::IntAttr(attrs, "positions"));
  RETURN_IF_ERROR(CheckFloat(x, "x"));
  if (x.shape.rank() < 2 || x.NumElements() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("x must be [..., T, C] with elements, got ", x.ToString()));
  }
  PositionRows p{.cols = x.shape.dim(x.shape.rank() - 1), .positions = positions};
  p.rows = x.NumElements() / p.cols;
  if (positions < 1 || positions > table_rows || p.rows % positions != 0) {
    return absl::InvalidArgumentError(absl::StrCat("positions ", positions, " must be in [1, ",
                                                   table_rows, "] (the table's rows) and divide ",
                                                   "the ", p.rows, " rows of x ", x.ToString()));
  }
  return p;
}

absl::StatusOr<std::vector<TensorSpec>> InferAdd(const Attrs& attrs,
                                                 absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  RETURN_IF_ERROR(CheckRank(in[1], 2, "table"));
  ASSIGN_OR_RETURN(PositionRows p, PositionRowsOf(attrs, in[0], in[1].shape.dim(0)));
  if (in[1].dtype != in[0].dtype || in[1].shape.dim(1) != p.cols) {
    return absl::InvalidArgumentError(absl::StrCat("table ", in[1].ToString(),
                                                   " must have x's dtype and last dimension, x ",
                                                   in[0].ToString()));
  }
  return std::vector<TensorSpec>{in[0]};
}

absl::StatusOr<std::vector<TensorSpec>> InferGrad(const Attrs& attrs,
                                                  absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  ASSIGN_OR_RETURN(const int64_t table_rows, ir::IntAttr(attrs, "table_rows"));
  ASSIGN_OR_RETURN(PositionRows p, PositionRowsOf(attrs, in[0], table_rows));
  return std::vector<TensorSpec>{{Shape{table_rows, p.cols}, in[0].dtype}};
}

absl::StatusOr<std::vector<Value>> GradAdd(Graph& g, const Node& node, absl::Span<const Value> dout,
                                           const std::vector<bool>& needs) {
  std::vector<Value> grads(2);
  if (needs[0]) grads[0] = dout[0];
  if (needs[1]) {
    ASSIGN_OR_RETURN(const int64_t positions, ir::IntAttr(node.attrs, "positions"));
    ASSIGN_OR_RETURN(
        grads[1],
        g.AddOp1(AddPositionsGradOp(), absl::StrCat(node.name, ".table_grad"), {dout[0]},
                 {{"positions", positions}, {"table_rows", g.spec(node.inputs[1]).shape.dim(0)}}));
  }
  return grads;
}

absl::Status CpuAdd(const Node& node, absl::Span<ir::HostTensor* const> in,
                    absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(PositionRows p,
                   PositionRowsOf(node.attrs, in[0]->spec(), in[1]->spec().shape.dim(0)));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    absl::Span<const T> x = in[0]->data<T>(), table = in[1]->data<T>();
    auto y = out[0]->data<T>();
    for (int64_t r = 0; r < p.rows; ++r) {
      for (int64_t c = 0; c < p.cols; ++c) {
        y[r * p.cols + c] = x[r * p.cols + c] + table[(r % p.positions) * p.cols + c];
      }
    }
    return absl::OkStatus();
  });
}

absl::Status CpuGrad(const Node& node, absl::Span<ir::HostTensor* const> in,
                     absl::Span<ir::HostTensor* const> out) {
  const int64_t table_rows = out[0]->spec().shape.dim(0);
  ASSIGN_OR_RETURN(PositionRows p, PositionRowsOf(node.attrs, in[0]->spec(), table_rows));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    absl::Span<const T> dy = in[0]->data<T>();
    auto dtable = out[0]->data<T>();
    for (int64_t i = 0; i < table_rows * p.cols; ++i) {
      const int64_t pos = i / p.cols, c = i % p.cols;
      double sum = 0;
      if (pos < p.positions) {
        for (int64_t r = pos; r < p.rows; r += p.positions) sum += dy[r * p.cols + c];
      }
      dtable[i] = static_cast<T>(sum);
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerAdd(const LoweringContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(const DType dtype, GpuElementType(node, ctx.input_specs));
  ASSIGN_OR_RETURN(PositionRows p,
                   PositionRowsOf(node.attrs, ctx.input_specs[0], ctx.input_specs[1].shape.dim(0)));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.outputs[0]);
  args.Add(static_cast<long long>(p.rows)).Add(static_cast<int>(p.cols));
  args.Add(static_cast<int>(p.positions));
  const int64_t vec = codegen::Vector16Elements(dtype);
  const bool vectors =
      p.cols % vec == 0 && codegen::Aligned16({ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]});
  return NvrtcKernel::Create(
      ctx, node.name, vectors ? codegen::AddPositionsVec(dtype) : codegen::AddPositions(dtype),
      GridFor(vectors ? p.rows * p.cols / vec : p.rows * p.cols, 256, *ctx.device), dim3(256), 0,
      std::move(args));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerGrad(const LoweringContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(const DType dtype, GpuElementType(node, ctx.input_specs));
  const int64_t table_rows = node.outputs[0].shape.dim(0);
  ASSIGN_OR_RETURN(PositionRows p, PositionRowsOf(node.attrs, ctx.input_specs[0], table_rows));
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.outputs[0]);
  args.Add(static_cast<long long>(p.rows)).Add(static_cast<int>(p.cols));
  args.Add(static_cast<int>(p.positions)).Add(static_cast<int>(table_rows));
  const int64_t vec = codegen::Vector16Elements(dtype);
  const bool vectors = p.cols % vec == 0 && codegen::Aligned16({ctx.inputs[0], ctx.outputs[0]});
  return NvrtcKernel::Create(
      ctx, node.name,
      vectors ? codegen::AddPositionsGradVec(dtype) : codegen::AddPositionsGrad(dtype),
      GridFor(vectors ? table_rows * p.cols / vec : table_rows * p.cols, 256, *ctx.device),
      dim3(256), 0, std::move(args));
}

}  // namespace

const ir::OpDef& AddPositionsOp() {
  static const ir::OpDef op{.name = "add_positions",
                            .infer = InferAdd,
                            .grad = GradAdd,
                            .cpu = CpuAdd,
                            .lower = LowerAdd,
                            .low_precision_lowering = true};
  return op;
}
const ir::OpDef& AddPositionsGradOp() {
  static const ir::OpDef op{.name = "add_positions_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferGrad,
                            .cpu = CpuGrad,
                            .lower = LowerGrad,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
