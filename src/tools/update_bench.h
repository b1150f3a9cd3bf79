// reprise-update-bench's host-side parts, apart from the tool so that tests reach them without a
// GPU: the model specs it takes, the models they build, and the table and JSON it prints from the
// measured paths (src/api/update_paths.h).
//
//   mlp:8x256:b32             an MLP of 8 hidden layers of 256 (and 256 input features), batch 32
//   mlp:4x1024:b256:tf32      the same shape of spec; tf32 lets matmuls use TF32
//   resnet50:b32:nhwc:tf32    ResNet-50 at batch 32, NHWC inputs, TF32 convolutions
//   resnet18:b16:i112:c100    ResNet-18, batch 16, 112x112 images, 100 classes
// Tokens after the first may come in any order: bN batch (required), iN image size (ResNet, 224),
// cN classes (MLP 10, ResNet 1000), nchw or nhwc (ResNet, nchw), tf32.
#ifndef REPRISE_SRC_TOOLS_UPDATE_BENCH_H_
#define REPRISE_SRC_TOOLS_UPDATE_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reprise/graph.h"
#include "reprise/tensor.h"
#include "src/api/update_paths.h"

namespace reprise::tools {

struct UpdateBenchModel {
  std::string spec;  // As given.
  enum class Kind : uint8_t { kMlp, kResNet } kind = Kind::kMlp;
  int depth = 0;  // Hidden layers (MLP) or 18, 34, 50, 101, 152 (ResNet).
  int width = 0;  // MLP only: hidden width and input features.
  int batch = 0;
  int classes = 0;
  int image_size = 224;  // ResNet only.
  Layout layout = Layout::kNCHW;
  bool tf32 = false;
};

// InvalidArgument naming the spec and the token at fault.
absl::StatusOr<UpdateBenchModel> ParseUpdateBenchModel(absl::string_view spec);
// Comma-separated specs; InvalidArgument for an empty list or any bad spec.
absl::StatusOr<std::vector<UpdateBenchModel>> ParseUpdateBenchModels(absl::string_view list);

// The tool's flags as given, and what they mean once checked.
struct UpdateBenchFlags {
  std::string models;  // Comma-separated specs.
  std::string paths;   // ParseUpdatePaths: "all" or names separated by commas.
  int reps = 0, recapture_reps = 0, warmup = 0, device_steps = 0;
  int lanes = 0;               // TrainOptions::launch.lanes: 0 (auto) to 4.
  bool device_launch = false;  // TrainOptions::launch.graph_launch kDevice, else kHost.
};
struct UpdateBenchConfig {
  std::vector<UpdateBenchModel> models;
  UpdateBenchOptions options;  // bound_input is set per model (BuiltModel::feature_input).
  int lanes = 0;
  bool device_launch = false;
};
// InvalidArgument naming the flag at fault: a bad spec or path, a count below 1 (warmup below
// 0), lanes outside 0..4.
absl::StatusOr<UpdateBenchConfig> ParseUpdateBenchFlags(const UpdateBenchFlags& flags);

struct BuiltModel {
  Graph graph;
  Value loss;
  std::string feature_input;  // "features" or "images": the input kBindInput rebinds.
};
// Host-only: builds the spec's graph (models::BuildMlp or BuildResNet); their errors pass through.
absl::StatusOr<BuiltModel> BuildUpdateBenchModel(const UpdateBenchModel& model);

// Median, 90th percentile and minimum of host times in µs; all zero for none.
struct TimeSummary {
  double median = 0, p90 = 0, min = 0;
  int64_t count = 0;
};
TimeSummary Summarize(std::vector<double> us);

struct UpdateBenchRun {
  UpdateBenchModel model;
  UpdateBenchResult result;
};
struct UpdateBenchReport {
  std::string gpu, date;
  int reps = 0, recapture_reps = 0, warmup = 0, lanes = 0;
  bool device_launch =
      false;  // Steps launched from the device (TrainOptions::launch.graph_launch kDevice).
  std::vector<UpdateBenchRun> runs;
};

// One table per model: each path's host µs (the change, the Step() after it, both), and the
// counters it moved.
std::string UpdateBenchTable(const UpdateBenchReport& report);
// {"tool": "reprise-update-bench", "gpu", "date", "config": {..., "device_launch"}, "models":
// [{"spec", ...,
//  "paths": {"<path>": {"reps", "update_us": {median, p90, min} or null, "step_us", "total_us",
//  "replays", "captures", "instantiations", "exec_updates", "node_updates",
//  "recapture_reasons": {...}, "instantiation_reasons": {...}}}}]}
std::string UpdateBenchJson(const UpdateBenchReport& report);

}  // namespace reprise::tools

#endif  // REPRISE_SRC_TOOLS_UPDATE_BENCH_H_
