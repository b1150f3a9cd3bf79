#include "tools/bench_results.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace reprise::tools {
namespace {

constexpr double kMiB = 1048576.0;

double PerSecond(double count, double ms) { return count / (ms / 1000.0); }
double ModelTflops(const BenchResult& r) { return PerSecond(r.flops_per_step, r.median_ms) / 1e12; }

}  // namespace

double Percentile(std::vector<float> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

std::string StepPath(const Graph& training) {
  bool batched = false;
  for (const Node& node : training.nodes()) {
    if (node.op_name() == "mlp_train_step") return "whole step";
    if (node.op_name() == "batched_mlp_train_step") {
      return absl::StrCat("whole step, ", training.spec(node.inputs[6]).shape.dim(0), " models");
    }
    batched |= absl::StartsWith(node.op_name(), "batched_");
  }
  return batched ? "batched per-layer" : "per-layer";
}

std::string ResultHeader() {
  return absl::StrFormat("%-16s %11s %11s %12s %10s %9s %11s %11s %6s %17s\n", "mode", "median ms",
                         "p90 ms", "samples/s", "host us", "launches", "graph nodes", "device MiB",
                         "busy", "activation MiB");
}

std::string ResultText(const BenchResult& r) {
  const std::string busy =
      r.busy_fraction < 0 ? "n/a" : absl::StrFormat("%.0f%%", 100 * r.busy_fraction);
  // The activation peak, and without mirroring where nodes are mirrored.
  const std::string activation =
      r.mirrored_nodes == 0 ? absl::StrFormat("%.1f", r.activation_peak_bytes / kMiB)
                            : absl::StrFormat("%.1f (%.1f)", r.activation_peak_bytes / kMiB,
                                              r.activation_peak_unmirrored_bytes / kMiB);
  std::string text = absl::StrFormat(
      "%-16s %11.4f %11.4f %12.0f %10.2f %9d %11d %11.1f %6s %17s\n", r.mode, r.median_ms, r.p90_ms,
      PerSecond(r.samples_per_step, r.median_ms), r.host_us_per_step, r.launches, r.graph_nodes,
      r.device_bytes / kMiB, busy, activation);
  absl::StrAppendFormat(&text, "%-16s path: %s\n", "", r.path);
  if (r.host_us_queued >= 0) {
    absl::StrAppendFormat(&text, "%-16s host us per Step() queued behind a running step: %.2f\n",
                          "", r.host_us_queued);
  }
  if (r.host_us_after_input >= 0) {
    absl::StrAppendFormat(&text, "%-16s host us per Step() right after SetInput: %.2f\n", "",
                          r.host_us_after_input);
  }
  if (r.tokens_per_step > 0) {
    const double tflops = ModelTflops(r);
    absl::StrAppendFormat(
        &text, "%-16s tokens/s: %.0f  model TFLOPS: %.1f  MFU: %s\n", "",
        PerSecond(r.tokens_per_step, r.median_ms), tflops,
        r.peak_tflops > 0
            ? absl::StrFormat("%.1f%% of %.1f TFLOPS %s", 100 * tflops / r.peak_tflops,
                              r.peak_tflops, r.precision)
            : std::string("n/a (no known peak for this GPU: --peak_tflops)"));
  }
  return text;
}

std::string ResultJson(const BenchResult& r) {
  const bool tokens = r.tokens_per_step > 0;
  return absl::StrFormat(
      "\"%s\": {\"median_ms\": %.6f, \"p90_ms\": %.6f, \"samples_per_s\": %.1f, "
      "\"host_us_per_step\": %.3f, \"launches_per_step\": %d, \"graph_nodes\": %d, "
      "\"arena_bytes\": %d, \"device_bytes\": %d, \"kernel_acquire_ms\": %.3f, "
      "\"kernels_compiled\": %d, \"kernel_disk_hits\": %d, \"gpu_busy_fraction\": %s, "
      "\"activation_peak_bytes\": %d, \"activation_peak_unmirrored_bytes\": %d, "
      "\"mirrored_nodes\": %d, \"path\": \"%s\", \"host_us_after_input\": %s, "
      "\"host_us_queued\": %s, \"tokens_per_s\": %s, \"model_tflops\": %s, \"mfu\": %s, "
      "\"create_ms\": %.3f}",
      r.mode, r.median_ms, r.p90_ms, PerSecond(r.samples_per_step, r.median_ms), r.host_us_per_step,
      r.launches, r.graph_nodes, r.arena_bytes, r.device_bytes, r.kernel_acquire_ms,
      r.kernels_compiled, r.kernel_disk_hits,
      r.busy_fraction < 0 ? "null" : absl::StrFormat("%.4f", r.busy_fraction),
      r.activation_peak_bytes, r.activation_peak_unmirrored_bytes, r.mirrored_nodes, r.path,
      r.host_us_after_input < 0 ? "null" : absl::StrFormat("%.3f", r.host_us_after_input),
      r.host_us_queued < 0 ? "null" : absl::StrFormat("%.3f", r.host_us_queued),
      tokens ? absl::StrFormat("%.1f", PerSecond(r.tokens_per_step, r.median_ms)) : "null",
      tokens ? absl::StrFormat("%.3f", ModelTflops(r)) : "null",
      tokens && r.peak_tflops > 0 ? absl::StrFormat("%.5f", ModelTflops(r) / r.peak_tflops)
                                  : "null",
      r.create_ms);
}

}  // namespace reprise::tools
