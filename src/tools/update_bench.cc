#include "src/tools/update_bench.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "reprise/models.h"
#include "src/util/json_writer.h"
#include "src/util/status_macros.h"

namespace reprise::tools {
namespace {

absl::Status BadSpec(absl::string_view spec, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("model spec '", spec, "': ", why,
                   " (expected mlp:<depth>x<width>:b<batch> or resnet<depth>:b<batch>, then any of "
                   "i<image size>, c<classes>, nchw, nhwc, tf32)"));
}

// A positive integer written as digits only ("32"; not "+32", "3.2" or "0").
bool PositiveInt(absl::string_view text, int* value) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), absl::ascii_isdigit)) return false;
  return absl::SimpleAtoi(text, value) && *value > 0;
}

// "mlp" with "<depth>x<width>", or "resnet<depth>": the first two fields' part of `model`.
absl::Status ParseKind(absl::string_view spec, absl::string_view head, UpdateBenchModel& model) {
  if (absl::ConsumePrefix(&head, "resnet")) {
    model.kind = UpdateBenchModel::Kind::kResNet;
    if (!PositiveInt(head, &model.depth)) return BadSpec(spec, "resnet needs its depth");
    if (model.depth != 18 && model.depth != 34 && model.depth != 50 && model.depth != 101 &&
        model.depth != 152) {
      return BadSpec(spec, "ResNet depth must be 18, 34, 50, 101 or 152");
    }
    model.classes = 1000;
    return absl::OkStatus();
  }
  if (head == "mlp") {
    model.kind = UpdateBenchModel::Kind::kMlp;
    model.classes = 10;
    return absl::OkStatus();
  }
  return BadSpec(spec, absl::StrCat("unknown model '", head, "'"));
}

void WriteSummary(util::JsonWriter& w, absl::string_view key, const std::vector<double>& us) {
  w.Key(key);
  if (us.empty()) {
    w.Null();
    return;
  }
  const TimeSummary s = Summarize(us);
  w.BeginObject(util::JsonWriter::kInline);
  w.Key("median").Double(s.median).Key("p90").Double(s.p90).Key("min").Double(s.min);
  w.EndObject();
}

void WriteReasons(util::JsonWriter& w, absl::string_view key,
                  const std::vector<std::pair<std::string, int64_t>>& reasons) {
  w.Key(key).BeginObject(util::JsonWriter::kInline);
  for (const auto& [reason, count] : reasons) w.Key(reason).Int(count);
  w.EndObject();
}

// Per repetition: the change and the Step() after it.
std::vector<double> Totals(const UpdatePathResult& path) {
  std::vector<double> total = path.step_us;
  for (size_t i = 0; i < path.update_us.size() && i < total.size(); ++i) {
    total[i] += path.update_us[i];
  }
  return total;
}

}  // namespace

absl::StatusOr<UpdateBenchModel> ParseUpdateBenchModel(absl::string_view spec) {
  const std::vector<absl::string_view> fields = absl::StrSplit(spec, ':');
  UpdateBenchModel model;
  model.spec = std::string(spec);
  RETURN_IF_ERROR(ParseKind(spec, fields[0], model));
  size_t next = 1;
  if (model.kind == UpdateBenchModel::Kind::kMlp) {
    std::vector<absl::string_view> shape;
    if (fields.size() > 1) shape = absl::StrSplit(fields[1], 'x');
    if (shape.size() != 2 || !PositiveInt(shape[0], &model.depth) ||
        !PositiveInt(shape[1], &model.width)) {
      return BadSpec(spec, "mlp needs <depth>x<width> as its second field");
    }
    next = 2;
  }
  bool layout_given = false;
  for (size_t i = next; i < fields.size(); ++i) {
    absl::string_view token = fields[i];
    const bool resnet = model.kind == UpdateBenchModel::Kind::kResNet;
    int* number = nullptr;
    absl::string_view what;
    if (token == "tf32") {
      if (model.tf32) return BadSpec(spec, "tf32 given twice");
      model.tf32 = true;
      continue;
    }
    if (token == "nchw" || token == "nhwc") {
      if (!resnet) return BadSpec(spec, absl::StrCat("'", token, "' is for ResNets only"));
      if (layout_given) return BadSpec(spec, "layout given twice");
      layout_given = true;
      model.layout = token == "nhwc" ? Layout::kNHWC : Layout::kNCHW;
      continue;
    }
    if (absl::ConsumePrefix(&token, "b")) {
      number = &model.batch;
      what = "batch";
    } else if (absl::ConsumePrefix(&token, "c")) {
      number = &model.classes;
      what = "classes";
    } else if (absl::ConsumePrefix(&token, "i")) {
      if (!resnet) return BadSpec(spec, "an image size is for ResNets only");
      number = &model.image_size;
      what = "image size";
    } else {
      return BadSpec(spec, absl::StrCat("unknown token '", fields[i], "'"));
    }
    if (!PositiveInt(token, number)) {
      return BadSpec(spec, absl::StrCat("'", fields[i], "' is not a positive ", what));
    }
  }
  if (model.batch == 0) return BadSpec(spec, "no batch size (b<batch>)");
  return model;
}

absl::StatusOr<std::vector<UpdateBenchModel>> ParseUpdateBenchModels(absl::string_view list) {
  std::vector<UpdateBenchModel> models;
  for (absl::string_view spec : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    ASSIGN_OR_RETURN(UpdateBenchModel model, ParseUpdateBenchModel(spec));
    models.push_back(std::move(model));
  }
  if (models.empty()) return absl::InvalidArgumentError("no model spec given");
  return models;
}

absl::StatusOr<UpdateBenchConfig> ParseUpdateBenchFlags(const UpdateBenchFlags& flags) {
  UpdateBenchConfig config;
  auto models = ParseUpdateBenchModels(flags.models);
  if (!models.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--models: ", models.status().message()));
  }
  config.models = *std::move(models);
  auto paths = ParseUpdatePaths(flags.paths);
  if (!paths.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--paths: ", paths.status().message()));
  }
  config.options.paths = *std::move(paths);
  const std::pair<const char*, int> counts[] = {{"reps", flags.reps},
                                                {"recapture_reps", flags.recapture_reps},
                                                {"device_steps", flags.device_steps}};
  for (const auto& [name, value] : counts) {
    if (value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be at least 1, not ", value));
    }
  }
  if (flags.warmup < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--warmup must be 0 or more, not ", flags.warmup));
  }
  if (flags.lanes < 0 || flags.lanes > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lanes must be 0 (auto), 1, 2, 3 or 4, not ", flags.lanes));
  }
  config.options.reps = flags.reps;
  config.options.recapture_reps = flags.recapture_reps;
  config.options.warmup = flags.warmup;
  config.options.device_steps = flags.device_steps;
  config.lanes = flags.lanes;
  config.device_launch = flags.device_launch;
  return config;
}

absl::StatusOr<BuiltModel> BuildUpdateBenchModel(const UpdateBenchModel& model) {
  if (model.kind == UpdateBenchModel::Kind::kMlp) {
    ASSIGN_OR_RETURN(models::Mlp mlp, models::BuildMlp({.batch = model.batch,
                                                        .input_features = model.width,
                                                        .depth = model.depth,
                                                        .width = model.width,
                                                        .classes = model.classes}));
    return BuiltModel{std::move(mlp.graph), mlp.loss, "features"};
  }
  ASSIGN_OR_RETURN(models::ResNet net, models::BuildResNet({.depth = model.depth,
                                                            .batch = model.batch,
                                                            .classes = model.classes,
                                                            .image_size = model.image_size,
                                                            .layout = model.layout}));
  return BuiltModel{std::move(net.graph), net.loss, "images"};
}

TimeSummary Summarize(std::vector<double> us) {
  if (us.empty()) return {};
  std::sort(us.begin(), us.end());
  const size_t n = us.size();
  return {.median = n % 2 == 1 ? us[n / 2] : (us[n / 2 - 1] + us[n / 2]) / 2,
          .p90 = us[std::min(n - 1, static_cast<size_t>(0.9 * static_cast<double>(n - 1) + 0.5))],
          .min = us[0],
          .count = static_cast<int64_t>(n)};
}

std::string UpdateBenchTable(const UpdateBenchReport& report) {
  std::string out = absl::StrFormat(
      "reprise-update-bench on %s: host us per repetition, the device idle before each (medians "
      "of %d, %d for re-captures; p90 in brackets)%s\n",
      report.gpu, report.reps, report.recapture_reps,
      report.device_launch ? "; steps launched from the device (one-node launcher graph)" : "");
  for (const UpdateBenchRun& run : report.runs) {
    const UpdateBenchResult& r = run.result;
    absl::StrAppendFormat(&out,
                          "\n%s: %d launches, %d graph nodes, %d lane(s), %.4f ms per step on the "
                          "device\n",
                          run.model.spec, r.launches_per_step, r.graph_nodes, r.lanes,
                          r.step_device_ms);
    absl::StrAppendFormat(&out, "  %-14s %20s %20s %12s %9s %7s %8s %8s\n", "path", "change us",
                          "Step() us", "total us", "captures", "inst.", "exec upd", "node upd");
    for (const UpdatePathResult& p : r.paths) {
      const TimeSummary change = Summarize(p.update_us), step = Summarize(p.step_us),
                        total = Summarize(Totals(p));
      const std::string change_text =
          p.update_us.empty() ? "-" : absl::StrFormat("%.2f [%.2f]", change.median, change.p90);
      absl::StrAppendFormat(
          &out, "  %-14s %20s %20s %12.2f %9d %7d %8d %8d\n", UpdatePathName(p.path), change_text,
          absl::StrFormat("%.2f [%.2f]", step.median, step.p90), total.median, p.counters.captures,
          p.counters.instantiations, p.counters.exec_updates, p.counters.node_updates);
    }
  }
  return out;
}

std::string UpdateBenchJson(const UpdateBenchReport& report) {
  util::JsonWriter w;
  w.BeginObject();
  w.Key("tool").String("reprise-update-bench");
  w.Key("gpu").String(report.gpu);
  w.Key("date").String(report.date);
  w.Key("config").BeginObject(util::JsonWriter::kInline);
  w.Key("reps").Int(report.reps).Key("recapture_reps").Int(report.recapture_reps);
  w.Key("warmup").Int(report.warmup).Key("lanes").Int(report.lanes);
  w.Key("device_launch").Bool(report.device_launch);
  w.EndObject();
  w.Key("models").BeginArray();
  for (const UpdateBenchRun& run : report.runs) {
    const UpdateBenchModel& m = run.model;
    const UpdateBenchResult& r = run.result;
    w.BeginObject();
    w.Key("spec").String(m.spec);
    w.Key("model").String(m.kind == UpdateBenchModel::Kind::kMlp ? "mlp" : "resnet");
    w.Key("depth").Int(m.depth).Key("width").Int(m.width).Key("batch").Int(m.batch);
    w.Key("classes").Int(m.classes).Key("image_size").Int(m.image_size);
    w.Key("layout").String(LayoutName(m.layout)).Key("tf32").Bool(m.tf32);
    w.Key("launches_per_step").Int(r.launches_per_step).Key("graph_nodes").Int(r.graph_nodes);
    w.Key("lanes").Int(r.lanes).Key("step_device_ms").Double(r.step_device_ms);
    w.Key("paths").BeginObject();
    for (const UpdatePathResult& p : r.paths) {
      w.Key(UpdatePathName(p.path)).BeginObject();
      w.Key("reps").Int(static_cast<int64_t>(p.step_us.size()));
      WriteSummary(w, "update_us", p.update_us);
      WriteSummary(w, "step_us", p.step_us);
      WriteSummary(w, "total_us", Totals(p));
      const UpdateCounters& c = p.counters;
      w.Key("replays").Int(c.replays).Key("captures").Int(c.captures);
      w.Key("instantiations").Int(c.instantiations).Key("exec_updates").Int(c.exec_updates);
      w.Key("node_updates").Int(c.node_updates);
      WriteReasons(w, "recapture_reasons", c.recapture_reasons);
      WriteReasons(w, "instantiation_reasons", c.instantiation_reasons);
      w.EndObject();
    }
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return std::move(w).str();
}

}  // namespace reprise::tools
