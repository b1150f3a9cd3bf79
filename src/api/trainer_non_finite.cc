// Trainer::Impl's view of the non-finite guard (src/autodiff/non_finite_guard.h): the counters
// live in state tensors that the step itself updates, read only when asked (Report,
// SkippedSteps) or, under NonFinitePolicy::kStop, by the calls that wait for the queued steps
// anyway. Step() reads nothing: the guard adds no host synchronisation to it.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/api/trainer_impl.h"
#include "src/autodiff/autodiff.h"
#include "src/autodiff/non_finite_guard.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise {
namespace {

// The index of the first inf or NaN among `n` elements of `dtype` at `data`, with its value in
// `what`; -1 if none. 16-bit floats are told by their exponent bits (all set: inf or NaN).
int64_t FirstNonFinite(const char* data, DType dtype, int64_t n, std::string* what) {
  for (int64_t i = 0; i < n; ++i) {
    double x = 0;
    if (dtype == DType::kFloat32) {
      float f;
      std::memcpy(&f, data + 4 * i, 4);
      x = f;
    } else if (dtype == DType::kFloat64) {
      std::memcpy(&x, data + 8 * i, 8);
    } else {
      uint16_t bits;
      std::memcpy(&bits, data + 2 * i, 2);
      const bool bf16 = dtype == DType::kBFloat16;
      const uint16_t exponent = bf16 ? 0x7f80 : 0x7c00;
      const uint16_t mantissa = bf16 ? 0x007f : 0x03ff;
      if ((bits & exponent) != exponent) continue;
      x = (bits & mantissa) != 0 ? NAN : (bits & 0x8000) != 0 ? -INFINITY : INFINITY;
    }
    if (!std::isfinite(x)) {
      *what = std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
      return i;
    }
  }
  return -1;
}

}  // namespace

absl::Status Trainer::Impl::ReadNamed(absl::string_view name, void* host, int64_t bytes) const {
  ASSIGN_OR_RETURN(const int32_t id, plan_.graph().FindNode(name));
  const passes::Buffer* b = plan_.memory.Find({id, 0});
  if (b == nullptr || b->bytes != bytes) {
    return absl::InternalError(absl::StrCat("'", name, "' has no ", bytes, "-byte buffer"));
  }
  RETURN_IF_ERROR(runtime::CudaStatus(
      cudaMemcpyAsync(host, static_cast<const char*>(arena_->data()) + b->offset, bytes,
                      cudaMemcpyDeviceToHost, stream_->get()),
      "cudaMemcpyAsync", absl::StrCat("reading '", name, "'")));
  return runtime::CudaStatus(cudaStreamSynchronize(stream_->get()), "cudaStreamSynchronize",
                             absl::StrCat("reading '", name, "'"));
}

absl::StatusOr<std::optional<TrainerReport::NonFiniteState>> Trainer::Impl::ReadNonFinite() const {
  const LossScaleOptions scaling =
      autodiff::ResolveLossScaling(options_.numerics.loss_scale, options_.numerics.compute_dtype);
  const autodiff::NonFiniteOptions& guard = options_.numerics.non_finite;
  TrainerReport::NonFiniteState state;
  state.policy = std::string(NonFinitePolicyName(guard.policy));
  if (autodiff::ScalesLoss(scaling)) {
    state.checked_by = "loss scaling's check (an overflow backs the scale off)";
    int32_t skipped = 0;
    RETURN_IF_ERROR(ReadNamed(autodiff::kLossScaleSkippedSteps, &skipped, 4));
    state.skipped_steps = skipped;
    return state;
  }
  if (!autodiff::Guards(guard)) return std::nullopt;
  state.checked_by = "the guard's check of the loss and gradients";
  RETURN_IF_ERROR(SettleGuardCounters());
  int32_t skipped = 0;
  int32_t record[2] = {0, 0};
  RETURN_IF_ERROR(ReadNamed(autodiff::kNonFiniteSkippedSteps, &skipped, 4));
  RETURN_IF_ERROR(ReadNamed(autodiff::kNonFiniteRecord, record, 8));
  state.skipped_steps = skipped;
  state.steps_checked = record[0];
  state.first_non_finite_step = int64_t{record[1]} - 1;
  if (!non_finite_stop_.ok()) state.stop = std::string(non_finite_stop_.message());
  return state;
}

absl::Status Trainer::Impl::CheckNonFiniteStop() {
  if (!non_finite_stop_.ok()) return non_finite_stop_;
  if (options_.numerics.non_finite.policy != NonFinitePolicy::kStop) return absl::OkStatus();
  RETURN_IF_ERROR(SettleGuardCounters());
  int32_t record[2] = {0, 0};
  RETURN_IF_ERROR(ReadNamed(autodiff::kNonFiniteRecord, record, 8));
  if (record[1] == 0) return absl::OkStatus();
  std::string first;
  if (options_.parallel.data_parallel.has_value()) {
    first = "not searched (an eager run of a data-parallel step needs every rank)";
  } else {
    absl::StatusOr<std::string> found = FirstNonFiniteTensor();
    first = !found.ok() ? absl::StrCat("unknown: the eager run failed: ", found.status().ToString())
            : found->empty() ? "none in an eager run of the step with the inputs bound now (the "
                               "non-finite step's inputs were replaced since)"
                             : *found;
  }
  non_finite_stop_ = absl::FailedPreconditionError(absl::StrCat(
      "non-finite step: step ", int64_t{record[1]} - 1,
      " (counted from 0 on the device) had an inf or a NaN in its loss or gradients; its update "
      "and every later one were skipped and the trainer stopped (NonFinitePolicy::kStop). First "
      "non-finite tensor: ",
      first));
  return non_finite_stop_;
}

absl::StatusOr<std::string> Trainer::Impl::FirstNonFiniteTensor() {
  cudaStream_t stream = stream_->get();
  char* arena = static_cast<char*>(arena_->data());
  const size_t arena_bytes = arena_->bytes();
  // The run writes the arena (batch-norm statistics, counters): it is put back after.
  ASSIGN_OR_RETURN(runtime::DeviceBuffer snapshot, runtime::DeviceBuffer::Create(arena_bytes));
  RETURN_IF_ERROR(runtime::CudaStatus(
      cudaMemcpyAsync(snapshot.data(), arena, arena_bytes, cudaMemcpyDeviceToDevice, stream),
      "cudaMemcpyAsync", "snapshot of the arena for the non-finite search"));
  const Graph& g = plan_.graph();
  std::vector<char> host;
  auto scan = [&](Value v, std::string* found) -> absl::Status {
    const passes::Buffer* b = plan_.memory.Find(v);
    const TensorSpec& spec = g.spec(v);
    if (b == nullptr || !IsFloat(spec.dtype)) return absl::OkStatus();
    host.resize(static_cast<size_t>(b->bytes));
    RETURN_IF_ERROR(runtime::CudaStatus(
        cudaMemcpyAsync(host.data(), arena + b->offset, b->bytes, cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync", absl::StrCat("non-finite search reading '", g.node(v.node).name, "'")));
    RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize",
                                        "non-finite search"));
    std::string what;
    const int64_t at = FirstNonFinite(host.data(), spec.dtype, spec.shape.NumElements(), &what);
    if (at < 0) return absl::OkStatus();
    const Node& node = g.node(v.node);
    *found =
        absl::StrCat("'", node.name, "'", v.output > 0 ? absl::StrCat(" output ", v.output) : "",
                     " (", node.op_name(), ", ", spec.ToString(), ") element ", at, " = ", what);
    return absl::OkStatus();
  };
  // Launch 0 copies the bound inputs in: they and the parameters are what the step starts from.
  // Then every launch in plan order on one stream, each one's outputs searched as it ends (the
  // memory plan reuses their places later).
  auto search = [&]() -> absl::StatusOr<std::string> {
    std::string found;
    RETURN_IF_ERROR(launches_[0].kernel->Launch(stream));
    for (const char* leaf : {"input", "parameter"}) {
      for (int32_t id : g.NodesOf(leaf)) {
        RETURN_IF_ERROR(scan(Value{id, 0}, &found));
        if (!found.empty()) return found;
      }
    }
    for (size_t i = 1; i < launches_.size(); ++i) {
      RETURN_IF_ERROR(launches_[i].kernel->Launch(stream));
      const Node& node = g.node(plan_.launches[i - 1].node);
      for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o) {
        RETURN_IF_ERROR(scan(Value{node.id, o}, &found));
        if (!found.empty()) return found;
      }
    }
    return found;
  };
  absl::StatusOr<std::string> found = search();
  RETURN_IF_ERROR(runtime::CudaStatus(
      cudaMemcpyAsync(arena, snapshot.data(), arena_bytes, cudaMemcpyDeviceToDevice, stream),
      "cudaMemcpyAsync", "restoring the arena after the non-finite search"));
  RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize",
                                      "restoring the arena after the non-finite search"));
  return found;
}

}  // namespace reprise
