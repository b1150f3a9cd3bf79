// Trainer::Impl's input bindings: the engine's own staging as a zero-copy buffer, and inputs
// bound to memory the caller owns, patched into the captured graph without re-instantiating; and
// the forced re-capture with which benchmarks and tests reach the other update paths.
#include "absl/strings/str_cat.h"
#include "src/api/trainer_impl.h"
#include "src/ir/op_def.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise {

absl::StatusOr<int32_t> Trainer::Impl::FindInput(absl::string_view name) const {
  auto id = plan_.graph().FindNode(name);
  if (!id.ok() || plan_.graph().node(*id).op != &ir::InputOp()) {
    return absl::NotFoundError(absl::StrCat("no input named '", name, "'"));
  }
  return *id;
}

absl::StatusOr<Trainer::Impl::NamedTensor> Trainer::Impl::FindInputTensor(
    absl::string_view name) const {
  return Resolve(name, ir::InputOp(), "input");
}

void* Trainer::Impl::InputSlot(int32_t id) const {
  return static_cast<char*>(arena_->data()) + plan_.memory.Find({id, 0})->offset;
}

absl::Status Trainer::Impl::CheckNotBound(int32_t id) const {
  if (!input_copy_->IsBound(InputSlot(id))) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("input '", plan_.graph().node(id).name,
                   "' is bound to caller memory (BindInput); unbind it with nullptr first"));
}

absl::Status Trainer::Impl::CheckNotBound(const NamedTensor& input) const {
  if (input.offset == 0) RETURN_IF_ERROR(CheckNotBound(input.node));
  if (!input_copy_->IsBound(static_cast<char*>(InputSlot(input.node)) + input.offset)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("this model's slice of input '", plan_.graph().node(input.node).name,
                   "' is bound to caller memory (BindInput); unbind it with nullptr first"));
}

absl::StatusOr<void*> Trainer::Impl::InputBuffer(absl::string_view name, DType dtype) {
  ASSIGN_OR_RETURN(const NamedTensor input, FindInputTensor(name));
  RETURN_IF_ERROR(CheckNotBound(input));
  const TensorSpec& spec = input.spec;
  if (spec.dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is ", spec.ToString(),
                                                   "; asked for a ", DTypeName(dtype), " buffer"));
  }
  RETURN_IF_ERROR(WaitForLastStep());
  const passes::Buffer* b = plan_.memory.Find({input.node, 0});
  return static_cast<char*>(staging_->data()) + (b->offset - plan_.memory.input_offset) +
         input.offset;
}

absl::Status Trainer::Impl::BindInput(absl::string_view name, const void* data, size_t bytes) {
  ASSIGN_OR_RETURN(const NamedTensor input, FindInputTensor(name));
  const TensorSpec& spec = input.spec;
  bool device_here = false;
  if (data != nullptr) {
    if (static_cast<int64_t>(bytes) != spec.bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is ", spec.ToString(),
                                                     " (", spec.bytes(), " bytes); bound ", bytes,
                                                     " bytes"));
    }
    cudaPointerAttributes attributes = {};
    RETURN_IF_ERROR(runtime::CudaStatus(cudaPointerGetAttributes(&attributes, data),
                                        "cudaPointerGetAttributes",
                                        absl::StrCat("binding input '", name, "'")));
    device_here = attributes.type == cudaMemoryTypeDevice && attributes.device == device_.ordinal;
    const bool reachable = device_here || attributes.type == cudaMemoryTypeHost ||
                           attributes.type == cudaMemoryTypeManaged;
    if (!reachable) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", name, "': bind device memory of GPU ", device_.ordinal,
          " or pinned host memory (cudaHostAlloc/cudaHostRegister); this pointer is ",
          attributes.type == cudaMemoryTypeDevice ? "on another GPU" : "pageable host memory"));
    }
  }
  RETURN_IF_ERROR(WaitForLastStep());
  void* slot = static_cast<char*>(InputSlot(input.node)) + input.offset;
  const size_t input_bytes = static_cast<size_t>(spec.bytes());
  if (!captured_.has_value()) {  // Eager modes read the binding as they run.
    input_copy_->Bind(slot, data, input_bytes, device_here);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const std::string recaptured,
                   captured_->Bind(*input_copy_, slot, data, input_bytes, device_here, launches_,
                                   *lanes_, stream_->get()));
  if (!recaptured.empty()) ++recapture_reasons_[absl::StrCat("input '", name, "' ", recaptured)];
  return absl::OkStatus();
}

absl::Status Trainer::Impl::ForceRecapture(capture::CapturedStep::Apply apply) {
  if (!captured_.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ForceRecapture: the step is not captured (mode ", ExecModeName(options_.launch.mode),
        "); only ExecMode::kGraph has a graph to update"));
  }
  RETURN_IF_ERROR(WaitForLastStep());  // No queued replay runs the executable being replaced.
  ++recapture_reasons_[kForcedRecapture];
  return captured_->Recapture(launches_, *lanes_, stream_->get(), apply);
}

}  // namespace reprise
