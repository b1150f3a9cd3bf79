// ForwardRunner: a forward-only graph run on a Trainer's GPU with the trainer's current
// parameters: validation loss between training steps, or a decode step that generates text
// (include/reprise/gpt2_decode.h). Trainer::CompileForward builds one.
//
// The forward graph's parameters are matched by name to the trainer's and read in place from the
// trainer's device memory (nothing is copied: each Run() sees the weights of the last queued
// step). Its inputs, activations and state (a decoder's key/value cache) live in the runner's own
// buffers, so the training step's inputs are left alone. The graph is compiled by the trainer's
// pipeline without autodiff or optimizer: mixed precision as the trainer's compute_dtype
// (bfloat16 casts of the weights in the plan), fusion, one lane, a memory plan, and in
// ExecMode::kGraph (the default) captured once into a CUDA graph that each Run() replays. Runs
// are queued on the trainer's stream, in order with its steps.
//
//   ASSIGN_OR_RETURN(models::Gpt2 eval, models::BuildGpt2(config));  // Same names as training.
//   ASSIGN_OR_RETURN(auto evaluator, trainer->CompileForward(eval.graph, {eval.loss}));
//   RETURN_IF_ERROR(evaluator->SetInput("tokens", tokens));
//   RETURN_IF_ERROR(evaluator->SetInput("targets", targets));
//   RETURN_IF_ERROR(evaluator->Run());
//   ASSIGN_OR_RETURN(std::vector<float> loss, evaluator->Read(eval.loss));
#ifndef REPRISE_INCLUDE_REPRISE_FORWARD_RUNNER_H_
#define REPRISE_INCLUDE_REPRISE_FORWARD_RUNNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "reprise/trainer.h"

namespace reprise {

struct ForwardOptions {
  // kGraph: captured once, each Run() one replay; kBulked and kSync launch op by op (the same
  // plan), for debugging and for checking the replay against.
  ExecMode mode = ExecMode::kGraph;
  bool fuse = true;  // Fuse as the trainer does (pointwise chains, GEMM epilogues).
};

// Counters of one runner, as TrainerStats counts a trainer's.
struct ForwardStats {
  int64_t runs = 0;
  int64_t graph_replays = 0;
  int64_t graph_captures = 0;  // 1 in ExecMode::kGraph, 0 otherwise.
  int64_t graph_nodes = 0;
  int64_t launches_per_run = 0;  // Launches in the plan, the input copy included.
  int64_t arena_bytes = 0;       // The runner's own device memory: inputs, activations, state.
  int64_t shared_parameter_bytes = 0;  // The trainer's parameters read in place.
  int64_t state_bytes = 0;             // Persistent state (a key/value cache), in the arena.
  int64_t activation_peak_bytes = 0;
  std::string ToString() const;
};

class ForwardRunner {
 public:
  ~ForwardRunner();
  ForwardRunner(const ForwardRunner&) = delete;
  ForwardRunner& operator=(const ForwardRunner&) = delete;

  // Binds the next run's value of an input, copied (the caller's buffer may be reused at once).
  // Waits until no queued run still reads the previous value. NotFound for an unknown name,
  // InvalidArgument for a wrong dtype or size, or for ids outside [0, vocab) of an embedding
  // table or labels outside [0, classes) of a loss (naming the input and the first bad value).
  absl::Status SetInput(absl::string_view name, absl::Span<const float> data);
  absl::Status SetInput(absl::string_view name, absl::Span<const int32_t> data);
  // Runs the graph once on the trainer's stream, after its queued steps. Asynchronous.
  absl::Status Run();
  // Waits for the queued runs and returns `output` (one of the values given to CompileForward)
  // as float32, or an int32 output's values. InvalidArgument for a value that is not an output
  // or has the other type.
  absl::StatusOr<std::vector<float>> Read(Value output);
  absl::StatusOr<std::vector<int32_t>> ReadInt32(Value output);
  // Sets every state tensor (a decoder's caches and position counter) back to its initial value,
  // after the queued runs: a decoder then starts a new sequence.
  absl::Status ResetState();
  // Waits for the queued runs.
  absl::Status Synchronize();
  ForwardStats stats() const;

  class Impl;
  explicit ForwardRunner(std::unique_ptr<Impl> impl);  // Trainer::CompileForward makes them.

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace reprise

#endif  // REPRISE_INCLUDE_REPRISE_FORWARD_RUNNER_H_
