// reprise-dump: a model's graph at a stage of compilation, for reading and for other tools.
//   reprise-dump --model mlp --depth 2 --width 64 --stage ir|training|plan|cuda-graph
//                --format text|json|dot|svg [-o FILE] [--fuse=true|false] [--lanes 1|2]
//                [--mirror off|auto|BYTES]
// ir, training and plan need no GPU; cuda-graph captures the step on one. The work is
// DumpModel (src/api/model_dump.h); this file only maps flags onto its request.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "src/api/model_dump.h"

ABSL_FLAG(std::string, model, "mlp", "model: mlp, resnet or ensemble (--ensemble MLPs)");
ABSL_FLAG(int, ensemble, 4, "models in the ensemble (ensemble)");
ABSL_FLAG(bool, batch_ensembles, true, "batch the ensemble's identical models (as the Trainer)");
ABSL_FLAG(int, depth, 2, "hidden layers (mlp); 18, 34, 50, 101 or 152 (resnet)");
ABSL_FLAG(int, image_size, 224, "image height and width (resnet)");
ABSL_FLAG(std::string, layout, "nchw", "nchw or nhwc (resnet)");
ABSL_FLAG(int, width, 64, "hidden width and input features (mlp)");
ABSL_FLAG(int, batch, 32, "batch size");
ABSL_FLAG(int, classes, 10, "classes");
ABSL_FLAG(std::string, stage, "plan", "ir, training, plan or cuda-graph (needs a GPU)");
ABSL_FLAG(std::string, format, "text",
          "text, json (schema: docs/dump_schema.md), dot, or svg (needs Graphviz 'dot')");
ABSL_FLAG(std::string, o, "", "write the dump to this file instead of standard output");
ABSL_FLAG(bool, fuse, true, "run the fuse pass (stages plan and cuda-graph)");
ABSL_FLAG(int, lanes, 0, "0 (auto) or 1 to 4 lanes (stages plan and cuda-graph)");
ABSL_FLAG(bool, whole_step, true,
          "allow the whole-step MLP kernel when it fits (stages plan and cuda-graph)");
ABSL_FLAG(std::string, mirror, "off",
          "off, auto or a byte budget for the activation peak: recompute cheap forward values "
          "in the backward pass (stages plan and cuda-graph; the plan marks them)");
ABSL_FLAG(std::string, dtype, "f32",
          "TrainOptions::compute_dtype: f32, bf16 or f16 (mixed precision; stages training, plan "
          "and cuda-graph)");
ABSL_FLAG(std::string, channels_last, "auto", "TrainOptions::channels_last: auto, on or off");
ABSL_FLAG(bool, tf32, false, "TrainOptions::allow_tf32");
ABSL_FLAG(double, data_parallel_bucket_mb, 0,
          "data parallelism's gradient buckets in MiB: the plan's all-reduces on the "
          "communication lane (stages training and plan); 0: none");
ABSL_FLAG(bool, cuda_debug_dot, false,
          "with --stage cuda-graph --format dot: CUDA's own DOT (cudaGraphDebugDotPrint), "
          "annotated in comments, instead of reprise's");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "reprise-dump --model mlp|resnet [--depth N --width N --image_size N --layout nchw|nhwc "
      "--batch N --classes N] "
      "--stage ir|training|plan|cuda-graph --format text|json|dot|svg [-o FILE] [--fuse=false]");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "reprise-dump: unexpected argument(s): %s\n",
                 absl::StrJoin(rest.begin() + 1, rest.end(), " ").c_str());
    return 1;
  }
  if (const std::string layout = absl::GetFlag(FLAGS_layout);
      layout != "nchw" && layout != "nhwc") {
    std::fprintf(stderr, "reprise-dump: --layout must be nchw or nhwc, not '%s'\n", layout.c_str());
    return 1;
  }
  reprise::DumpRequest request;
  request.model = absl::GetFlag(FLAGS_model);
  request.mlp = {.batch = absl::GetFlag(FLAGS_batch),
                 .input_features = absl::GetFlag(FLAGS_width),
                 .depth = absl::GetFlag(FLAGS_depth),
                 .width = absl::GetFlag(FLAGS_width),
                 .classes = absl::GetFlag(FLAGS_classes)};
  request.resnet = {.depth = absl::GetFlag(FLAGS_depth),
                    .batch = absl::GetFlag(FLAGS_batch),
                    .classes = absl::GetFlag(FLAGS_classes),
                    .image_size = absl::GetFlag(FLAGS_image_size),
                    .layout = absl::GetFlag(FLAGS_layout) == "nhwc" ? reprise::Layout::kNHWC
                                                                    : reprise::Layout::kNCHW};
  request.ensemble = absl::GetFlag(FLAGS_ensemble);
  request.batch_ensembles = absl::GetFlag(FLAGS_batch_ensembles);
  request.stage = absl::GetFlag(FLAGS_stage);
  request.format = absl::GetFlag(FLAGS_format);
  request.fuse = absl::GetFlag(FLAGS_fuse);
  request.lanes = absl::GetFlag(FLAGS_lanes);
  request.whole_step = absl::GetFlag(FLAGS_whole_step);
  request.mirror = absl::GetFlag(FLAGS_mirror);
  request.dtype = absl::GetFlag(FLAGS_dtype);
  request.channels_last = absl::GetFlag(FLAGS_channels_last);
  request.tf32 = absl::GetFlag(FLAGS_tf32);
  request.data_parallel_bucket_bytes =
      static_cast<int64_t>(absl::GetFlag(FLAGS_data_parallel_bucket_mb) * (1 << 20));
  request.output = absl::GetFlag(FLAGS_o);
  request.cuda_debug_dot = absl::GetFlag(FLAGS_cuda_debug_dot);

  absl::StatusOr<std::string> text = reprise::DumpModel(request);
  absl::Status status = text.status();
  if (status.ok()) {
    if (request.output.empty() || request.output == "-") {
      std::fputs(text->c_str(), stdout);
    } else {
      status = reprise::WriteDump(request.output, *text);
    }
  }
  if (!status.ok()) {
    std::fprintf(stderr, "reprise-dump: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
