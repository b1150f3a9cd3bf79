// The host half of Trainer::CompileForward (reprise/forward_runner.h): a forward-only graph
// through the trainer's passes without autodiff or optimizer, and the checks of its parameters
// against the trainer's. Host-only, so that it is tested without a GPU.
#ifndef REPRISE_SRC_API_FORWARD_PLAN_H_
#define REPRISE_SRC_API_FORWARD_PLAN_H_

#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "reprise/trainer.h"
#include "src/api/input_checks.h"
#include "src/codegen/mlp_step_kernel.h"
#include "src/passes/plan.h"

namespace reprise {

struct ForwardPlan {
  passes::Plan plan;
  absl::flat_hash_map<Value, Value> outputs;  // The user's output -> its value in the plan.
  // Inputs read as token ids (an embedding's) or labels (a loss's), also through reshapes ->
  // the range they index and the node that does (LabelUsesOf, src/api/input_checks.h).
  struct Limit {
    LabelRange range;
    std::string consumer;
  };
  absl::flat_hash_map<std::string, Limit> limits;
  // Bytes [0, parameter_region) of the plan's arena hold its parameters and nothing else (the
  // memory plan places them first): what a runner does not allocate.
  int64_t parameter_region = 0;
};

// `graph` compiled as `train` compiles a step, without autodiff or optimizer: mixed precision as
// train.numerics.compute_dtype (the outputs read back as float32), fusion if `fuse` (no whole-step
// MLP kernel), one lane, nothing mirrored, a memory plan that keeps `outputs`. InvalidArgument for
// no outputs, an output not in the graph, and a float state written in place (a key/value cache) of
// another dtype than a 16-bit compute_dtype, naming it; the passes' errors pass through.
absl::StatusOr<ForwardPlan> BuildForwardPlan(const Graph& graph, absl::Span<const Value> outputs,
                                             const TrainOptions& train,
                                             const codegen::MlpStepTarget& mlp_step_target,
                                             bool fuse);

// Each parameter of `plan`'s graph against `lookup` (the trainer's spec of a parameter by name,
// or NotFound): InvalidArgument naming the parameter when the trainer lacks it or has it with
// another shape or dtype.
absl::Status CheckForwardParameters(
    const passes::Plan& plan,
    const std::function<absl::StatusOr<TensorSpec>(const std::string&)>& lookup);

}  // namespace reprise

#endif  // REPRISE_SRC_API_FORWARD_PLAN_H_
