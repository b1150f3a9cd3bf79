// Trainer::Impl's checkpoints: the weights and state SaveWeights writes, the optimizer's scalar
// inputs (hyperparameters bound per step, kept in the input staging) and the step count, in the
// checkpoint format of src/api/checkpoint_format.h. Nothing is written to the trainer before the
// whole file has been read and checked against the model.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/api/checkpoint_format.h"
#include "src/api/input_checks.h"
#include "src/api/trainer_impl.h"
#include "src/autodiff/optimizer_graph.h"
#include "src/ir/op_def.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise {
namespace {

// The checkpoint's name for an input: apart from the graph's own names.
constexpr char kInputPrefix[] = "reprise.input.";

// The optimizer's scalar inputs: values the user may bind per step, so part of the state.
constexpr const char* kHyperparameters[] = {
    autodiff::kLearningRate, autodiff::kMomentum, autodiff::kWeightDecay, autodiff::kBeta1,
    autodiff::kBeta2,        autodiff::kEpsilon,  autodiff::kMaxGradNorm,
};

// One tensor of the checkpoint and where it lives in the trainer.
struct Slot {
  std::string name;  // In the file.
  const passes::Buffer* buffer;
  bool staged;  // An input: its value is in the host staging, not the arena.
};

absl::StatusOr<std::vector<Slot>> SlotsOf(const passes::Plan& plan,
                                          const std::vector<std::string>& weight_names,
                                          const std::vector<const passes::Buffer*>& weights) {
  std::vector<Slot> slots;
  for (size_t i = 0; i < weights.size(); ++i) slots.push_back({weight_names[i], weights[i], false});
  for (const char* name : kHyperparameters) {
    absl::StatusOr<int32_t> id = plan.graph().FindNode(name);
    if (!id.ok() || plan.graph().node(*id).op != &ir::InputOp()) continue;
    const passes::Buffer* b = plan.memory.Find({*id, 0});
    if (b == nullptr) {
      return absl::InternalError(absl::StrCat("input '", name, "' has no place in the arena"));
    }
    if (b->cls != passes::BufferClass::kInput) continue;  // Not bound per step.
    slots.push_back({absl::StrCat(kInputPrefix, name), b, true});
  }
  return slots;
}

}  // namespace

absl::Status Trainer::Impl::SaveCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<const passes::Buffer*> weights, WeightBuffers());
  ASSIGN_OR_RETURN(std::vector<Slot> slots, SlotsOf(plan_, weight_names_, weights));
  RETURN_IF_ERROR(SettleParameters());
  RETURN_IF_ERROR(Synchronize());
  const char* arena = static_cast<const char*>(arena_->data());
  const char* staging = static_cast<const char*>(staging_->data());
  std::vector<std::string> host(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    const passes::Buffer& b = *slots[i].buffer;
    host[i].resize(b.bytes);
    if (slots[i].staged) {
      host[i].assign(staging + (b.offset - plan_.memory.input_offset), b.bytes);
      continue;
    }
    RETURN_IF_ERROR(runtime::CudaStatus(cudaMemcpyAsync(host[i].data(), arena + b.offset, b.bytes,
                                                        cudaMemcpyDeviceToHost, stream_->get()),
                                        "cudaMemcpyAsync",
                                        absl::StrCat("checkpointing '", slots[i].name, "'")));
  }
  RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamSynchronize(stream_->get()),
                                      "cudaStreamSynchronize", "SaveCheckpoint"));
  std::vector<util::TensorView> views;
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorSpec& spec = plan_.graph().spec(slots[i].buffer->value);
    views.push_back({slots[i].name, FileDType(spec.dtype), spec.shape.dims(), host[i]});
  }
  return WriteCheckpoint(path, {.model = model_fingerprint_, .step = steps_}, views);
}

absl::Status Trainer::Impl::RestoreCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(const Checkpoint checkpoint, ReadCheckpoint(path));
  ASSIGN_OR_RETURN(std::vector<const passes::Buffer*> weights, WeightBuffers());
  ASSIGN_OR_RETURN(std::vector<Slot> slots, SlotsOf(plan_, weight_names_, weights));
  std::vector<ExpectedTensor> expected;
  for (const Slot& slot : slots) {
    const TensorSpec& spec = plan_.graph().spec(slot.buffer->value);
    expected.push_back({slot.name, FileDType(spec.dtype), spec.shape.dims()});
  }
  RETURN_IF_ERROR(CheckCheckpointMatches(checkpoint, path, model_fingerprint_, expected));
  // A saved hyperparameter goes through SetInput's checks too: a NaN rate would poison the weights.
  for (const Slot& slot : slots) {
    const TensorSpec& spec = plan_.graph().spec(slot.buffer->value);
    if (!slot.staged || spec.dtype != DType::kFloat32 || spec.NumElements() != 1) continue;
    float value;
    std::memcpy(&value, checkpoint.file.Data(*checkpoint.file.Find(slot.name)).data(),
                sizeof(value));
    const absl::Status valid =
        CheckHyperparameterInput(plan_.graph().node(slot.buffer->value.node).name, value);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", slot.name, "': ", valid.message()));
    }
  }
  // Checked through: from here on only a device fault can stop the restore half way.
  RETURN_IF_ERROR(SettleParameters());  // The file replaces what the steps left elsewhere.
  RETURN_IF_ERROR(Synchronize());
  char* arena = static_cast<char*>(arena_->data());
  char* staging = static_cast<char*>(staging_->data());
  for (const Slot& slot : slots) {
    const passes::Buffer& b = *slot.buffer;
    const absl::string_view data = checkpoint.file.Data(*checkpoint.file.Find(slot.name));
    if (slot.staged) {
      // A bound input reads the caller's memory; the staging would be overwritten anyway.
      if (CheckNotBound(b.value.node).ok()) {
        std::memcpy(staging + (b.offset - plan_.memory.input_offset), data.data(), data.size());
      }
      continue;
    }
    RETURN_IF_ERROR(runtime::CudaStatus(cudaMemcpyAsync(arena + b.offset, data.data(), data.size(),
                                                        cudaMemcpyHostToDevice, stream_->get()),
                                        "cudaMemcpyAsync",
                                        absl::StrCat("restoring '", slot.name, "'")));
  }
  RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamSynchronize(stream_->get()),
                                      "cudaStreamSynchronize", "RestoreCheckpoint"));
  steps_ = checkpoint.header.step;
  return absl::OkStatus();
}

// The public face. ------------------------------------------------------------------------------

absl::Status Trainer::SaveCheckpoint(const std::string& path) {
  return impl_->SaveCheckpoint(path);
}

absl::Status Trainer::RestoreCheckpoint(const std::string& path) {
  return impl_->RestoreCheckpoint(path);
}

}  // namespace reprise
