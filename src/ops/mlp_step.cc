// mlp_train_step and its ensemble form batched_mlp_train_step (K identically shaped MLPs, every
// tensor stacked [K, ...]): one shape rule, one CPU reference (the unfused training graph's
// arithmetic, op by op, per model, then the sum of the models' losses) and one GPU lowering
// (cooperative, or in thread-block clusters), the batched op's with a leading model dimension.
#include "src/ops/mlp_step.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/mlp_step_double_buffer.h"
#include "src/ops/mlp_step_reference.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

constexpr int kFixedInputs = 6;

// What the inputs say: K, L, the per-model batch and widths, which inputs every model shares.
struct StepShape {
  bool stacked = false;  // batched_mlp_train_step: the tensors lead with the models.
  int64_t models = 1, batch = 0;
  int layers = 0;
  std::vector<int64_t> widths;  // F, out_0, ..., out_{L-1}.
  bool shared_features = false, shared_labels = false;
  bool guarded = false;  // With the guard's counters after the barrier.
  bool shadow = false;   // Guarded: with the double-buffering shadow after the counters.

  // `dims` after the model dimension where the op has one.
  Shape Stack(std::initializer_list<int64_t> dims) const {
    std::vector<int64_t> all;
    if (stacked) all.push_back(models);
    all.insert(all.end(), dims.begin(), dims.end());
    return Shape(all);
  }
};

std::string InputName(int index, int layers) {
  static const char* const kFixed[] = {"features",      "labels",   "dloss",
                                       "learning_rate", "momentum", "weight_decay"};
  if (index < kFixedInputs) return kFixed[index];
  if (index == kFixedInputs + 4 * layers) return "barrier";
  if (index == kFixedInputs + 4 * layers + 1) return "skipped_steps";
  if (index == kFixedInputs + 4 * layers + 2) return "record";
  if (index == kFixedInputs + 4 * layers + 3) return "shadow";
  const int l = (index - kFixedInputs) / 4;
  static const char* const kPerLayer[] = {"W_", "b_", "velocity of W_", "velocity of b_"};
  return absl::StrCat(kPerLayer[(index - kFixedInputs) % 4], l);
}

absl::Status Bad(int index, int layers, absl::string_view what, const TensorSpec& got) {
  return absl::InvalidArgumentError(absl::StrCat("input ", index, " (", InputName(index, layers),
                                                 ") must be ", what, ", got ", got.ToString()));
}

// Checks arity and every input of an L-layer step; stacked, K comes from W_0 [K, out_0, F], and
// the features [B, F] and labels [B] may be shared by every model.
absl::StatusOr<StepShape> CheckInputs(int64_t layers, absl::Span<const TensorSpec> in, bool guarded,
                                      bool shadow, bool stacked) {
  // Bounded by the inputs (four a layer) before it is narrowed to int: a hostile attribute of
  // 2^31 layers became -2^31, and 4 * layers overflowed.
  if (layers < 1 || layers > static_cast<int64_t>(in.size()) / 4) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'layers' must be >= 1 and fit the ",
                                                   in.size(), " inputs (4 a layer), got ", layers));
  }
  StepShape s;
  s.stacked = stacked;
  s.layers = static_cast<int>(layers);
  s.guarded = guarded;
  s.shadow = guarded && shadow;
  RETURN_IF_ERROR(
      CheckArity(in, kFixedInputs + 4 * s.layers + 1 + (guarded ? 2 : 0) + (s.shadow ? 1 : 0)));
  const int lead = stacked ? 1 : 0;
  if (stacked) {
    const TensorSpec& w0 = in[kFixedInputs];
    if (w0.shape.rank() != 3 || w0.shape.dim(0) < 1) {
      return Bad(kFixedInputs, s.layers, "a stacked weight [models, out, in]", w0);
    }
    s.models = w0.shape.dim(0);
  }
  const TensorSpec& x = in[0];
  const DType dt = x.dtype;
  if ((dt != DType::kFloat32 && dt != DType::kFloat64) ||
      !(x.shape.rank() == 2 || (stacked && x.shape.rank() == 3 && x.shape.dim(0) == s.models))) {
    return Bad(0, s.layers,
               stacked ? absl::StrCat("a float tensor [", s.models,
                                      ", batch, features] or [batch, features]")
                       : "a float matrix [batch, features]",
               x);
  }
  s.shared_features = stacked && x.shape.rank() == 2;
  s.batch = x.shape.dim(x.shape.rank() - 2);
  s.widths = {x.shape.dim(x.shape.rank() - 1)};
  const TensorSpec own_labels{s.Stack({s.batch}), DType::kInt32};
  const TensorSpec shared_labels{Shape{s.batch}, DType::kInt32};
  s.shared_labels = stacked && in[1] == shared_labels;
  if (!(in[1] == own_labels) && !s.shared_labels) {
    return Bad(1, s.layers,
               stacked ? absl::StrCat(own_labels.ToString(), " or ", shared_labels.ToString())
                       : own_labels.ToString(),
               in[1]);
  }
  for (int i = 2; i < kFixedInputs; ++i) {
    if (!(in[i] == TensorSpec{Shape{}, dt})) {
      return Bad(i, s.layers, absl::StrCat("a ", DTypeName(dt), " scalar"), in[i]);
    }
  }
  for (int l = 0; l < s.layers; ++l) {
    const int base = kFixedInputs + 4 * l;
    const TensorSpec& w = in[base];
    if (w.shape.rank() != 2 + lead || w.dtype != dt || (stacked && w.shape.dim(0) != s.models) ||
        w.shape.dim(1 + lead) != s.widths.back()) {
      return Bad(
          base, s.layers,
          absl::StrCat(DTypeName(dt), " [", stacked ? absl::StrCat(s.models, ", ") : "", "out, ",
                       s.widths.back(), "] (its inputs are ",
                       l == 0 ? "the features" : absl::StrCat("layer ", l - 1, "'s outputs"), ")"),
          w);
    }
    const int64_t out = w.shape.dim(lead);
    const TensorSpec bias{s.Stack({out}), dt};
    if (!(in[base + 1] == bias)) return Bad(base + 1, s.layers, bias.ToString(), in[base + 1]);
    if (!(in[base + 2] == w)) return Bad(base + 2, s.layers, w.ToString(), in[base + 2]);
    if (!(in[base + 3] == bias)) return Bad(base + 3, s.layers, bias.ToString(), in[base + 3]);
    s.widths.push_back(out);
  }
  const int bar = kFixedInputs + 4 * s.layers;
  const TensorSpec barrier{Shape{codegen::kMlpStepBarrierWords}, DType::kInt32};
  if (!(in[bar] == barrier)) return Bad(bar, s.layers, barrier.ToString(), in[bar]);
  if (guarded) RETURN_IF_ERROR(CheckMlpStepGuardInputs(in, bar + 1));
  if (s.shadow) {
    const TensorSpec shadow_spec{Shape{codegen::MlpStepShadowFloats(s.widths, s.models)},
                                 DType::kFloat32};
    if (!(in[bar + 3] == shadow_spec)) {
      return Bad(bar + 3, s.layers, shadow_spec.ToString(), in[bar + 3]);
    }
  }
  return s;
}

// CheckInputs with L derived from the number of inputs (guarded, one more for the shadow).
absl::StatusOr<StepShape> ShapeOf(absl::Span<const TensorSpec> in, bool guarded, bool stacked) {
  const size_t extra = 1 + (guarded ? 2 : 0);  // The barrier and the guard's counters.
  const bool shadow =
      guarded && in.size() >= kFixedInputs + extra && (in.size() - kFixedInputs - extra) % 4 == 1;
  if (in.size() < kFixedInputs + 4 + extra ||
      (in.size() - kFixedInputs - extra - (shadow ? 1 : 0)) % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        stacked ? "a batched_mlp_train_step" : "an mlp_train_step", " takes 6 + 4 L + ", extra,
        guarded ? " (or one more, the shadow)" : "", " inputs for L >= 1 layers, got ", in.size()));
  }
  return CheckInputs(static_cast<int64_t>(in.size() - kFixedInputs - extra - (shadow ? 1 : 0)) / 4,
                     in, guarded, shadow, stacked);
}

bool Stacked(const Node& node) { return node.op == &BatchedMlpTrainStepOp(); }

absl::StatusOr<StepShape> ShapeOfNode(const Attrs& attrs, absl::Span<const TensorSpec> in,
                                      bool stacked) {
  ASSIGN_OR_RETURN(int64_t layers, ir::IntAttr(attrs, "layers"));
  ASSIGN_OR_RETURN(const codegen::MlpGuard guard, MlpStepGuardOf(attrs));
  const bool guarded = guard != codegen::MlpGuard::kNone;
  // (layers is compared with the count first: a hostile attribute cannot overflow 4 * layers.)
  const bool shadow = guarded && layers >= 1 && layers < static_cast<int64_t>(in.size()) &&
                      in.size() == static_cast<size_t>(kFixedInputs + 4 * layers + 4);
  return CheckInputs(layers, in, guarded, shadow, stacked);
}

// Outputs: loss [], the stacked op's losses [K], logits [K?, B, C], workspace.
template <bool kStacked>
absl::StatusOr<std::vector<TensorSpec>> InferMlpStep(const Attrs& attrs,
                                                     absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(const StepShape s, ShapeOfNode(attrs, in, kStacked));
  const DType dt = in[0].dtype;
  std::vector<TensorSpec> out = {{Shape{}, dt}};
  if (kStacked) out.push_back({Shape{s.models}, dt});
  out.push_back({s.Stack({s.batch, s.widths.back()}), dt});
  // A double-buffered step (a shadow) keeps no step-start copies in its workspace.
  out.push_back(
      {Shape{codegen::MlpStepWorkspaceFloats(s.batch, s.widths, s.models, s.guarded && !s.shadow)},
       DType::kFloat32});
  return out;
}

std::vector<int> MutatedMlpStep(const Attrs&, int num_inputs) {
  std::vector<int> mutated;
  for (int i = kFixedInputs; i < num_inputs; ++i) mutated.push_back(i);
  return mutated;
}

// The single MLP's reference for each model's slices, then (stacked) the models' losses summed
// in model order (as model_sum). Guarded, every model's gradients first, then every update or
// none.
template <typename T>
absl::Status StepModelsOnCpu(const StepShape& s, codegen::MlpGuard guard,
                             absl::Span<ir::HostTensor* const> in,
                             absl::Span<ir::HostTensor* const> out) {
  const MlpStepScalars scalars{in[2]->data<T>()[0], in[3]->data<T>()[0], in[4]->data<T>()[0],
                               in[5]->data<T>()[0]};
  const int64_t b = s.batch, classes = s.widths.back();
  T* losses = out[s.stacked ? 1 : 0]->data<T>().data();
  T* logits = out[s.stacked ? 2 : 1]->data<T>().data();
  std::vector<MlpStepTensors<T>> tensors;
  std::vector<MlpStepGradients<T>> grads(s.models);
  bool finite = true;
  for (int64_t k = 0; k < s.models; ++k) {
    MlpStepTensors<T> m{
        .x = in[0]->data<T>().data() + (s.shared_features ? 0 : k * b * s.widths[0]),
        .labels = in[1]->data<int32_t>().data() + (s.shared_labels ? 0 : k * b),
        .logits = logits + k * b * classes};
    for (int l = 0; l < s.layers; ++l) {
      const int base = kFixedInputs + 4 * l;
      const int64_t weights = s.widths[l + 1] * s.widths[l], biases = s.widths[l + 1];
      m.w.push_back(in[base]->data<T>().data() + k * weights);
      m.b.push_back(in[base + 1]->data<T>().data() + k * biases);
      m.vw.push_back(in[base + 2]->data<T>().data() + k * weights);
      m.vb.push_back(in[base + 3]->data<T>().data() + k * biases);
    }
    RETURN_IF_ERROR(MlpStepGradientsOnCpu<T>(b, s.widths, scalars, m, losses + k, &grads[k],
                                             s.stacked ? absl::StrCat("model ", k, " ") : ""));
    finite = finite && grads[k].Finite();
    tensors.push_back(std::move(m));
  }
  T total = losses[0];
  for (int64_t k = 1; k < s.models; ++k) total += losses[k];
  if (s.stacked) out[0]->data<T>()[0] = total;
  const int first_counter = kFixedInputs + 4 * s.layers + 1;
  int32_t* record =
      guard == codegen::MlpGuard::kNone ? nullptr : in[first_counter + 1]->data<int32_t>().data();
  const bool skip = record != nullptr && (!finite || !std::isfinite(total) ||
                                          (guard == codegen::MlpGuard::kStop && record[1] != 0));
  if (!skip) {
    for (int64_t k = 0; k < s.models; ++k) ApplyMlpStepOnCpu(scalars, tensors[k], grads[k]);
  }
  if (record != nullptr) {
    CountMlpStepGuard(in[first_counter]->data<int32_t>().data(), record, skip);
  }
  return absl::OkStatus();
}

absl::Status CpuMlpStep(const Node& node, absl::Span<ir::HostTensor* const> in,
                        absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(const codegen::MlpGuard guard, MlpStepGuardOf(node.attrs));
  std::vector<TensorSpec> specs;
  for (const ir::HostTensor* t : in) specs.push_back(t->spec());
  ASSIGN_OR_RETURN(const StepShape s, ShapeOfNode(node.attrs, specs, Stacked(node)));
  return DispatchFloat(in[0]->dtype(),
                       [&]<typename T>() { return StepModelsOnCpu<T>(s, guard, in, out); });
}

absl::StatusOr<codegen::MlpStepPlan> PlanFor(const StepShape& s, DType dtype,
                                             const codegen::MlpStepTarget& target) {
  if (dtype != DType::kFloat32) {
    return absl::UnimplementedError(
        absl::StrCat("the fused MLP step runs in f32 only, got ", DTypeName(dtype)));
  }
  codegen::MlpStepTarget with_shadow = target;
  with_shadow.shadow = s.shadow;
  return codegen::PlanMlpStep(s.batch, s.widths, with_shadow, s.models);
}

absl::StatusOr<codegen::MlpStepPlan> PlanFor(absl::Span<const TensorSpec> inputs,
                                             const codegen::MlpStepTarget& target, bool stacked) {
  ASSIGN_OR_RETURN(const StepShape s,
                   ShapeOf(inputs, target.guard != codegen::MlpGuard::kNone, stacked));
  return PlanFor(s, inputs[0].dtype, target);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerMlpStep(const LoweringContext& ctx,
                                                        const Node& node) {
  const bool stacked = Stacked(node);
  codegen::MlpStepTarget target = MlpTrainStepTargetFor(ctx);
  const absl::StatusOr<codegen::MlpGuard> guard = MlpStepGuardOf(node.attrs);
  if (guard.ok()) target.guard = *guard;
  const absl::StatusOr<StepShape> shape =
      guard.ok() ? ShapeOf(ctx.input_specs, target.guard != codegen::MlpGuard::kNone, stacked)
                 : absl::StatusOr<StepShape>(guard.status());
  const absl::StatusOr<codegen::MlpStepPlan> plan =
      shape.ok() ? PlanFor(*shape, ctx.input_specs[0].dtype, target)
                 : absl::StatusOr<codegen::MlpStepPlan>(shape.status());
  if (!plan.ok()) {
    return absl::Status(plan.status().code(),
                        absl::StrCat("node '", node.name, "': ", plan.status().message()));
  }
  KernelArgs args;
  for (void* p : ctx.inputs) args.Add(p);
  for (void* p : ctx.outputs) args.Add(p);
  ASSIGN_OR_RETURN(
      std::unique_ptr<GpuKernel> step,
      LaunchForMlpStep(ctx, node.name, *plan,
                       stacked ? codegen::BatchedMlpStepKernel(*plan, shape->shared_features,
                                                               shape->shared_labels)
                               : codegen::MlpStepKernel(*plan),
                       std::move(args)));
  if (!plan->double_buffered) return step;
  const int state = kFixedInputs + 4 * plan->layers();  // barrier, skipped_steps, record, shadow.
  MlpStepBuffers buffers{.barrier = ctx.inputs[state],
                         .shadow = ctx.inputs[state + 3],
                         .skipped_steps = ctx.inputs[state + 1],
                         .record = ctx.inputs[state + 2]};
  for (int l = 0; l < plan->layers(); ++l) {
    const int first = kFixedInputs + 4 * l;  // W, b, W's velocity, b's.
    buffers.layers.push_back(
        {ctx.inputs[first], ctx.inputs[first + 1], ctx.inputs[first + 2], ctx.inputs[first + 3]});
  }
  return DoubleBufferedMlpStep::Create(ctx, node.name, *plan, buffers, std::move(step));
}

}  // namespace

int64_t MlpTrainStepWorkspaceFloats(int64_t batch, const std::vector<int64_t>& widths,
                                    bool start_copies) {
  return codegen::MlpStepWorkspaceFloats(batch, widths, 1, start_copies);
}

absl::StatusOr<codegen::MlpGuard> MlpStepGuardOf(const Attrs& attrs) {
  auto it = attrs.find("non_finite");
  if (it == attrs.end()) return codegen::MlpGuard::kNone;
  const std::string* name = std::get_if<std::string>(&it->second);
  if (name != nullptr && *name == "skip") return codegen::MlpGuard::kSkip;
  if (name != nullptr && *name == "stop") return codegen::MlpGuard::kStop;
  return absl::InvalidArgumentError(
      "attribute 'non_finite' of a whole-step MLP node must be \"skip\" or \"stop\"");
}

std::string MlpStepGuardName(codegen::MlpGuard guard) {
  return guard == codegen::MlpGuard::kStop ? "stop" : "skip";
}

absl::Status CheckMlpStepGuardInputs(absl::Span<const TensorSpec> in, int first) {
  const TensorSpec skipped{Shape{}, DType::kInt32}, record{Shape{2}, DType::kInt32};
  if (!(in[first] == skipped) || !(in[first + 1] == record)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs ", first, " and ", first + 1, " (the non-finite guard's skipped_steps and record) ",
        "must be ", skipped.ToString(), " and ", record.ToString(), ", got ", in[first].ToString(),
        " and ", in[first + 1].ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LaunchForMlpStep(const LoweringContext& ctx,
                                                            const std::string& node_name,
                                                            const codegen::MlpStepPlan& plan,
                                                            const codegen::GeneratedKernel& source,
                                                            KernelArgs args, int grid) {
  const dim3 block(plan.target.threads);
  const auto shared = static_cast<unsigned>(plan.shared_bytes);
  if (plan.cluster > 0 && plan.groups == 0) {
    ASSIGN_OR_RETURN(std::unique_ptr<ClusterKernel> kernel,
                     ClusterKernel::Create(ctx, node_name, source, plan.grid(), plan.cluster, block,
                                           shared, std::move(args)));
    return std::unique_ptr<GpuKernel>(std::move(kernel));
  }
  if (plan.groups > 0 && grid > 0 && (grid % plan.cluster != 0 || grid > plan.grid())) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", node_name, "': the group schedule launches a multiple of ",
                     plan.cluster, " blocks, at most ", plan.grid(), "; asked for ", grid));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<CooperativeKernel> kernel,
                   CooperativeKernel::Create(ctx, node_name, source, grid > 0 ? grid : plan.grid(),
                                             block, shared, std::move(args)));
  return std::unique_ptr<GpuKernel>(std::move(kernel));
}

codegen::MlpStepTarget MlpTrainStepTargetFor(const runtime::DeviceInfo& device) {
  codegen::MlpStepTarget target;
  target.grid = std::max(1, device.sm_count);
  target.threads = 256;
  target.max_shared_bytes =
      device.max_shared_per_block > 0 ? device.max_shared_per_block : 48 << 10;
  return target;
}

codegen::MlpStepTarget MlpTrainStepTargetFor(const LoweringContext& ctx) {
  codegen::MlpStepTarget target = MlpTrainStepTargetFor(*ctx.device);
  for (void* p : ctx.inputs) target.aligned &= reinterpret_cast<uintptr_t>(p) % 16 == 0;
  for (void* p : ctx.outputs) target.aligned &= reinterpret_cast<uintptr_t>(p) % 16 == 0;
  target.tf32 = ctx.options.allow_tf32;
  return target;
}

absl::Status CheckMlpTrainStepSupported(absl::Span<const TensorSpec> inputs,
                                        const codegen::MlpStepTarget& target) {
  return PlanFor(inputs, target, /*stacked=*/false).status();
}

int64_t BatchedMlpTrainStepWorkspaceFloats(int64_t models, int64_t batch,
                                           const std::vector<int64_t>& widths, bool start_copies) {
  return codegen::MlpStepWorkspaceFloats(batch, widths, models, start_copies);
}

absl::Status CheckBatchedMlpTrainStepSupported(absl::Span<const TensorSpec> inputs,
                                               const codegen::MlpStepTarget& target) {
  return PlanFor(inputs, target, /*stacked=*/true).status();
}

bool MlpTrainStepSupported(const std::vector<TensorSpec>& inputs,
                           const codegen::MlpStepTarget& target, std::string* why) {
  const absl::Status status = CheckMlpTrainStepSupported(inputs, target);
  if (!status.ok() && why != nullptr) *why = std::string(status.message());
  return status.ok();
}

const ir::OpDef& MlpTrainStepOp() {
  static const ir::OpDef op{.name = "mlp_train_step",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferMlpStep<false>,
                            .cpu = CpuMlpStep,
                            .lower = LowerMlpStep,
                            .mutated_inputs_of = MutatedMlpStep};
  return op;
}

const ir::OpDef& BatchedMlpTrainStepOp() {
  static const ir::OpDef op{.name = "batched_mlp_train_step",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferMlpStep<true>,
                            .cpu = CpuMlpStep,
                            .lower = LowerMlpStep,
                            .mutated_inputs_of = MutatedMlpStep};
  return op;
}

}  // namespace reprise::ops
