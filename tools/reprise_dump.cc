// reprise-dump: prints a model's graph at a stage of compilation, with no GPU needed.
//   reprise-dump --model mlp --depth 2 --width 64 --stage ir|training|plan
// This first version writes text; other formats and the captured CUDA graph come later and are
// refused with a clear message until then.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "reprise/reprise.h"
#include "src/autodiff/autodiff.h"
#include "src/passes/plan.h"
#include "src/util/status_macros.h"

ABSL_FLAG(std::string, model, "mlp", "model: mlp");
ABSL_FLAG(int, depth, 2, "hidden layers (mlp)");
ABSL_FLAG(int, width, 64, "hidden width and input features (mlp)");
ABSL_FLAG(int, batch, 32, "batch size");
ABSL_FLAG(int, classes, 10, "classes");
ABSL_FLAG(std::string, stage, "plan", "ir, training or plan");
ABSL_FLAG(std::string, format, "text", "text");
ABSL_FLAG(int, lanes, 2, "1 or 2 lanes (stage plan)");
ABSL_FLAG(bool, fuse, true, "run the fuse pass before planning (stage plan)");

namespace {

absl::StatusOr<std::string> Dump() {
  if (absl::GetFlag(FLAGS_model) != "mlp") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown --model '", absl::GetFlag(FLAGS_model), "': this version knows mlp"));
  }
  if (absl::GetFlag(FLAGS_format) != "text") {
    return absl::UnimplementedError(absl::StrCat("--format ", absl::GetFlag(FLAGS_format),
                                                 " is not implemented yet; use --format text"));
  }
  ASSIGN_OR_RETURN(reprise::models::Mlp mlp,
                   reprise::models::BuildMlp({.batch = absl::GetFlag(FLAGS_batch),
                                              .input_features = absl::GetFlag(FLAGS_width),
                                              .depth = absl::GetFlag(FLAGS_depth),
                                              .width = absl::GetFlag(FLAGS_width),
                                              .classes = absl::GetFlag(FLAGS_classes)}));
  const std::string stage = absl::GetFlag(FLAGS_stage);
  if (stage == "ir") return mlp.graph.ToString();
  ASSIGN_OR_RETURN(reprise::autodiff::TrainingGraph training,
                   reprise::autodiff::BuildTrainingGraph(mlp.graph, mlp.loss, {}));
  if (stage == "training") return training.graph.ToString();
  if (stage == "plan") {
    ASSIGN_OR_RETURN(reprise::passes::Plan plan,
                     reprise::passes::BuildPlan(
                         std::move(training), {},
                         {.fuse = absl::GetFlag(FLAGS_fuse), .lanes = absl::GetFlag(FLAGS_lanes)}));
    return reprise::passes::PlanToString(plan);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --stage '", stage, "': expected ir, training or plan"));
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<std::string> text = Dump();
  if (!text.ok()) {
    std::fprintf(stderr, "reprise-dump: %s\n", text.status().ToString().c_str());
    return 1;
  }
  std::fputs(text->c_str(), stdout);
  return 0;
}
