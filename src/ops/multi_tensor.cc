#include "src/ops/multi_tensor.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "src/codegen/cast_kernels.h"
#include "src/codegen/gradient_loads.h"
#include "src/codegen/loss_scale_kernels.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/ir/low_precision.h"
#include "src/ir/op_def.h"
#include "src/ops/cast.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"

namespace reprise::ops {

absl::StatusOr<int64_t> MultiTensorCount(const Attrs& attrs, int num_inputs, int per_tensor,
                                         int min_shared, int max_shared) {
  ASSIGN_OR_RETURN(int64_t tensors, ir::IntAttr(attrs, "tensors"));
  // tensors is bounded first, so that per_tensor * tensors cannot overflow.
  const bool fits = tensors >= 1 && tensors <= num_inputs;
  const int64_t shared = fits ? num_inputs - per_tensor * tensors : -1;
  if (!fits || shared < min_shared || shared > max_shared) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", per_tensor, " inputs per tensor for ", tensors, " tensors plus ",
                     min_shared, min_shared == max_shared ? "" : absl::StrCat(" to ", max_shared),
                     " shared inputs, got ", num_inputs, " inputs"));
  }
  return tensors;
}

absl::StatusOr<OptionalShared> OptionalSharedInputs(const Attrs& attrs, int per_tensor,
                                                    int num_shared, int min_shared) {
  const bool scaled = ir::BoolAttrOr(attrs, "loss_scaled", false);
  const int fixed = min_shared + (scaled ? 1 : 0);
  const int extra = num_shared - fixed;
  if (extra < 0 || extra > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", per_tensor + fixed, " inputs (", per_tensor + fixed + 1,
                     " with a clip coefficient", scaled ? ", the last the loss-scale check" : "",
                     "), got ", per_tensor + num_shared));
  }
  OptionalShared optional;
  if (extra == 1) optional.clip = min_shared;
  if (scaled) optional.check = num_shared - 1;
  return optional;
}

absl::Status CheckLossScaleCheck(const TensorSpec& check) {
  if (check.shape.rank() != 1 || check.shape.dim(0) != 2 || !IsFloat(check.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the loss-scale check must be f32[2] (1 / scale, found non-finite), got ",
                     check.ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorSpec>> InferEachTensor(const Attrs& attrs,
                                                        absl::Span<const TensorSpec> in,
                                                        int64_t tensors, int per_tensor,
                                                        ir::InferFn single) {
  for (int64_t t = 0; t < tensors; ++t) {
    auto checked = single(attrs, SingleTensorInputs(in, tensors, per_tensor, t));
    if (!checked.ok()) {
      return absl::Status(checked.status().code(),
                          absl::StrCat("tensor ", t, ": ", checked.status().message()));
    }
  }
  return std::vector<TensorSpec>{};
}

absl::Status RunEachTensor(const Node& node, absl::Span<ir::HostTensor* const> in,
                           absl::Span<ir::HostTensor* const> out, int64_t tensors, int per_tensor,
                           ir::CpuFn single) {
  for (int64_t t = 0; t < tensors; ++t) {
    RETURN_IF_ERROR(single(node, SingleTensorInputs(in, tensors, per_tensor, t), out));
  }
  return absl::OkStatus();
}

std::vector<int> MultiTensorMutated(const Attrs& attrs, int per_tensor,
                                    absl::Span<const int> per_tensor_mutated) {
  absl::StatusOr<int64_t> tensors = ir::IntAttr(attrs, "tensors");
  std::vector<int> mutated;
  for (int64_t t = 0; tensors.ok() && t < *tensors; ++t) {
    for (int m : per_tensor_mutated) mutated.push_back(static_cast<int>(per_tensor * t + m));
  }
  return mutated;
}

absl::Status CheckWeightCopies(absl::Span<const TensorSpec> in, int per_tensor, int64_t copies,
                               int64_t first_copy) {
  for (int64_t t = 0; t < copies; ++t) {
    const TensorSpec& copy = in[first_copy + t];
    const Shape& weight = in[per_tensor * t].shape;
    if (!IsLowPrecision(copy.dtype) || copy.shape != weight) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", t, ": its copy is ", copy.ToString(), ", not a 16-bit ", weight.ToString()));
    }
  }
  return copies > 0 ? CheckStaleFlag(in[first_copy + copies]) : absl::OkStatus();
}

std::vector<int> WithCopiesMutated(std::vector<int> mutated, const Attrs& attrs, int num_inputs) {
  const int64_t copies = ir::IntAttr(attrs, "copies").value_or(0);
  if (copies > 0 && copies < num_inputs) {
    for (int64_t i = num_inputs - copies - 1; i < num_inputs; ++i) {
      mutated.push_back(static_cast<int>(i));  // The copies and the flag.
    }
  }
  return mutated;
}

absl::Status WriteWeightCopies(absl::Span<ir::HostTensor* const> in, int per_tensor, int64_t copies,
                               int64_t first_copy, bool skipped) {
  for (int64_t t = 0; t < copies && !skipped; ++t) {
    RETURN_IF_ERROR(ir::ConvertFloats(*in[per_tensor * t], *in[first_copy + t]));
  }
  if (copies > 0) in[first_copy + copies]->data<int32_t>()[0] = 0;
  return absl::OkStatus();
}

absl::StatusOr<UpdateTable> UpdateTableOf(const LoweringContext& ctx, int per_tensor, int64_t first,
                                          int64_t count, int64_t copies, int64_t first_copy) {
  const int capacity = codegen::MultiTensorCapacity(count);
  UpdateTable out{ChunkTable(capacity, per_tensor + (copies > 0 ? 1 : 0)),
                  std::vector<unsigned char>(capacity, 0)};
  for (int64_t t = first; t < first + count; ++t) {
    const auto begin = ctx.inputs.begin() + per_tensor * t;
    std::vector<void*> pointers(begin, begin + per_tensor);
    int kind = codegen::GradientKind(ctx.input_specs[per_tensor * t + 1].dtype);
    if (copies > 0) {
      const bool copied = t < copies;
      pointers.push_back(copied ? ctx.inputs[first_copy + t] : nullptr);
      if (copied) kind |= codegen::GradientKind(ctx.input_specs[first_copy + t].dtype) << 2;
    }
    RETURN_IF_ERROR(out.table.Add(pointers, ctx.input_specs[per_tensor * t].NumElements()));
    out.kinds[t - first] = static_cast<unsigned char>(kind);
  }
  return out;
}

dim3 UpdateGrid(const LoweringContext& ctx, int64_t chunks) {
  const int64_t most = int64_t{ctx.device->sm_count} * codegen::kAdamBlocksPerSm;
  return dim3(static_cast<unsigned>(std::max<int64_t>(1, std::min(chunks, most))));
}

int64_t NormChunks(int64_t n) { return (n + codegen::kNormChunk - 1) / codegen::kNormChunk; }

ChunkTable::ChunkTable(int capacity, int pointer_arrays)
    : capacity_(capacity),
      pointer_arrays_(pointer_arrays),
      // The pointers and n, 8 bytes each, then first[capacity + 1] as ints, rounded up.
      words_((pointer_arrays + 1) * capacity + (capacity + 2) / 2, 0) {}

absl::Status ChunkTable::Add(absl::Span<void* const> pointers, int64_t n) {
  if (count_ == capacity_ || static_cast<int>(pointers.size()) != pointer_arrays_) {
    return absl::InvalidArgumentError(absl::StrCat("a table of ", capacity_, " tensors with ",
                                                   pointer_arrays_, " arrays is full or got ",
                                                   pointers.size(), " pointers"));
  }
  const int64_t chunks = chunks_ + NormChunks(n);
  if (chunks > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the tensors of one table have more than 2^31 chunks (", chunks, ")"));
  }
  for (int a = 0; a < pointer_arrays_; ++a) {
    std::memcpy(&words_[a * capacity_ + count_], &pointers[a], sizeof(void*));
  }
  const long long elements = n;
  std::memcpy(&words_[pointer_arrays_ * capacity_ + count_], &elements, sizeof(elements));
  auto* first = reinterpret_cast<int*>(&words_[(pointer_arrays_ + 1) * capacity_]);
  first[count_] = static_cast<int>(chunks_);
  first[count_ + 1] = static_cast<int>(chunks);
  ++count_;
  chunks_ = chunks;
  return absl::OkStatus();
}

std::vector<codegen::GeneratedKernel> ChunkedKernelsOf(const Node& node) {
  const bool adam = node.op == &AdamMultiOp();
  const bool sgd = node.op == &SgdMultiOp();
  const bool nonfinite = node.op == &GradNonfiniteOp();
  const bool cast = node.op == &CastMultiOp() && !node.outputs.empty();
  const bool refresh = node.op == &RefreshCopiesOp() && node.inputs.size() >= 3;
  if (!adam && !sgd && !nonfinite && !cast && !refresh && node.op != &GradSumSquaresOp() &&
      node.op != &GradSumSquaresNonfiniteOp())
    return {};
  int64_t tensors = static_cast<int64_t>(node.inputs.size());
  const bool copies = (adam || sgd) && ir::IntAttr(node.attrs, "copies").value_or(0) > 0;
  const bool checks = sgd && node.attrs.contains("checks");  // One launch, whatever the count.
  if (adam || sgd) {
    tensors = ir::IntAttr(node.attrs, "tensors").value_or(0);
  } else if (refresh) {
    tensors = tensors / 2;
  } else if (ir::BoolAttrOr(node.attrs, "loss_scaled", false)) {
    --tensors;  // The loss-scale check.
  }
  // Tables of kMaxMultiTensorCapacity tensors, the last of the rest, as the lowerings split them.
  std::vector<int> capacities;
  for (int64_t left = tensors; left > 0; left -= codegen::kMaxMultiTensorCapacity) {
    const int capacity = codegen::MultiTensorCapacity(left);
    if (absl::c_find(capacities, capacity) == capacities.end()) capacities.push_back(capacity);
  }
  std::vector<codegen::GeneratedKernel> kernels;
  for (int capacity : capacities) {
    kernels.push_back(adam        ? codegen::AdamMulti(capacity, copies)
                      : sgd       ? codegen::SgdMulti(capacity, copies, checks)
                      : nonfinite ? codegen::GradNonfinite(capacity)
                      : cast      ? codegen::CastMulti(capacity, node.outputs[0].dtype)
                      : refresh
                          ? codegen::CastMulti(
                                capacity, CastTargetOf(node.attrs).value_or(DType::kBFloat16), true)
                          : codegen::GradSumSquares(capacity));
  }
  return kernels;
}

std::string LaunchSequence::Describe() const {
  std::string out;
  for (const auto& part : kernels()) {
    absl::StrAppend(&out, out.empty() ? "" : "; ", part->Describe());
  }
  return out;
}

std::unique_ptr<GpuKernel> Sequence(std::vector<std::unique_ptr<GpuKernel>> parts) {
  if (parts.size() == 1) return std::move(parts[0]);
  // The parts run one at a time: the workspace is the most any of them uses.
  size_t workspace = 0;
  for (const auto& part : parts) workspace = std::max(workspace, part->WorkspaceBytes());
  return std::make_unique<LaunchSequence>(std::move(parts), workspace);
}

}  // namespace reprise::ops
