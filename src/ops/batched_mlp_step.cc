// batched_mlp_train_step: the whole SGD-with-momentum step of K identically shaped ReLU MLPs (an
// ensemble batched by src/passes/batch_ensemble.h) as one node: shape rule, CPU reference (the
// single MLP's per model, then the sum of the models' losses) and the GPU lowering (cooperative,
// or in thread-block clusters: see MlpSchedule).
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/mlp_step.h"
#include "src/ops/mlp_step_reference.h"
#include "src/ops/op_helpers.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

constexpr int kFixedInputs = 6;

// What the inputs say: K, L, the per-model batch and widths, which inputs every model shares.
struct BatchedStepShape {
  int64_t models = 0, batch = 0;
  int layers = 0;
  std::vector<int64_t> widths;  // F, out_0, ..., out_{L-1}.
  bool shared_features = false, shared_labels = false;
  bool guarded = false;  // With the guard's counters after the barrier.
};

std::string InputName(int index, int layers) {
  static const char* const kFixed[] = {"features",      "labels",   "dloss",
                                       "learning_rate", "momentum", "weight_decay"};
  if (index < kFixedInputs) return kFixed[index];
  if (index == kFixedInputs + 4 * layers) return "barrier";
  if (index == kFixedInputs + 4 * layers + 1) return "skipped_steps";
  if (index == kFixedInputs + 4 * layers + 2) return "record";
  const int l = (index - kFixedInputs) / 4;
  static const char* const kPerLayer[] = {"W_", "b_", "velocity of W_", "velocity of b_"};
  return absl::StrCat(kPerLayer[(index - kFixedInputs) % 4], l);
}

absl::Status Bad(int index, int layers, absl::string_view what, const TensorSpec& got) {
  return absl::InvalidArgumentError(absl::StrCat("input ", index, " (", InputName(index, layers),
                                                 ") must be ", what, ", got ", got.ToString()));
}

absl::StatusOr<BatchedStepShape> CheckInputs(int64_t layers, absl::Span<const TensorSpec> in,
                                             bool guarded) {
  if (layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'layers' must be >= 1, got ", layers));
  }
  BatchedStepShape s;
  s.layers = static_cast<int>(layers);
  s.guarded = guarded;
  RETURN_IF_ERROR(CheckArity(in, kFixedInputs + 4 * s.layers + 1 + (guarded ? 2 : 0)));
  // W_0 [K, out_0, F] says K; the features are [K, B, F], or [B, F] when every model reads them.
  const TensorSpec& w0 = in[kFixedInputs];
  if (w0.shape.rank() != 3 || w0.shape.dim(0) < 1) {
    return Bad(kFixedInputs, s.layers, "a stacked weight [models, out, in]", w0);
  }
  s.models = w0.shape.dim(0);
  const TensorSpec& x = in[0];
  const DType dt = x.dtype;
  if ((dt != DType::kFloat32 && dt != DType::kFloat64) ||
      !(x.shape.rank() == 2 || (x.shape.rank() == 3 && x.shape.dim(0) == s.models))) {
    return Bad(
        0, s.layers,
        absl::StrCat("a float tensor [", s.models, ", batch, features] or [batch, features]"), x);
  }
  s.shared_features = x.shape.rank() == 2;
  s.batch = x.shape.dim(x.shape.rank() - 2);
  s.widths = {x.shape.dim(x.shape.rank() - 1)};
  const TensorSpec own_labels{Shape{s.models, s.batch}, DType::kInt32};
  const TensorSpec shared_labels{Shape{s.batch}, DType::kInt32};
  s.shared_labels = in[1] == shared_labels;
  if (!(in[1] == own_labels) && !s.shared_labels) {
    return Bad(1, s.layers, absl::StrCat(own_labels.ToString(), " or ", shared_labels.ToString()),
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
    if (w.shape.rank() != 3 || w.dtype != dt || w.shape.dim(0) != s.models ||
        w.shape.dim(2) != s.widths.back()) {
      return Bad(
          base, s.layers,
          absl::StrCat(DTypeName(dt), " [", s.models, ", out, ", s.widths.back(),
                       "] (its inputs are ",
                       l == 0 ? "the features" : absl::StrCat("layer ", l - 1, "'s outputs"), ")"),
          w);
    }
    const TensorSpec bias{Shape{s.models, w.shape.dim(1)}, dt};
    if (!(in[base + 1] == bias)) return Bad(base + 1, s.layers, bias.ToString(), in[base + 1]);
    if (!(in[base + 2] == w)) return Bad(base + 2, s.layers, w.ToString(), in[base + 2]);
    if (!(in[base + 3] == bias)) return Bad(base + 3, s.layers, bias.ToString(), in[base + 3]);
    s.widths.push_back(w.shape.dim(1));
  }
  const int bar = kFixedInputs + 4 * s.layers;
  const TensorSpec barrier{Shape{codegen::kMlpStepBarrierWords}, DType::kInt32};
  if (!(in[bar] == barrier)) return Bad(bar, s.layers, barrier.ToString(), in[bar]);
  if (guarded) RETURN_IF_ERROR(CheckMlpStepGuardInputs(in, bar + 1));
  return s;
}

absl::StatusOr<BatchedStepShape> ShapeOf(absl::Span<const TensorSpec> in, bool guarded) {
  const size_t extra = 1 + (guarded ? 2 : 0);  // The barrier and the guard's counters.
  if (in.size() < kFixedInputs + 4 + extra || (in.size() - kFixedInputs - extra) % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("a batched_mlp_train_step takes 6 + 4 L + ",
                                                   extra, " inputs for L >= 1 layers, got ",
                                                   in.size()));
  }
  return CheckInputs(static_cast<int64_t>(in.size() - kFixedInputs - extra) / 4, in, guarded);
}

absl::StatusOr<std::vector<TensorSpec>> InferBatchedMlpStep(const Attrs& attrs,
                                                            absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(int64_t layers, ir::IntAttr(attrs, "layers"));
  ASSIGN_OR_RETURN(const codegen::MlpGuard guard, MlpStepGuardOf(attrs));
  ASSIGN_OR_RETURN(const BatchedStepShape s,
                   CheckInputs(layers, in, guard != codegen::MlpGuard::kNone));
  const DType dt = in[0].dtype;
  return std::vector<TensorSpec>{
      {Shape{}, dt},
      {Shape{s.models}, dt},
      {Shape{s.models, s.batch, s.widths.back()}, dt},
      {Shape{BatchedMlpTrainStepWorkspaceFloats(s.models, s.batch, s.widths, s.guarded)},
       DType::kFloat32}};
}

std::vector<int> MutatedBatchedMlpStep(const Attrs&, int num_inputs) {
  std::vector<int> mutated;
  for (int i = kFixedInputs; i < num_inputs; ++i) mutated.push_back(i);
  return mutated;
}

// mlp_train_step's reference for each model's slices, then the models' losses summed in model
// order (as model_sum). Guarded, every model's gradients first, then every update or none.
template <typename T>
absl::Status StepModelsOnCpu(const BatchedStepShape& s, codegen::MlpGuard guard,
                             absl::Span<ir::HostTensor* const> in,
                             absl::Span<ir::HostTensor* const> out) {
  const MlpStepScalars scalars{in[2]->data<T>()[0], in[3]->data<T>()[0], in[4]->data<T>()[0],
                               in[5]->data<T>()[0]};
  const int64_t b = s.batch, classes = s.widths.back();
  T* losses = out[1]->data<T>().data();
  std::vector<MlpStepTensors<T>> tensors;
  std::vector<MlpStepGradients<T>> grads(s.models);
  bool finite = true;
  for (int64_t k = 0; k < s.models; ++k) {
    MlpStepTensors<T> m{
        .x = in[0]->data<T>().data() + (s.shared_features ? 0 : k * b * s.widths[0]),
        .labels = in[1]->data<int32_t>().data() + (s.shared_labels ? 0 : k * b),
        .logits = out[2]->data<T>().data() + k * b * classes};
    for (int l = 0; l < s.layers; ++l) {
      const int base = kFixedInputs + 4 * l;
      const int64_t weights = s.widths[l + 1] * s.widths[l], biases = s.widths[l + 1];
      m.w.push_back(in[base]->data<T>().data() + k * weights);
      m.b.push_back(in[base + 1]->data<T>().data() + k * biases);
      m.vw.push_back(in[base + 2]->data<T>().data() + k * weights);
      m.vb.push_back(in[base + 3]->data<T>().data() + k * biases);
    }
    RETURN_IF_ERROR(MlpStepGradientsOnCpu<T>(b, s.widths, scalars, m, losses + k, &grads[k],
                                             absl::StrCat("model ", k, " ")));
    finite = finite && grads[k].Finite();
    tensors.push_back(std::move(m));
  }
  T total = losses[0];
  for (int64_t k = 1; k < s.models; ++k) total += losses[k];
  out[0]->data<T>()[0] = total;
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

absl::Status CpuBatchedMlpStep(const Node& node, absl::Span<ir::HostTensor* const> in,
                               absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(int64_t layers, ir::IntAttr(node.attrs, "layers"));
  ASSIGN_OR_RETURN(const codegen::MlpGuard guard, MlpStepGuardOf(node.attrs));
  std::vector<TensorSpec> specs;
  for (const ir::HostTensor* t : in) specs.push_back(t->spec());
  ASSIGN_OR_RETURN(const BatchedStepShape s,
                   CheckInputs(layers, specs, guard != codegen::MlpGuard::kNone));
  return DispatchFloat(in[0]->dtype(),
                       [&]<typename T>() { return StepModelsOnCpu<T>(s, guard, in, out); });
}

absl::StatusOr<codegen::MlpStepPlan> PlanFor(const BatchedStepShape& s, DType dtype,
                                             const codegen::MlpStepTarget& target) {
  if (dtype != DType::kFloat32) {
    return absl::UnimplementedError(
        absl::StrCat("the fused MLP step runs in f32 only, got ", DTypeName(dtype)));
  }
  return codegen::PlanMlpStep(s.batch, s.widths, target, s.models);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerBatchedMlpStep(const LoweringContext& ctx,
                                                               const Node& node) {
  codegen::MlpStepTarget target = MlpTrainStepTargetFor(ctx);
  const absl::StatusOr<codegen::MlpGuard> guard = MlpStepGuardOf(node.attrs);
  if (guard.ok()) target.guard = *guard;
  const absl::StatusOr<BatchedStepShape> shape =
      guard.ok() ? ShapeOf(ctx.input_specs, target.guard != codegen::MlpGuard::kNone)
                 : absl::StatusOr<BatchedStepShape>(guard.status());
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
  return LaunchForMlpStep(
      ctx, node.name, *plan,
      codegen::BatchedMlpStepKernel(*plan, shape->shared_features, shape->shared_labels),
      std::move(args));
}

}  // namespace

int64_t BatchedMlpTrainStepWorkspaceFloats(int64_t models, int64_t batch,
                                           const std::vector<int64_t>& widths, bool guarded) {
  return codegen::MlpStepWorkspaceFloats(batch, widths, models, guarded);
}

absl::Status CheckBatchedMlpTrainStepSupported(absl::Span<const TensorSpec> inputs,
                                               const codegen::MlpStepTarget& target) {
  ASSIGN_OR_RETURN(const BatchedStepShape s,
                   ShapeOf(inputs, target.guard != codegen::MlpGuard::kNone));
  return PlanFor(s, inputs[0].dtype, target).status();
}

const ir::OpDef& BatchedMlpTrainStepOp() {
  static const ir::OpDef op{.name = "batched_mlp_train_step",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferBatchedMlpStep,
                            .cpu = CpuBatchedMlpStep,
                            .lower = LowerBatchedMlpStep,
                            .mutated_inputs_of = MutatedBatchedMlpStep};
  return op;
}

}  // namespace reprise::ops
