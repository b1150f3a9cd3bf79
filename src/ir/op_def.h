// OpDef: everything the engine knows about one op, in one table entry: shape and dtype rule,
// gradient rule, CPU reference and GPU lowering. The ir layer sees only the signatures; each op
// family's file in src/ops/ fills in its entries, so adding an op touches one file.
#ifndef REPRISE_SRC_IR_OP_DEF_H_
#define REPRISE_SRC_IR_OP_DEF_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "src/ir/host_tensor.h"

namespace reprise::ops {
class GpuKernel;         // One launchable piece of a plan (src/ops/gpu_kernel.h).
struct LoweringContext;  // Device, buffers and options a lowering needs.
}  // namespace reprise::ops

namespace reprise::ir {

// Checks attributes and input specs, returns the output specs. Messages name the shapes; the
// graph prefixes the op and node.
using InferFn = absl::StatusOr<std::vector<TensorSpec>> (*)(const Attrs& attrs,
                                                            absl::Span<const TensorSpec> inputs);

// Adds the gradient nodes of `node` to `graph`. `output_grads` holds one gradient per output
// (invalid where none flows); returns one gradient per input, invalid where `needs_grad` is false.
using GradFn = absl::StatusOr<std::vector<Value>> (*)(Graph& graph, const Node& node,
                                                      absl::Span<const Value> output_grads,
                                                      const std::vector<bool>& needs_grad);

// Reference implementation. Float inputs are all float32 or all float64 (the reference executor
// can promote a whole graph); mutated inputs are written in place.
using CpuFn = absl::Status (*)(const Node& node, absl::Span<HostTensor* const> inputs,
                               absl::Span<HostTensor* const> outputs);

using LowerFn = absl::StatusOr<std::unique_ptr<ops::GpuKernel>> (*)(
    const ops::LoweringContext& context, const Node& node);

// What recomputing the op would cost (for mirroring) and how the planner treats it.
enum class OpKind : uint8_t {
  kLeaf,           // input, parameter, state, constant: storage, no launch.
  kPointwise,      // Elementwise: cheap to recompute, fusable.
  kReduction,      // Cheap, but reads a whole tensor per output.
  kMatmul,         // Expensive.
  kOptimizer,      // The optimizer: updates writing parameters and state in place, and the per-step
                   // scalars they read (scheduled rate, clip coefficient).
  kCommunication,  // Collectives across data-parallel ranks (all_reduce): a lane of their own, and
                   // inputs and outputs each laid out contiguously by the memory plan.
};

// How a pointwise op computes one element, so that a fused kernel can chain several: a CUDA
// expression over $0, $1, ... (float values of the inputs at this element) and how each input is
// indexed by the element.
enum class Operand : uint8_t {
  kElement,    // Same shape as the output: in[i].
  kRowVector,  // One value per column of a rank-2 output: in[i % cols].
};
struct PointwiseForm {
  absl::string_view expression;  // Empty: the op cannot be chained.
  std::vector<Operand> operands;
};

// What a lowering's Launch may do under stream capture: enqueue work on the stream it is given and
// nothing else. A lowering that reads a device value on the host, synchronises, calls the legacy
// default stream (cudaMemcpy, cudaMemset) or allocates cannot be captured; it says so and why.
struct CaptureSupport {
  bool capturable = true;
  absl::string_view reason;  // When not capturable: "copies with cudaMemcpy on the legacy stream".
};

struct OpDef {
  absl::string_view name;
  OpKind kind = OpKind::kPointwise;
  InferFn infer = nullptr;  // Null only for leaves.
  GradFn grad = nullptr;    // Null: no gradient flows through (an error if one must).
  CpuFn cpu = nullptr;
  LowerFn lower = nullptr;          // Null only for leaves.
  std::vector<int> mutated_inputs;  // Inputs written in place; they must be parameters or state.
  // For ops whose arity depends on attributes (multi-tensor optimizers, fused steps): the inputs
  // written in place, given the node's attributes and input count. Overrides mutated_inputs.
  std::vector<int> (*mutated_inputs_of)(const Attrs& attrs, int num_inputs) = nullptr;
  // Output 0 is written in the place of this input, which the op reads first (accumulation in
  // place); -1: none. The input must be a transient value whose other readers all run before the
  // node: the memory plan gives both values one buffer and refuses the plan otherwise.
  int output_overwrites_input = -1;
  PointwiseForm pointwise;  // For kPointwise ops that fused kernels may chain.
  // The CPU reference and the GPU lowering read and write bfloat16 and float16 themselves. For
  // other ops the reference executor runs 16-bit tensors through float32 (rounding each result).
  bool low_precision = false;
  // The GPU lowering reads and writes the 16-bit floats, bfloat16 and float16 alike (computing in
  // float32). A GPU lowering of a 16-bit node whose op has neither flag is refused as
  // unimplemented, naming the node.
  bool low_precision_lowering = false;
  // Whether the GPU lowering's launches can be recorded into a CUDA graph. There is no eager
  // fallback: Trainer::Create refuses a plan with an op that says it cannot (CheckCapturable).
  CaptureSupport capture;
};

// The inputs `op` writes in place for a node with these attributes and this many inputs.
std::vector<int> MutatedInputs(const OpDef& op, const Attrs& attrs, int num_inputs);
inline std::vector<int> MutatedInputs(const Node& node) {
  return MutatedInputs(*node.op, node.attrs, static_cast<int>(node.inputs.size()));
}

// Leaf ops: storage that the plan places, no computation.
const OpDef& InputOp();
const OpDef& ParameterOp();
const OpDef& StateOp();
const OpDef& ConstantOp();
bool IsLeaf(const Node& node);

// Whether every launch of `graph` can be captured into one CUDA graph: each non-leaf node's op
// has a GPU lowering that declares itself capturable (OpDef::capture). Host-only, so
// Trainer::Create checks a plan before it touches the device. Unimplemented for an op with no GPU
// lowering, FailedPrecondition for one that cannot be captured; either names the op, the node and
// why.
absl::Status CheckCapturable(const Graph& graph);

// Returns a copy of `node`'s float attribute / int attribute, or InvalidArgument.
absl::StatusOr<double> FloatAttr(const Attrs& attrs, absl::string_view key);
absl::StatusOr<int64_t> IntAttr(const Attrs& attrs, absl::string_view key);
bool BoolAttrOr(const Attrs& attrs, absl::string_view key, bool fallback);

}  // namespace reprise::ir

#endif  // REPRISE_SRC_IR_OP_DEF_H_
