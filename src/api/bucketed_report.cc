// BucketedReport's text and JSON forms. Host-only, so the formats are tested on the CPU.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "reprise/bucketed_trainer.h"
#include "src/util/json_writer.h"

namespace reprise {
namespace {

double MiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

std::string BucketedReport::ToText() const {
  std::vector<std::string> batches;
  for (const Bucket& b : buckets) batches.push_back(absl::StrCat(b.batch));
  std::string text = absl::StrCat("reprise bucketed step report: buckets batch ",
                                  absl::StrJoin(batches, ", "), "\n");
  absl::StrAppendFormat(
      &text,
      "  one arena %.2f MiB = shared parameters and state %.2f + private %.2f + inputs and "
      "activations %.2f (the largest bucket's); the largest bucket alone: %.2f MiB (x%.3f)\n",
      MiB(memory.arena_bytes), MiB(memory.shared_bytes), MiB(memory.private_bytes),
      MiB(memory.overlap_bytes), MiB(memory.largest_alone_bytes),
      memory.largest_alone_bytes > 0
          ? static_cast<double>(memory.arena_bytes) / memory.largest_alone_bytes
          : 0.0);
  for (const Bucket& b : buckets) {
    absl::StrAppend(&text, "bucket batch ", b.batch, ":\n");
    for (absl::string_view line : absl::StrSplit(b.report.ToText(), '\n', absl::SkipEmpty())) {
      absl::StrAppend(&text, "  ", line, "\n");
    }
  }
  return text;
}

std::string BucketedReport::ToJson() const {
  util::JsonWriter w;
  w.BeginObject();
  w.Key("memory_bytes").BeginObject(util::JsonWriter::kInline);
  w.Key("arena").Int(memory.arena_bytes);
  w.Key("shared").Int(memory.shared_bytes);
  w.Key("private").Int(memory.private_bytes);
  w.Key("overlap").Int(memory.overlap_bytes);
  w.Key("largest_alone").Int(memory.largest_alone_bytes);
  w.EndObject();
  w.Key("buckets").BeginArray();
  for (const Bucket& b : buckets) {
    const TrainerStats& s = b.report.stats;
    w.BeginObject();
    w.Key("batch").Int(b.batch);
    w.Key("steps").Int(s.steps);
    w.Key("graphs").BeginArray();
    for (const TrainerReport::CapturedGraph& g : b.report.graphs) {
      int64_t nodes = 0;
      for (const auto& [kind, n] : g.nodes_by_kind) nodes += n;
      w.BeginObject(util::JsonWriter::kInline);
      w.Key("name").String(g.name).Key("nodes").Int(nodes).Key("replays").Int(g.replays);
      w.EndObject();
    }
    w.EndArray();
    w.Key("captures").Int(s.graph_captures);
    w.Key("instantiations").Int(s.graph_instantiations);
    w.Key("reinstantiations").Int(std::max<int64_t>(0, s.graph_instantiations - 1));
    w.Key("exec_updates").Int(s.graph_exec_updates);
    w.Key("launches_per_step").Int(s.launches_per_step);
    w.Key("activation_peak_bytes").Int(s.activation_peak_bytes);
    w.Key("input_bytes").Int(s.input_bytes);
    w.Key("host_step_us_median").Double(s.host_step_us_median);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return std::move(w).str();
}

}  // namespace reprise
