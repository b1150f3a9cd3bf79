// head_loss_chunks: a language model's output layer forward and backward up to its data gradient,
// in row chunks on two streams (written by the fuse pass: FuseOptions::head_loss_chunks).
//
//   (x [R, C], w [V, C], labels [R] int32, dloss []) -> (loss [], dz [R, V], dx [R, C])
//   z = x·wᵀ; loss, dz = softmax_cross_entropy_with_grad(z, labels, dloss); dx = dz·w
//
// Alone, GPT-2's three run one after another on one lane: the product (compute-bound), the loss
// pass over the logits (memory-bound: 1.65 GB read and written at B=16, T=1024) and the data
// gradient. Here the rows go in `chunks` slices: the lane's stream runs every slice's product and
// then every slice's data gradient, and a second stream runs slice c's loss pass as soon as its
// product is done, so that a loss pass overlaps the products of other slices. dz is written over
// the logits (the loss pass reads each row before it writes it) and is an output for the weight
// gradient dzᵀ·x, which stays a node of its own on the weight lane.
//
// Bits: each row's loss and gradient are those of the unfused loss kernel (the rows are
// independent, the mean adds all rows' losses in its fixed order); the slices' products are
// planned for their own shapes, so they may round differently from one product of all rows, but
// give the same bits on every run. The CPU reference is the unfused ops' references in sequence,
// z and dz rounded to their stored type as the unfused nodes store them.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/loss_kernels.h"
#include "src/ir/low_precision.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/loss_checks.h"
#include "src/ops/loss_rows.h"
#include "src/ops/lt_matmul_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/owners.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

absl::StatusOr<int64_t> ChunksOf(const Attrs& attrs) {
  return ir::IntAttr(attrs, kHeadLossChunksAttr);
}

absl::StatusOr<std::vector<TensorSpec>> InferHeadLoss(const Attrs& attrs,
                                                      absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 4));
  const TensorSpec &x = in[0], &w = in[1];
  RETURN_IF_ERROR(CheckRank(x, 2, "x"));
  RETURN_IF_ERROR(CheckRank(w, 2, "w"));
  RETURN_IF_ERROR(CheckFloat(x, "x"));
  if (w.dtype != x.dtype || w.shape.dim(1) != x.shape.dim(1)) {
    return absl::InvalidArgumentError(absl::StrCat("w ", w.ToString(), " must be [classes, ",
                                                   x.shape.dim(1), "] of x's dtype (x ",
                                                   x.ToString(), ")"));
  }
  ASSIGN_OR_RETURN(const int64_t chunks, ChunksOf(attrs));
  const int64_t rows = x.shape.dim(0);
  if (chunks < 1 || chunks > rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunks must be in [1, ", rows, "] (the rows), got ", chunks));
  }
  const TensorSpec logits{Shape{rows, w.shape.dim(0)}, x.dtype};
  const std::vector<TensorSpec> xent_in = {logits, in[2], in[3]};
  ASSIGN_OR_RETURN(std::vector<TensorSpec> xent,
                   SoftmaxCrossEntropyWithGradOp().infer(attrs, xent_in));
  return std::vector<TensorSpec>{xent[0], xent[1], x};
}

// The unfused references in sequence: matmul (transpose_b), the loss with its gradient, matmul.
absl::Status CpuHeadLoss(const Node& node, absl::Span<ir::HostTensor* const> in,
                         absl::Span<ir::HostTensor* const> out) {
  Node product_node;
  product_node.attrs = {{"transpose_b", true}};
  ir::HostTensor logits(out[1]->spec());
  ir::HostTensor* logits_ptr = &logits;
  RETURN_IF_ERROR(MatmulOp().cpu(product_node, in.subspan(0, 2), absl::MakeSpan(&logits_ptr, 1)));
  RETURN_IF_ERROR(ir::RoundToStored(node.outputs[1].dtype, logits));
  Node xent_node;
  xent_node.attrs = node.attrs;
  xent_node.attrs.erase(std::string(kHeadLossChunksAttr));
  ir::HostTensor* xent_in[] = {&logits, in[2], in[3]};
  RETURN_IF_ERROR(
      SoftmaxCrossEntropyWithGradOp().cpu(xent_node, absl::MakeSpan(xent_in), out.subspan(0, 2)));
  RETURN_IF_ERROR(ir::RoundToStored(node.outputs[1].dtype, *out[1]));
  ir::HostTensor* dgrad_in[] = {out[1], in[1]};
  return MatmulOp().cpu(Node(), absl::MakeSpan(dgrad_in), out.subspan(2, 1));
}

// Slice c's rows: [first, first + count).
struct Slice {
  int64_t first, count;
};
std::vector<Slice> Slices(int64_t rows, int64_t chunks) {
  std::vector<Slice> slices;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t first = rows * c / chunks, next = rows * (c + 1) / chunks;
    slices.push_back({first, next - first});
  }
  return slices;
}

class HeadLossKernel : public GpuKernel {
 public:
  struct Parts {
    std::vector<std::unique_ptr<GpuKernel>> products, losses, data_gradients;
    std::unique_ptr<GpuKernel> mean;
    std::optional<runtime::Stream> side;
    std::vector<runtime::Event> made, lost;  // Slice c's logits written; its gradient written.
    std::optional<runtime::Event> forked, joined;
    size_t workspace_bytes = 0;
  };
  HeadLossKernel(std::string node_name, Parts parts)
      : node_name_(std::move(node_name)), p_(std::move(parts)) {}

  absl::Status Launch(cudaStream_t stream) const override {
    const std::string& where = node_name_;
    cudaStream_t side = p_.side->get();
    // The side stream joins the lane's (under capture: the graph's fork).
    CUDA_RETURN_IF_ERROR(cudaEventRecord(p_.forked->get(), stream), where);
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side, p_.forked->get()), where);
    for (size_t c = 0; c < p_.products.size(); ++c) {
      RETURN_IF_ERROR(p_.products[c]->Launch(stream));
      CUDA_RETURN_IF_ERROR(cudaEventRecord(p_.made[c].get(), stream), where);
      CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side, p_.made[c].get()), where);
      RETURN_IF_ERROR(p_.losses[c]->Launch(side));
      CUDA_RETURN_IF_ERROR(cudaEventRecord(p_.lost[c].get(), side), where);
    }
    for (size_t c = 0; c < p_.data_gradients.size(); ++c) {
      CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, p_.lost[c].get()), where);
      RETURN_IF_ERROR(p_.data_gradients[c]->Launch(stream));
    }
    // Every slice's loss pass is done (the last wait above): the mean of all rows.
    RETURN_IF_ERROR(p_.mean->Launch(stream));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(p_.joined->get(), side), where);
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, p_.joined->get()), where);
    return absl::OkStatus();
  }
  std::string Describe() const override {
    return absl::StrCat(p_.products.size(), " slices: ", p_.products.front()->Describe(), " + ",
                        p_.losses.front()->Describe(), " (second stream) + ",
                        p_.data_gradients.front()->Describe(), " + ", p_.mean->Describe());
  }
  std::vector<std::string> GeneratedKernelNames() const override {
    std::vector<std::string> names;
    for (const auto& loss : p_.losses) {
      for (std::string& name : loss->GeneratedKernelNames()) names.push_back(std::move(name));
    }
    for (std::string& name : p_.mean->GeneratedKernelNames()) names.push_back(std::move(name));
    return names;
  }
  size_t WorkspaceBytes() const override { return p_.workspace_bytes; }

 private:
  std::string node_name_;
  Parts p_;
};

// The lane's workspace: the row losses first (256-byte aligned), the products' after them; the
// loss passes on the second stream write only their rows' losses, never the products' part.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerHeadLoss(const LoweringContext& ctx,
                                                         const Node& node) {
  const TensorSpec &x = ctx.input_specs[0], &w = ctx.input_specs[1];
  const int64_t rows = x.shape.dim(0), width = x.shape.dim(1), classes = w.shape.dim(0);
  const int64_t element = DTypeSize(x.dtype);
  const size_t row_bytes = (static_cast<size_t>(rows) * sizeof(float) + 255) / 256 * 256;
  if (ctx.workspace == nullptr || row_bytes > ctx.workspace_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("node '", node.name, "': the row losses of ", rows,
                     " rows need more of the lane's workspace than its ",
                     ctx.workspace == nullptr ? 0 : ctx.workspace_bytes, " bytes"));
  }
  char* const x_at = static_cast<char*>(ctx.inputs[0]);
  char* const dz_at = static_cast<char*>(ctx.outputs[1]);
  char* const dx_at = static_cast<char*>(ctx.outputs[2]);
  void* const row_loss = ctx.workspace;
  LoweringContext product_ctx = ctx;
  product_ctx.workspace = static_cast<char*>(ctx.workspace) + row_bytes;
  product_ctx.workspace_bytes = ctx.workspace_bytes - row_bytes;
  // The loss passes' view of the node: softmax_cross_entropy_with_grad's inputs and outputs.
  LoweringContext loss_ctx = ctx;
  loss_ctx.input_specs = {TensorSpec{Shape{rows, classes}, x.dtype}, ctx.input_specs[2],
                          ctx.input_specs[3]};
  loss_ctx.inputs = {dz_at, ctx.inputs[2], ctx.inputs[3]};
  loss_ctx.outputs = {ctx.outputs[0], dz_at};
  Node loss_node = node;
  loss_node.attrs.erase(std::string(kHeadLossChunksAttr));

  ASSIGN_OR_RETURN(const int64_t chunks, ChunksOf(node.attrs));
  HeadLossKernel::Parts parts;
  size_t product_workspace = 0;
  for (const Slice& s : Slices(rows, chunks)) {
    product_ctx.inputs = {x_at + s.first * width * element, ctx.inputs[1]};
    product_ctx.outputs = {dz_at + s.first * classes * element};
    ASSIGN_OR_RETURN(
        parts.products.emplace_back(),
        LowerLtMatmul(product_ctx, node, {s.count, classes, width, false, true, x.dtype}, {}));
    ASSIGN_OR_RETURN(parts.losses.emplace_back(),
                     LowerXentRowRange(loss_ctx, loss_node, codegen::XentOutputs::kLossAndGradient,
                                       {.first = s.first, .count = s.count, .row_loss = row_loss}));
    product_ctx.inputs = {dz_at + s.first * classes * element, ctx.inputs[1]};
    product_ctx.outputs = {dx_at + s.first * width * element};
    ASSIGN_OR_RETURN(
        parts.data_gradients.emplace_back(),
        LowerLtMatmul(product_ctx, node, {s.count, width, classes, false, false, x.dtype}, {}));
    product_workspace = std::max({product_workspace, parts.products.back()->WorkspaceBytes(),
                                  parts.data_gradients.back()->WorkspaceBytes()});
    ASSIGN_OR_RETURN(runtime::Event made, runtime::Event::Create());
    ASSIGN_OR_RETURN(runtime::Event lost, runtime::Event::Create());
    parts.made.push_back(std::move(made));
    parts.lost.push_back(std::move(lost));
  }
  KernelArgs mean_args;
  mean_args.Add(row_loss).Add(ctx.outputs[0]).Add(static_cast<int>(rows));
  ASSIGN_OR_RETURN(parts.mean,
                   NvrtcKernel::Create(ctx, node.name, codegen::XentMean(), dim3(1),
                                       dim3(codegen::kXentMeanThreads), 0, std::move(mean_args)));
  // The loss passes' blocks go first where both streams have blocks waiting: a slice's product
  // then never holds back the pass that the next data gradient waits for.
  ASSIGN_OR_RETURN(parts.side, runtime::Stream::CreateHighestPriority());
  ASSIGN_OR_RETURN(parts.forked, runtime::Event::Create());
  ASSIGN_OR_RETURN(parts.joined, runtime::Event::Create());
  parts.workspace_bytes = row_bytes + product_workspace;
  return std::unique_ptr<GpuKernel>(new HeadLossKernel(node.name, std::move(parts)));
}

}  // namespace

const ir::OpDef& HeadLossChunksOp() {
  static const ir::OpDef op{.name = "head_loss_chunks",
                            .kind = ir::OpKind::kReduction,
                            .infer = InferHeadLoss,
                            .cpu = CpuHeadLoss,
                            .lower = LowerHeadLoss,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
