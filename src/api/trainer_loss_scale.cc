// Trainer::Impl's view of loss scaling (reprise/optimizer.h, LossScaleOptions): the scale and its
// counters live in state tensors on the device, which the step itself updates; reading them is
// the only host work loss scaling does, and only when asked.
#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "src/api/trainer_impl.h"
#include "src/autodiff/autodiff.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise {

absl::StatusOr<std::optional<TrainerReport::LossScaleState>> Trainer::Impl::ReadLossScale() const {
  const LossScaleOptions scaling =
      autodiff::ResolveLossScaling(options_.numerics.loss_scale, options_.numerics.compute_dtype);
  if (!autodiff::ScalesLoss(scaling)) return std::nullopt;
  const Graph& g = plan_.graph();
  // Each state tensor is 4 bytes: the f32 scale and the i32 counters.
  auto read = [&](const char* name, void* host) -> absl::Status {
    ASSIGN_OR_RETURN(const int32_t id, g.FindNode(name));
    const passes::Buffer* b = plan_.memory.Find({id, 0});
    if (b == nullptr || b->bytes != 4) {
      return absl::InternalError(absl::StrCat("loss scaling's '", name, "' has no 4-byte buffer"));
    }
    return runtime::CudaStatus(
        cudaMemcpyAsync(host, static_cast<const char*>(arena_->data()) + b->offset, 4,
                        cudaMemcpyDeviceToHost, stream_->get()),
        "cudaMemcpyAsync", absl::StrCat("reading '", name, "'"));
  };
  float scale = 0;
  int32_t tracker = 0, skipped = 0;
  RETURN_IF_ERROR(read(autodiff::kLossScale, &scale));
  RETURN_IF_ERROR(read(autodiff::kLossScaleGrowthTracker, &tracker));
  RETURN_IF_ERROR(read(autodiff::kLossScaleSkippedSteps, &skipped));
  // The copies ran after the queued steps, on their stream (to pageable memory, so each returned
  // once done); the synchronisation reports a fault of those steps.
  RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamSynchronize(stream_->get()),
                                      "cudaStreamSynchronize", "reading the loss scale"));
  return TrainerReport::LossScaleState{
      .mode = scaling.mode == LossScaling::kDynamic ? "dynamic" : "static",
      .scale = scale,
      .growth_tracker = tracker,
      .skipped_steps = skipped};
}

absl::StatusOr<float> Trainer::LossScale() {
  ASSIGN_OR_RETURN(const std::optional<TrainerReport::LossScaleState> state,
                   impl_->ReadLossScale());
  return state.has_value() ? state->scale : 1.0f;
}

absl::StatusOr<int64_t> Trainer::SkippedSteps() {
  // Loss scaling's count, or the non-finite guard's (trainer_non_finite.cc); a kStop trainer
  // that has stopped says so.
  RETURN_IF_ERROR(impl_->Synchronize());
  ASSIGN_OR_RETURN(const std::optional<TrainerReport::NonFiniteState> state,
                   impl_->ReadNonFinite());
  return state.has_value() ? state->skipped_steps : int64_t{0};
}

}  // namespace reprise
