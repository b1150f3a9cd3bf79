// train_mlp: the README's main job. Trains an MLP classifier on interleaved spirals with the whole
// training step captured into one CUDA graph, then times the same plan run sync, bulked and as a
// graph, and checks that bulked and graph runs give the same bits.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "examples/spirals.h"
#include "reprise/reprise.h"
#include "src/runtime/device.h"
#include "src/util/status_macros.h"
#include "tools/cli.h"

ABSL_FLAG(int, steps, 1500, "training steps with capture");
ABSL_FLAG(int, batch, 256, "batch size");
ABSL_FLAG(int, depth, 4, "hidden layers");
ABSL_FLAG(int, width, 256, "hidden width");
ABSL_FLAG(int, classes, 3, "spiral arms");
ABSL_FLAG(float, lr, 0.05f, "learning rate");
ABSL_FLAG(int, print_every, 100, "print the loss every N steps");
ABSL_FLAG(int, verify, 0,
          "after training, run N steps captured and N eagerly from the same state and compare "
          "every tensor bit for bit (Trainer::Verify); exit 1 on a difference");

namespace {

using reprise::ExecMode;

constexpr reprise::cli::Program kProgram = {
    "train_mlp",
    "[--steps N] [--batch N] [--depth N] [--width N] [--classes N] [--lr X] [--print_every N] "
    "[--verify N]\n  Trains an MLP on spirals as one captured CUDA graph (needs an NVIDIA GPU).",
    __FILE__};

struct Run {
  std::unique_ptr<reprise::Trainer> trainer;
  reprise::models::Mlp mlp;
};

absl::StatusOr<Run> MakeRun(ExecMode mode) {
  Run run;
  ASSIGN_OR_RETURN(run.mlp, reprise::models::BuildMlp({.batch = absl::GetFlag(FLAGS_batch),
                                                       .input_features = 2,
                                                       .depth = absl::GetFlag(FLAGS_depth),
                                                       .width = absl::GetFlag(FLAGS_width),
                                                       .classes = absl::GetFlag(FLAGS_classes)}));
  reprise::TrainOptions options;
  options.on_compile_progress = reprise::cli::CompileProgressPrinter(kProgram.name);
  options.launch.mode = mode;
  options.optimizer.learning_rate = absl::GetFlag(FLAGS_lr);
  options.fetch = {run.mlp.logits};
  ASSIGN_OR_RETURN(run.trainer, reprise::Trainer::Create(run.mlp.graph, run.mlp.loss, options));
  return run;
}

int Argmax(const float* row, int n) {
  return static_cast<int>(std::max_element(row, row + n) - row);
}

absl::Status Train() {
  const int batch = absl::GetFlag(FLAGS_batch), classes = absl::GetFlag(FLAGS_classes);
  const int steps = absl::GetFlag(FLAGS_steps);
  ASSIGN_OR_RETURN(Run run, MakeRun(ExecMode::kGraph));
  reprise::Trainer& trainer = *run.trainer;
  std::printf(
      "MLP %d x %d on %d-arm spirals, batch %d, SGD lr %.3g momentum 0.9, %d steps, "
      "captured as one CUDA graph\n",
      absl::GetFlag(FLAGS_depth), absl::GetFlag(FLAGS_width), classes, batch,
      absl::GetFlag(FLAGS_lr), steps);
  reprise::examples::Spirals data(classes, /*seed=*/1);
  std::vector<float> x;
  std::vector<int32_t> y;
  int correct = 0, seen = 0;
  const int measure_from = steps - std::min(steps, 100);
  for (int step = 0; step < steps; ++step) {
    data.Next(batch, x, y);
    RETURN_IF_ERROR(trainer.SetInput("features", x));
    RETURN_IF_ERROR(trainer.SetInput("labels", y));
    RETURN_IF_ERROR(trainer.Step());
    if ((step + 1) % absl::GetFlag(FLAGS_print_every) == 0) {
      ASSIGN_OR_RETURN(float loss, trainer.Loss());
      std::printf("step %5d  loss %.4f\n", step + 1, loss);
    }
    if (step >= measure_from) {
      // The logits come from weights that had not yet seen this batch: held-out accuracy.
      ASSIGN_OR_RETURN(std::vector<float> logits, trainer.Read(run.mlp.logits));
      for (int i = 0; i < batch; ++i) correct += Argmax(&logits[i * classes], classes) == y[i];
      seen += batch;
    }
  }
  std::printf("accuracy on the last %d unseen samples: %.1f%%\n", seen, 100.0 * correct / seen);
  if (const int verify = absl::GetFlag(FLAGS_verify); verify > 0) {
    ASSIGN_OR_RETURN(const reprise::VerifyResult result, trainer.Verify(verify));
    std::printf("%s\n", result.ToString().c_str());
    if (!result.ok()) return absl::InternalError("verify mode found a difference");
  }
  std::printf("%s", trainer.Report().ToText().c_str());

  // The same plan three ways; bulked and graph must agree bit for bit.
  std::printf("\nms/step (median of 200 CUDA-event-timed steps after 20 warm-up):\n");
  std::vector<float> bulked_weights, graph_weights;
  data.Next(batch, x, y);  // One batch for all three modes, so their weights can be compared.
  for (ExecMode mode : {ExecMode::kSync, ExecMode::kBulked, ExecMode::kGraph}) {
    ASSIGN_OR_RETURN(Run timed, MakeRun(mode));
    RETURN_IF_ERROR(timed.trainer->SetInput("features", x));
    RETURN_IF_ERROR(timed.trainer->SetInput("labels", y));
    RETURN_IF_ERROR(timed.trainer->TimeSteps(20).status());
    ASSIGN_OR_RETURN(std::vector<float> ms, timed.trainer->TimeSteps(200));
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    ASSIGN_OR_RETURN(std::vector<float> w, timed.trainer->GetParameter("fc0.weight"));
    if (mode == ExecMode::kBulked) bulked_weights = w;
    if (mode == ExecMode::kGraph) graph_weights = w;
    std::printf("  %-7s %.4f ms  (%lld launches/step)\n",
                std::string(reprise::ExecModeName(mode)).c_str(), ms[ms.size() / 2],
                static_cast<long long>(timed.trainer->stats().launches_per_step));
  }
  std::printf("bulked and graph weights after 220 steps are bitwise equal: %s\n",
              bulked_weights == graph_weights ? "yes" : "NO");
  return bulked_weights == graph_weights
             ? absl::OkStatus()
             : absl::InternalError("graph replay diverged from the bulked run");
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = reprise::cli;
  cli::ParseCommandLine(argc, argv, kProgram);
  cli::CheckFlags(
      kProgram,
      {cli::AtLeast("steps", FLAGS_steps, 1), cli::AtLeast("batch", FLAGS_batch, 1),
       cli::AtLeast("depth", FLAGS_depth, 0), cli::AtLeast("width", FLAGS_width, 1),
       cli::AtLeast("classes", FLAGS_classes, 2), cli::AtLeast("print_every", FLAGS_print_every, 1),
       cli::AtLeast("verify", FLAGS_verify, 0)});
  auto devices = reprise::runtime::VisibleDeviceCount();
  if (!devices.ok() || *devices == 0) {
    std::fprintf(stderr,
                 "train_mlp: no CUDA device visible; it needs an NVIDIA GPU (compute "
                 "capability 8.0 or newer)\n");
    return cli::kExitFailure;
  }
  return cli::Finish(kProgram, Train());
}
