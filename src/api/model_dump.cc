#include "src/api/model_dump.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "capture/graph_dump.h"
#include "src/api/captured_step_dump.h"
#include "src/api/compile_options.h"
#include "src/api/input_checks.h"
#include "src/api/models_gpt2.h"
#include "src/ops/mlp_step.h"
#include "src/passes/pipeline.h"
#include "src/passes/plan_dump.h"
#include "src/runtime/device.h"
#include "src/util/status_macros.h"

namespace reprise {
namespace {

constexpr DumpStage kStages[] = {DumpStage::kIr, DumpStage::kTraining, DumpStage::kPlan,
                                 DumpStage::kCudaGraph};

bool IsStandardOutput(const std::string& path) { return path.empty() || path == "-"; }

// Whether `path` could be opened for writing, without creating or truncating it.
absl::Status CheckWritable(const std::string& path) {
  if (IsStandardOutput(path)) return absl::OkStatus();
  struct stat info;
  if (stat(path.c_str(), &info) == 0) {
    if (S_ISDIR(info.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat("-o '", path, "' is a directory"));
    }
    if (access(path.c_str(), W_OK) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("-o '", path, "' is not writable: ", strerror(errno)));
    }
    return absl::OkStatus();
  }
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  if (stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("-o '", path, "': directory '", dir, "' does not exist"));
  }
  if (access(dir.c_str(), W_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("-o '", path, "': directory '", dir, "' is not writable: ", strerror(errno)));
  }
  return absl::OkStatus();
}

// The requested ready model as a graph and its loss.
struct Model {
  Graph graph;
  Value loss;
};

absl::StatusOr<Model> BuildModel(const DumpRequest& request) {
  if (request.model == "resnet") {
    ASSIGN_OR_RETURN(models::ResNet net, models::BuildResNet(request.resnet));
    return Model{std::move(net.graph), net.loss};
  }
  if (request.model == "gpt2") {
    ASSIGN_OR_RETURN(models::Gpt2 gpt, models::BuildGpt2(request.gpt2));
    return Model{std::move(gpt.graph), gpt.loss};
  }
  if (request.model == "ensemble") {
    ASSIGN_OR_RETURN(models::MlpEnsemble ensemble,
                     models::BuildMlpEnsemble(request.ensemble, request.mlp));
    return Model{std::move(ensemble.graph), ensemble.loss};
  }
  ASSIGN_OR_RETURN(models::Mlp mlp, models::BuildMlp(request.mlp));
  return Model{std::move(mlp.graph), mlp.loss};
}

// The whole-step MLP kernel is planned for the visible device, as the Trainer plans it, or for
// the default target (an H100) on a machine without one.
codegen::MlpStepTarget DumpMlpStepTarget() {
  const absl::StatusOr<int> devices = runtime::VisibleDeviceCount();
  if (!devices.ok() || *devices == 0) return codegen::MlpStepTarget{};
  const absl::StatusOr<runtime::DeviceInfo> device = runtime::UseDevice(0);
  return device.ok() ? ops::MlpTrainStepTargetFor(*device) : codegen::MlpStepTarget{};
}

absl::StatusOr<passes::CompileOptions> CompileOptionsOf(const DumpRequest& request) {
  ASSIGN_OR_RETURN(const TrainOptions options, TrainOptionsOf(request));
  return CompileOptionsFor(options, DumpMlpStepTarget());
}

absl::StatusOr<std::string> DumpCudaGraph(const Model& model, const DumpRequest& request,
                                          passes::DumpFormat format) {
  ASSIGN_OR_RETURN(const TrainOptions options, TrainOptionsOf(request));
  ASSIGN_OR_RETURN(CapturedStepDump step,
                   CaptureStepForDump(model.graph, model.loss, options, request.cuda_debug_dot));
  if (request.cuda_debug_dot) return step.cuda_debug_dot;
  return capture::FormatCudaGraph(step.plan, step.graph, format);
}

absl::StatusOr<DType> ParseComputeDType(absl::string_view name) {
  if (name == "f32") return DType::kFloat32;
  if (name == "bf16") return DType::kBFloat16;
  if (name == "f16") return DType::kFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --dtype '", name, "': expected f32, bf16 or f16"));
}

}  // namespace

absl::string_view DumpStageName(DumpStage stage) {
  switch (stage) {
    case DumpStage::kIr:
      return "ir";
    case DumpStage::kTraining:
      return "training";
    case DumpStage::kPlan:
      return "plan";
    case DumpStage::kCudaGraph:
      return "cuda-graph";
  }
  return "?";
}

absl::StatusOr<DumpStage> ParseDumpStage(absl::string_view name) {
  for (DumpStage s : kStages) {
    if (name == DumpStageName(s)) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --stage '", name, "': expected ir, training, plan or cuda-graph"));
}

absl::StatusOr<TrainOptions> TrainOptionsOf(const DumpRequest& request) {
  TrainOptions options;
  options.kernels.fuse = request.fuse;
  options.launch.lanes = request.lanes;
  options.kernels.whole_step = request.whole_step;
  options.kernels.update_writes_parameter_copies = request.update_copies;
  options.kernels.sgd_one_launch = request.sgd_one_launch;
  options.kernels.sgd_checks_in_launch = request.sgd_checks_in_launch;
  options.kernels.residual_sums_in_batch_norm = request.residual_sums_in_batch_norm;
  options.kernels.residual_sums_min_elements = request.residual_sums_min_elements;
  options.parallel.batch_ensembles = request.batch_ensembles;
  options.numerics.allow_tf32 = request.tf32;
  options.numerics.non_finite = request.non_finite;
  if (request.model == "gpt2") options.optimizer = models::Gpt2AdamW();
  absl::StatusOr<MirrorOptions> mirror = ParseMirrorOptions(request.mirror);
  if (!mirror.ok())
    return absl::InvalidArgumentError(absl::StrCat("--mirror: ", mirror.status().message()));
  options.mirror = *mirror;
  absl::StatusOr<ChannelsLast> layout = ParseChannelsLast(request.channels_last);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--channels_last: ", layout.status().message()));
  }
  options.kernels.channels_last = *layout;
  ASSIGN_OR_RETURN(options.numerics.compute_dtype, ParseComputeDType(request.dtype));
  if (request.data_parallel_bucket_bytes > 0) {
    options.parallel.data_parallel =
        DataParallel{.bucket_bytes = request.data_parallel_bucket_bytes};
  }
  // What Trainer::Create would refuse, the dump refuses too (it shows that trainer's step).
  RETURN_IF_ERROR(ValidateTrainOptions(options));
  return options;
}

absl::Status ValidateDumpRequest(const DumpRequest& request) {
  if (request.model != "mlp" && request.model != "resnet" && request.model != "ensemble" &&
      request.model != "gpt2") {
    return absl::InvalidArgumentError(absl::StrCat("unknown --model '", request.model,
                                                   "': expected mlp, resnet, ensemble or gpt2"));
  }
  if (request.model == "ensemble" && request.ensemble < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ensemble must be at least 1, got ", request.ensemble));
  }
  ASSIGN_OR_RETURN(DumpStage stage, ParseDumpStage(request.stage));
  ASSIGN_OR_RETURN(passes::DumpFormat format, passes::ParseDumpFormat(request.format));
  if (request.cuda_debug_dot &&
      (stage != DumpStage::kCudaGraph || format != passes::DumpFormat::kDot)) {
    return absl::InvalidArgumentError(
        "--cuda_debug_dot needs --stage cuda-graph --format dot (it is CUDA's own DOT)");
  }
  if (request.lanes < 0 || request.lanes > passes::kMaxLanes) {
    return absl::InvalidArgumentError(absl::StrCat("--lanes must be 0 (auto) or 1 to ",
                                                   passes::kMaxLanes, ", got ", request.lanes));
  }
  if (request.data_parallel_bucket_bytes < 0 ||
      (request.data_parallel_bucket_bytes > 0 && stage == DumpStage::kCudaGraph)) {
    return absl::InvalidArgumentError(
        "--data_parallel_bucket_mb must be positive, with --stage training or plan (a captured "
        "data-parallel step needs its ranks)");
  }
  RETURN_IF_ERROR(TrainOptionsOf(request).status());
  RETURN_IF_ERROR(CheckWritable(request.output));
  RETURN_IF_ERROR(passes::CheckFormatAvailable(format));
  if (stage == DumpStage::kCudaGraph) return CheckDeviceForCapture();
  return absl::OkStatus();
}

absl::StatusOr<std::string> DumpModel(const DumpRequest& request) {
  RETURN_IF_ERROR(ValidateDumpRequest(request));
  ASSIGN_OR_RETURN(DumpStage stage, ParseDumpStage(request.stage));
  ASSIGN_OR_RETURN(passes::DumpFormat format, passes::ParseDumpFormat(request.format));
  ASSIGN_OR_RETURN(Model model, BuildModel(request));
  switch (stage) {
    case DumpStage::kIr:
      return passes::DumpForward(model.graph, model.loss, format);
    case DumpStage::kTraining: {
      ASSIGN_OR_RETURN(const passes::CompileOptions options, CompileOptionsOf(request));
      ASSIGN_OR_RETURN(passes::TrainingStep step,
                       passes::BuildTrainingStep(model.graph, model.loss, options));
      return passes::DumpTraining(step.training, format);
    }
    case DumpStage::kPlan: {
      ASSIGN_OR_RETURN(const passes::CompileOptions options, CompileOptionsOf(request));
      ASSIGN_OR_RETURN(passes::CompiledStep step,
                       passes::CompileStep(model.graph, model.loss, options));
      return passes::DumpPlan(step.plan, format);
    }
    case DumpStage::kCudaGraph:
      return DumpCudaGraph(model, request, format);
  }
  return absl::InvalidArgumentError("unknown dump stage");
}

absl::Status WriteDump(const std::string& path, absl::string_view text) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::InternalError(absl::StrCat("cannot open '", path, "': ", strerror(errno)));
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const int write_errno = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    return absl::InternalError(
        absl::StrCat("cannot write '", path, "': ", strerror(written ? errno : write_errno)));
  }
  return absl::OkStatus();
}

}  // namespace reprise
