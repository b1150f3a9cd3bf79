// reprise-optimizer-bench: the optimizer update alone, its bytes moved per update over its median
// time, against the GPU's device-to-device copy bandwidth. One JSON line per case:
//   {"case": "adamw+clip+cosine", "model": "resnet50", "parameters": 25557032, "nodes": 3,
//    "launches": 3, "bytes_per_update": ..., "median_ms": ..., "gb_per_s": ...,
//    "copy_gb_per_s": ..., "fraction_of_copy": ...}
// ("nodes": the plan's optimizer launches; "launches": the kernel launches they make.)
// Cases: SGD with momentum, and AdamW with gradient clipping and a warm-up + cosine schedule, over
// ResNet-50's parameters (25.6 M, in its 161 tensors) and an MLP's. The update is the plan's
// optimizer launches (multi-tensor updates, gradient norm, clip coefficient, scheduled rate, step
// counter) run back to back between CUDA events; bytes are every input they read and every
// tensor they write, counted from the plan. The copy row reads and writes --copy_mib MiB.
//
//   reprise-optimizer-bench --iters 200 --warmup 20
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "reprise/reprise.h"
#include "src/api/optimizer_bandwidth.h"
#include "src/runtime/device.h"
#include "src/util/status_macros.h"
#include "tools/cli.h"

ABSL_FLAG(int, iters, 200, "timed updates per case");
ABSL_FLAG(int, warmup, 20, "untimed updates before timing");
ABSL_FLAG(int, copy_mib, 1024, "MiB copied device to device for the copy bandwidth");
ABSL_FLAG(std::string, models, "resnet50,mlp", "parameter sets: resnet50, mlp");
ABSL_FLAG(int, mlp_depth, 8, "hidden layers of the MLP");
ABSL_FLAG(int, mlp_width, 1024, "hidden width and input features of the MLP");

namespace {

constexpr reprise::cli::Program kProgram = {
    "reprise-optimizer-bench",
    "[--models resnet50,mlp] [--iters N] [--warmup N] [--copy_mib N] [--mlp_depth N] "
    "[--mlp_width N]\n  The optimizer update's bytes per second against the device copy "
    "bandwidth.",
    __FILE__};

// Every name in --models is known (checked before any device work).
absl::Status CheckModels() {
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_models), ',')) {
    if (name != "resnet50" && name != "mlp") {
      return absl::InvalidArgumentError(
          absl::StrFormat("--models: unknown model '%s': resnet50 or mlp", name));
    }
  }
  return absl::OkStatus();
}

double Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Model {
  reprise::Graph graph;
  reprise::Value loss;
};

// Small batches and images: only the parameters matter here.
absl::StatusOr<Model> BuildModel(const std::string& name) {
  if (name == "resnet50") {
    ASSIGN_OR_RETURN(
        reprise::models::ResNet net,
        reprise::models::BuildResNet({.depth = 50, .batch = 2, .classes = 1000, .image_size = 32}));
    return Model{std::move(net.graph), net.loss};
  }
  if (name == "mlp") {
    const int width = absl::GetFlag(FLAGS_mlp_width);
    ASSIGN_OR_RETURN(reprise::models::Mlp mlp,
                     reprise::models::BuildMlp({.batch = 32,
                                                .input_features = width,
                                                .depth = absl::GetFlag(FLAGS_mlp_depth),
                                                .width = width,
                                                .classes = 10}));
    return Model{std::move(mlp.graph), mlp.loss};
  }
  return absl::InvalidArgumentError(absl::StrFormat("unknown model '%s': resnet50 or mlp", name));
}

struct Case {
  const char* name;
  reprise::OptimizerOptions optimizer;
};

std::vector<Case> Cases() {
  return {
      {"sgd_momentum", {.kind = reprise::OptimizerKind::kSgd, .momentum = 0.9f}},
      {"adamw+clip+cosine",
       {.kind = reprise::OptimizerKind::kAdamW,
        .learning_rate = 1e-3f,
        .weight_decay = 0.01f,
        .decay_rank1 = false,
        .max_grad_norm = 1.0f,
        .schedule = {.warmup_steps = 100,
                     .decay = reprise::LrDecay::kCosine,
                     .total_steps = 10000,
                     .min_lr_factor = 0.1f}}},
  };
}

absl::Status Main() {
  const int iters = absl::GetFlag(FLAGS_iters), warmup = absl::GetFlag(FLAGS_warmup);
  ASSIGN_OR_RETURN(int devices, reprise::runtime::VisibleDeviceCount());
  if (devices == 0) return absl::FailedPreconditionError("no CUDA device visible");
  ASSIGN_OR_RETURN(reprise::runtime::DeviceInfo device, reprise::runtime::UseDevice(0));
  const int64_t copy_bytes = int64_t{absl::GetFlag(FLAGS_copy_mib)} << 20;
  ASSIGN_OR_RETURN(std::vector<float> copy_ms, reprise::TimeDeviceCopy(copy_bytes, warmup, iters));
  const double copy_median = Median(copy_ms);
  const double copy_gbs = 2.0 * copy_bytes / (copy_median * 1e-3) / 1e9;  // Read and write.
  std::printf(
      "{\"case\": \"device_copy\", \"gpu\": \"%s\", \"bytes_per_copy\": %lld, \"median_ms\": "
      "%.5f, \"gb_per_s\": %.1f}\n",
      device.name.c_str(), static_cast<long long>(2 * copy_bytes), copy_median, copy_gbs);
  for (absl::string_view model_name : absl::StrSplit(absl::GetFlag(FLAGS_models), ',')) {
    for (const Case& c : Cases()) {
      ASSIGN_OR_RETURN(Model model, BuildModel(std::string(model_name)));
      reprise::TrainOptions options;
      options.on_compile_progress = reprise::cli::CompileProgressPrinter(kProgram.name);
      options.optimizer = c.optimizer;
      options.kernels.whole_step =
          false;  // The update in launches of its own, not in a fused step.
      options.launch.lanes = 1;
      ASSIGN_OR_RETURN(
          reprise::OptimizerTiming timing,
          reprise::TimeOptimizerUpdate(model.graph, model.loss, options, warmup, iters));
      const int64_t bytes = timing.traffic.bytes_read + timing.traffic.bytes_written;
      const double median = Median(timing.ms);
      const double gbs = bytes / (median * 1e-3) / 1e9;
      std::printf(
          "{\"case\": \"%s\", \"model\": \"%.*s\", \"gpu\": \"%s\", \"parameters\": %lld, "
          "\"nodes\": %lld, \"launches\": %lld, \"bytes_per_update\": %lld, "
          "\"bytes_read\": %lld, \"bytes_written\": %lld, \"median_ms\": %.5f, \"gb_per_s\": %.1f, "
          "\"copy_gb_per_s\": %.1f, \"fraction_of_copy\": %.3f}\n",
          c.name, static_cast<int>(model_name.size()), model_name.data(), device.name.c_str(),
          static_cast<long long>(timing.traffic.parameters),
          static_cast<long long>(timing.nodes_per_update),
          static_cast<long long>(timing.launches_per_update), static_cast<long long>(bytes),
          static_cast<long long>(timing.traffic.bytes_read),
          static_cast<long long>(timing.traffic.bytes_written), median, gbs, copy_gbs,
          gbs / copy_gbs);
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = reprise::cli;
  cli::ParseCommandLine(argc, argv, kProgram);
  cli::CheckFlags(kProgram,
                  {cli::AtLeast("iters", FLAGS_iters, 1), cli::AtLeast("warmup", FLAGS_warmup, 0),
                   cli::InRange("copy_mib", FLAGS_copy_mib, 1, 1 << 20),
                   cli::AtLeast("mlp_depth", FLAGS_mlp_depth, 0),
                   cli::AtLeast("mlp_width", FLAGS_mlp_width, 1), CheckModels()});
  return cli::Finish(kProgram, Main());
}
