// reprise-dp-bench: data-parallel scaling on the GPUs of one host. For each rank count (1 and
// --gpus), LocalDataParallel trains --model at --batch per GPU from one process, every rank's step
// one replayed CUDA graph with its NCCL all-reduces inside; a plain single-GPU trainer of the same
// per-GPU batch is the baseline. Prints images/s, scaling efficiency (images/s over N times the
// baseline's) and the exposed communication (step time over the baseline's: what the overlap did
// not hide). Compare with tools/bench/torch_ddp.py on the same host.
//
//   reprise-dp-bench --model resnet --depth 50 --batch 32 --gpus 2 --tf32
//   reprise-dp-bench --model mlp --depth 8 --width 256 --batch 32 --gpus 2
//
// With --launcher mpi, one process per GPU as mpirun starts them (MpiDataParallel: MPI passes
// NCCL's id, NCCL moves the data): every rank times its own single-GPU baseline, then all train
// data-parallel together; rank 0 prints (its step time: the collectives keep the ranks in step).
//
//   mpirun --allow-run-as-root -np 2 reprise-dp-bench --launcher mpi --model mlp --depth 8
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "reprise/reprise.h"
#include "src/runtime/device.h"
#include "src/util/json_writer.h"
#include "src/util/status_macros.h"
#include "tools/cli.h"

ABSL_FLAG(std::string, model, "resnet", "mlp or resnet");
ABSL_FLAG(int, depth, 50, "hidden layers (mlp); 18, 34, 50, 101 or 152 (resnet)");
ABSL_FLAG(int, width, 256, "hidden width and input features (mlp)");
ABSL_FLAG(int, batch, 32, "batch per GPU");
ABSL_FLAG(int, classes, 1000, "classes");
ABSL_FLAG(int, image_size, 224, "image height and width (resnet)");
ABSL_FLAG(int, gpus, 0, "ranks of the scaled run (one per GPU); 0: every visible GPU");
ABSL_FLAG(int, iters, 200, "timed steps");
ABSL_FLAG(int, warmup, 20, "untimed steps before timing");
ABSL_FLAG(bool, tf32, false, "allow TF32 in matmuls and convolutions");
ABSL_FLAG(bool, bf16, false, "mixed precision: compute in bfloat16");
ABSL_FLAG(int, lanes, 0, "compute lanes: 0 (auto), 1 to 4");
ABSL_FLAG(double, bucket_mb, 25, "gradient bucket size in MiB");
ABSL_FLAG(std::string, json, "", "write results to this JSON file");
ABSL_FLAG(std::string, launcher, "local",
          "local: one process drives every GPU (LocalDataParallel); mpi: one process per GPU "
          "under mpirun (MpiDataParallel)");

namespace {

constexpr reprise::cli::Program kProgram = {
    "reprise-dp-bench",
    "[--model mlp|resnet] [--depth N] [--width N] [--batch N] [--gpus N] [--iters N] "
    "[--launcher local|mpi] [--json FILE] ...\n  Data-parallel scaling on the GPUs of one host.",
    __FILE__};

struct Model {
  reprise::Graph graph;
  reprise::Value loss;
  std::string input;
  int64_t input_elements = 0;
};

absl::StatusOr<Model> BuildModel() {
  const int batch = absl::GetFlag(FLAGS_batch), classes = absl::GetFlag(FLAGS_classes);
  if (absl::GetFlag(FLAGS_model) == "mlp") {
    const int width = absl::GetFlag(FLAGS_width);
    ASSIGN_OR_RETURN(reprise::models::Mlp mlp,
                     reprise::models::BuildMlp({.batch = batch,
                                                .input_features = width,
                                                .depth = absl::GetFlag(FLAGS_depth),
                                                .width = width,
                                                .classes = classes}));
    return Model{std::move(mlp.graph), mlp.loss, "features", int64_t{batch} * width};
  }
  if (absl::GetFlag(FLAGS_model) == "resnet") {
    const int size = absl::GetFlag(FLAGS_image_size);
    ASSIGN_OR_RETURN(reprise::models::ResNet net,
                     reprise::models::BuildResNet({.depth = absl::GetFlag(FLAGS_depth),
                                                   .batch = batch,
                                                   .classes = classes,
                                                   .image_size = size}));
    return Model{std::move(net.graph), net.loss, "images", int64_t{batch} * 3 * size * size};
  }
  return absl::InvalidArgumentError("--model must be mlp or resnet");
}

reprise::TrainOptions Options() {
  reprise::TrainOptions options;
  options.on_compile_progress = reprise::cli::CompileProgressPrinter(kProgram.name);
  options.numerics.allow_tf32 = absl::GetFlag(FLAGS_tf32);
  options.numerics.compute_dtype =
      absl::GetFlag(FLAGS_bf16) ? reprise::DType::kBFloat16 : reprise::DType::kFloat32;
  options.launch.lanes = absl::GetFlag(FLAGS_lanes);
  // The data-parallel step cannot use the whole-step MLP kernel; neither does the baseline.
  options.kernels.whole_step = false;
  return options;
}

// Fresh random data (never zeros), the same on every rank apart from the seed.
absl::Status Feed(reprise::Trainer& t, const Model& model, int rank) {
  std::mt19937 rng(100 + rank);
  std::normal_distribution<float> normal;
  std::vector<float> x(model.input_elements);
  for (float& v : x) v = normal(rng);
  std::vector<int32_t> y(absl::GetFlag(FLAGS_batch));
  for (int32_t& v : y) v = static_cast<int32_t>(rng() % absl::GetFlag(FLAGS_classes));
  RETURN_IF_ERROR(t.SetInput(model.input, x));
  return t.SetInput("labels", y);
}

double Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The median step time (ms) of `t` after warm-up.
absl::StatusOr<double> TimeTrainer(reprise::Trainer& t) {
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) RETURN_IF_ERROR(t.Step());
  ASSIGN_OR_RETURN(std::vector<float> ms, t.TimeSteps(absl::GetFlag(FLAGS_iters)));
  return Median(std::move(ms));
}

// The step time of `ranks` data-parallel ranks: the slowest rank's median.
absl::StatusOr<double> TimeDataParallel(const Model& model, int ranks) {
  reprise::TrainOptions options = Options();
  options.parallel.data_parallel = reprise::DataParallel{
      .bucket_bytes = static_cast<int64_t>(absl::GetFlag(FLAGS_bucket_mb) * (1 << 20))};
  ASSIGN_OR_RETURN(auto dp,
                   reprise::LocalDataParallel::Create(model.graph, model.loss, options, ranks));
  std::vector<double> ms(ranks);
  RETURN_IF_ERROR(dp->ForEachRank([&](int rank, reprise::Trainer& t) -> absl::Status {
    RETURN_IF_ERROR(Feed(t, model, rank));
    ASSIGN_OR_RETURN(ms[rank], TimeTrainer(t));
    return absl::OkStatus();
  }));
  return *std::max_element(ms.begin(), ms.end());
}

// One rank of a job started by mpirun: its plain single-GPU step time, then the job's
// data-parallel step time (this rank's median).
struct MpiTimes {
  int rank = 0, world_size = 1;
  double single_ms = 0, data_parallel_ms = 0;
};
absl::StatusOr<MpiTimes> TimeUnderMpi(const Model& model) {
  ASSIGN_OR_RETURN(reprise::MpiRank me, reprise::MpiDataParallel());
  MpiTimes out{.rank = me.data_parallel.rank, .world_size = me.data_parallel.world_size};
  reprise::TrainOptions options = Options();
  options.device = me.device;
  {
    ASSIGN_OR_RETURN(auto single, reprise::Trainer::Create(model.graph, model.loss, options));
    RETURN_IF_ERROR(Feed(*single, model, out.rank));
    ASSIGN_OR_RETURN(out.single_ms, TimeTrainer(*single));
  }
  options.parallel.data_parallel = me.data_parallel;
  options.parallel.data_parallel->bucket_bytes =
      static_cast<int64_t>(absl::GetFlag(FLAGS_bucket_mb) * (1 << 20));
  ASSIGN_OR_RETURN(auto trainer, reprise::Trainer::Create(model.graph, model.loss, options));
  RETURN_IF_ERROR(Feed(*trainer, model, out.rank));
  ASSIGN_OR_RETURN(out.data_parallel_ms, TimeTrainer(*trainer));
  return out;
}

absl::Status Main() {
  const std::string launcher = absl::GetFlag(FLAGS_launcher);
  ASSIGN_OR_RETURN(const Model model, BuildModel());
  const int batch = absl::GetFlag(FLAGS_batch);

  // (rank count, step ms) of each data-parallel run.
  std::vector<std::pair<int, double>> runs;
  double single_ms = 0;
  if (launcher == "mpi") {
    ASSIGN_OR_RETURN(const MpiTimes times, TimeUnderMpi(model));
    RETURN_IF_ERROR(reprise::MpiFinalize());
    if (times.rank != 0) return absl::OkStatus();
    single_ms = times.single_ms;
    runs.emplace_back(times.world_size, times.data_parallel_ms);
  } else {
    ASSIGN_OR_RETURN(const int visible, reprise::runtime::VisibleDeviceCount());
    const int gpus = absl::GetFlag(FLAGS_gpus) == 0 ? visible : absl::GetFlag(FLAGS_gpus);
    {
      ASSIGN_OR_RETURN(auto single, reprise::Trainer::Create(model.graph, model.loss, Options()));
      RETURN_IF_ERROR(Feed(*single, model, 0));
      ASSIGN_OR_RETURN(single_ms, TimeTrainer(*single));
    }
    std::vector<int> counts = {1};
    if (gpus > 1) counts.push_back(gpus);
    for (int ranks : counts) {
      ASSIGN_OR_RETURN(const double ms, TimeDataParallel(model, ranks));
      runs.emplace_back(ranks, ms);
    }
  }
  const double single_rate = batch * 1000.0 / single_ms;

  const std::string config =
      absl::GetFlag(FLAGS_model) == "mlp"
          ? absl::StrCat("mlp ", absl::GetFlag(FLAGS_depth), "x", absl::GetFlag(FLAGS_width))
          : absl::StrCat("resnet", absl::GetFlag(FLAGS_depth));
  std::printf("%s b%d/GPU%s%s, buckets %.0f MiB, launcher %s\n", config.c_str(), batch,
              absl::GetFlag(FLAGS_tf32) ? " tf32" : "", absl::GetFlag(FLAGS_bf16) ? " bf16" : "",
              absl::GetFlag(FLAGS_bucket_mb), launcher.c_str());
  std::printf("%-22s %10s %12s %11s %14s\n", "run", "step ms", "images/s", "efficiency",
              "exposed comm ms");
  std::printf("%-22s %10.3f %12.1f %11s %14s\n", "1 GPU, no data parallel", single_ms, single_rate,
              "-", "-");
  reprise::util::JsonWriter json;
  json.BeginObject();
  json.Key("config").String(config);
  json.Key("launcher").String(launcher);
  json.Key("batch_per_gpu").Int(batch);
  json.Key("single_ms").Double(single_ms);
  json.Key("runs").BeginArray();
  for (const auto& [ranks, ms] : runs) {
    const double rate = ranks * batch * 1000.0 / ms;
    const double efficiency = rate / (ranks * single_rate);
    std::printf("%-22s %10.3f %12.1f %10.1f%% %14.3f\n",
                absl::StrCat(ranks, " GPU", ranks > 1 ? "s" : "", ", data parallel").c_str(), ms,
                rate, 100 * efficiency, std::max(0.0, ms - single_ms));
    json.BeginObject();
    json.Key("gpus").Int(ranks);
    json.Key("step_ms").Double(ms);
    json.Key("images_per_s").Double(rate);
    json.Key("efficiency").Double(efficiency);
    json.Key("exposed_comm_ms").Double(std::max(0.0, ms - single_ms));
    json.EndObject();
  }
  json.EndArray();
  json.EndObject();
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream file(path);
    file << std::move(json).str() << "\n";
    if (!file) return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = reprise::cli;
  cli::ParseCommandLine(argc, argv, kProgram);
  const bool resnet = absl::GetFlag(FLAGS_model) == "resnet";
  cli::CheckFlags(
      kProgram,
      {cli::OneOf("model", FLAGS_model, {"mlp", "resnet"}),
       resnet ? cli::OneOf("depth", FLAGS_depth, {18, 34, 50, 101, 152})
              : cli::AtLeast("depth", FLAGS_depth, 0),
       cli::AtLeast("width", FLAGS_width, 1), cli::AtLeast("batch", FLAGS_batch, 1),
       cli::AtLeast("classes", FLAGS_classes, 2), cli::AtLeast("image_size", FLAGS_image_size, 32),
       cli::AtLeast("gpus", FLAGS_gpus, 0), cli::AtLeast("iters", FLAGS_iters, 1),
       cli::AtLeast("warmup", FLAGS_warmup, 0), cli::InRange("lanes", FLAGS_lanes, 0, 4),
       absl::GetFlag(FLAGS_bucket_mb) > 0
           ? absl::OkStatus()
           : absl::InvalidArgumentError("--bucket_mb must be positive"),
       cli::OneOf("launcher", FLAGS_launcher, {"local", "mpi"})});
  return cli::Finish(kProgram, Main());
}
