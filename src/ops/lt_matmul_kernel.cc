#include "src/ops/lt_matmul_kernel.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "src/ops/op_helpers.h"
#include "src/runtime/kernel_store.h"
#include "src/runtime/plan_record.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

class LtMatmulKernel : public GpuKernel {
 public:
  LtMatmulKernel(std::string node_name, runtime::LtMatmul matmul, const LoweringContext& ctx)
      : node_name_(std::move(node_name)),
        matmul_(std::move(matmul)),
        a_(ctx.inputs[0]),
        b_(ctx.inputs[1]),
        c_(ctx.outputs[0]),
        workspace_(ctx.workspace) {}

  absl::Status Launch(cudaStream_t stream) const override {
    absl::Status status = matmul_.Run(stream, a_, b_, c_, workspace_);
    if (status.ok()) return status;
    return absl::Status(status.code(), absl::StrCat("node '", node_name_, "': ", status.message()));
  }
  std::string Describe() const override { return absl::StrCat("cublasLt ", matmul_.Describe()); }
  size_t WorkspaceBytes() const override { return matmul_.workspace_bytes(); }

 private:
  std::string node_name_;
  runtime::LtMatmul matmul_;
  const void* a_;
  const void* b_;
  void* c_;
  void* workspace_;
};

}  // namespace

absl::StatusOr<ProductDims> ProductDimsOf(const Attrs& attrs, const TensorSpec& a,
                                          const TensorSpec& b, int rank) {
  RETURN_IF_ERROR(CheckRank(a, rank, "A"));
  RETURN_IF_ERROR(CheckRank(b, rank, "B"));
  RETURN_IF_ERROR(CheckFloat(a, "A"));
  if (a.dtype != b.dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("A and B differ in dtype: ", a.ToString(), " and ", b.ToString()));
  }
  const int rows = rank - 2, cols = rank - 1;  // The matrix dimensions.
  ProductDims d;
  d.stacked = rank == 3;
  if (d.stacked) {
    d.models = a.shape.dim(0);
    if (b.shape.dim(0) != d.models || d.models <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("A ", a.ToString(), " and B ", b.ToString(),
                                                     " must stack the same positive model count"));
    }
  }
  d.ta = ir::BoolAttrOr(attrs, "transpose_a", false);
  d.tb = ir::BoolAttrOr(attrs, "transpose_b", false);
  d.m = d.ta ? a.shape.dim(cols) : a.shape.dim(rows);
  d.k = d.ta ? a.shape.dim(rows) : a.shape.dim(cols);
  const int64_t kb = d.tb ? b.shape.dim(cols) : b.shape.dim(rows);
  d.n = d.tb ? b.shape.dim(rows) : b.shape.dim(cols);
  if (d.k != kb) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inner dimensions differ: A ", a.ToString(), (d.ta ? " transposed" : ""), " and B ",
        b.ToString(), (d.tb ? " transposed" : ""), " give k = ", d.k, " and ", kb));
  }
  return d;
}

Shape ProductDims::Stack(std::initializer_list<int64_t> dims) const {
  std::vector<int64_t> all;
  if (stacked) all.push_back(models);
  all.insert(all.end(), dims.begin(), dims.end());
  return Shape(all);
}

runtime::MatmulShape ProductDims::Matmul(DType dtype) const {
  runtime::MatmulShape shape{m, n, k, ta, tb, dtype};
  shape.batch = models;
  return shape;
}

namespace {

absl::Mutex stats_mu;
MatmulChoiceStats stats ABSL_GUARDED_BY(stats_mu);

// Makes `matmul`'s configuration the measured one: from a record where ctx.kernels keeps one for
// this product on this device, else by timing the candidates (kRounds alternating rounds of
// kRepeats runs each, on the node's buffers before the step has written them), then recorded.
absl::Status ChooseByMeasuring(const LoweringContext& ctx, runtime::LtMatmul& matmul) {
  constexpr int kRepeats = 10, kRounds = 3;
  const std::string key = runtime::MatmulPlanRecordKey(
      matmul.RecordKeyText(), DeviceChoiceKey(ctx.device), cublasLtGetVersion());
  if (ctx.kernels != nullptr) {
    if (std::optional<std::string> text =
            ctx.kernels->FindRecord(key, runtime::kMatmulPlanRecordKind)) {
      absl::StatusOr<runtime::PlanRecord> record = runtime::DecodeMatmulPlanRecord(*text);
      absl::Status used = record.ok() ? matmul.UseConfigName(record->name) : record.status();
      absl::MutexLock lock(&stats_mu);
      if (used.ok()) {
        ++stats.from_records;
        return used;
      }
      ++stats.records_discarded;
      absl::FPrintF(stderr, "reprise: measuring %s again: its plan record %s\n", matmul.Describe(),
                    used.ToString());
    }
  }
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(const float best_ms,
                   matmul.ChooseFastest(cudaStreamPerThread, ctx.inputs[0], ctx.inputs[1],
                                        ctx.outputs[0], ctx.workspace, kRepeats, kRounds));
  const runtime::PlanRecord record{.name = matmul.ConfigName(),
                                   .candidates = matmul.candidate_count(),
                                   .median_ms = std::max<double>(best_ms, 1e-6)};
  if (ctx.kernels != nullptr) {
    ctx.kernels->StoreRecord(key, runtime::kMatmulPlanRecordKind,
                             runtime::EncodeMatmulPlanRecord(record));
  }
  absl::MutexLock lock(&stats_mu);
  ++stats.measured;
  stats.candidates_timed += record.candidates;
  stats.measure_ms += absl::ToDoubleMilliseconds(absl::Now() - start);
  return absl::OkStatus();
}

}  // namespace

MatmulChoiceStats MatmulChoiceStats::Since(const MatmulChoiceStats& before) const {
  return {.measured = measured - before.measured,
          .from_records = from_records - before.from_records,
          .records_discarded = records_discarded - before.records_discarded,
          .candidates_timed = candidates_timed - before.candidates_timed,
          .measure_ms = measure_ms - before.measure_ms};
}

std::string MatmulChoiceStats::MeasuredSince(const MatmulChoiceStats& before) const {
  const MatmulChoiceStats d = Since(before);
  if (d.measured + d.from_records == 0) return "";
  return absl::StrFormat("cuBLASLt choices measured %d (%.0f ms), from records %d", d.measured,
                         d.measure_ms, d.from_records);
}

void CountMatmulChoice(const MatmulChoiceStats& choice) {
  absl::MutexLock lock(&stats_mu);
  stats.measured += choice.measured;
  stats.from_records += choice.from_records;
  stats.records_discarded += choice.records_discarded;
  stats.candidates_timed += choice.candidates_timed;
  stats.measure_ms += choice.measure_ms;
}

MatmulChoiceStats MatmulChoices() {
  absl::MutexLock lock(&stats_mu);
  return stats;
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerLtMatmul(const LoweringContext& ctx,
                                                         const Node& node,
                                                         const runtime::MatmulShape& shape,
                                                         const runtime::MatmulEpilogue& epilogue) {
  // Measured: the heuristic's first kMeasuredCandidates, each timed on this node's own operands.
  constexpr int kMeasuredCandidates = 8;
  const bool measure = ctx.options.measure_matmul_algorithms;
  absl::StatusOr<runtime::LtMatmul> matmul =
      runtime::LtMatmul::Create(*ctx.lt, shape, ctx.options.allow_tf32, ctx.workspace_bytes,
                                epilogue, measure ? kMeasuredCandidates : 1);
  if (matmul.ok() && measure) {
    if (absl::Status chosen = ChooseByMeasuring(ctx, *matmul); !chosen.ok()) matmul = chosen;
  }
  if (!matmul.ok()) {
    return absl::Status(matmul.status().code(),
                        absl::StrCat("node '", node.name, "': ", matmul.status().message()));
  }
  return std::unique_ptr<GpuKernel>(new LtMatmulKernel(node.name, *std::move(matmul), ctx));
}

}  // namespace reprise::ops
