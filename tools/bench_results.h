// One measured row of reprise-bench (an execution mode and fusion level of one model): what was
// measured, its line of the table with the notes under it, and its JSON object.
#ifndef REPRISE_TOOLS_BENCH_RESULTS_H_
#define REPRISE_TOOLS_BENCH_RESULTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "reprise/graph.h"

namespace reprise::tools {

struct BenchResult {
  std::string mode;  // "graph", "graph+devlaunch/per-layer", "sync/unfused", ...
  double median_ms = 0, p90_ms = 0;
  double host_us_per_step = 0;  // Median host time of one Step() call, the device idle.
  int64_t launches = 0, graph_nodes = 0, arena_bytes = 0;
  int64_t device_bytes = 0;      // Device memory the trainer holds (arena, workspaces, handles).
  double kernel_acquire_ms = 0;  // Trainer::Create's time for kernels and cuBLASLt plans.
  int64_t kernels_compiled = 0, kernel_disk_hits = 0;
  double create_ms = 0;          // Trainer::Create's wall time (TrainerStats::create_total_ms).
  std::string create_breakdown;  // By phase (TrainerStats::CreateBreakdown).
  double busy_fraction = -1;     // GPU busy time (CUPTI) over step time; -1 without CUPTI.
  int64_t activation_peak_bytes = 0, activation_peak_unmirrored_bytes = 0, mirrored_nodes = 0;
  std::string path;  // Which form the step took ("whole step", "per-layer", ...).
  // Host time of Step() right after SetInput wrote the next batch, as in a training loop (the
  // host has just been busy rather than asleep in Synchronize()); -1 with --inputs device.
  double host_us_after_input = -1;
  // Host time of Step() queued behind the step before it, still running on the device.
  double host_us_queued = -1;
  int64_t samples_per_step = 0;
  // GPT-2: tokens and model flops per step (bench_models.h's Gpt2FlopsPerStep); 0 otherwise.
  int64_t tokens_per_step = 0;
  double flops_per_step = 0;
  double peak_tflops = 0;  // The GPU's peak for the compute type, for MFU; 0: unknown.
  std::string precision;   // "bf16", "fp16", "tf32" or "fp32".
};

// Which form a training graph's step takes: "whole step" (mlp_train_step), "whole step, K
// models" (batched_mlp_train_step), "batched per-layer" (an ensemble batched into per-layer
// launches) or "per-layer".
std::string StepPath(const Graph& training);

// The q-quantile (0 <= q <= 1) of v, the nearest sample; v must not be empty.
double Percentile(std::vector<float> v, double q);

// The table's header line, and a result's line with its notes under it (the step's path, the
// host time after SetInput, tokens/s and MFU), each newline-terminated.
std::string ResultHeader();
std::string ResultText(const BenchResult& r);

// "\"<mode>\": {\"median_ms\": ..., ...}": every field, null where not measured.
std::string ResultJson(const BenchResult& r);

}  // namespace reprise::tools

#endif  // REPRISE_TOOLS_BENCH_RESULTS_H_
