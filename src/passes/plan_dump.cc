#include "src/passes/plan_dump.h"

#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/passes/dump_dot.h"
#include "src/passes/dump_json.h"
#include "src/util/graphviz.h"

namespace reprise::passes {
namespace {

constexpr DumpFormat kFormats[] = {DumpFormat::kText, DumpFormat::kJson, DumpFormat::kDot,
                                   DumpFormat::kSvg};

}  // namespace

absl::string_view DumpFormatName(DumpFormat format) {
  switch (format) {
    case DumpFormat::kText:
      return "text";
    case DumpFormat::kJson:
      return "json";
    case DumpFormat::kDot:
      return "dot";
    case DumpFormat::kSvg:
      return "svg";
  }
  return "?";
}

absl::StatusOr<DumpFormat> ParseDumpFormat(absl::string_view name) {
  for (DumpFormat f : kFormats) {
    if (name == DumpFormatName(f)) return f;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --format '", name, "': expected text, json, dot or svg"));
}

absl::Status CheckFormatAvailable(DumpFormat format) {
  return format == DumpFormat::kSvg ? util::CheckDotAvailable() : absl::OkStatus();
}

std::vector<std::string> FusedNodeNames(const Node& node) {
  auto it = node.attrs.find("fused_nodes");
  if (it == node.attrs.end() || !std::holds_alternative<std::string>(it->second)) return {};
  return absl::StrSplit(std::get<std::string>(it->second), ',', absl::SkipEmpty());
}

absl::StatusOr<std::string> FinishDot(std::string dot_text, DumpFormat format) {
  if (format == DumpFormat::kDot) return dot_text;
  if (format == DumpFormat::kSvg) return util::RenderSvg(dot_text);
  return absl::InvalidArgumentError(
      absl::StrCat("FinishDot: format ", DumpFormatName(format), " is not dot or svg"));
}

absl::StatusOr<std::string> DumpForward(const Graph& graph, Value loss, DumpFormat format) {
  switch (format) {
    case DumpFormat::kText:
      return graph.ToString();
    case DumpFormat::kJson:
      return ForwardToJson(graph, loss);
    case DumpFormat::kDot:
    case DumpFormat::kSvg:
      return FinishDot(GraphToDot(graph), format);
  }
  return absl::InvalidArgumentError("unknown dump format");
}

absl::StatusOr<std::string> DumpTraining(const autodiff::TrainingGraph& training,
                                         DumpFormat format) {
  switch (format) {
    case DumpFormat::kText:
      return training.graph.ToString();
    case DumpFormat::kJson:
      return TrainingToJson(training);
    case DumpFormat::kDot:
    case DumpFormat::kSvg:
      return FinishDot(GraphToDot(training.graph), format);
  }
  return absl::InvalidArgumentError("unknown dump format");
}

absl::StatusOr<std::string> DumpPlan(const Plan& plan, DumpFormat format) {
  switch (format) {
    case DumpFormat::kText:
      return PlanToString(plan);
    case DumpFormat::kJson:
      return PlanToJson(plan);
    case DumpFormat::kDot:
    case DumpFormat::kSvg:
      return FinishDot(PlanToDot(plan), format);
  }
  return absl::InvalidArgumentError("unknown dump format");
}

}  // namespace reprise::passes
