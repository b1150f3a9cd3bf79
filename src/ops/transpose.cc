// transpose: shape rule, gradient rule, CPU reference and the NVRTC lowering
// (src/codegen/transpose_kernels.h).
#include "src/ops/transpose.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <variant>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/codegen/transpose_kernels.h"
#include "src/ops/cast.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/util/status_macros.h"

namespace reprise::ops {

absl::StatusOr<Permutation> PermAttr(const Attrs& attrs) {
  auto it = attrs.find("perm");
  const std::string* text = it == attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
  if (text == nullptr) {
    return absl::InvalidArgumentError(
        "attribute 'perm' must be a string permutation of 0..3, e.g. \"0,2,3,1\"");
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(*text, ',');
  Permutation perm{};
  std::array<bool, 4> seen{};
  bool ok = parts.size() == 4;
  for (size_t i = 0; ok && i < parts.size(); ++i) {
    int axis = -1;
    ok = absl::SimpleAtoi(parts[i], &axis) && axis >= 0 && axis < 4 && !seen[axis];
    if (ok) seen[axis] = true, perm[i] = axis;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attribute 'perm' \"", *text, "\" must list 0, 1, 2 and 3 once each, e.g. \"0,2,3,1\""));
  }
  return perm;
}

Permutation InversePermutation(const Permutation& perm) {
  Permutation inverse{};
  for (int i = 0; i < 4; ++i) inverse[perm[i]] = i;
  return inverse;
}

std::string PermutationString(const Permutation& perm) { return absl::StrJoin(perm, ","); }

TransposeLaunch PlanTranspose(const Shape& x, const Permutation& perm) {
  // Position of each x axis among the axes of extent > 1 (-1 for the others).
  std::array<int, 4> position{-1, -1, -1, -1};
  int kept = 0;
  for (int a = 0; a < 4; ++a) {
    if (x.dim(a) != 1) position[a] = kept++;
  }
  // y's dimensions of extent > 1, merged where consecutive in y and in x: {x position, extent}.
  struct Group {
    int position;
    int64_t extent;
    int last;  // x position of the group's last axis.
  };
  std::vector<Group> groups;  // In y order.
  for (int i = 0; i < 4; ++i) {
    const int p = position[perm[i]];
    if (p < 0) continue;
    if (!groups.empty() && groups.back().last + 1 == p) {
      groups.back().extent *= x.dim(perm[i]);
      groups.back().last = p;
    } else {
      groups.push_back({p, x.dim(perm[i]), p});
    }
  }
  if (groups.empty()) groups.push_back({0, 1, 0});  // One element: a copy.
  // order[j]: the y-order index of the j-th group in x order.
  std::vector<int> order(groups.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return groups[a].position < groups[b].position; });
  TransposeLaunch launch;
  if (groups.size() == 2 && order == std::vector<int>{1, 0}) {
    launch.kind = TransposeLaunch::Kind::kTiled;
    launch.rows = groups[1].extent, launch.cols = groups[0].extent;
    return launch;
  }
  if (groups.size() == 3 && order == std::vector<int>{0, 2, 1}) {
    launch.kind = TransposeLaunch::Kind::kTiled;
    launch.batches = groups[0].extent;
    launch.rows = groups[2].extent, launch.cols = groups[1].extent;
    return launch;
  }
  // x strides of the groups, from x's innermost group outwards.
  std::vector<int64_t> stride(groups.size());
  int64_t step = 1;
  for (int j = static_cast<int>(order.size()) - 1; j >= 0; --j) {
    stride[order[j]] = step;
    step *= groups[order[j]].extent;
  }
  const size_t offset = 4 - groups.size();  // Right-aligned; leading extents stay 1.
  for (size_t i = 0; i < groups.size(); ++i) {
    launch.extents[offset + i] = groups[i].extent;
    launch.strides[offset + i] = stride[i];
  }
  return launch;
}

namespace {

absl::StatusOr<std::vector<TensorSpec>> InferTranspose(const Attrs& attrs,
                                                       absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 1));
  RETURN_IF_ERROR(CheckRank(in[0], 4, "x"));
  ASSIGN_OR_RETURN(const Permutation perm, PermAttr(attrs));
  std::vector<int64_t> dims(4);
  for (int i = 0; i < 4; ++i) dims[i] = in[0].shape.dim(perm[i]);
  return std::vector<TensorSpec>{{Shape(std::move(dims)), in[0].dtype}};
}

absl::StatusOr<std::vector<Value>> GradTranspose(Graph& g, const Node& node,
                                                 absl::Span<const Value> dout,
                                                 const std::vector<bool>& needs) {
  std::vector<Value> grads(1);
  if (!needs[0]) return grads;
  ASSIGN_OR_RETURN(const Permutation perm, PermAttr(node.attrs));
  Attrs attrs = {{"perm", PermutationString(InversePermutation(perm))}};
  // A transposed parameter's gradient ends its weight-gradient chain: role "wgrad" keeps it on
  // the wgrad lane, so the data-gradient lane never waits for it.
  if (IsParameterOrItsCast(g, node.inputs[0])) attrs["role"] = std::string("wgrad");
  ASSIGN_OR_RETURN(grads[0], g.AddOp1(TransposeOp(), absl::StrCat(node.name, ".grad"), {dout[0]},
                                      std::move(attrs)));
  return grads;
}

// A direct loop over y in storage order, independent of PlanTranspose, so that tests can check
// the plan against it. Elements are copied as bytes: any dtype.
absl::Status CpuTranspose(const Node& node, absl::Span<ir::HostTensor* const> in,
                          absl::Span<ir::HostTensor* const> out) {
  ASSIGN_OR_RETURN(const Permutation perm, PermAttr(node.attrs));
  const Shape& x = in[0]->spec().shape;
  if (x.rank() != 4 || in[0]->dtype() != out[0]->dtype()) {
    return absl::InternalError(absl::StrCat("transpose of ", in[0]->spec().ToString(), " into ",
                                            out[0]->spec().ToString()));
  }
  std::array<int64_t, 4> x_stride{};
  int64_t step = 1;
  for (int a = 3; a >= 0; --a) x_stride[a] = step, step *= x.dim(a);
  std::array<int64_t, 4> extent{}, stride{};
  for (int i = 0; i < 4; ++i) extent[i] = x.dim(perm[i]), stride[i] = x_stride[perm[i]];
  const size_t bytes = DTypeSize(in[0]->dtype());
  const char* src = static_cast<const char*>(in[0]->raw());
  char* dst = static_cast<char*>(out[0]->raw());
  for (int64_t a0 = 0; a0 < extent[0]; ++a0) {
    for (int64_t a1 = 0; a1 < extent[1]; ++a1) {
      for (int64_t a2 = 0; a2 < extent[2]; ++a2) {
        for (int64_t a3 = 0; a3 < extent[3]; ++a3) {
          const int64_t from = a0 * stride[0] + a1 * stride[1] + a2 * stride[2] + a3 * stride[3];
          std::memcpy(dst, src + from * bytes, bytes);
          dst += bytes;
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerTranspose(const LoweringContext& ctx,
                                                          const Node& node) {
  const TensorSpec& x = ctx.input_specs[0];
  // The kernels move raw words: the 32-bit one serves every 4-byte type, the 16-bit one (named
  // for bfloat16) both 16-bit floats.
  if (DTypeSize(x.dtype) != 4 && !IsLowPrecision(x.dtype)) {
    return absl::UnimplementedError(absl::StrCat("node '", node.name,
                                                 "': transpose runs on the GPU for f32, i32, bf16 "
                                                 "and f16 elements only, got ",
                                                 x.ToString()));
  }
  const DType word = IsLowPrecision(x.dtype) ? DType::kBFloat16 : DType::kFloat32;
  ASSIGN_OR_RETURN(const Permutation perm, PermAttr(node.attrs));
  const TransposeLaunch plan = PlanTranspose(x.shape, perm);
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.outputs[0]);
  if (plan.kind == TransposeLaunch::Kind::kTiled) {
    constexpr int kTile = codegen::kTransposeTile;
    const int64_t tiles =
        plan.batches * ((plan.rows + kTile - 1) / kTile) * ((plan.cols + kTile - 1) / kTile);
    args.Add(static_cast<long long>(plan.batches)).Add(static_cast<long long>(plan.rows));
    args.Add(static_cast<long long>(plan.cols));
    // GridFor counts threads; one block per tile, at most enough to fill the device.
    constexpr int kThreads = kTile * codegen::kTransposeTileRows;
    return NvrtcKernel::Create(ctx, node.name, codegen::TransposeTiled(word),
                               GridFor(tiles * kThreads, kThreads, *ctx.device),
                               dim3(kTile, codegen::kTransposeTileRows), 0, std::move(args));
  }
  for (int64_t e : plan.extents) args.Add(static_cast<long long>(e));
  for (int64_t s : plan.strides) args.Add(static_cast<long long>(s));
  return NvrtcKernel::Create(ctx, node.name, codegen::TransposeGather(word),
                             GridFor(x.NumElements(), 256, *ctx.device), dim3(256), 0,
                             std::move(args));
}

}  // namespace

const ir::OpDef& TransposeOp() {
  // No pointwise form: an element of y is not the element of x at the same index, so fused
  // pointwise chains must not take it in.
  static const ir::OpDef op{.name = "transpose",
                            .infer = InferTranspose,
                            .grad = GradTranspose,
                            .cpu = CpuTranspose,
                            .lower = LowerTranspose,
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
