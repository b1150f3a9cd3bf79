// reprise-dump: a model's graph at a stage of compilation, for reading and for other tools.
//   reprise-dump --model mlp --depth 2 --width 64 --stage ir|training|plan|cuda-graph
//                --format text|json|dot|svg|html [-o FILE] [--fuse=true|false] [--lanes 1|2]
//                [--mirror off|auto|BYTES] [--max_nodes N] [--filter NAME]
// ir, training and plan need no GPU; cuda-graph captures the step on one. The work is
// DumpModel (src/api/model_dump.h); this file maps flags onto its request, and draws large
// graphs collapsed (or filtered) and the HTML view through src/tools/dump_view.h.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "src/api/model_dump.h"
#include "src/tools/dump_view.h"
#include "src/util/graphviz.h"
#include "src/util/json_value.h"
#include "src/util/status_macros.h"
#include "tools/cli.h"

ABSL_FLAG(std::string, model, "mlp",
          "model: mlp, resnet, ensemble (--ensemble MLPs) or gpt2 (trained with AdamW as "
          "train_gpt2)");
ABSL_FLAG(int, ensemble, 4, "models in the ensemble (ensemble)");
ABSL_FLAG(bool, batch_ensembles, true, "batch the ensemble's identical models (as the Trainer)");
ABSL_FLAG(int, depth, 2,
          "hidden layers (mlp); 18, 34, 50, 101 or 152 (resnet); transformer blocks (gpt2)");
ABSL_FLAG(int, image_size, 224, "image height and width (resnet)");
ABSL_FLAG(std::string, layout, "nchw", "nchw or nhwc (resnet)");
ABSL_FLAG(int, width, 64, "hidden width and input features (mlp); the residual stream's (gpt2)");
ABSL_FLAG(int, seq, 1024, "tokens per sequence (gpt2)");
ABSL_FLAG(int, heads, 0, "attention heads (gpt2); 0: width / 64, GPT-2's head size");
ABSL_FLAG(int, vocab, 50257, "vocabulary (gpt2)");
ABSL_FLAG(int, batch, 32, "batch size");
ABSL_FLAG(int, classes, 10, "classes");
ABSL_FLAG(std::string, stage, "plan", "ir, training, plan or cuda-graph (needs a GPU)");
ABSL_FLAG(std::string, format, "text",
          "text, json (schema: docs/dump_schema.md), dot, svg (needs Graphviz 'dot') or html (one "
          "self-contained page: every node by block, searchable, linked to inputs and consumers)");
ABSL_FLAG(int, max_nodes, -1,
          "dot and svg: above this many nodes, draw one box per block (nodes grouped by the "
          "leading parts of their names); 0: every node; -1: 100 for svg, every node for dot");
ABSL_FLAG(std::string, filter, "",
          "dot and svg: draw only the nodes whose names contain this (e.g. layer3.2.), with the "
          "values they read from outside as grey ellipses");
ABSL_FLAG(std::string, o, "", "write the dump to this file instead of standard output");
ABSL_FLAG(bool, fuse, true, "run the fuse pass (stages plan and cuda-graph)");
ABSL_FLAG(int, lanes, 0, "0 (auto) or 1 to 4 lanes (stages plan and cuda-graph)");
ABSL_FLAG(bool, whole_step, true,
          "allow the whole-step MLP kernel when it fits (stages plan and cuda-graph)");
ABSL_FLAG(bool, update_copies, true,
          "mixed precision with AdamW (or SGD with --sgd_one_launch): the parameters' 16-bit "
          "copies kept between steps and "
          "written by the update (TrainOptions::kernels.update_writes_parameter_copies; stages "
          "plan and cuda-graph)");
ABSL_FLAG(bool, sgd_one_launch, true,
          "TrainOptions::kernels.sgd_one_launch: SGD's checked or clipped updates in one sgd_multi "
          "launch, which in mixed precision also writes the 16-bit parameter copies (stages plan "
          "and cuda-graph)");
ABSL_FLAG(bool, sgd_checks_in_launch, true,
          "TrainOptions::kernels.sgd_checks_in_launch: the non-finite guard's check and verdict "
          "in that sgd_multi launch, not grad_nonfinite and loss_scale_check before it (stages "
          "plan and cuda-graph)");
ABSL_FLAG(bool, residual_sums_in_bn, reprise::KernelTuning{}.residual_sums_in_batch_norm,
          "TrainOptions::kernels.residual_sums_in_batch_norm: residual blocks' input gradients "
          "summed by the batch-norm gradients that read them (stages plan and cuda-graph)");
ABSL_FLAG(int64_t, residual_sums_min_elements, reprise::KernelTuning{}.residual_sums_min_elements,
          "TrainOptions::kernels.residual_sums_min_elements: with --residual_sums_in_bn, only "
          "sums of at least this many elements (stages plan and cuda-graph)");
ABSL_FLAG(std::string, mirror, "off",
          "off, auto or a byte budget for the activation peak: recompute cheap forward values "
          "in the backward pass (stages plan and cuda-graph; the plan marks them)");
ABSL_FLAG(std::string, dtype, "f32",
          "TrainOptions::numerics.compute_dtype: f32, bf16 or f16 (mixed precision; stages "
          "training, plan "
          "and cuda-graph)");
ABSL_FLAG(std::string, channels_last, "auto",
          "TrainOptions::kernels.channels_last: auto, on or off");
ABSL_FLAG(bool, tf32, false, "TrainOptions::numerics.allow_tf32");
ABSL_FLAG(double, data_parallel_bucket_mb, 0,
          "data parallelism's gradient buckets in MiB: the plan's all-reduces on the "
          "communication lane (stages training and plan); 0: none");
ABSL_FLAG(bool, cuda_debug_dot, false,
          "with --stage cuda-graph --format dot: CUDA's own DOT (cudaGraphDebugDotPrint), "
          "annotated in comments, instead of reprise's");

namespace {

constexpr reprise::cli::Program kProgram = {
    "reprise-dump",
    "--model mlp|resnet|ensemble|gpt2 [--depth N --width N --image_size N --layout nchw|nhwc "
    "--batch N --classes N --seq N --heads N --vocab N] --stage ir|training|plan|cuda-graph "
    "--format "
    "text|json|dot|svg|html [-o FILE] [--fuse=false] [--max_nodes N] [--filter NAME]\n"
    "  A model's graph at a stage of compilation; only cuda-graph needs a GPU.",
    __FILE__};

// Graphviz lays out 100 nodes in seconds; a 122-node MLP training graph took 49 s, a 226-node one
// and a 280-node ResNet-18 plan more than two minutes.
constexpr int64_t kSvgMaxNodes = 100;

reprise::DumpRequest RequestFromFlags() {
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
  const int heads = absl::GetFlag(FLAGS_heads);
  request.gpt2 = {.batch = absl::GetFlag(FLAGS_batch),
                  .seq = absl::GetFlag(FLAGS_seq),
                  .max_positions = std::max(1024, absl::GetFlag(FLAGS_seq)),
                  .vocab = absl::GetFlag(FLAGS_vocab),
                  .layers = absl::GetFlag(FLAGS_depth),
                  .heads = heads > 0 ? heads : std::max(1, absl::GetFlag(FLAGS_width) / 64),
                  .width = absl::GetFlag(FLAGS_width)};
  request.ensemble = absl::GetFlag(FLAGS_ensemble);
  request.batch_ensembles = absl::GetFlag(FLAGS_batch_ensembles);
  request.stage = absl::GetFlag(FLAGS_stage);
  request.format = absl::GetFlag(FLAGS_format);
  request.fuse = absl::GetFlag(FLAGS_fuse);
  request.lanes = absl::GetFlag(FLAGS_lanes);
  request.whole_step = absl::GetFlag(FLAGS_whole_step);
  request.update_copies = absl::GetFlag(FLAGS_update_copies);
  request.sgd_one_launch = absl::GetFlag(FLAGS_sgd_one_launch);
  request.sgd_checks_in_launch = absl::GetFlag(FLAGS_sgd_checks_in_launch);
  request.residual_sums_in_batch_norm = absl::GetFlag(FLAGS_residual_sums_in_bn);
  request.residual_sums_min_elements = absl::GetFlag(FLAGS_residual_sums_min_elements);
  request.mirror = absl::GetFlag(FLAGS_mirror);
  request.dtype = absl::GetFlag(FLAGS_dtype);
  request.channels_last = absl::GetFlag(FLAGS_channels_last);
  request.tf32 = absl::GetFlag(FLAGS_tf32);
  request.data_parallel_bucket_bytes =
      static_cast<int64_t>(absl::GetFlag(FLAGS_data_parallel_bucket_mb) * (1 << 20));
  request.output = absl::GetFlag(FLAGS_o);
  request.cuda_debug_dot = absl::GetFlag(FLAGS_cuda_debug_dot);
  return request;
}

// The flags' own checks, then DumpModel's (the html format is checked as json, which it embeds).
// InvalidArgument is the command line's fault (exit 2); FailedPrecondition (no Graphviz, no GPU)
// is not.
absl::Status CheckRequest(const reprise::DumpRequest& request) {
  namespace cli = reprise::cli;
  const std::string format = request.format;
  for (const absl::Status& check : {cli::OneOf("layout", FLAGS_layout, {"nchw", "nhwc"}),
                                    cli::AtLeast("max_nodes", FLAGS_max_nodes, -1)}) {
    RETURN_IF_ERROR(check);
  }
  const bool drawn = format == "dot" || format == "svg";
  if (!drawn && (absl::GetFlag(FLAGS_max_nodes) != -1 || !absl::GetFlag(FLAGS_filter).empty())) {
    return absl::InvalidArgumentError("--max_nodes and --filter go with --format dot or svg");
  }
  if (request.stage == "cuda-graph" && !absl::GetFlag(FLAGS_filter).empty()) {
    return absl::InvalidArgumentError(
        "--filter works on stages ir, training and plan (the captured CUDA graph's nodes are "
        "kernels, not named nodes)");
  }
  reprise::DumpRequest checked = request;
  if (format == "html") checked.format = "json";
  return reprise::ValidateDumpRequest(checked);
}

// The JSON dump's node count: its graph's, or at stage cuda-graph the CUDA graph's.
absl::StatusOr<int64_t> NodeCount(const std::string& json) {
  ASSIGN_OR_RETURN(const reprise::util::JsonValue root, reprise::util::ParseJson(json));
  const reprise::util::JsonValue* count = root.Find("num_nodes");
  if (const reprise::util::JsonValue* cuda = root.Find("cuda_graph"); cuda != nullptr) {
    count = cuda->Find("num_nodes");
  }
  if (count == nullptr || !count->is_integer()) {
    return absl::InternalError("the JSON dump has no num_nodes");
  }
  return count->integer();
}

// dot or svg: as DumpModel draws it while the graph is small enough, else collapsed into blocks
// (or refused at stage cuda-graph, whose nodes have no names to group by).
absl::StatusOr<std::string> Drawn(reprise::DumpRequest request) {
  const bool svg = request.format == "svg";
  int64_t max_nodes = absl::GetFlag(FLAGS_max_nodes);
  if (max_nodes == -1) max_nodes = svg ? kSvgMaxNodes : 0;
  const std::string filter = absl::GetFlag(FLAGS_filter);
  if (max_nodes == 0 && filter.empty()) return reprise::DumpModel(request);
  const std::string format = request.format;
  request.format = "json";
  ASSIGN_OR_RETURN(const std::string json, reprise::DumpModel(request));
  ASSIGN_OR_RETURN(const int64_t nodes, NodeCount(json));
  if (filter.empty() && nodes <= max_nodes) {
    request.format = format;
    return reprise::DumpModel(request);
  }
  if (request.stage == "cuda-graph") {
    return absl::FailedPreconditionError(absl::StrCat(
        "the captured CUDA graph has ", nodes, " nodes, more than --max_nodes ", max_nodes,
        ": --stage plan draws the same launches collapsed into blocks, --format json or html "
        "lists every node, and --max_nodes 0 draws them all (Graphviz may take many minutes)"));
  }
  ASSIGN_OR_RETURN(
      const reprise::tools::DotView view,
      reprise::tools::DotFromDumpJson(json, {.max_nodes = max_nodes, .filter = filter}));
  if (!view.note.empty()) std::fprintf(stderr, "reprise-dump: %s\n", view.note.c_str());
  if (!svg) return view.dot;
  return reprise::util::RenderSvg(view.dot);
}

absl::StatusOr<std::string> Dump(reprise::DumpRequest request) {
  if (request.format == "dot" || request.format == "svg") return Drawn(std::move(request));
  if (request.format != "html") return reprise::DumpModel(request);
  request.format = "json";
  ASSIGN_OR_RETURN(const std::string json, reprise::DumpModel(request));
  const std::string model = request.model == "resnet"
                                ? absl::StrCat("ResNet-", absl::GetFlag(FLAGS_depth))
                                : absl::StrCat(request.model, " depth ", absl::GetFlag(FLAGS_depth),
                                               " width ", absl::GetFlag(FLAGS_width));
  return reprise::tools::HtmlFromDumpJson(
      json, absl::StrCat("reprise-dump: ", model, ", batch ", absl::GetFlag(FLAGS_batch),
                         ", stage ", request.stage));
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = reprise::cli;
  cli::ParseCommandLine(argc, argv, kProgram);
  const reprise::DumpRequest request = RequestFromFlags();
  if (absl::Status status = CheckRequest(request); !status.ok()) {
    if (absl::IsInvalidArgument(status)) cli::CheckFlags(kProgram, {status});
    return cli::Finish(kProgram, status);
  }
  absl::StatusOr<std::string> text = Dump(request);
  if (!text.ok()) return cli::Finish(kProgram, text.status());
  if (request.output.empty() || request.output == "-") {
    std::fputs(text->c_str(), stdout);
    return cli::kExitOk;
  }
  return cli::Finish(kProgram, reprise::WriteDump(request.output, *text));
}
