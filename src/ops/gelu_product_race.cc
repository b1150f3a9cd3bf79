#include "src/ops/gelu_product_race.h"

#include <cublasLt.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "src/ops/gelu_product_cudnn.h"
#include "src/ops/kernel_timing.h"
#include "src/ops/lt_matmul_kernel.h"
#include "src/runtime/plan_record.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

constexpr absl::string_view kCublasLtName = "cublaslt";
constexpr absl::string_view kCudnnPrefix = "cudnn:";

std::unique_ptr<GpuKernel> Noted(std::unique_ptr<GpuKernel> kernel, std::string note) {
  return std::unique_ptr<GpuKernel>(new NotedKernel(std::move(kernel), std::move(note)));
}

// The recorded winner, lowered: cuBLASLt's kernel as given (taken from `lt` only then), or
// cuDNN's named plan. kNotFound or kDataLoss where the record names nothing usable.
absl::StatusOr<std::unique_ptr<GpuKernel>> FromRecord(const LoweringContext& ctx, const Node& node,
                                                      const runtime::MatmulShape& shape,
                                                      std::unique_ptr<GpuKernel>& lt,
                                                      const runtime::PlanRecord& record) {
  const std::string note =
      absl::StrFormat("faster of cuDNN and cuBLASLt, %.4f ms (record)", record.median_ms);
  if (record.name == kCublasLtName) return Noted(std::move(lt), note);
  absl::string_view plan = record.name;
  if (!absl::ConsumePrefix(&plan, kCudnnPrefix) || plan.empty()) {
    return absl::DataLossError(absl::StrCat("names '", record.name, "', neither ", kCublasLtName,
                                            " nor ", kCudnnPrefix, "<plan>"));
  }
  ASSIGN_OR_RETURN(CudnnGeluLowering cudnn, LowerCudnnGeluProduct(ctx, node, shape, plan));
  return Noted(std::move(cudnn.kernel), note);
}

}  // namespace

std::string CudnnRefusalNote(const absl::Status& refusal) {
  std::string why(refusal.message());
  if (why.size() > 200) why = absl::StrCat(why.substr(0, 200), " ...");
  return absl::StrCat("cuDNN: ", why);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> RaceGeluProduct(
    const LoweringContext& ctx, const Node& node, const runtime::MatmulShape& shape,
    const runtime::MatmulEpilogue& epilogue) {
  // cuBLASLt's measured epilogue (from its own record where there is one) always: the rival, and
  // where cuDNN takes no part, the kernel.
  absl::StatusOr<std::unique_ptr<GpuKernel>> lt = LowerLtMatmul(ctx, node, shape, epilogue);
  const bool lt_has_none = !lt.ok() && lt.status().code() == absl::StatusCode::kNotFound;
  if (!lt.ok() && !lt_has_none) return lt.status();
  absl::StatusOr<runtime::GeluProductShape> gelu_shape =
      CudnnGeluProductShape(shape, absl::StrCat("node '", node.name, "'"));
  if (!gelu_shape.ok()) {
    if (lt_has_none) return lt.status();
    return Noted(*std::move(lt), CudnnRefusalNote(gelu_shape.status()));
  }
  const std::string key = runtime::GeluProductRaceRecordKey(
      *gelu_shape, ctx.workspace_bytes, DeviceChoiceKey(ctx.device), cublasLtGetVersion());
  if (ctx.kernels != nullptr && !lt_has_none) {
    if (std::optional<std::string> text =
            ctx.kernels->FindRecord(key, runtime::kGeluProductRecordKind)) {
      absl::StatusOr<runtime::PlanRecord> record = runtime::DecodeGeluProductRecord(*text);
      absl::StatusOr<std::unique_ptr<GpuKernel>> kernel =
          record.ok() ? FromRecord(ctx, node, shape, *lt, *record) : record.status();
      if (kernel.ok()) {
        CountMatmulChoice({.from_records = 1});
        return kernel;
      }
      CountMatmulChoice({.records_discarded = 1});
      absl::FPrintF(stderr, "reprise: racing node '%s' again: its gelu product record %s\n",
                    node.name, kernel.status().ToString());
    }
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<CudnnGeluLowering> cudnn = LowerCudnnGeluProduct(ctx, node, shape);
  if (!cudnn.ok()) {
    // The race was not asked for by name: cuBLASLt's runs, the plan dump saying why. A failure
    // other than cuDNN having no plan is also said on stderr.
    if (!absl::IsUnimplemented(cudnn.status())) {
      absl::FPrintF(stderr, "reprise: node '%s' runs cuBLASLt's GELU product: cuDNN's failed: %s\n",
                    node.name, cudnn.status().ToString());
    }
    if (lt_has_none) return lt.status();
    return Noted(*std::move(lt), CudnnRefusalNote(cudnn.status()));
  }
  // cuBLASLt offering no epilogue algorithm leaves cuDNN's plan without a rival.
  if (lt_has_none) return std::move(cudnn->kernel);
  const GpuKernel* const kernels[] = {cudnn->kernel.get(), lt->get()};
  ASSIGN_OR_RETURN(std::vector<double> ms,
                   TimeKernelsInTurns(kernels, {}, absl::StrCat("node '", node.name, "'")));
  const bool cudnn_faster = ms[0] < ms[1];
  const runtime::PlanRecord record{
      .name = cudnn_faster ? absl::StrCat(kCudnnPrefix, cudnn->engine) : std::string(kCublasLtName),
      .candidates = 2,
      .median_ms = std::max(cudnn_faster ? ms[0] : ms[1], 1e-6)};
  if (ctx.kernels != nullptr) {
    ctx.kernels->StoreRecord(key, runtime::kGeluProductRecordKind,
                             runtime::EncodeGeluProductRecord(record));
  }
  CountMatmulChoice({.measured = 1,
                     .candidates_timed = 2,
                     .measure_ms = absl::ToDoubleMilliseconds(absl::Now() - start)});
  std::string note =
      absl::StrFormat("timed in turns: cuDNN %.4f ms, cuBLASLt %.4f ms", ms[0], ms[1]);
  return Noted(cudnn_faster ? std::move(cudnn->kernel) : *std::move(lt), std::move(note));
}

}  // namespace reprise::ops
