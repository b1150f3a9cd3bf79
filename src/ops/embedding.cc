// embedding and embedding_grad: a gather of table rows by int32 ids and its deterministic
// scatter-add (src/codegen/embedding_kernels.h), with CPU references that refuse ids outside the
// table.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/element_type.h"
#include "src/codegen/embedding_kernels.h"
#include "src/codegen/vector16.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/ops/transformer_ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

// ids' shape with C appended.
Shape RowsShape(const Shape& ids, int64_t cols) {
  std::vector<int64_t> dims = ids.dims();
  dims.push_back(cols);
  return Shape(std::move(dims));
}

absl::Status CheckIds(const TensorSpec& ids) {
  RETURN_IF_ERROR(CheckDType(ids, DType::kInt32, "ids"));
  if (ids.NumElements() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("ids ", ids.ToString(), " is empty"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorSpec>> InferEmbedding(const Attrs&,
                                                       absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  RETURN_IF_ERROR(CheckIds(in[0]));
  RETURN_IF_ERROR(CheckRank(in[1], 2, "table"));
  RETURN_IF_ERROR(CheckFloat(in[1], "table"));
  if (in[1].NumElements() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("table ", in[1].ToString(), " is empty"));
  }
  return std::vector<TensorSpec>{{RowsShape(in[0].shape, in[1].shape.dim(1)), in[1].dtype}};
}

absl::StatusOr<int64_t> VocabOf(const Attrs& attrs) {
  ASSIGN_OR_RETURN(const int64_t vocab, ir::IntAttr(attrs, "vocab"));
  if (vocab <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("vocab must be positive, got ", vocab));
  }
  return vocab;
}

absl::StatusOr<std::vector<TensorSpec>> InferEmbeddingGrad(const Attrs& attrs,
                                                           absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 2));
  ASSIGN_OR_RETURN(const int64_t vocab, VocabOf(attrs));
  RETURN_IF_ERROR(CheckFloat(in[0], "dy"));
  RETURN_IF_ERROR(CheckIds(in[1]));
  const int rank = in[0].shape.rank();
  if (rank < 1 || !(RowsShape(in[1].shape, in[0].shape.dim(rank - 1)) == in[0].shape)) {
    return absl::InvalidArgumentError(absl::StrCat("dy ", in[0].ToString(),
                                                   " must be ids' shape and one more dimension, "
                                                   "ids ",
                                                   in[1].ToString()));
  }
  return std::vector<TensorSpec>{{Shape{vocab, in[0].shape.dim(rank - 1)}, in[0].dtype}};
}

absl::StatusOr<std::vector<TensorSpec>> InferEmbeddingGradAdd(const Attrs& attrs,
                                                              absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 3));
  ASSIGN_OR_RETURN(std::vector<TensorSpec> out, InferEmbeddingGrad(attrs, in.subspan(0, 2)));
  const TensorSpec& base = in[2];
  if (base.dtype != out[0].dtype || base.shape.rank() != 2 ||
      base.shape.dim(1) != out[0].shape.dim(1) || base.shape.dim(0) < out[0].shape.dim(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("base ", base.ToString(), " must be [rows >= ", out[0].shape.dim(0), ", ",
                     out[0].shape.dim(1), "] of the gradient's dtype ", DTypeName(out[0].dtype)));
  }
  return out;
}

absl::StatusOr<std::vector<Value>> GradEmbedding(Graph& g, const Node& node,
                                                 absl::Span<const Value> dout,
                                                 const std::vector<bool>& needs) {
  std::vector<Value> grads(2);  // The ids are integers: none for them.
  if (needs[1]) {
    const TensorSpec& table = g.spec(node.inputs[1]);
    ASSIGN_OR_RETURN(grads[1],
                     g.AddOp1(EmbeddingGradOp(), absl::StrCat(node.name, ".grad"),
                              {dout[0], node.inputs[0]}, {{"vocab", table.shape.dim(0)}}));
  }
  return grads;
}

// InvalidArgument naming the first id outside [0, vocab), or OK.
absl::Status CheckIdRange(absl::Span<const int32_t> ids, int64_t vocab) {
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] < 0 || ids[t] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("id ", ids[t], " at index ", t, " is outside [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CpuEmbedding(const Node&, absl::Span<ir::HostTensor* const> in,
                          absl::Span<ir::HostTensor* const> out) {
  absl::Span<const int32_t> ids = std::as_const(*in[0]).data<int32_t>();
  const int64_t vocab = in[1]->spec().shape.dim(0), cols = in[1]->spec().shape.dim(1);
  RETURN_IF_ERROR(CheckIdRange(ids, vocab));
  return DispatchFloat(in[1]->dtype(), [&]<typename T>() {
    absl::Span<const T> table = in[1]->data<T>();
    auto y = out[0]->data<T>();
    for (size_t t = 0; t < ids.size(); ++t) {
      std::copy_n(table.data() + ids[t] * cols, cols, y.data() + t * cols);
    }
    return absl::OkStatus();
  });
}

absl::Status CpuEmbeddingGrad(const Node& node, absl::Span<ir::HostTensor* const> in,
                              absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(const int64_t vocab, VocabOf(node.attrs));
  absl::Span<const int32_t> ids = std::as_const(*in[1]).data<int32_t>();
  RETURN_IF_ERROR(CheckIdRange(ids, vocab));
  const int64_t cols = out[0]->spec().shape.dim(1);
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    absl::Span<const T> dy = in[0]->data<T>();
    auto dtable = out[0]->data<T>();
    std::vector<double> sum(dtable.size(), 0.0);  // Rounded once, after every token's share.
    for (size_t t = 0; t < ids.size(); ++t) {
      for (int64_t c = 0; c < cols; ++c) sum[ids[t] * cols + c] += dy[t * cols + c];
    }
    for (size_t i = 0; i < sum.size(); ++i) dtable[i] = static_cast<T>(sum[i]);
    return absl::OkStatus();
  });
}

// embedding_grad's reference, then add's of its result and the base's first vocab rows.
absl::Status CpuEmbeddingGradAdd(const Node& node, absl::Span<ir::HostTensor* const> in,
                                 absl::Span<ir::HostTensor* const> out) {
  const TensorSpec spec = out[0]->spec();
  ir::HostTensor grad(spec), base(spec);
  std::vector<ir::HostTensor*> grad_out = {&grad};
  RETURN_IF_ERROR(CpuEmbeddingGrad(node, in.subspan(0, 2), grad_out));
  std::memcpy(base.raw(), in[2]->raw(), spec.bytes());  // Row-major: the first vocab rows.
  std::vector<ir::HostTensor*> add_in = {&grad, &base};
  const Node stub;
  return AddOp().cpu(stub, add_in, out);
}

// Float32 or 16-bit `data` tensors and int32 ids, as the kernels read them.
absl::StatusOr<DType> KernelType(const Node& node, const TensorSpec& data, const TensorSpec& ids) {
  if (!codegen::IsKernelElementType(data.dtype) || ids.dtype != DType::kInt32) {
    return absl::UnimplementedError(
        absl::StrCat("node '", node.name, "': ", node.op_name(),
                     " runs on the GPU with float32, bfloat16 or float16 rows and int32 ids, got ",
                     data.ToString(), " and ids ", ids.ToString()));
  }
  return data.dtype;
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerEmbedding(const LoweringContext& ctx,
                                                          const Node& node) {
  const TensorSpec& table = ctx.input_specs[1];
  ASSIGN_OR_RETURN(const DType dtype, KernelType(node, table, ctx.input_specs[0]));
  const int64_t tokens = ctx.input_specs[0].NumElements(), cols = table.shape.dim(1);
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.outputs[0]);
  args.Add(static_cast<long long>(tokens)).Add(static_cast<int>(cols));
  args.Add(static_cast<int>(table.shape.dim(0)));
  // A row's 16-byte vectors a thread where the width and the addresses allow.
  const int64_t vec = codegen::Vector16Elements(dtype);
  const bool vectors = cols % vec == 0 && codegen::Aligned16({ctx.inputs[1], ctx.outputs[0]});
  return NvrtcKernel::Create(
      ctx, node.name,
      vectors ? codegen::EmbeddingForwardVec(dtype) : codegen::EmbeddingForward(dtype),
      GridFor(vectors ? tokens * cols / vec : tokens * cols, 256, *ctx.device), dim3(256), 0,
      std::move(args));
}

// Where embedding_grad's sum goes: a table of its own (zeros where no token names a row), that
// plus a base's first rows, or the base itself, only the rows tokens name.
enum class GradTable { kAlone, kAddBase, kOverBase };

// Two launches: the chunk sort into the lane's workspace, then the sums: one warp per vocabulary
// row (kAlone, kAddBase), or one per sorted token, summing the rows tokens name (kOverBase).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerEmbeddingGradInto(const LoweringContext& ctx,
                                                                  const Node& node,
                                                                  GradTable table) {
  const void* base = table == GradTable::kAlone ? nullptr : ctx.inputs[2];
  if (table == GradTable::kOverBase && ctx.outputs[0] != ctx.inputs[2]) {
    return absl::FailedPreconditionError(
        absl::StrCat("node '", node.name, "': ", node.op_name(),
                     " writes its gradient over its base, but the plan placed them apart"));
  }
  ASSIGN_OR_RETURN(const DType dtype, KernelType(node, ctx.input_specs[0], ctx.input_specs[1]));
  ASSIGN_OR_RETURN(const int64_t vocab, VocabOf(node.attrs));
  const int64_t tokens = ctx.input_specs[1].NumElements();
  const int64_t cols = node.outputs[0].shape.dim(1);
  const int64_t chunks = (tokens + codegen::kEmbeddingChunk - 1) / codegen::kEmbeddingChunk;
  const int64_t key_bytes = chunks * codegen::kEmbeddingChunk * 4;
  constexpr int64_t kSharedLimit = 48 * 1024;
  const int64_t shared_bytes = codegen::EmbeddingGradSharedBytes(chunks);
  if (vocab > codegen::kEmbeddingMaxVocab || shared_bytes > kSharedLimit) {
    const int64_t most_chunks = kSharedLimit / codegen::EmbeddingGradSharedBytes(1);
    return absl::UnimplementedError(absl::StrCat(
        "node '", node.name, "': the GPU embedding gradient takes at most ",
        codegen::kEmbeddingMaxVocab, " table rows and ", most_chunks * codegen::kEmbeddingChunk,
        " tokens, got ", vocab, " and ", tokens));
  }
  if (ctx.workspace == nullptr || static_cast<size_t>(key_bytes) > ctx.workspace_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("node '", node.name, "': embedding_grad over ", tokens, " tokens needs ",
                     key_bytes, " bytes of scratch in the lane's workspace, which has ",
                     ctx.workspace == nullptr ? 0 : ctx.workspace_bytes));
  }
  if (ctx.kernels == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node '", node.name, "': embedding_grad needs a kernel store, and the plan has none"));
  }
  std::vector<std::unique_ptr<GpuKernel>> kernels;
  KernelArgs sort_args;
  sort_args.Add(ctx.inputs[1]).Add(ctx.workspace);
  sort_args.Add(static_cast<long long>(tokens)).Add(static_cast<int>(vocab));
  ASSIGN_OR_RETURN(kernels.emplace_back(),
                   NvrtcKernel::Create(ctx, node.name, codegen::EmbeddingSortChunks(),
                                       dim3(static_cast<unsigned>(chunks)),
                                       dim3(codegen::kEmbeddingChunk), 0, std::move(sort_args)));
  const uintptr_t alignment = 4 * codegen::ElementBytes(dtype);
  const bool vector = cols % 4 == 0 &&
                      reinterpret_cast<uintptr_t>(ctx.inputs[0]) % alignment == 0 &&
                      reinterpret_cast<uintptr_t>(base) % alignment == 0 &&
                      reinterpret_cast<uintptr_t>(ctx.outputs[0]) % alignment == 0;
  // Warps: one per vocabulary row, or (over the base) one per key slot of the sorted chunks.
  const bool over = table == GradTable::kOverBase;
  const int64_t warps = over ? chunks * codegen::kEmbeddingChunk : vocab;
  KernelArgs grad_args;
  grad_args.Add(ctx.workspace).Add(ctx.inputs[0]);
  if (!over) grad_args.Add(base);
  grad_args.Add(ctx.outputs[0]).Add(static_cast<int>(chunks)).Add(static_cast<int>(cols));
  if (!over) grad_args.Add(static_cast<int>(vocab));
  grad_args.Add(vector ? 1 : 0);
  constexpr int64_t kRows = codegen::kEmbeddingGradRowsPerBlock;
  ASSIGN_OR_RETURN(kernels.emplace_back(),
                   NvrtcKernel::Create(
                       ctx, node.name,
                       over ? codegen::EmbeddingGradInPlace(dtype) : codegen::EmbeddingGrad(dtype),
                       dim3(static_cast<unsigned>((warps + kRows - 1) / kRows)),
                       dim3(static_cast<unsigned>(32 * kRows)), static_cast<unsigned>(shared_bytes),
                       std::move(grad_args)));
  return std::unique_ptr<GpuKernel>(
      new KernelSequence(std::move(kernels), static_cast<size_t>(key_bytes)));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerEmbeddingGrad(const LoweringContext& ctx,
                                                              const Node& node) {
  return LowerEmbeddingGradInto(ctx, node, GradTable::kAlone);
}

// The base's dtype and width are dy's (InferEmbeddingGradAdd).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerEmbeddingGradAdd(const LoweringContext& ctx,
                                                                 const Node& node) {
  return LowerEmbeddingGradInto(ctx, node, GradTable::kAddBase);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerEmbeddingGradAccumulate(const LoweringContext& ctx,
                                                                        const Node& node) {
  return LowerEmbeddingGradInto(ctx, node, GradTable::kOverBase);
}

}  // namespace

const ir::OpDef& EmbeddingOp() {
  static const ir::OpDef op{.name = "embedding",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferEmbedding,
                            .grad = GradEmbedding,
                            .cpu = CpuEmbedding,
                            .lower = LowerEmbedding,
                            .low_precision_lowering = true};
  return op;
}
const ir::OpDef& EmbeddingGradOp() {
  static const ir::OpDef op{.name = "embedding_grad",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferEmbeddingGrad,
                            .cpu = CpuEmbeddingGrad,
                            .lower = LowerEmbeddingGrad,
                            .low_precision_lowering = true};
  return op;
}
const ir::OpDef& EmbeddingGradAddOp() {
  static const ir::OpDef op{.name = "embedding_grad_add",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferEmbeddingGradAdd,
                            .cpu = CpuEmbeddingGradAdd,
                            .lower = LowerEmbeddingGradAdd,
                            .low_precision_lowering = true};
  return op;
}
const ir::OpDef& EmbeddingGradAccumulateOp() {
  static const ir::OpDef op{.name = "embedding_grad_accumulate",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferEmbeddingGradAdd,
                            .cpu = CpuEmbeddingGradAdd,
                            .lower = LowerEmbeddingGradAccumulate,
                            .output_overwrites_input = 2,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
