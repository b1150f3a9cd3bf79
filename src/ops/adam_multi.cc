// adam_multi: the updates of many tensors, each as adam does it and with its own weight decay, in
// one launch; and, where the fuse pass folds them in, the step's scalars computed by every block of
// that launch: the scheduled rate (lr_schedule's attributes) and the clip coefficient from the
// global norm's partial sums (grad_sum_squares' output), so that neither needs a launch of its own.
// The reference runs lr_schedule's, clip_coefficient's and adam's references, so the fused step
// has the unfused step's bits. A gradient may be bfloat16 or float16 (the fuse pass folds a
// mixed-precision gradient's widening cast in): the kernel widens it exactly on load, as the
// reference executor does for the reference, so the bits are those of the cast's update.
//
// With attr "copies" = K (src/passes/parameter_copies.h): the first K tensors' 16-bit working
// copies (state the forward and backward read instead of casting the weights each step) follow the
// shared inputs, then the int32 flag that RefreshCopiesOp reads; each updated weight is written to
// its copy rounded as cast rounds it, and the flag is cleared (skipped step or not).
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/ir/low_precision.h"
#include "src/ops/cast.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/lr_schedule.h"
#include "src/ops/multi_tensor.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

constexpr int kPerTensor = kAdamMultiInputsPerTensor;
constexpr int kFixedShared = 5;  // lr, step, beta1, beta2, epsilon
constexpr int kWeightDecay = 4;  // Among a tensor's inputs.

// Where the optional shared inputs are, counted from the first shared input; -1 where absent.
struct Layout {
  int64_t tensors = 0;
  int64_t copies = 0;      // Tensors 0 .. copies - 1 have a 16-bit copy,
  int64_t first_copy = 0;  // the input of tensor 0's; the flag follows the last copy.
  int clip = -1;           // A clip coefficient,
  int partials = -1;       // or (attr clip_norm) the norm's partial sums, then max_norm.
  int check = -1;          // Loss scaling's check (attr loss_scaled).
  bool scheduled = false;
};

absl::StatusOr<Layout> LayoutOf(const Attrs& attrs, int num_inputs) {
  ASSIGN_OR_RETURN(const int64_t tensors, ir::IntAttr(attrs, "tensors"));
  int64_t copies = 0;
  if (attrs.contains("copies")) {
    ASSIGN_OR_RETURN(copies, ir::IntAttr(attrs, "copies"));
  }
  const bool norm = ir::BoolAttrOr(attrs, "clip_norm", false);
  const bool scaled = ir::BoolAttrOr(attrs, "loss_scaled", false);
  // tensors and copies are bounded first, so that kPerTensor * tensors cannot overflow.
  const bool fits = tensors >= 1 && tensors <= num_inputs && copies >= 0 && copies <= tensors;
  const int64_t copy_inputs = copies > 0 ? copies + 1 : 0;  // The copies, then the flag.
  const int64_t shared = fits ? num_inputs - kPerTensor * tensors - copy_inputs : -1;
  const int64_t fixed = kFixedShared + (norm ? 2 : 0) + (scaled ? 1 : 0);
  if (!fits || shared < fixed || shared > fixed + (norm ? 0 : 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected ", kPerTensor, " inputs per tensor (w, g, m, v, weight_decay) for ", tensors,
        " tensors, then lr, step, beta1, beta2, epsilon",
        norm ? ", the norm's partial sums, max_norm" : "[, clip]", scaled ? ", check" : "",
        copies > 0 ? absl::StrCat(", ", copies, " copies, the stale flag") : "", "; got ",
        num_inputs, " inputs"));
  }
  Layout layout{.tensors = tensors,
                .copies = copies,
                .first_copy = num_inputs - copy_inputs,
                .scheduled = attrs.contains("decay")};
  int next = kFixedShared;
  if (norm) {
    layout.partials = next;
    next += 2;
  } else if (shared > fixed) {
    layout.clip = next++;
  }
  if (scaled) layout.check = next;
  return layout;
}

// What adam sees for tensor t (its inputs, then the shared ones with that tensor's weight decay),
// with `clip` standing for the clip coefficient where there is one.
template <typename T>
std::vector<T> AdamInputs(absl::Span<T const> in, const Layout& layout, int64_t t, T lr, T clip) {
  const size_t h = kPerTensor * layout.tensors;
  std::vector<T> single(in.begin() + kPerTensor * t, in.begin() + kPerTensor * t + 4);
  single.push_back(lr);
  single.insert(single.end(), in.begin() + h + 1, in.begin() + h + kFixedShared);
  single.push_back(in[kPerTensor * t + kWeightDecay]);
  if (layout.clip >= 0 || layout.partials >= 0) single.push_back(clip);
  if (layout.check >= 0) single.push_back(in[h + layout.check]);
  return single;
}

absl::StatusOr<std::vector<TensorSpec>> InferAdamMulti(const Attrs& attrs,
                                                       absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(const Layout layout, LayoutOf(attrs, static_cast<int>(in.size())));
  const size_t h = kPerTensor * layout.tensors;
  const TensorSpec scalar{Shape{}, DType::kFloat32};
  if (layout.scheduled) {
    auto rate = LrScheduleOp().infer(attrs, {in[h], in[h + 1]});
    if (!rate.ok()) {
      return absl::Status(rate.status().code(),
                          absl::StrCat("schedule: ", rate.status().message()));
    }
  }
  TensorSpec clip = layout.clip >= 0 ? in[h + layout.clip] : scalar;
  if (layout.partials >= 0) {
    auto norm =
        ClipCoefficientOp().infer(attrs, {in[h + layout.partials], in[h + layout.partials + 1]});
    if (!norm.ok()) {
      return absl::Status(norm.status().code(),
                          absl::StrCat("clip norm: ", norm.status().message()));
    }
  }
  for (int64_t t = 0; t < layout.tensors; ++t) {
    std::vector<TensorSpec> single = AdamInputs<TensorSpec>(in, layout, t, in[h], clip);
    // A 16-bit gradient of the weight's shape is read as its exact float32 widening.
    if (IsLowPrecision(single[1].dtype) && single[1].shape == single[0].shape) {
      single[1].dtype = DType::kFloat32;
    }
    auto checked = AdamOp().infer(attrs, single);
    if (!checked.ok()) {
      return absl::Status(checked.status().code(),
                          absl::StrCat("tensor ", t, ": ", checked.status().message()));
    }
  }
  RETURN_IF_ERROR(CheckWeightCopies(in, kPerTensor, layout.copies, layout.first_copy));
  return std::vector<TensorSpec>{};
}

absl::Status CpuAdamMulti(const Node& node, absl::Span<ir::HostTensor* const> in,
                          absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(const Layout layout, LayoutOf(node.attrs, static_cast<int>(in.size())));
  const size_t h = kPerTensor * layout.tensors;
  ir::HostTensor* lr = in[h];
  ir::HostTensor rate(TensorSpec{Shape{}, lr->dtype()});
  if (layout.scheduled) {
    RETURN_IF_ERROR(LrScheduleOp().cpu(node, {lr, in[h + 1]}, {&rate}));
    lr = &rate;
  }
  ir::HostTensor* clip = layout.clip >= 0 ? in[h + layout.clip] : nullptr;
  ir::HostTensor norm, coefficient;
  if (layout.partials >= 0) {
    ir::HostTensor* partials = in[h + layout.partials];
    norm = coefficient = ir::HostTensor(TensorSpec{Shape{}, partials->dtype()});
    RETURN_IF_ERROR(ClipCoefficientOp().cpu(node, {partials, in[h + layout.partials + 1]},
                                            {&norm, &coefficient}));
    clip = &coefficient;
  }
  // A step that loss scaling's check skips writes no copy either, as the kernel returns at once.
  bool skipped = false;
  if (layout.check >= 0) {
    const ir::HostTensor& check = *in[h + layout.check];
    RETURN_IF_ERROR(DispatchFloat(check.dtype(), [&]<typename T>() {
      skipped = check.data<T>()[1] != T(0);
      return absl::OkStatus();
    }));
  }
  for (int64_t t = 0; t < layout.tensors; ++t) {
    RETURN_IF_ERROR(AdamOp().cpu(node, AdamInputs<ir::HostTensor*>(in, layout, t, lr, clip), out));
  }
  return WriteWeightCopies(in, kPerTensor, layout.copies, layout.first_copy, skipped);
}

std::vector<int> MultiMutated(const Attrs& attrs, int num_inputs) {
  return WithCopiesMutated(MultiTensorMutated(attrs, kPerTensor, {0, 2, 3}), attrs, num_inputs);
}

// One launch per codegen::kMaxMultiTensorCapacity tensors (one for any model below that), its
// blocks striding over every chunk of every tensor (codegen::AdamMulti).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerAdamMulti(const LoweringContext& ctx,
                                                          const Node& node) {
  ASSIGN_OR_RETURN(const Layout layout, LayoutOf(node.attrs, static_cast<int>(ctx.inputs.size())));
  codegen::ScheduleParams schedule;
  if (layout.scheduled) {
    ASSIGN_OR_RETURN(schedule, LrScheduleParams(node.attrs));
  }
  const size_t h = kPerTensor * layout.tensors;
  auto shared = [&](int i) -> void* { return i >= 0 ? ctx.inputs[h + i] : nullptr; };
  const long long partial_count =
      layout.partials >= 0 ? ctx.input_specs[h + layout.partials].NumElements() : 0;
  std::vector<std::unique_ptr<GpuKernel>> parts;
  for (int64_t first = 0; first < layout.tensors; first += codegen::kMaxMultiTensorCapacity) {
    const int64_t count =
        std::min<int64_t>(codegen::kMaxMultiTensorCapacity, layout.tensors - first);
    const int capacity = codegen::MultiTensorCapacity(count);
    const bool copies = layout.copies > 0;
    ASSIGN_OR_RETURN(const UpdateTable update, UpdateTableOf(ctx, kPerTensor, first, count,
                                                             layout.copies, layout.first_copy));
    KernelArgs args;
    args.AddBytes(update.table.data(), update.table.bytes())
        .AddBytes(update.kinds.data(), update.kinds.size());
    args.Add(update.table.count());
    for (int i = 0; i < kFixedShared; ++i) args.Add(shared(i));
    args.Add(shared(layout.clip)).Add(shared(layout.partials)).Add(partial_count);
    args.Add(shared(layout.partials >= 0 ? layout.partials + 1 : -1)).Add(shared(layout.check));
    args.Add(static_cast<int>(ir::BoolAttrOr(node.attrs, "decoupled", false)));
    args.Add(static_cast<int>(layout.scheduled));
    args.Add(static_cast<long long>(schedule.warmup_steps)).Add(static_cast<int>(schedule.decay));
    args.Add(static_cast<long long>(schedule.total_steps)).Add(schedule.min_factor);
    args.Add(static_cast<long long>(schedule.step_size)).Add(schedule.gamma);
    if (copies) args.Add(ctx.inputs[layout.first_copy + layout.copies]);
    const dim3 grid = UpdateGrid(ctx, update.table.chunks());
    ASSIGN_OR_RETURN(std::unique_ptr<GpuKernel> part,
                     NvrtcKernel::Create(ctx, node.name, codegen::AdamMulti(capacity, copies), grid,
                                         dim3(codegen::kNormBlock), 0, std::move(args)));
    parts.push_back(std::move(part));
  }
  return Sequence(std::move(parts));
}

}  // namespace

const ir::OpDef& AdamMultiOp() {
  static const ir::OpDef op{.name = "adam_multi",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferAdamMulti,
                            .cpu = CpuAdamMulti,
                            .lower = LowerAdamMulti,
                            .mutated_inputs_of = MultiMutated,
                            // The weights and moments are float32; 16-bit gradients (the fuse
                            // pass folds their widening casts in) are read as they are.
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
