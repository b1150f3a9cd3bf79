// Trainer::Impl's weights in and out: parameters and state copied between the arena and a
// safetensors file. The arena never moves, so a load needs no re-capture: the captured kernels
// read the new values from the same addresses at the next replay.
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/api/trainer_impl.h"
#include "src/autodiff/non_finite_guard.h"
#include "src/runtime/cuda_status.h"
#include "src/util/safetensors.h"
#include "src/util/status_macros.h"

namespace reprise {
namespace {

std::string FileSpec(const TensorSpec& spec) {
  return absl::StrCat(util::SafetensorsDTypeName(Trainer::Impl::FileDType(spec.dtype)),
                      spec.shape.ToString());
}

// "'a', 'b' and 3 more": a long list of names stays readable.
std::string NameList(const std::vector<std::string>& names) {
  constexpr size_t kShown = 5;
  std::vector<std::string> quoted;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) {
    quoted.push_back(absl::StrCat("'", names[i], "'"));
  }
  std::string out = absl::StrJoin(quoted, ", ");
  if (names.size() > kShown) absl::StrAppend(&out, " and ", names.size() - kShown, " more");
  return out;
}

}  // namespace

util::SafetensorsDType Trainer::Impl::FileDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return util::SafetensorsDType::kF32;
    case DType::kFloat64:
      return util::SafetensorsDType::kF64;
    case DType::kInt32:
      return util::SafetensorsDType::kI32;
    case DType::kBFloat16:
      return util::SafetensorsDType::kBF16;
    case DType::kFloat16:
      return util::SafetensorsDType::kF16;
  }
  return util::SafetensorsDType::kF32;
}

std::vector<std::string> Trainer::Impl::WeightNamesOf(const Graph& training) {
  std::vector<std::string> names;
  for (const char* op : {"parameter", "state"}) {
    for (int32_t id : training.NodesOf(op)) names.push_back(training.node(id).name);
  }
  return names;
}

absl::StatusOr<std::vector<const passes::Buffer*>> Trainer::Impl::WeightBuffers() const {
  std::vector<const passes::Buffer*> buffers;
  for (const std::string& name : weight_names_) {
    absl::StatusOr<int32_t> id = plan_.graph().FindNode(name);
    const passes::Buffer* b = id.ok() ? plan_.memory.Find({*id, 0}) : nullptr;
    if (b == nullptr) {
      return absl::InternalError(absl::StrCat("weight '", name, "' has no place in the arena"));
    }
    buffers.push_back(b);
  }
  return buffers;
}

absl::Status Trainer::Impl::SaveWeights(const std::string& path,
                                        const SaveWeightsOptions& options) {
  ASSIGN_OR_RETURN(std::vector<const passes::Buffer*> buffers, WeightBuffers());
  RETURN_IF_ERROR(SettleParameters());
  RETURN_IF_ERROR(WaitForQueued());  // Also after a NonFinitePolicy::kStop: the weights it kept.
  const char* arena = static_cast<const char*>(arena_->data());
  std::vector<std::string> host(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    host[i].resize(buffers[i]->bytes);
    RETURN_IF_ERROR(runtime::CudaStatus(
        cudaMemcpyAsync(host[i].data(), arena + buffers[i]->offset, buffers[i]->bytes,
                        cudaMemcpyDeviceToHost, stream_->get()),
        "cudaMemcpyAsync", absl::StrCat("saving '", weight_names_[i], "'")));
  }
  RETURN_IF_ERROR(runtime::CudaStatus(cudaStreamSynchronize(stream_->get()),
                                      "cudaStreamSynchronize", "SaveWeights"));
  // torch_compatible: only the user graph's own tensors (no optimizer state, no "rng.step").
  const absl::flat_hash_set<std::string> torch_names(torch_names_.tensors.begin(),
                                                     torch_names_.tensors.end());
  const auto wanted = [&](const std::string& name) {
    return !options.torch_compatible || torch_names.contains(name);
  };
  std::vector<util::TensorView> views;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const TensorSpec& spec = plan_.graph().spec(buffers[i]->value);
    auto models = model_names_.find(weight_names_[i]);
    if (models == model_names_.end()) {
      if (wanted(weight_names_[i])) {
        views.push_back({weight_names_[i], FileDType(spec.dtype), spec.shape.dims(), host[i]});
      }
      continue;
    }
    // A stacked tensor (ensemble batching) is written as its models' own tensors.
    const std::vector<int64_t> dims(spec.shape.dims().begin() + 1, spec.shape.dims().end());
    const size_t slice = host[i].size() / models->second.size();
    for (size_t k = 0; k < models->second.size(); ++k) {
      if (!wanted(models->second[k])) continue;
      views.push_back({models->second[k], FileDType(spec.dtype), dims,
                       absl::string_view(host[i]).substr(k * slice, slice)});
    }
  }
  // torch counts a batch norm's training forward passes in an int64 scalar; one per step here.
  const int64_t batches = steps_;
  const absl::string_view batches_bytes(reinterpret_cast<const char*>(&batches), sizeof(batches));
  if (options.torch_compatible) {
    for (const std::string& name : torch_names_.batch_counters) {
      views.push_back({name, util::SafetensorsDType::kI64, {}, batches_bytes});
    }
  }
  return util::WriteSafetensors(path, views, {{"format", "pt"}});
}

absl::Status Trainer::Impl::LoadWeights(const std::string& path,
                                        const LoadWeightsOptions& options) {
  ASSIGN_OR_RETURN(const util::SafetensorsFile file, util::ReadSafetensors(path));
  ASSIGN_OR_RETURN(std::vector<const passes::Buffer*> buffers, WeightBuffers());
  // Everything is checked before anything is written, so a refused file changes no weight.
  struct Copy {
    const passes::Buffer* buffer;
    absl::string_view data;
    int64_t offset = 0;  // Bytes into the buffer: a model's slice of a stacked tensor.
  };
  std::vector<Copy> copies;
  std::vector<std::string> missing;
  std::vector<std::string> names;  // The file's names for the graph's tensors.
  for (size_t i = 0; i < buffers.size(); ++i) {
    const TensorSpec& whole = plan_.graph().spec(buffers[i]->value);
    // A stacked tensor (ensemble batching) is read as its models' own tensors.
    auto models = model_names_.find(weight_names_[i]);
    const bool stacked = models != model_names_.end();
    const std::vector<std::string> parts =
        stacked ? models->second : std::vector<std::string>{weight_names_[i]};
    TensorSpec spec = whole;
    if (stacked) {
      spec.shape =
          Shape(std::vector<int64_t>(whole.shape.dims().begin() + 1, whole.shape.dims().end()));
    }
    for (size_t k = 0; k < parts.size(); ++k) {
      const std::string& name = parts[k];
      names.push_back(name);
      const util::SafetensorsEntry* entry = file.Find(name);
      if (entry == nullptr) {
        // The non-finite guard's counters describe this trainer's run, not the model: a file
        // from a step without the guard (the whole-step kernel, kIgnore) leaves them as they are.
        if (!autodiff::IsNonFiniteCounter(name)) missing.push_back(name);
        continue;
      }
      if (entry->dtype != FileDType(spec.dtype) || entry->shape != spec.shape.dims()) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": tensor '", name, "' is ", entry->SpecString(), " in the file but ",
            FileSpec(spec), " in the graph (no conversion is made)"));
      }
      copies.push_back({buffers[i], file.Data(*entry), static_cast<int64_t>(k) * spec.bytes()});
    }
  }
  if (!missing.empty() && !options.allow_missing) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the file has no tensor ", NameList(missing),
                     " of the graph (LoadWeightsOptions::allow_missing leaves them as they are)"));
  }
  if (!options.allow_unexpected) {
    const absl::flat_hash_set<std::string> known(names.begin(), names.end());
    std::vector<std::string> unexpected;
    for (const util::SafetensorsEntry& entry : file.entries) {
      // As above: the guard's counters of another trainer's run are no part of the model.
      if (!known.contains(entry.name) && !autodiff::IsNonFiniteCounter(entry.name)) {
        unexpected.push_back(entry.name);
      }
    }
    if (!unexpected.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": the graph has no tensor ", NameList(unexpected),
                       " of the file (LoadWeightsOptions::allow_unexpected ignores them)"));
    }
  }
  // Stream-ordered after the last step and before the next; waited for here because `file`
  // holds the source bytes.
  RETURN_IF_ERROR(SettleParameters());  // The file replaces what the step left elsewhere.
  RETURN_IF_ERROR(Synchronize());
  char* arena = static_cast<char*>(arena_->data());
  for (const Copy& copy : copies) {
    RETURN_IF_ERROR(runtime::CudaStatus(
        cudaMemcpyAsync(arena + copy.buffer->offset + copy.offset, copy.data.data(),
                        copy.data.size(), cudaMemcpyHostToDevice, stream_->get()),
        "cudaMemcpyAsync",
        absl::StrCat("loading '", plan_.graph().node(copy.buffer->value.node).name, "'")));
  }
  return runtime::CudaStatus(cudaStreamSynchronize(stream_->get()), "cudaStreamSynchronize",
                             "LoadWeights");
}

// The public face. ------------------------------------------------------------------------------

absl::Status Trainer::SaveWeights(const std::string& path, const SaveWeightsOptions& options) {
  return impl_->SaveWeights(path, options);
}

absl::Status Trainer::LoadWeights(const std::string& path, const LoadWeightsOptions& options) {
  return impl_->LoadWeights(path, options);
}

}  // namespace reprise
