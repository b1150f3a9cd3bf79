// train_resnet: trains a ResNet on a learnable synthetic task (each class is a fixed random image
// template, seen through noise) with the whole step captured into one CUDA graph; then times the
// same plan run sync, bulked and as a graph, and checks that bulked and graph runs give the same
// bits (with deterministic cuDNN algorithms).
//
//   train_resnet --depth 18 --image_size 64 --batch 32 --steps 200
//
// With --check_dir DIR it instead runs one strict-fp32 step and writes what
// tools/bench/torch_resnet_check.py compares with PyTorch: initial.safetensors (weights and state
// before the step), batch.safetensors (images, labels; the configuration as metadata),
// after.safetensors (after the step: each "<param>.momentum" is then that parameter's gradient)
// and loss.txt.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "reprise/reprise.h"
#include "src/runtime/device.h"
#include "src/util/safetensors.h"
#include "src/util/status_macros.h"
#include "tools/cli.h"

ABSL_FLAG(int, depth, 18, "18, 34, 50, 101 or 152");
ABSL_FLAG(int, steps, 200, "training steps with capture");
ABSL_FLAG(int, batch, 32, "batch size");
ABSL_FLAG(int, image_size, 64, "image height and width");
ABSL_FLAG(int, classes, 10, "classes (image templates)");
ABSL_FLAG(float, noise, 1.0f, "standard deviation of the noise over each template");
ABSL_FLAG(float, lr, 0.02f, "learning rate");
ABSL_FLAG(std::string, layout, "nchw", "nchw or nhwc");
ABSL_FLAG(bool, tf32, true, "allow TF32 in convolutions and matmuls");
ABSL_FLAG(int, print_every, 20, "print the loss every N steps");
ABSL_FLAG(int, verify, 0,
          "after training, run N steps captured and N eagerly from the same state and compare "
          "every tensor bit for bit (Trainer::Verify; the training run then uses deterministic "
          "cuDNN algorithms); exit 1 on a difference");
ABSL_FLAG(int, timed_steps, 50, "CUDA-event-timed steps per mode (after 10 warm-up)");
ABSL_FLAG(std::string, check_dir, "",
          "write one strict-fp32 step's weights, batch and loss here for torch_resnet_check.py");

namespace {

using reprise::ExecMode;

constexpr reprise::cli::Program kProgram = {
    "train_resnet",
    "[--depth 18|34|50|101|152] [--steps N] [--batch N] [--image_size N] [--layout nchw|nhwc] "
    "[--check_dir DIR] ...\n  Trains a ResNet on noisy image templates as one captured CUDA graph "
    "(needs an NVIDIA GPU).",
    __FILE__};

// Batches of noisy class templates: learnable, but not from a single pixel.
class Templates {
 public:
  Templates(int classes, int64_t image_elements, uint64_t seed) : rng_(seed) {
    std::uniform_real_distribution<float> uniform(-1, 1);
    templates_.resize(classes);
    for (auto& t : templates_) {
      t.resize(image_elements);
      for (float& v : t) v = uniform(rng_);
    }
  }
  void Next(int batch, float noise, std::vector<float>& images, std::vector<int32_t>& labels) {
    const int64_t per_image = templates_[0].size();
    images.resize(batch * per_image);
    labels.resize(batch);
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(templates_.size()) - 1);
    std::normal_distribution<float> normal(0, noise);
    for (int i = 0; i < batch; ++i) {
      labels[i] = pick(rng_);
      const std::vector<float>& t = templates_[labels[i]];
      for (int64_t j = 0; j < per_image; ++j) images[i * per_image + j] = t[j] + normal(rng_);
    }
  }

 private:
  std::mt19937_64 rng_;
  std::vector<std::vector<float>> templates_;
};

absl::StatusOr<reprise::models::ResNet> Build() {
  const std::string layout = absl::GetFlag(FLAGS_layout);
  if (layout != "nchw" && layout != "nhwc") {
    return absl::InvalidArgumentError(absl::StrCat("--layout must be nchw or nhwc, not ", layout));
  }
  return reprise::models::BuildResNet(
      {.depth = absl::GetFlag(FLAGS_depth),
       .batch = absl::GetFlag(FLAGS_batch),
       .classes = absl::GetFlag(FLAGS_classes),
       .image_size = absl::GetFlag(FLAGS_image_size),
       .layout = layout == "nhwc" ? reprise::Layout::kNHWC : reprise::Layout::kNCHW});
}

absl::StatusOr<std::unique_ptr<reprise::Trainer>> MakeTrainer(const reprise::models::ResNet& net,
                                                              ExecMode mode, bool deterministic) {
  reprise::TrainOptions options;
  options.on_compile_progress = reprise::cli::CompileProgressPrinter(kProgram.name);
  options.launch.mode = mode;
  options.optimizer.learning_rate = absl::GetFlag(FLAGS_lr);
  options.numerics.allow_tf32 = absl::GetFlag(FLAGS_tf32);
  options.numerics.deterministic = deterministic;
  return reprise::Trainer::Create(net.graph, net.loss, options);
}

// One step from the initial weights, written out for comparison with PyTorch.
absl::Status WriteCheck(const std::string& dir) {
  ASSIGN_OR_RETURN(reprise::models::ResNet net, Build());
  reprise::TrainOptions options;
  options.on_compile_progress = reprise::cli::CompileProgressPrinter(kProgram.name);
  options.launch.mode = ExecMode::kGraph;
  options.optimizer.learning_rate = absl::GetFlag(FLAGS_lr);
  options.numerics.allow_tf32 = false;
  options.numerics.deterministic = true;
  ASSIGN_OR_RETURN(auto trainer, reprise::Trainer::Create(net.graph, net.loss, options));
  const int batch = absl::GetFlag(FLAGS_batch), size = absl::GetFlag(FLAGS_image_size);
  Templates data(absl::GetFlag(FLAGS_classes), int64_t{3} * size * size, /*seed=*/1);
  std::vector<float> x;
  std::vector<int32_t> y;
  data.Next(batch, absl::GetFlag(FLAGS_noise), x, y);
  RETURN_IF_ERROR(trainer->SaveWeights(dir + "/initial.safetensors"));
  const bool nhwc = absl::GetFlag(FLAGS_layout) == "nhwc";
  const std::vector<int64_t> image_shape = nhwc ? std::vector<int64_t>{batch, size, size, 3}
                                                : std::vector<int64_t>{batch, 3, size, size};
  using reprise::util::SafetensorsDType;
  const reprise::util::TensorView tensors[] = {
      {"images", SafetensorsDType::kF32, image_shape,
       absl::string_view(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float))},
      {"labels",
       SafetensorsDType::kI32,
       {batch},
       absl::string_view(reinterpret_cast<const char*>(y.data()), y.size() * sizeof(int32_t))}};
  RETURN_IF_ERROR(reprise::util::WriteSafetensors(
      dir + "/batch.safetensors", tensors,
      {{"depth", absl::StrCat(absl::GetFlag(FLAGS_depth))},
       {"classes", absl::StrCat(absl::GetFlag(FLAGS_classes))},
       {"image_size", absl::StrCat(size)},
       {"layout", nhwc ? "NHWC" : "NCHW"},
       {"lr", absl::StrCat(options.optimizer.learning_rate)},
       {"momentum", absl::StrCat(options.optimizer.momentum)},
       {"weight_decay", absl::StrCat(options.optimizer.weight_decay)},
       {"bn_momentum", "0.1"},
       {"bn_epsilon", "1e-05"}}));
  RETURN_IF_ERROR(trainer->SetInput("images", x));
  RETURN_IF_ERROR(trainer->SetInput("labels", y));
  RETURN_IF_ERROR(trainer->Step());
  ASSIGN_OR_RETURN(float loss, trainer->Loss());
  RETURN_IF_ERROR(trainer->SaveWeights(dir + "/after.safetensors"));
  std::FILE* file = std::fopen((dir + "/loss.txt").c_str(), "w");
  if (file == nullptr) return absl::InternalError(absl::StrCat("cannot write ", dir, "/loss.txt"));
  std::fprintf(file, "%.9g\n", loss);
  std::fclose(file);
  std::printf("ResNet-%d one strict-fp32 step, loss %.6f; weights, batch and loss written to %s\n",
              absl::GetFlag(FLAGS_depth), loss, dir.c_str());
  return absl::OkStatus();
}

absl::Status Train() {
  const int batch = absl::GetFlag(FLAGS_batch), steps = absl::GetFlag(FLAGS_steps);
  ASSIGN_OR_RETURN(reprise::models::ResNet net, Build());
  const int verify = absl::GetFlag(FLAGS_verify);
  ASSIGN_OR_RETURN(auto trainer, MakeTrainer(net, ExecMode::kGraph, /*deterministic=*/verify > 0));
  std::printf(
      "ResNet-%d, %s %dx%d images of %d noisy templates, batch %d, SGD lr %.3g momentum 0.9, "
      "TF32 %s, %d steps captured as one CUDA graph\n",
      absl::GetFlag(FLAGS_depth), absl::GetFlag(FLAGS_layout).c_str(),
      absl::GetFlag(FLAGS_image_size), absl::GetFlag(FLAGS_image_size),
      absl::GetFlag(FLAGS_classes), batch, absl::GetFlag(FLAGS_lr),
      absl::GetFlag(FLAGS_tf32) ? "on" : "off", steps);
  const int64_t image_elements =
      int64_t{3} * absl::GetFlag(FLAGS_image_size) * absl::GetFlag(FLAGS_image_size);
  Templates data(absl::GetFlag(FLAGS_classes), image_elements, /*seed=*/1);
  std::vector<float> x;
  std::vector<int32_t> y;
  float first_loss = 0, last_loss = 0;
  for (int step = 0; step < steps; ++step) {
    data.Next(batch, absl::GetFlag(FLAGS_noise), x, y);
    RETURN_IF_ERROR(trainer->SetInput("images", x));
    RETURN_IF_ERROR(trainer->SetInput("labels", y));
    RETURN_IF_ERROR(trainer->Step());
    if (step == 0 || (step + 1) % absl::GetFlag(FLAGS_print_every) == 0 || step + 1 == steps) {
      ASSIGN_OR_RETURN(last_loss, trainer->Loss());
      if (step == 0) first_loss = last_loss;
      std::printf("step %5d  loss %.4f\n", step + 1, last_loss);
    }
  }
  std::printf("loss %.4f -> %.4f\n", first_loss, last_loss);
  if (verify > 0) {
    ASSIGN_OR_RETURN(const reprise::VerifyResult result, trainer->Verify(verify));
    std::printf("%s\n", result.ToString().c_str());
    if (!result.ok()) return absl::InternalError("verify mode found a difference");
  }
  std::printf("%s", trainer->Report().ToText().c_str());
  trainer.reset();  // Frees its arena before the timed trainers take theirs.

  const int timed = absl::GetFlag(FLAGS_timed_steps);
  std::printf(
      "\nms/step (median of %d CUDA-event-timed steps after 10 warm-up; deterministic "
      "cuDNN algorithms):\n",
      timed);
  std::vector<float> bulked_weights, graph_weights;
  data.Next(batch, absl::GetFlag(FLAGS_noise), x, y);
  for (ExecMode mode : {ExecMode::kSync, ExecMode::kBulked, ExecMode::kGraph}) {
    ASSIGN_OR_RETURN(auto t, MakeTrainer(net, mode, /*deterministic=*/true));
    RETURN_IF_ERROR(t->SetInput("images", x));
    RETURN_IF_ERROR(t->SetInput("labels", y));
    RETURN_IF_ERROR(t->TimeSteps(10).status());
    ASSIGN_OR_RETURN(std::vector<float> ms, t->TimeSteps(timed));
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    ASSIGN_OR_RETURN(std::vector<float> w, t->GetParameter("conv1.weight"));
    if (mode == ExecMode::kBulked) bulked_weights = w;
    if (mode == ExecMode::kGraph) graph_weights = w;
    const float median = ms[ms.size() / 2];
    std::printf("  %-7s %8.3f ms  %8.0f images/s  (%lld launches/step)\n",
                std::string(reprise::ExecModeName(mode)).c_str(), median, batch / (median / 1e3),
                static_cast<long long>(t->stats().launches_per_step));
  }
  const bool equal = bulked_weights == graph_weights;
  std::printf("bulked and graph weights after %d steps are bitwise equal: %s\n", 10 + timed,
              equal ? "yes" : "NO");
  if (!(last_loss < first_loss)) return absl::InternalError("the loss did not fall");
  return equal ? absl::OkStatus() : absl::InternalError("graph replay diverged from bulked");
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = reprise::cli;
  cli::ParseCommandLine(argc, argv, kProgram);
  cli::CheckFlags(
      kProgram,
      {cli::OneOf("depth", FLAGS_depth, {18, 34, 50, 101, 152}),
       cli::AtLeast("steps", FLAGS_steps, 1), cli::AtLeast("batch", FLAGS_batch, 1),
       cli::AtLeast("image_size", FLAGS_image_size, 32), cli::AtLeast("classes", FLAGS_classes, 2),
       cli::NonNegative("noise", absl::GetFlag(FLAGS_noise)),
       cli::OneOf("layout", FLAGS_layout, {"nchw", "nhwc"}),
       cli::AtLeast("print_every", FLAGS_print_every, 1), cli::AtLeast("verify", FLAGS_verify, 0),
       cli::AtLeast("timed_steps", FLAGS_timed_steps, 1)});
  auto devices = reprise::runtime::VisibleDeviceCount();
  if (!devices.ok() || *devices == 0) {
    std::fprintf(stderr, "train_resnet: no CUDA device visible; it needs an NVIDIA GPU\n");
    return cli::kExitFailure;
  }
  const std::string check_dir = absl::GetFlag(FLAGS_check_dir);
  return cli::Finish(kProgram, check_dir.empty() ? Train() : WriteCheck(check_dir));
}
