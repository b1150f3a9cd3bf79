#include "src/ops/batch_norm_nhwc.h"

#include <climits>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/batch_norm_kernels.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

// The launches of one batch norm, in order, under one description.
class BatchNormLaunches : public GpuKernel {
 public:
  BatchNormLaunches(std::string describe, std::vector<std::unique_ptr<GpuKernel>> parts)
      : describe_(std::move(describe)), parts_(std::move(parts)) {}
  absl::Status Launch(cudaStream_t stream) const override {
    for (const auto& part : parts_) RETURN_IF_ERROR(part->Launch(stream));
    return absl::OkStatus();
  }
  std::string Describe() const override { return describe_; }
  std::vector<std::string> GeneratedKernelNames() const override {
    std::vector<std::string> names;
    for (const auto& part : parts_) {
      for (std::string& name : part->GeneratedKernelNames()) names.push_back(std::move(name));
    }
    return names;
  }

 private:
  std::string describe_;
  std::vector<std::unique_ptr<GpuKernel>> parts_;
};

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// float4 loads need C % 4 == 0 (a row starts on a 16-byte boundary) and every row-walked tensor
// 16-byte aligned; otherwise scalar loads.
int VectorWidth(int64_t channels, std::initializer_list<const void*> tensors) {
  if (channels % 4 != 0) return 1;
  for (const void* p : tensors) {
    if (p != nullptr && !Aligned16(p)) return 1;
  }
  return 4;
}

// The checks both passes share, then the tiling with its scratch, which must fit in the lane's
// workspace.
absl::StatusOr<codegen::BatchNormTiling> Plan(const LoweringContext& ctx, const std::string& where,
                                              absl::string_view op, int64_t rows, int64_t min_rows,
                                              int64_t channels, int vec,
                                              std::initializer_list<const void*> required) {
  if (rows < min_rows || channels < 1 || channels > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", op, " nhwc needs rows >= ", min_rows,
                     " and 1 <= channels <= ", INT_MAX, ", got rows=", rows, " c=", channels));
  }
  for (const void* p : required) {
    if (p == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", op, " nhwc is missing a required device address"));
    }
  }
  const codegen::BatchNormTiling t = codegen::BatchNormTilingFor(rows, channels, vec);
  if (ctx.workspace == nullptr || static_cast<size_t>(t.scratch_bytes) > ctx.workspace_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        where, ": ", op, " nhwc rows=", rows, " c=", channels, " needs ", t.scratch_bytes,
        " bytes of scratch (", t.chunks, " chunks) in the lane's workspace, which has ",
        ctx.workspace == nullptr ? 0 : ctx.workspace_bytes));
  }
  if (ctx.kernels == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": ", op, " nhwc needs a kernel store, and the plan has none"));
  }
  return t;
}

dim3 TiledGrid(const codegen::BatchNormTiling& t) {
  return dim3(static_cast<unsigned>(t.column_tiles), static_cast<unsigned>(t.chunks));
}
dim3 TiledBlock(const codegen::BatchNormTiling& t) { return dim3(t.block_x, t.block_y); }
dim3 ChannelGrid(int64_t channels) { return dim3(static_cast<unsigned>((channels + 31) / 32)); }

std::string Describe(absl::string_view op, const codegen::BatchNormTiling& t, int64_t rows,
                     int64_t channels, absl::string_view extras) {
  return absl::StrCat("nvrtc ", op, " nhwc rows=", rows, " c=", channels, " vec=", t.vec,
                      " chunks=", t.chunks, extras, " (3 kernels)");
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerNhwcBatchNormTrain(const LoweringContext& ctx,
                                                                   const std::string& node_name,
                                                                   const NhwcBatchNormForward& a) {
  const std::string where = absl::StrCat("node '", node_name, "'");
  const int vec = VectorWidth(a.channels, {a.x, a.residual, a.y});
  ASSIGN_OR_RETURN(codegen::BatchNormTiling t,
                   Plan(ctx, where, "batch_norm_train", a.rows, 2, a.channels, vec,
                        {a.x, a.gamma, a.beta, a.running_mean, a.running_var, a.y, a.saved_mean,
                         a.saved_invstd}));
  double* partial = static_cast<double*>(ctx.workspace);
  float* coef = reinterpret_cast<float*>(static_cast<char*>(ctx.workspace) +
                                         codegen::BatchNormCoefficientOffset(t.chunks, a.channels));
  const int channels = static_cast<int>(a.channels);
  const long long rows = a.rows, rows_per_chunk = t.rows_per_chunk;
  std::vector<std::unique_ptr<GpuKernel>> parts;

  KernelArgs stats;
  stats.Add(a.x).Add(partial).Add(rows).Add(channels).Add(rows_per_chunk);
  ASSIGN_OR_RETURN(parts.emplace_back(),
                   NvrtcKernel::Create(ctx, node_name, codegen::BatchNormStats(vec), TiledGrid(t),
                                       TiledBlock(t), 0, std::move(stats)));
  KernelArgs finalize;
  finalize.Add(static_cast<const double*>(partial))
      .Add(static_cast<int>(t.chunks))
      .Add(channels)
      .Add(rows)
      .Add(a.epsilon)
      .Add(a.momentum)
      .Add(a.gamma)
      .Add(a.running_mean)
      .Add(a.running_var)
      .Add(a.saved_mean)
      .Add(a.saved_invstd)
      .Add(coef);
  ASSIGN_OR_RETURN(
      parts.emplace_back(),
      NvrtcKernel::Create(ctx, node_name, codegen::BatchNormFinalize(), ChannelGrid(a.channels),
                          dim3(32, 32), 0, std::move(finalize)));
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
      .Add(a.relu ? 1 : 0);
  ASSIGN_OR_RETURN(parts.emplace_back(),
                   NvrtcKernel::Create(ctx, node_name, codegen::BatchNormApply(vec), TiledGrid(t),
                                       TiledBlock(t), 0, std::move(apply)));
  const std::string extras =
      absl::StrCat(a.residual != nullptr ? " +residual" : "", a.relu ? " +relu" : "");
  return std::unique_ptr<GpuKernel>(new BatchNormLaunches(
      Describe("batch_norm_train", t, a.rows, a.channels, extras), std::move(parts)));
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerNhwcBatchNormGrad(const LoweringContext& ctx,
                                                                  const std::string& node_name,
                                                                  const NhwcBatchNormBackward& a) {
  const std::string where = absl::StrCat("node '", node_name, "'");
  const int vec = VectorWidth(a.channels, {a.dy, a.act_out, a.x, a.dx, a.masked_dy});
  ASSIGN_OR_RETURN(
      codegen::BatchNormTiling t,
      Plan(ctx, where, "batch_norm_grad", a.rows, 1, a.channels, vec,
           {a.dy, a.x, a.gamma, a.saved_mean, a.saved_invstd, a.dx, a.dgamma, a.dbeta}));
  double* partial = static_cast<double*>(ctx.workspace);
  float* coef = reinterpret_cast<float*>(static_cast<char*>(ctx.workspace) +
                                         codegen::BatchNormCoefficientOffset(t.chunks, a.channels));
  const int channels = static_cast<int>(a.channels);
  const long long rows = a.rows, rows_per_chunk = t.rows_per_chunk;
  std::vector<std::unique_ptr<GpuKernel>> parts;

  KernelArgs stats;
  stats.Add(a.dy)
      .Add(a.act_out)
      .Add(a.x)
      .Add(a.saved_mean)
      .Add(partial)
      .Add(rows)
      .Add(channels)
      .Add(rows_per_chunk);
  ASSIGN_OR_RETURN(parts.emplace_back(),
                   NvrtcKernel::Create(ctx, node_name, codegen::BatchNormGradStats(vec),
                                       TiledGrid(t), TiledBlock(t), 0, std::move(stats)));
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
      NvrtcKernel::Create(ctx, node_name, codegen::BatchNormGradFinalize(), ChannelGrid(a.channels),
                          dim3(32, 32), 0, std::move(finalize)));
  KernelArgs apply;
  apply.Add(a.dy)
      .Add(a.act_out)
      .Add(a.x)
      .Add(a.saved_mean)
      .Add(static_cast<const float*>(coef))
      .Add(a.dx)
      .Add(a.masked_dy)
      .Add(rows)
      .Add(channels)
      .Add(rows_per_chunk);
  ASSIGN_OR_RETURN(parts.emplace_back(),
                   NvrtcKernel::Create(ctx, node_name, codegen::BatchNormGradApply(vec),
                                       TiledGrid(t), TiledBlock(t), 0, std::move(apply)));
  const std::string extras = absl::StrCat(a.act_out != nullptr ? " +relu_mask" : "",
                                          a.masked_dy != nullptr ? " +masked_dy" : "");
  return std::unique_ptr<GpuKernel>(new BatchNormLaunches(
      Describe("batch_norm_grad", t, a.rows, a.channels, extras), std::move(parts)));
}

}  // namespace reprise::ops
