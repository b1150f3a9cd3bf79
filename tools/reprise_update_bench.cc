// reprise-update-bench: the host cost of each way the captured step changes between replays,
// against a plain Step() and a full re-instantiation, across model sizes (issue 5's benchmark).
// Per model, and per path, many repetitions, each with the device idle (the queued step is
// waited for first, untimed): the change's host time, then the host time of the Step() after it.
//   step           nothing changes
//   learning_rate  SetLearningRate: the device-side parameter block, no graph update
//   bind_input     BindInput to another device pointer: one memcpy node patched
//   exec_update    the step re-captured (nothing changed) and applied by cudaGraphExecUpdate
//   reinstantiate  the step re-captured and instantiated anew (forced)
// The trainer's counters over each path's repetitions are printed beside it, so the path taken
// is seen, not assumed (instantiations stay 0 for every path but reinstantiate). The device time
// of one replay (CUDA events, median) is printed per model for scale. --json writes it all.
//
//   reprise-update-bench --models mlp:8x256:b32,resnet50:b32:nhwc:tf32 --json update.json
//   reprise-update-bench --models mlp:2x64:b16 --paths step,bind_input --reps 200
//   reprise-update-bench --models mlp:2x64:b16,resnet50:b32:nhwc:tf32 --device_launch
//       (TrainOptions::launch.graph_launch = kDevice: Step() launches a one-node graph that
//       tail-launches
//        the step from the device; every change of the step's graph is uploaded again)
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "reprise/reprise.h"
#include "src/api/update_paths.h"
#include "src/runtime/device.h"
#include "src/tools/update_bench.h"
#include "src/util/status_macros.h"
#include "tools/cli.h"

ABSL_FLAG(std::string, models,
          "mlp:8x256:b32,mlp:4x1024:b256,resnet18:b32:nhwc:tf32,resnet50:b32:nhwc:tf32",
          "comma-separated model specs: mlp:<depth>x<width>:b<batch> or resnet<depth>:b<batch>, "
          "then any of i<image size>, c<classes>, nchw, nhwc, tf32");
ABSL_FLAG(std::string, paths, "all",
          "all, or any of step, learning_rate, bind_input, exec_update, reinstantiate");
ABSL_FLAG(int, reps, 1000, "timed repetitions of step, learning_rate and bind_input");
ABSL_FLAG(int, recapture_reps, 100, "timed repetitions of exec_update and reinstantiate");
ABSL_FLAG(int, warmup, 20, "untimed repetitions before each path's timed ones");
ABSL_FLAG(int, device_steps, 100, "replays timed on the device for the step's device time");
ABSL_FLAG(int, lanes, 0, "0 (auto), 1, 2, 3 or 4 concurrent lanes");
ABSL_FLAG(bool, device_launch, false,
          "launch the captured step from the device (TrainOptions::launch.graph_launch = kDevice), "
          "else from the host (kHost)");
ABSL_FLAG(std::string, json, "", "write results to this JSON file");

namespace {

constexpr reprise::cli::Program kProgram = {
    "reprise-update-bench",
    "[--models SPEC,...] [--paths all|step,...] [--reps N] [--lanes N] [--device_launch] "
    "[--json FILE]\n  The host cost of each way the captured step changes between replays.",
    __FILE__};

absl::StatusOr<reprise::tools::UpdateBenchConfig> ParseFlags() {
  return reprise::tools::ParseUpdateBenchFlags({
      .models = absl::GetFlag(FLAGS_models),
      .paths = absl::GetFlag(FLAGS_paths),
      .reps = absl::GetFlag(FLAGS_reps),
      .recapture_reps = absl::GetFlag(FLAGS_recapture_reps),
      .warmup = absl::GetFlag(FLAGS_warmup),
      .device_steps = absl::GetFlag(FLAGS_device_steps),
      .lanes = absl::GetFlag(FLAGS_lanes),
      .device_launch = absl::GetFlag(FLAGS_device_launch),
  });
}

absl::Status Main(const reprise::tools::UpdateBenchConfig& config) {
  ASSIGN_OR_RETURN(int devices, reprise::runtime::VisibleDeviceCount());
  if (devices == 0) return absl::FailedPreconditionError("no CUDA device visible");
  ASSIGN_OR_RETURN(reprise::runtime::DeviceInfo device, reprise::runtime::UseDevice(0));
  reprise::tools::UpdateBenchReport report{
      .gpu = device.name,
      .date = absl::FormatTime("%Y-%m-%d", absl::Now(), absl::UTCTimeZone()),
      .reps = config.options.reps,
      .recapture_reps = config.options.recapture_reps,
      .warmup = config.options.warmup,
      .lanes = config.lanes,
      .device_launch = config.device_launch};
  for (const reprise::tools::UpdateBenchModel& model : config.models) {
    std::fprintf(stderr, "reprise-update-bench: measuring %s ...\n", model.spec.c_str());
    ASSIGN_OR_RETURN(reprise::tools::BuiltModel built,
                     reprise::tools::BuildUpdateBenchModel(model));
    reprise::TrainOptions options;
    options.on_compile_progress = reprise::cli::CompileProgressPrinter(kProgram.name);
    options.launch.mode = reprise::ExecMode::kGraph;
    options.numerics.allow_tf32 = model.tf32;
    options.launch.lanes = config.lanes;
    options.launch.graph_launch =
        config.device_launch ? reprise::GraphLaunch::kDevice : reprise::GraphLaunch::kHost;
    reprise::UpdateBenchOptions bench = config.options;
    bench.bound_input = built.feature_input;
    auto result = reprise::MeasureUpdatePaths(built.graph, built.loss, options, bench);
    if (!result.ok()) {
      return absl::Status(result.status().code(),
                          absl::StrCat(model.spec, ": ", result.status().message()));
    }
    report.runs.push_back({model, *std::move(result)});
  }
  std::fputs(reprise::tools::UpdateBenchTable(report).c_str(), stdout);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream out(path);
    out << reprise::tools::UpdateBenchJson(report);
    if (!out) return absl::UnavailableError(absl::StrCat("could not write ", path));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = reprise::cli;
  cli::ParseCommandLine(argc, argv, kProgram);
  // Flags first: a bad one is refused before anything touches the device.
  const absl::StatusOr<reprise::tools::UpdateBenchConfig> config = ParseFlags();
  cli::CheckFlags(kProgram, {config.status()});
  return cli::Finish(kProgram, Main(*config));
}
