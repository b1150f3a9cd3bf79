// train_ensemble: K MLPs trained side by side in one graph, each on spirals of its own (a
// different noise stream per model), batched into one strided-batched GEMM per layer by the
// Trainer. Prints each model's loss, saves every model's weights under its own names, then times
// the same ensemble unbatched and batched, eager and as a CUDA graph.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "examples/spirals.h"
#include "reprise/reprise.h"
#include "src/runtime/device.h"
#include "src/util/status_macros.h"
#include "tools/cli.h"

ABSL_FLAG(int, models, 8, "models in the ensemble");
ABSL_FLAG(int, steps, 1000, "training steps (batched, captured)");
ABSL_FLAG(int, batch, 64, "batch of each model");
ABSL_FLAG(int, depth, 2, "hidden layers of each model");
ABSL_FLAG(int, width, 256, "hidden width");
ABSL_FLAG(int, classes, 3, "spiral arms");
ABSL_FLAG(float, lr, 0.05f, "learning rate");
ABSL_FLAG(int, print_every, 200, "print the models' losses every N steps");
ABSL_FLAG(std::string, save, "", "write every model's weights to this safetensors file");

namespace {

using reprise::ExecMode;

constexpr reprise::cli::Program kProgram = {
    "train_ensemble",
    "[--models K] [--steps N] [--batch N] [--depth N] [--width N] [--classes N] [--lr X] "
    "[--print_every N] [--save FILE]\n  Trains K MLPs side by side, batched, as one captured "
    "CUDA graph (needs an NVIDIA GPU).",
    __FILE__};

struct Run {
  reprise::models::MlpEnsemble ensemble;
  std::unique_ptr<reprise::Trainer> trainer;
};

absl::StatusOr<Run> MakeRun(ExecMode mode, bool batch_ensembles) {
  Run run;
  ASSIGN_OR_RETURN(run.ensemble,
                   reprise::models::BuildMlpEnsemble(absl::GetFlag(FLAGS_models),
                                                     {.batch = absl::GetFlag(FLAGS_batch),
                                                      .input_features = 2,
                                                      .depth = absl::GetFlag(FLAGS_depth),
                                                      .width = absl::GetFlag(FLAGS_width),
                                                      .classes = absl::GetFlag(FLAGS_classes)}));
  reprise::TrainOptions options;
  options.on_compile_progress = reprise::cli::CompileProgressPrinter(kProgram.name);
  options.launch.mode = mode;
  options.parallel.batch_ensembles = batch_ensembles;
  options.optimizer.learning_rate = absl::GetFlag(FLAGS_lr);
  options.fetch = run.ensemble.losses;  // Each model's loss stays readable.
  ASSIGN_OR_RETURN(run.trainer,
                   reprise::Trainer::Create(run.ensemble.graph, run.ensemble.loss, options));
  return run;
}

// A fresh batch for every model: model k draws from a spirals stream of its own.
absl::Status FeedModels(reprise::Trainer& trainer, std::vector<reprise::examples::Spirals>& data) {
  std::vector<float> x;
  std::vector<int32_t> y;
  for (size_t k = 0; k < data.size(); ++k) {
    data[k].Next(absl::GetFlag(FLAGS_batch), x, y);
    RETURN_IF_ERROR(trainer.SetInput(absl::StrCat("m", k, ".features"), x));
    RETURN_IF_ERROR(trainer.SetInput(absl::StrCat("m", k, ".labels"), y));
  }
  return absl::OkStatus();
}

std::vector<reprise::examples::Spirals> MakeData() {
  std::vector<reprise::examples::Spirals> data;
  for (int k = 0; k < absl::GetFlag(FLAGS_models); ++k) {
    data.emplace_back(absl::GetFlag(FLAGS_classes), /*seed=*/100 + k);
  }
  return data;
}

absl::Status Train() {
  const int models = absl::GetFlag(FLAGS_models), steps = absl::GetFlag(FLAGS_steps);
  ASSIGN_OR_RETURN(Run run, MakeRun(ExecMode::kGraph, /*batch_ensembles=*/true));
  reprise::Trainer& trainer = *run.trainer;
  std::printf("%d MLPs %d x %d on %d-arm spirals, batch %d each, batched, one CUDA graph\n", models,
              absl::GetFlag(FLAGS_depth), absl::GetFlag(FLAGS_width), absl::GetFlag(FLAGS_classes),
              absl::GetFlag(FLAGS_batch));
  std::vector<reprise::examples::Spirals> data = MakeData();
  for (int step = 0; step < steps; ++step) {
    RETURN_IF_ERROR(FeedModels(trainer, data));
    RETURN_IF_ERROR(trainer.Step());
    if ((step + 1) % absl::GetFlag(FLAGS_print_every) != 0 && step + 1 != steps) continue;
    std::printf("step %5d  losses", step + 1);
    for (const reprise::Value& loss : run.ensemble.losses) {
      ASSIGN_OR_RETURN(std::vector<float> value, trainer.Read(loss));
      std::printf(" %.4f", value[0]);
    }
    std::printf("\n");
  }
  if (const std::string path = absl::GetFlag(FLAGS_save); !path.empty()) {
    RETURN_IF_ERROR(trainer.SaveWeights(path));
    std::printf("saved every model's weights (\"m0.fc0.weight\", ...) to %s\n", path.c_str());
  }

  std::printf("\nms/step (median of 200 CUDA-event-timed steps after 20 warm-up):\n");
  for (const bool batched : {false, true}) {
    for (ExecMode mode : {ExecMode::kBulked, ExecMode::kGraph}) {
      ASSIGN_OR_RETURN(Run timed, MakeRun(mode, batched));
      std::vector<reprise::examples::Spirals> timing_data = MakeData();
      RETURN_IF_ERROR(FeedModels(*timed.trainer, timing_data));
      RETURN_IF_ERROR(timed.trainer->TimeSteps(20).status());
      ASSIGN_OR_RETURN(std::vector<float> ms, timed.trainer->TimeSteps(200));
      std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
      std::printf("  %-9s %-7s %.4f ms  (%lld launches/step)\n", batched ? "batched" : "unbatched",
                  std::string(reprise::ExecModeName(mode)).c_str(), ms[ms.size() / 2],
                  static_cast<long long>(timed.trainer->stats().launches_per_step));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = reprise::cli;
  cli::ParseCommandLine(argc, argv, kProgram);
  cli::CheckFlags(kProgram,
                  {cli::AtLeast("models", FLAGS_models, 1), cli::AtLeast("steps", FLAGS_steps, 1),
                   cli::AtLeast("batch", FLAGS_batch, 1), cli::AtLeast("depth", FLAGS_depth, 0),
                   cli::AtLeast("width", FLAGS_width, 1), cli::AtLeast("classes", FLAGS_classes, 2),
                   cli::AtLeast("print_every", FLAGS_print_every, 1)});
  auto devices = reprise::runtime::VisibleDeviceCount();
  if (!devices.ok() || *devices == 0) {
    std::fprintf(stderr,
                 "train_ensemble: no CUDA device visible; it needs an NVIDIA GPU (compute "
                 "capability 8.0 or newer)\n");
    return cli::kExitFailure;
  }
  return cli::Finish(kProgram, Train());
}
