// sgd_multi: the SGD updates of many tensors in one launch of a chunked kernel (codegen::SgdMulti),
// each tensor as sgd_momentum updates it and with its own weight decay, so that one node serves
// every parameter whatever its gradient's type or decay; where sgd_momentum_multi takes one
// launch per kSgdTableSize tensors and per weight decay and gradient type. The reference runs
// sgd_momentum's for each tensor, so the bits are sgd_momentum's. A gradient may be bfloat16 or
// float16 (the fuse pass folds its widening cast in), widened exactly on load.
//
// With attr "copies" = K (src/passes/parameter_copies.h): the first K tensors' 16-bit working
// copies follow the shared inputs, then the int32 stale flag; each updated weight is written to
// its copy rounded as cast rounds it, and the flag is cleared, as adam_multi does.
//
// With attr "checks" (passes::Fuse, FuseOptions::sgd_checks_in_launch): the non-finite guard's
// grad_nonfinite and loss_scale_check in the same launch, before any update: its blocks test the
// chunks they update, wait for each other on a grid barrier and skip together. The bits and the
// counters are those of the three nodes it replaces.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/gradient_loads.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/ir/low_precision.h"
#include "src/ops/cast.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/multi_tensor.h"
#include "src/ops/op_helpers.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {
namespace {

constexpr int kPerTensor = kSgdMultiInputsPerTensor;
constexpr int kWeightDecay = 3;  // Among a tensor's inputs.
constexpr int kFixedShared = 2;  // lr, momentum

// Where the optional shared inputs are, counted from the first shared input; -1 where absent.
struct Layout {
  int64_t tensors = 0;
  int64_t copies = 0;      // Tensors 0 .. copies - 1 have a 16-bit copy,
  int64_t first_copy = 0;  // the input of tensor 0's; the flag follows the last copy.
  int clip = -1;
  int check = -1;  // Loss scaling's or the non-finite guard's check (attr loss_scaled).
  // With attr checks: the extra tensors checked from first_extra, then the counters and words.
  int64_t extras = -1;
  int first_extra = -1, skipped = -1, record = -1, words = -1;
  bool sticky = false;
};

absl::StatusOr<Layout> LayoutOf(const Attrs& attrs, int num_inputs) {
  ASSIGN_OR_RETURN(const int64_t tensors, ir::IntAttr(attrs, "tensors"));
  int64_t copies = 0;
  if (attrs.contains("copies")) {
    ASSIGN_OR_RETURN(copies, ir::IntAttr(attrs, "copies"));
  }
  const bool scaled = ir::BoolAttrOr(attrs, "loss_scaled", false);
  int64_t extras = -1;
  if (attrs.contains("checks")) {
    ASSIGN_OR_RETURN(extras, ir::IntAttr(attrs, "checks"));
    if (extras < 0 || extras > num_inputs || scaled) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attr checks must count the extra tensors checked (at least 0), without loss_scaled; "
          "got ",
          extras, scaled ? " with loss_scaled" : ""));
    }
  }
  // tensors and copies are bounded first, so that kPerTensor * tensors cannot overflow.
  const bool fits = tensors >= 1 && tensors <= num_inputs && copies >= 0 && copies <= tensors;
  const int64_t copy_inputs = copies > 0 ? copies + 1 : 0;    // The copies, then the flag.
  const int64_t check_inputs = extras >= 0 ? extras + 3 : 0;  // Extras, counters, words.
  const int64_t shared = fits ? num_inputs - kPerTensor * tensors - copy_inputs : -1;
  const int64_t fixed = kFixedShared + (scaled ? 1 : 0) + check_inputs;
  const int64_t most = fixed + (extras >= 0 ? 0 : 1);  // A clip, except with checks.
  if (!fits || shared < fixed || shared > most) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected ", kPerTensor, " inputs per tensor (w, g, v, weight_decay) for ", tensors,
        " tensors, then lr, momentum", extras >= 0 ? "" : "[, clip]", scaled ? ", check" : "",
        extras >= 0
            ? absl::StrCat(", ", extras, " tensors checked, skipped_steps, record, barrier words")
            : "",
        copies > 0 ? absl::StrCat(", ", copies, " copies, the stale flag") : "", "; got ",
        num_inputs, " inputs"));
  }
  Layout layout{.tensors = tensors, .copies = copies, .first_copy = num_inputs - copy_inputs};
  int next = kFixedShared;
  if (extras >= 0) {
    layout.extras = extras;
    layout.first_extra = next;
    layout.skipped = next + static_cast<int>(extras);
    layout.record = layout.skipped + 1;
    layout.words = layout.record + 1;
    layout.sticky = ir::BoolAttrOr(attrs, "sticky", false);
    return layout;
  }
  if (shared > fixed) layout.clip = next++;
  if (scaled) layout.check = next;
  return layout;
}

// What sgd_momentum sees for tensor t: w, g, v, lr, momentum, its weight decay[, clip][, check].
template <typename T>
std::vector<T> SgdInputs(absl::Span<T const> in, const Layout& layout, int64_t t) {
  const size_t h = kPerTensor * layout.tensors;
  std::vector<T> single(in.begin() + kPerTensor * t, in.begin() + kPerTensor * t + 3);
  single.insert(single.end(), in.begin() + h, in.begin() + h + kFixedShared);
  single.push_back(in[kPerTensor * t + kWeightDecay]);
  if (layout.clip >= 0) single.push_back(in[h + layout.clip]);
  if (layout.check >= 0) single.push_back(in[h + layout.check]);
  return single;
}

absl::StatusOr<std::vector<TensorSpec>> InferSgdMulti(const Attrs& attrs,
                                                      absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(const Layout layout, LayoutOf(attrs, static_cast<int>(in.size())));
  for (int64_t t = 0; t < layout.tensors; ++t) {
    std::vector<TensorSpec> single = SgdInputs<TensorSpec>(in, layout, t);
    // A 16-bit gradient of the weight's shape is read as its exact float32 widening.
    if (IsLowPrecision(single[1].dtype) && single[1].shape == single[0].shape) {
      single[1].dtype = DType::kFloat32;
    }
    auto checked = SgdMomentumOp().infer(attrs, single);
    if (!checked.ok()) {
      return absl::Status(checked.status().code(),
                          absl::StrCat("tensor ", t, ": ", checked.status().message()));
    }
  }
  RETURN_IF_ERROR(CheckWeightCopies(in, kPerTensor, layout.copies, layout.first_copy));
  if (layout.extras < 0) return std::vector<TensorSpec>{};
  const size_t h = kPerTensor * layout.tensors;
  for (int64_t e = 0; e < layout.extras; ++e) {
    const TensorSpec& extra = in[h + layout.first_extra + e];
    if (extra.dtype != DType::kFloat32 && !IsLowPrecision(extra.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checked tensor ", e, " must be float32, bfloat16 or float16, got ", extra.ToString()));
    }
  }
  const TensorSpec skipped{Shape{}, DType::kInt32}, record{Shape{2}, DType::kInt32},
      words{Shape{codegen::kSgdCheckWords}, DType::kInt32};
  if (!(in[h + layout.skipped] == skipped) || !(in[h + layout.record] == record) ||
      !(in[h + layout.words] == words)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the skipped-step count, the non-finite record and the barrier words must be ",
                     skipped.ToString(), ", ", record.ToString(), " and ", words.ToString(),
                     ", got ", in[h + layout.skipped].ToString(), ", ",
                     in[h + layout.record].ToString(), " and ", in[h + layout.words].ToString()));
  }
  return std::vector<TensorSpec>{{Shape{2}, DType::kFloat32}};
}

// With attr checks: whether the step is found non-finite (a gradient or an extra tensor holds an
// inf or a NaN, or, sticky, the record holds a found step), as grad_nonfinite and
// loss_scale_check find it; writes the check and moves the counters on as the latter does.
bool CheckedStepFound(absl::Span<ir::HostTensor* const> in, ir::HostTensor& check,
                      const Layout& layout) {
  const size_t h = kPerTensor * layout.tensors;
  std::vector<const ir::HostTensor*> checked;
  for (int64_t t = 0; t < layout.tensors; ++t) checked.push_back(in[kPerTensor * t + 1]);
  for (int64_t e = 0; e < layout.extras; ++e) checked.push_back(in[h + layout.first_extra + e]);
  bool found = false;
  for (const ir::HostTensor* x : checked) {
    const int64_t n = x->spec().shape.NumElements();
    for (int64_t i = 0; i < n && !found; ++i) found = !std::isfinite(ir::FloatElement(*x, i));
  }
  auto record = in[h + layout.record]->data<int32_t>();
  if (layout.sticky) found = found || record[1] != 0;
  ir::SetFloatElement(check, 0, 1.0);
  ir::SetFloatElement(check, 1, found ? 1.0 : 0.0);
  const int32_t steps = record[0];
  if (found) {
    ++in[h + layout.skipped]->data<int32_t>()[0];
    if (record[1] == 0) record[1] = steps + 1;
  }
  record[0] = steps + 1;
  return found;
}

absl::Status CpuSgdMulti(const Node& node, absl::Span<ir::HostTensor* const> in,
                         absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(const Layout layout, LayoutOf(node.attrs, static_cast<int>(in.size())));
  // A skipped step writes no copy either, as the kernel returns at once.
  bool skipped = false;
  if (layout.extras >= 0) {
    skipped = CheckedStepFound(in, *out[0], layout);
    if (skipped) return WriteWeightCopies(in, kPerTensor, layout.copies, layout.first_copy, true);
  } else if (layout.check >= 0) {
    const ir::HostTensor& check = *in[kPerTensor * layout.tensors + layout.check];
    RETURN_IF_ERROR(DispatchFloat(check.dtype(), [&]<typename T>() {
      skipped = check.data<T>()[1] != T(0);
      return absl::OkStatus();
    }));
  }
  for (int64_t t = 0; t < layout.tensors; ++t) {
    RETURN_IF_ERROR(SgdMomentumOp().cpu(node, SgdInputs<ir::HostTensor*>(in, layout, t), out));
  }
  return WriteWeightCopies(in, kPerTensor, layout.copies, layout.first_copy, skipped);
}

std::vector<int> MultiMutated(const Attrs& attrs, int num_inputs) {
  std::vector<int> mutated =
      WithCopiesMutated(MultiTensorMutated(attrs, kPerTensor, {0, 2}), attrs, num_inputs);
  const absl::StatusOr<Layout> layout = LayoutOf(attrs, num_inputs);
  if (layout.ok() && layout->extras >= 0) {
    const int h = kPerTensor * static_cast<int>(layout->tensors);
    for (int i : {layout->skipped, layout->record, layout->words}) mutated.push_back(h + i);
  }
  return mutated;
}

// The arguments every SGD kernel takes, up to the stale flag: the table, the kinds, the shared
// scalars (a clip and a check where the node has them, else null) and Nesterov.
KernelArgs SgdArgs(const LoweringContext& ctx, const Node& node, const Layout& layout,
                   const UpdateTable& update) {
  const size_t h = kPerTensor * layout.tensors;
  auto shared = [&](int i) -> void* { return i >= 0 ? ctx.inputs[h + i] : nullptr; };
  KernelArgs args;
  args.AddBytes(update.table.data(), update.table.bytes())
      .AddBytes(update.kinds.data(), update.kinds.size());
  args.Add(update.table.count());
  args.Add(shared(0)).Add(shared(1)).Add(shared(layout.clip)).Add(shared(layout.check));
  args.Add(static_cast<int>(ir::BoolAttrOr(node.attrs, "nesterov", false)));
  if (layout.copies > 0) args.Add(ctx.inputs[layout.first_copy + layout.copies]);
  return args;
}

// With attr checks: one cooperative launch over every tensor, the checks before the barrier.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerCheckedSgdMulti(const LoweringContext& ctx,
                                                                const Node& node,
                                                                const Layout& layout) {
  if (layout.tensors > codegen::kMaxMultiTensorCapacity || layout.extras > 1) {
    return absl::UnimplementedError(
        absl::StrCat("sgd_multi '", node.name, "' checks in its launch at most ",
                     codegen::kMaxMultiTensorCapacity, " tensors and 1 extra tensor, got ",
                     layout.tensors, " and ", layout.extras));
  }
  const size_t h = kPerTensor * layout.tensors;
  const int capacity = codegen::MultiTensorCapacity(layout.tensors);
  ASSIGN_OR_RETURN(const UpdateTable update, UpdateTableOf(ctx, kPerTensor, 0, layout.tensors,
                                                           layout.copies, layout.first_copy));
  KernelArgs args = SgdArgs(ctx, node, layout, update);  // No clip, no loss scaling.
  const bool extra = layout.extras == 1;
  const TensorSpec none{Shape{0}, DType::kFloat32};
  const TensorSpec& extra_spec = extra ? ctx.input_specs[h + layout.first_extra] : none;
  args.Add(extra ? ctx.inputs[h + layout.first_extra] : nullptr);
  args.Add(static_cast<long long>(extra_spec.shape.NumElements()));
  args.Add(static_cast<int>(codegen::GradientKind(extra_spec.dtype)));  // The kernel's int.
  args.Add(ctx.inputs[h + layout.skipped]).Add(ctx.inputs[h + layout.record]);
  args.Add(layout.sticky ? 1 : 0).Add(ctx.inputs[h + layout.words]).Add(ctx.outputs[0]);
  const dim3 grid = UpdateGrid(ctx, update.table.chunks());
  return CooperativeKernel::Create(
      ctx, node.name, codegen::SgdMulti(capacity, layout.copies > 0, true),
      static_cast<int>(grid.x), dim3(codegen::kNormBlock), 0, std::move(args));
}

// One launch per codegen::kMaxMultiTensorCapacity tensors (one for any model below that), its
// blocks striding over every chunk of every tensor.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerSgdMulti(const LoweringContext& ctx,
                                                         const Node& node) {
  ASSIGN_OR_RETURN(const Layout layout, LayoutOf(node.attrs, static_cast<int>(ctx.inputs.size())));
  const bool copies = layout.copies > 0;
  if (layout.extras >= 0) return LowerCheckedSgdMulti(ctx, node, layout);
  std::vector<std::unique_ptr<GpuKernel>> parts;
  for (int64_t first = 0; first < layout.tensors; first += codegen::kMaxMultiTensorCapacity) {
    const int64_t count =
        std::min<int64_t>(codegen::kMaxMultiTensorCapacity, layout.tensors - first);
    const int capacity = codegen::MultiTensorCapacity(count);
    ASSIGN_OR_RETURN(const UpdateTable update, UpdateTableOf(ctx, kPerTensor, first, count,
                                                             layout.copies, layout.first_copy));
    KernelArgs args = SgdArgs(ctx, node, layout, update);
    const dim3 grid = UpdateGrid(ctx, update.table.chunks());
    ASSIGN_OR_RETURN(std::unique_ptr<GpuKernel> part,
                     NvrtcKernel::Create(ctx, node.name, codegen::SgdMulti(capacity, copies), grid,
                                         dim3(codegen::kNormBlock), 0, std::move(args)));
    parts.push_back(std::move(part));
  }
  return Sequence(std::move(parts));
}

}  // namespace

const ir::OpDef& SgdMultiOp() {
  static const ir::OpDef op{.name = "sgd_multi",
                            .kind = ir::OpKind::kOptimizer,
                            .infer = InferSgdMulti,
                            .cpu = CpuSgdMulti,
                            .lower = LowerSgdMulti,
                            .mutated_inputs_of = MultiMutated,
                            // The weights and velocities are float32; 16-bit gradients and copies
                            // are read and written as they are.
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
