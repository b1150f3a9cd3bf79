#include "src/ops/batch_norm_nhwc.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/batch_norm_kernels.h"
#include "src/codegen/element_type.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

// The launches of one batch norm, in order, under one description.
class BatchNormLaunches : public KernelSequence {
 public:
  BatchNormLaunches(std::string describe, std::vector<std::unique_ptr<GpuKernel>> parts,
                    size_t scratch_bytes)  // In the lane's workspace.
      : KernelSequence(std::move(parts), scratch_bytes), describe_(std::move(describe)) {}
  std::string Describe() const override { return describe_; }

 private:
  std::string describe_;
};

// What one lowering asks of Plan: its op (for messages), the element type of its [rows, channels]
// arrays, sizes, and whether it needs the scratch in the lane's workspace.
struct Request {
  absl::string_view op;
  DType dtype;
  int64_t rows, min_rows, channels;
  int64_t plane = 0;  // As the lowering's.
  bool needs_scratch = true;
};

// Four channels per thread need channels-last data, C % 4 == 0 (then every row starts 4 elements
// apart) and every row-walked tensor aligned for Load4 and Store4: 16 bytes for float32, 8 for
// bfloat16. Otherwise one channel per thread.
int VectorWidth(int64_t channels, int64_t plane, DType dtype,
                std::initializer_list<const void*> tensors) {
  if (plane != 0 || channels % 4 != 0) return 1;
  const uintptr_t alignment = 4 * codegen::ElementBytes(dtype);
  for (const void* p : tensors) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % alignment != 0) return 1;
  }
  return 4;
}

absl::string_view LayoutWord(const Request& r) { return r.plane == 0 ? "nhwc" : "nchw"; }

// The checks every lowering shares, then the tiling; its scratch must fit in the lane's
// workspace when the request needs it.
absl::StatusOr<codegen::BatchNormTiling> Plan(const LoweringContext& ctx, const std::string& where,
                                              const Request& r, int vec,
                                              std::initializer_list<const void*> required) {
  if (!codegen::IsKernelElementType(r.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", r.op, " ", LayoutWord(r),
                                                   " reads float32, bfloat16 or float16 data, got ",
                                                   DTypeName(r.dtype)));
  }
  if (r.rows < r.min_rows || r.channels < 1 || r.channels > INT_MAX || r.plane < 0 ||
      (r.plane > 0 && r.rows % r.plane != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", r.op, " ", LayoutWord(r), " needs rows >= ", r.min_rows,
        ", 1 <= channels <= ", INT_MAX, " and rows a multiple of the plane, got rows=", r.rows,
        " c=", r.channels, " plane=", r.plane));
  }
  for (const void* p : required) {
    if (p == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", r.op, " ", LayoutWord(r),
                                                     " is missing a required device address"));
    }
  }
  const codegen::BatchNormTiling t =
      codegen::BatchNormTilingFor(r.rows, r.channels, vec, /*planar=*/r.plane != 0);
  if (r.needs_scratch &&
      (ctx.workspace == nullptr || static_cast<size_t>(t.scratch_bytes) > ctx.workspace_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(where, ": ", r.op, " ", LayoutWord(r), " rows=", r.rows, " c=", r.channels,
                     " needs ", t.scratch_bytes, " bytes of scratch (", t.chunks,
                     " chunks) in the lane's workspace, which has ",
                     ctx.workspace == nullptr ? 0 : ctx.workspace_bytes));
  }
  if (ctx.kernels == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": ", r.op, " ", LayoutWord(r), " needs a kernel store, and the plan has none"));
  }
  return t;
}

// The lane workspace as the launches share it: per-chunk double partial sums, then the
// per-channel coefficients the finalize leaves for the apply kernel, then (where the statistics
// kernel finalizes) its lanes' sums. `tickets`: the lane's, where the statistics kernel finalizes
// (options.batch_norm_finalize_in_stats, kBatchNormTileTickets words a column tile, and room for
// the lanes' sums); else null, and the finalize kernel runs.
struct Scratch {
  double* partial;
  float* coef;
  double* lane_sums;
  unsigned* tickets;
  size_t bytes;
};
Scratch ScratchOf(const LoweringContext& ctx, const codegen::BatchNormTiling& t, int64_t channels) {
  char* base = static_cast<char*>(ctx.workspace);
  Scratch s{
      reinterpret_cast<double*>(base),
      reinterpret_cast<float*>(base + codegen::BatchNormCoefficientOffset(t.chunks, channels)),
      nullptr, nullptr, static_cast<size_t>(t.scratch_bytes)};
  const int64_t bytes = codegen::BatchNormFinalizeScratchBytes(t.chunks, channels);
  if (ctx.options.batch_norm_finalize_in_stats && ctx.tickets != nullptr &&
      t.column_tiles * codegen::kBatchNormTileTickets <= ctx.ticket_words &&
      static_cast<size_t>(bytes) <= ctx.workspace_bytes) {
    s.lane_sums =
        reinterpret_cast<double*>(base + codegen::BatchNormLaneSumsOffset(t.chunks, channels));
    s.tickets = ctx.tickets;
    s.bytes = static_cast<size_t>(bytes);
  }
  return s;
}

dim3 TiledGrid(const codegen::BatchNormTiling& t) {
  return dim3(static_cast<unsigned>(t.column_tiles), static_cast<unsigned>(t.chunks));
}
dim3 TiledBlock(const codegen::BatchNormTiling& t) { return dim3(t.block_x, t.block_y); }
dim3 ChannelGrid(int64_t channels) { return dim3(static_cast<unsigned>((channels + 31) / 32)); }

// "nvrtc batch_norm_train nhwc rows=.. c=.. vec=4 chunks=.. (2 kernels)" ("nchw" for NCHW data);
// bfloat16 lowerings say " bf16" after the layout (float32 ones read as they did before bfloat16
// existed).
std::string Describe(const Request& r, const codegen::BatchNormTiling& t, absl::string_view extras,
                     int kernels) {
  return absl::StrCat("nvrtc ", r.op, " ", LayoutWord(r),
                      r.dtype == DType::kFloat32 ? "" : absl::StrCat(" ", DTypeName(r.dtype)),
                      " rows=", r.rows, " c=", r.channels, " vec=", t.vec, " chunks=", t.chunks,
                      extras, " (", kernels, kernels == 1 ? " kernel)" : " kernels)");
}

// Keep bits: whole 32-bit words of the mask per row (channels % 16 == 0) of channels-last data,
// after a ReLU.
bool BitsFit(int64_t plane, int64_t channels, bool relu) {
  return plane == 0 && channels % 16 == 0 && relu;
}

}  // namespace

absl::StatusOr<DType> NhwcDataType(const Node& node, absl::Span<const TensorSpec> inputs,
                                   absl::Span<const int> data_inputs,
                                   absl::Span<const int> other_inputs) {
  const DType data = inputs[*data_inputs.begin()].dtype;
  for (int i = 0; i < static_cast<int>(inputs.size()); ++i) {
    if (std::find(other_inputs.begin(), other_inputs.end(), i) != other_inputs.end()) continue;
    const bool is_data = std::find(data_inputs.begin(), data_inputs.end(), i) != data_inputs.end();
    const bool fits = is_data ? codegen::IsKernelElementType(data) && inputs[i].dtype == data
                              : inputs[i].dtype == DType::kFloat32;
    if (!fits) {
      return absl::UnimplementedError(absl::StrCat(
          "node '", node.name, "': ", node.op_name(),
          " runs on the GPU with float32, bfloat16 or float16 data and float32 per-channel "
          "tensors, got ",
          inputs[i].ToString(), " for input ", i));
    }
  }
  return data;
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerNhwcBatchNormTrain(const LoweringContext& ctx,
                                                                   const std::string& node_name,
                                                                   const NhwcBatchNormForward& a) {
  const std::string where = absl::StrCat("node '", node_name, "'");
  const Request request{"batch_norm_train", a.dtype, a.rows, 2, a.channels, a.plane};
  const int vec = VectorWidth(a.channels, a.plane, a.dtype, {a.x, a.residual, a.y});
  ASSIGN_OR_RETURN(codegen::BatchNormTiling t,
                   Plan(ctx, where, request, vec,
                        {a.x, a.gamma, a.beta, a.running_mean, a.running_var, a.y, a.saved_mean,
                         a.saved_invstd}));
  if (a.keep_bits != nullptr && !BitsFit(a.plane, a.channels, a.relu)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where,
        ": batch_norm_train writes ReLU keep bits for channels-last data with a ReLU and "
        "channels a multiple of 16, got c=",
        a.channels, a.plane == 0 ? "" : " (NCHW)", a.relu ? "" : " without a ReLU"));
  }
  const Scratch scratch = ScratchOf(ctx, t, a.channels);
  double* partial = scratch.partial;
  float* coef = scratch.coef;
  const int channels = static_cast<int>(a.channels);
  const long long rows = a.rows, rows_per_chunk = t.rows_per_chunk;
  std::vector<std::unique_ptr<GpuKernel>> parts;

  // The finalize's arguments from epsilon on, which the statistics kernel takes too.
  auto add_finish = [&](KernelArgs& args) {
    args.Add(a.epsilon)
        .Add(a.momentum)
        .Add(a.gamma)
        .Add(a.running_mean)
        .Add(a.running_var)
        .Add(a.saved_mean)
        .Add(a.saved_invstd)
        .Add(coef);
  };
  unsigned* tickets = scratch.tickets;
  KernelArgs stats;
  stats.Add(a.x).Add(partial).Add(rows).Add(channels).Add(rows_per_chunk);
  if (tickets != nullptr) {
    stats.Add(tickets).Add(scratch.lane_sums);
    add_finish(stats);
  }
  ASSIGN_OR_RETURN(
      parts.emplace_back(),
      NvrtcKernel::Create(ctx, node_name,
                          codegen::BatchNormStats(vec, a.dtype, a.plane, tickets != nullptr),
                          TiledGrid(t), TiledBlock(t), 0, std::move(stats)));
  if (tickets == nullptr) {
    KernelArgs finalize;
    finalize.Add(static_cast<const double*>(partial))
        .Add(static_cast<int>(t.chunks))
        .Add(channels)
        .Add(rows);
    add_finish(finalize);
    ASSIGN_OR_RETURN(
        parts.emplace_back(),
        NvrtcKernel::Create(ctx, node_name, codegen::BatchNormFinalize(), ChannelGrid(a.channels),
                            dim3(32, 32), 0, std::move(finalize)));
  }
  KernelArgs apply;
  apply.Add(a.x)
      .Add(a.residual)
      .Add(static_cast<const float*>(a.saved_mean))
      .Add(static_cast<const float*>(coef))
      .Add(a.beta)
      .Add(a.y)
      .Add(rows)
      .Add(channels)
      .Add(rows_per_chunk)
      .Add(a.relu ? 1 : 0)
      .Add(a.keep_bits);
  ASSIGN_OR_RETURN(
      parts.emplace_back(),
      NvrtcKernel::Create(ctx, node_name,
                          codegen::BatchNormApply(vec, a.dtype, a.plane, a.keep_bits != nullptr),
                          TiledGrid(t), TiledBlock(t), 0, std::move(apply)));
  const std::string extras =
      absl::StrCat(a.residual != nullptr ? " +residual" : "", a.relu ? " +relu" : "",
                   a.keep_bits != nullptr ? " +keep_bits" : "");
  const int kernels = static_cast<int>(parts.size());
  return std::unique_ptr<GpuKernel>(new BatchNormLaunches(Describe(request, t, extras, kernels),
                                                          std::move(parts), scratch.bytes));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerNhwcBatchNormGrad(const LoweringContext& ctx,
                                                                  const std::string& node_name,
                                                                  const NhwcBatchNormBackward& a) {
  const std::string where = absl::StrCat("node '", node_name, "'");
  const Request request{"batch_norm_grad", a.dtype, a.rows, 1, a.channels, a.plane};
  const int vec = VectorWidth(a.channels, a.plane, a.dtype,
                              {a.dy, a.act_out, a.x, a.dx, a.masked_dy, a.dy_addend});
  ASSIGN_OR_RETURN(codegen::BatchNormTiling t, Plan(ctx, where, request, vec,
                                                    {a.dy, a.x, a.gamma, a.saved_mean,
                                                     a.saved_invstd, a.dx, a.dgamma, a.dbeta}));
  if ((a.relu_beta != nullptr) + (a.act_out != nullptr) + (a.act_bits != nullptr) > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": batch_norm_grad takes the ReLU mask from one of act_out, x or keep bits"));
  }
  if (a.act_bits != nullptr && !BitsFit(a.plane, a.channels, true)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where,
                     ": batch_norm_grad reads ReLU keep bits for channels-last data with "
                     "channels a multiple of 16, got c=",
                     a.channels, a.plane == 0 ? "" : " (NCHW)"));
  }
  if (a.dy_addend != nullptr && a.masked_dy == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(where,
                     ": batch_norm_grad sums dy's two summands only where it writes the masked "
                     "gradient, which its apply pass then reads alone"));
  }
  const bool from_x = a.relu_beta != nullptr;
  const Scratch scratch = ScratchOf(ctx, t, a.channels);
  double* partial = scratch.partial;
  float* coef = scratch.coef;
  const int channels = static_cast<int>(a.channels);
  const long long rows = a.rows, rows_per_chunk = t.rows_per_chunk;
  std::vector<std::unique_ptr<GpuKernel>> parts;

  // Where the masked gradient g is an output, the statistics pass writes it and the apply pass
  // reads g alone: one read of the mask's source and of dy fewer, the same bits.
  const bool write_masked = a.masked_dy != nullptr;
  unsigned* tickets = scratch.tickets;
  KernelArgs stats;
  stats.Add(a.dy)
      .Add(a.act_out)
      .Add(a.x)
      .Add(a.saved_mean)
      .Add(a.gamma)
      .Add(a.saved_invstd)
      .Add(a.relu_beta)
      .Add(partial)
      .Add(a.masked_dy)
      .Add(rows)
      .Add(channels)
      .Add(rows_per_chunk)
      .Add(a.act_bits)
      .Add(a.dy_addend);
  if (tickets != nullptr) {
    stats.Add(tickets).Add(scratch.lane_sums).Add(a.dgamma).Add(a.dbeta).Add(coef);
  }
  ASSIGN_OR_RETURN(
      parts.emplace_back(),
      NvrtcKernel::Create(ctx, node_name,
                          codegen::BatchNormGradStats(vec, a.dtype, a.plane,
                                                      {.mask_from_x = from_x,
                                                       .write_masked = write_masked,
                                                       .mask_from_bits = a.act_bits != nullptr,
                                                       .finalize = tickets != nullptr,
                                                       .dy_addend = a.dy_addend != nullptr}),
                          TiledGrid(t), TiledBlock(t), 0, std::move(stats)));
  if (tickets == nullptr) {
    KernelArgs finalize;
    finalize.Add(static_cast<const double*>(partial))
        .Add(static_cast<int>(t.chunks))
        .Add(channels)
        .Add(rows)
        .Add(a.gamma)
        .Add(a.saved_invstd)
        .Add(a.dgamma)
        .Add(a.dbeta)
        .Add(coef);
    ASSIGN_OR_RETURN(
        parts.emplace_back(),
        NvrtcKernel::Create(ctx, node_name, codegen::BatchNormGradFinalize(),
                            ChannelGrid(a.channels), dim3(32, 32), 0, std::move(finalize)));
  }
  KernelArgs apply;
  apply.Add(write_masked ? a.masked_dy : a.dy)
      .Add(write_masked ? nullptr : a.act_out)
      .Add(a.x)
      .Add(a.saved_mean)
      .Add(static_cast<const float*>(coef))
      .Add(a.gamma)
      .Add(a.saved_invstd)
      .Add(write_masked ? nullptr : a.relu_beta)
      .Add(a.dx)
      .Add(rows)
      .Add(channels)
      .Add(rows_per_chunk)
      .Add(write_masked ? nullptr : a.act_bits);
  const bool apply_from_x = from_x && !write_masked;
  const bool apply_from_bits = a.act_bits != nullptr && !write_masked;
  ASSIGN_OR_RETURN(parts.emplace_back(),
                   NvrtcKernel::Create(ctx, node_name,
                                       codegen::BatchNormGradApply(vec, a.dtype, a.plane,
                                                                   apply_from_x, apply_from_bits),
                                       TiledGrid(t), TiledBlock(t), 0, std::move(apply)));
  const std::string extras = absl::StrCat(a.act_out != nullptr     ? " +relu_mask"
                                          : a.relu_beta != nullptr ? " +relu_mask_from_x"
                                          : a.act_bits != nullptr  ? " +relu_mask_bits"
                                                                   : "",
                                          a.dy_addend != nullptr ? " +dy_sum" : "",
                                          a.masked_dy != nullptr ? " +masked_dy" : "");
  const int kernels = static_cast<int>(parts.size());
  return std::unique_ptr<GpuKernel>(new BatchNormLaunches(Describe(request, t, extras, kernels),
                                                          std::move(parts), scratch.bytes));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerNhwcBatchNormRecompute(
    const LoweringContext& ctx, const std::string& node_name, const NhwcBatchNormRecompute& a) {
  const std::string where = absl::StrCat("node '", node_name, "'");
  const Request request{.op = "batch_norm_apply",
                        .dtype = a.dtype,
                        .rows = a.rows,
                        .min_rows = 1,
                        .channels = a.channels,
                        .plane = a.plane,
                        .needs_scratch = false};
  const int vec = VectorWidth(a.channels, a.plane, a.dtype, {a.x, a.residual, a.y});
  ASSIGN_OR_RETURN(
      codegen::BatchNormTiling t,
      Plan(ctx, where, request, vec, {a.x, a.gamma, a.beta, a.saved_mean, a.saved_invstd, a.y}));
  KernelArgs args;
  args.Add(a.x)
      .Add(a.residual)
      .Add(a.gamma)
      .Add(a.beta)
      .Add(a.saved_mean)
      .Add(a.saved_invstd)
      .Add(a.y)
      .Add(static_cast<long long>(a.rows))
      .Add(static_cast<int>(a.channels))
      .Add(static_cast<long long>(t.rows_per_chunk))
      .Add(a.relu ? 1 : 0);
  std::vector<std::unique_ptr<GpuKernel>> parts;
  ASSIGN_OR_RETURN(
      parts.emplace_back(),
      NvrtcKernel::Create(ctx, node_name, codegen::BatchNormApplySaved(vec, a.dtype, a.plane),
                          TiledGrid(t), TiledBlock(t), 0, std::move(args)));
  const std::string extras =
      absl::StrCat(a.residual != nullptr ? " +residual" : "", a.relu ? " +relu" : "");
  return std::unique_ptr<GpuKernel>(
      new BatchNormLaunches(Describe(request, t, extras, 1), std::move(parts), 0));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerNhwcBatchNormChain(const LoweringContext& ctx,
                                                                   const std::string& node_name,
                                                                   const NhwcBatchNormChain& a) {
  const std::string where = absl::StrCat("node '", node_name, "'");
  const int64_t steps = static_cast<int64_t>(a.steps.size());
  if (steps < 2 || steps > codegen::kBatchNormChainMaxSteps) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": batch_norm_apply_chain runs 2 to ",
                                                   codegen::kBatchNormChainMaxSteps,
                                                   " steps in one kernel, got ", steps));
  }
  const Request request{"batch_norm_apply_chain", a.dtype, a.rows, 1, a.channels, a.plane,
                        /*needs_scratch=*/false};
  // The kernel's by-value parameter, laid out as its BnChain (six addresses per step).
  static_assert(sizeof(NhwcBatchNormChainStep) == 6 * sizeof(void*));
  struct Chain {
    NhwcBatchNormChainStep step[codegen::kBatchNormChainMaxSteps];
    int steps;
  } chain{};
  chain.steps = static_cast<int>(steps);
  int vec = 4;
  for (int64_t s = 0; s < steps; ++s) {
    const NhwcBatchNormChainStep& in = a.steps[s];
    if (in.x == nullptr || in.gamma == nullptr || in.beta == nullptr || in.saved_mean == nullptr ||
        in.saved_invstd == nullptr || (s > 0 && in.y == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": batch_norm_apply_chain step ", s, " misses a device address"));
    }
    chain.step[s] = in;
    vec = std::min(vec, VectorWidth(a.channels, a.plane, a.dtype, {in.x, in.y}));
  }
  ASSIGN_OR_RETURN(codegen::BatchNormTiling t, Plan(ctx, where, request, vec, {}));
  KernelArgs args;
  args.AddBytes(&chain, sizeof(chain))
      .Add(static_cast<long long>(a.rows))
      .Add(static_cast<int>(a.channels))
      .Add(static_cast<long long>(t.rows_per_chunk));
  std::vector<std::unique_ptr<GpuKernel>> parts;
  ASSIGN_OR_RETURN(
      parts.emplace_back(),
      NvrtcKernel::Create(ctx, node_name, codegen::BatchNormApplyChain(vec, a.dtype, a.plane),
                          TiledGrid(t), TiledBlock(t), 0, std::move(args)));
  return std::unique_ptr<GpuKernel>(new BatchNormLaunches(
      Describe(request, t, absl::StrCat(" steps=", steps), 1), std::move(parts), 0));
}

}  // namespace reprise::ops
