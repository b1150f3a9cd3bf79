// Trainer's public face: every call forwards to Trainer::Impl (src/api/trainer_impl.h); and the
// names of the execution modes and graph launches.
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/api/trainer_impl.h"
#include "src/ir/op_def.h"
#include "src/util/status_macros.h"

namespace reprise {

absl::string_view ExecModeName(ExecMode mode) {
  switch (mode) {
    case ExecMode::kSync:
      return "sync";
    case ExecMode::kBulked:
      return "bulked";
    case ExecMode::kGraph:
      return "graph";
  }
  return "?";
}

absl::StatusOr<ExecMode> ParseExecMode(absl::string_view name) {
  for (ExecMode m : {ExecMode::kSync, ExecMode::kBulked, ExecMode::kGraph}) {
    if (name == ExecModeName(m)) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown mode '", name, "': expected sync, bulked or graph"));
}

absl::string_view GraphLaunchName(GraphLaunch launch) {
  switch (launch) {
    case GraphLaunch::kAuto:
      return "auto";
    case GraphLaunch::kHost:
      return "host";
    case GraphLaunch::kDevice:
      return "device";
  }
  return "?";
}

absl::StatusOr<GraphLaunch> ParseGraphLaunch(absl::string_view name) {
  for (GraphLaunch l : {GraphLaunch::kAuto, GraphLaunch::kHost, GraphLaunch::kDevice}) {
    if (name == GraphLaunchName(l)) return l;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown graph launch '", name, "': expected auto, host or device"));
}

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() {
  if (impl_ != nullptr) impl_->PrintReportIfAsked();
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const Graph& graph, Value loss,
                                                         const TrainOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl, Impl::Create(graph, loss, options));
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

absl::Status Trainer::SetInput(absl::string_view name, absl::Span<const float> data) {
  return impl_->SetInput(name, data.data(), data.size(), DType::kFloat32);
}
absl::Status Trainer::SetInput(absl::string_view name, absl::Span<const int32_t> data) {
  return impl_->SetInput(name, data.data(), data.size(), DType::kInt32);
}
absl::Status Trainer::SetLearningRate(float learning_rate) {
  return SetInput(autodiff::kLearningRate, absl::MakeConstSpan(&learning_rate, 1));
}
absl::StatusOr<absl::Span<float>> Trainer::InputBuffer(absl::string_view name) {
  ASSIGN_OR_RETURN(void* data, impl_->InputBuffer(name, DType::kFloat32));
  ASSIGN_OR_RETURN(const Impl::NamedTensor input, impl_->Resolve(name, ir::InputOp(), "input"));
  return absl::MakeSpan(static_cast<float*>(data), input.spec.NumElements());
}
absl::StatusOr<absl::Span<int32_t>> Trainer::InputBufferInt32(absl::string_view name) {
  ASSIGN_OR_RETURN(void* data, impl_->InputBuffer(name, DType::kInt32));
  ASSIGN_OR_RETURN(const Impl::NamedTensor input, impl_->Resolve(name, ir::InputOp(), "input"));
  return absl::MakeSpan(static_cast<int32_t*>(data), input.spec.NumElements());
}
absl::Status Trainer::BindInput(absl::string_view name, const void* data, size_t bytes) {
  return impl_->BindInput(name, data, bytes);
}
absl::Status Trainer::Step() { return impl_->Step(); }
absl::Status Trainer::Synchronize() { return impl_->Synchronize(); }
absl::StatusOr<std::vector<float>> Trainer::TimeSteps(int steps) { return impl_->TimeSteps(steps); }
absl::StatusOr<std::vector<Trainer::LaunchTime>> Trainer::ProfileLaunches(int repeats) {
  return impl_->ProfileLaunches(repeats);
}
absl::StatusOr<std::vector<Trainer::LaunchSpan>> Trainer::TimeLanes(int repeats) {
  return impl_->TimeLanes(repeats);
}
absl::StatusOr<float> Trainer::Loss() {
  ASSIGN_OR_RETURN(std::vector<float> loss, impl_->ReadFloat(impl_->loss()));
  return loss[0];
}
absl::StatusOr<std::vector<float>> Trainer::Read(Value value) {
  RETURN_IF_ERROR(impl_->CheckUserValue(value));
  ASSIGN_OR_RETURN(const passes::ModelValue batched, impl_->MapEnsembleValue(value));
  ASSIGN_OR_RETURN(const Value converted, impl_->user_values().Map(batched.value));
  ASSIGN_OR_RETURN(const Value planned, impl_->plan().MapValue(converted));
  ASSIGN_OR_RETURN(std::vector<float> all, impl_->ReadFloat(planned));
  if (batched.model < 0) return all;
  // One model's slice of a stacked value (ensemble batching).
  const int64_t models = impl_->plan().graph().spec(planned).shape.dim(0);
  const int64_t per_model = static_cast<int64_t>(all.size()) / models;
  return std::vector<float>(all.begin() + batched.model * per_model,
                            all.begin() + (batched.model + 1) * per_model);
}
std::vector<std::string> Trainer::ParameterNames() const { return impl_->ParameterNames(); }
absl::StatusOr<std::vector<float>> Trainer::GetParameter(absl::string_view name) {
  return impl_->GetParameter(name);
}
absl::Status Trainer::SetParameter(absl::string_view name, absl::Span<const float> data) {
  return impl_->SetParameter(name, data);
}
TrainerStats Trainer::stats() const { return impl_->stats(); }
const Graph& Trainer::training_graph() const { return impl_->plan().graph(); }

}  // namespace reprise
