// mlp_train_step: shape rule, CPU reference (the unfused training graph's arithmetic, op by op)
// and the cooperative GPU lowering.
#include "src/ops/mlp_step.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/mlp_step_reference.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

constexpr int kFixedInputs = 6;

std::string InputName(int index, int layers) {
  static const char* const kFixed[] = {"features",      "labels",   "dloss",
                                       "learning_rate", "momentum", "weight_decay"};
  if (index < kFixedInputs) return kFixed[index];
  if (index == kFixedInputs + 4 * layers) return "barrier";
  if (index == kFixedInputs + 4 * layers + 1) return "skipped_steps";
  if (index == kFixedInputs + 4 * layers + 2) return "record";
  const int l = (index - kFixedInputs) / 4;
  switch ((index - kFixedInputs) % 4) {
    case 0:
      return absl::StrCat("W_", l);
    case 1:
      return absl::StrCat("b_", l);
    case 2:
      return absl::StrCat("velocity of W_", l);
    default:
      return absl::StrCat("velocity of b_", l);
  }
}

absl::Status Bad(int index, int layers, absl::string_view what, const TensorSpec& got) {
  return absl::InvalidArgumentError(absl::StrCat("input ", index, " (", InputName(index, layers),
                                                 ") must be ", what, ", got ", got.ToString()));
}

// Checks arity and every input; returns L and fills `widths` with F, out_0, ..., out_{L-1}.
absl::StatusOr<int> CheckInputs(int64_t layers, absl::Span<const TensorSpec> in,
                                std::vector<int64_t>* widths, bool guarded) {
  if (layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'layers' must be >= 1, got ", layers));
  }
  const int l_count = static_cast<int>(layers);
  RETURN_IF_ERROR(CheckArity(in, kFixedInputs + 4 * l_count + 1 + (guarded ? 2 : 0)));
  const TensorSpec& x = in[0];
  if (x.shape.rank() != 2 || (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64)) {
    return Bad(0, l_count, "a float matrix [batch, features]", x);
  }
  const DType dt = x.dtype;
  const int64_t batch = x.shape.dim(0);
  const TensorSpec labels{Shape{batch}, DType::kInt32};
  if (!(in[1] == labels)) return Bad(1, l_count, labels.ToString(), in[1]);
  for (int i = 2; i < kFixedInputs; ++i) {
    if (!(in[i] == TensorSpec{Shape{}, dt})) {
      return Bad(i, l_count, absl::StrCat("a ", DTypeName(dt), " scalar"), in[i]);
    }
  }
  widths->assign(1, x.shape.dim(1));
  for (int l = 0; l < l_count; ++l) {
    const int base = kFixedInputs + 4 * l;
    const TensorSpec& w = in[base];
    if (w.shape.rank() != 2 || w.dtype != dt || w.shape.dim(1) != widths->back()) {
      return Bad(
          base, l_count,
          absl::StrCat(DTypeName(dt), " [out, ", widths->back(), "] (its inputs are ",
                       l == 0 ? "the features" : absl::StrCat("layer ", l - 1, "'s outputs"), ")"),
          w);
    }
    const TensorSpec bias{Shape{w.shape.dim(0)}, dt};
    if (!(in[base + 1] == bias)) return Bad(base + 1, l_count, bias.ToString(), in[base + 1]);
    if (!(in[base + 2] == w)) return Bad(base + 2, l_count, w.ToString(), in[base + 2]);
    if (!(in[base + 3] == bias)) return Bad(base + 3, l_count, bias.ToString(), in[base + 3]);
    widths->push_back(w.shape.dim(0));
  }
  const int bar = kFixedInputs + 4 * l_count;
  const TensorSpec barrier{Shape{codegen::kMlpStepBarrierWords}, DType::kInt32};
  if (!(in[bar] == barrier)) return Bad(bar, l_count, barrier.ToString(), in[bar]);
  if (guarded) RETURN_IF_ERROR(CheckMlpStepGuardInputs(in, bar + 1));
  return l_count;
}

absl::StatusOr<std::vector<TensorSpec>> InferMlpStep(const Attrs& attrs,
                                                     absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(int64_t layers, ir::IntAttr(attrs, "layers"));
  ASSIGN_OR_RETURN(const codegen::MlpGuard guard, MlpStepGuardOf(attrs));
  const bool guarded = guard != codegen::MlpGuard::kNone;
  std::vector<int64_t> widths;
  ASSIGN_OR_RETURN(int l_count, CheckInputs(layers, in, &widths, guarded));
  const int64_t batch = in[0].shape.dim(0);
  return std::vector<TensorSpec>{
      {Shape{}, in[0].dtype},
      {Shape{batch, widths[l_count]}, in[0].dtype},
      {Shape{MlpTrainStepWorkspaceFloats(batch, widths, guarded)}, DType::kFloat32}};
}

std::vector<int> MutatedMlpStep(const Attrs&, int num_inputs) {
  std::vector<int> mutated;
  for (int i = kFixedInputs; i < num_inputs; ++i) mutated.push_back(i);
  return mutated;
}

template <typename T>
absl::Status StepOnCpu(int layers, codegen::MlpGuard guard, absl::Span<ir::HostTensor* const> in,
                       absl::Span<ir::HostTensor* const> out) {
  const int64_t batch = in[0]->spec().shape.dim(0);
  std::vector<int64_t> d = {in[0]->spec().shape.dim(1)};
  MlpStepTensors<T> m{.x = in[0]->data<T>().data(),
                      .labels = in[1]->data<int32_t>().data(),
                      .logits = out[1]->data<T>().data()};
  for (int l = 0; l < layers; ++l) {
    const int base = kFixedInputs + 4 * l;
    d.push_back(in[base]->spec().shape.dim(0));
    m.w.push_back(in[base]->data<T>().data());
    m.b.push_back(in[base + 1]->data<T>().data());
    m.vw.push_back(in[base + 2]->data<T>().data());
    m.vb.push_back(in[base + 3]->data<T>().data());
  }
  const MlpStepScalars s{in[2]->data<T>()[0], in[3]->data<T>()[0], in[4]->data<T>()[0],
                         in[5]->data<T>()[0]};
  T* loss = out[0]->data<T>().data();
  if (guard == codegen::MlpGuard::kNone) return MlpStepOnCpu<T>(batch, d, s, m, loss);
  MlpStepGradients<T> grads;
  RETURN_IF_ERROR(MlpStepGradientsOnCpu<T>(batch, d, s, m, loss, &grads));
  int32_t* record = in[kFixedInputs + 4 * layers + 2]->data<int32_t>().data();
  const bool skip = !std::isfinite(*loss) || !grads.Finite() ||
                    (guard == codegen::MlpGuard::kStop && record[1] != 0);
  if (!skip) ApplyMlpStepOnCpu(s, m, grads);
  CountMlpStepGuard(in[kFixedInputs + 4 * layers + 1]->data<int32_t>().data(), record, skip);
  return absl::OkStatus();
}

absl::Status CpuMlpStep(const Node& node, absl::Span<ir::HostTensor* const> in,
                        absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(int64_t layers, ir::IntAttr(node.attrs, "layers"));
  ASSIGN_OR_RETURN(const codegen::MlpGuard guard, MlpStepGuardOf(node.attrs));
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    return StepOnCpu<T>(static_cast<int>(layers), guard, in, out);
  });
}

absl::StatusOr<codegen::MlpStepPlan> PlanFor(absl::Span<const TensorSpec> inputs,
                                             const codegen::MlpStepTarget& target) {
  const bool guarded = target.guard != codegen::MlpGuard::kNone;
  const size_t extra = 1 + (guarded ? 2 : 0);  // The barrier and the guard's counters.
  if (inputs.size() < kFixedInputs + 4 + extra || (inputs.size() - kFixedInputs - extra) % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("an mlp_train_step takes 6 + 4 L + ", extra,
                                                   " inputs for L >= 1 layers, got ",
                                                   inputs.size()));
  }
  const int64_t layers = static_cast<int64_t>(inputs.size() - kFixedInputs - extra) / 4;
  std::vector<int64_t> widths;
  RETURN_IF_ERROR(CheckInputs(layers, inputs, &widths, guarded).status());
  if (inputs[0].dtype != DType::kFloat32) {
    return absl::UnimplementedError(
        absl::StrCat("the fused MLP step runs in f32 only, got ", inputs[0].ToString()));
  }
  return codegen::PlanMlpStep(inputs[0].shape.dim(0), widths, target);
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerMlpStep(const LoweringContext& ctx,
                                                        const Node& node) {
  codegen::MlpStepTarget target = MlpTrainStepTargetFor(ctx);
  auto guard = MlpStepGuardOf(node.attrs);
  if (guard.ok()) target.guard = *guard;
  auto plan = guard.ok() ? PlanFor(ctx.input_specs, target)
                         : absl::StatusOr<codegen::MlpStepPlan>(guard.status());
  if (!plan.ok()) {
    return absl::Status(plan.status().code(),
                        absl::StrCat("node '", node.name, "': ", plan.status().message()));
  }
  KernelArgs args;
  for (void* p : ctx.inputs) args.Add(p);
  for (void* p : ctx.outputs) args.Add(p);
  return LaunchForMlpStep(ctx, node.name, *plan, codegen::MlpStepKernel(*plan), std::move(args));
}

}  // namespace

int64_t MlpTrainStepWorkspaceFloats(int64_t batch, const std::vector<int64_t>& widths,
                                    bool guarded) {
  return codegen::MlpStepWorkspaceFloats(batch, widths, 1, guarded);
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
  return PlanFor(inputs, target).status();
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
                            .infer = InferMlpStep,
                            .cpu = CpuMlpStep,
                            .lower = LowerMlpStep,
                            .mutated_inputs_of = MutatedMlpStep};
  return op;
}

}  // namespace reprise::ops
