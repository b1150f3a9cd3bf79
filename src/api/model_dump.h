// reprise-dump as a library: builds a ready model, takes it to the asked stage of compilation and
// dumps it in the asked format (src/passes/plan_dump.h for ir, training and plan; the captured CUDA
// graph through captured_step_dump.h). The tool maps its flags onto DumpRequest one to one, so the
// tests check the very validation a user meets.
//
//   ASSIGN_OR_RETURN(std::string json, DumpModel({.stage = "plan", .format = "json"}));
#ifndef REPRISE_SRC_API_MODEL_DUMP_H_
#define REPRISE_SRC_API_MODEL_DUMP_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reprise/models.h"
#include "reprise/trainer.h"

namespace reprise {

enum class DumpStage : uint8_t { kIr, kTraining, kPlan, kCudaGraph };

absl::string_view DumpStageName(DumpStage stage);  // "ir", "training", "plan", "cuda-graph"
// InvalidArgument naming the unknown stage and the known ones.
absl::StatusOr<DumpStage> ParseDumpStage(absl::string_view name);

struct DumpRequest {
  // mlp, resnet, ensemble (`ensemble` MLPs of config `mlp`) or gpt2 (trained with AdamW as
  // models::Gpt2AdamW says, as train_gpt2 and reprise-bench train it).
  std::string model = "mlp";
  models::MlpConfig mlp;
  int ensemble = 4;  // Models of the ensemble.
  // Batch the ensemble's identical models, as the Trainer does (stages training and plan).
  bool batch_ensembles = true;
  models::ResNetConfig resnet;
  models::Gpt2Config gpt2;
  std::string stage = "plan";   // ir, training, plan or cuda-graph.
  std::string format = "text";  // text, json, dot or svg.
  bool fuse = true;             // Run the fuse pass (stages plan and cuda-graph).
  int lanes = 0;                // 0 (auto) or 1 to 4 (stages plan and cuda-graph).
  bool whole_step = true;       // Allow the whole-step MLP kernel (stages plan and cuda-graph).
  bool update_copies = true;    // KernelTuning::update_writes_parameter_copies.
  bool sgd_one_launch = true;   // KernelTuning::sgd_one_launch.
  bool sgd_checks_in_launch = true;  // KernelTuning::sgd_checks_in_launch.
  bool residual_sums_in_batch_norm = KernelTuning{}.residual_sums_in_batch_norm;
  int64_t residual_sums_min_elements = KernelTuning{}.residual_sums_min_elements;
  std::string mirror = "off";  // off, auto or a byte budget (stages plan and cuda-graph).
  // The Trainer's TrainOptions of the same names (stages training, plan and cuda-graph):
  std::string dtype = "f32";           // compute_dtype: f32, bf16 or f16.
  std::string channels_last = "auto";  // auto, on or off.
  bool tf32 = false;                   // allow_tf32.
  // The non-finite guard, as the Trainer's default (TrainOptions::numerics.non_finite): its check
  // and counter are in the training graph, except where the whole-step kernel runs the step.
  NonFiniteOptions non_finite;
  // Data parallelism's gradient buckets of this many bytes, averaged by all_reduce nodes (stages
  // training and plan; turns off the whole-step kernel as the Trainer does); 0: none.
  int64_t data_parallel_bucket_bytes = 0;
  std::string output;           // -o: the file to write; empty or "-" for standard output.
  bool cuda_debug_dot = false;  // cuda-graph in dot: CUDA's own DOT instead of reprise's.
};

// Checks `request` before anything is built: InvalidArgument for an unknown model, stage or
// format, an option that does not fit the stage, or an output path that cannot be written;
// FailedPrecondition for svg without Graphviz and for the cuda-graph stage without a GPU. Each
// message names the flag.
absl::Status ValidateDumpRequest(const DumpRequest& request);

// Validates `request`, builds the model and returns the dump's text (the caller writes it). The
// training and plan stages are what Trainer::Create builds with TrainOptionsOf(request).
absl::StatusOr<std::string> DumpModel(const DumpRequest& request);

// The TrainOptions a Trainer would be created with for the same model: the request's options, the
// rest as TrainOptions' defaults. InvalidArgument naming the flag for a bad value.
absl::StatusOr<TrainOptions> TrainOptionsOf(const DumpRequest& request);

// Writes `text` to `path`; Internal, naming the path and the system's reason, when it cannot.
absl::Status WriteDump(const std::string& path, absl::string_view text);

}  // namespace reprise

#endif  // REPRISE_SRC_API_MODEL_DUMP_H_
