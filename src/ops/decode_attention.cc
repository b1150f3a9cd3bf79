// decode_attention: shape rule, CPU reference and GPU lowering (src/ops/decode_attention.h).
#include "src/ops/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/codegen/decode_kernels.h"
#include "src/codegen/element_type.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/op_helpers.h"
#include "src/util/status_macros.h"

namespace reprise::ops {

namespace {

struct DecodeDims {
  int64_t batch = 0, heads = 0, head_dim = 0, max_positions = 0;
  int64_t width() const { return heads * head_dim; }
};

absl::StatusOr<DecodeDims> DimsOf(const Attrs& attrs, absl::Span<const TensorSpec> in) {
  RETURN_IF_ERROR(CheckArity(in, 4));
  ASSIGN_OR_RETURN(const int64_t heads, ir::IntAttr(attrs, "heads"));
  if (heads < 1) return absl::InvalidArgumentError(absl::StrCat("heads must be >= 1, got ", heads));
  RETURN_IF_ERROR(CheckRank(in[0], 2, "qkv"));
  RETURN_IF_ERROR(CheckFloat(in[0], "qkv"));
  DecodeDims dims{.batch = in[0].shape.dim(0), .heads = heads};
  const int64_t packed = in[0].shape.dim(1);
  // heads is bounded by the width before it is tripled, which could overflow.
  if (heads > packed || packed < 3 * heads || packed % (3 * heads) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("qkv ", in[0].ToString(),
                                                   ": its last dimension must split into 3 x ",
                                                   heads, " heads of equal width"));
  }
  dims.head_dim = packed / (3 * heads);
  if (dims.batch < 1)
    return absl::InvalidArgumentError(absl::StrCat("qkv is empty: ", in[0].ToString()));
  const char* names[] = {"k_cache", "v_cache"};
  for (int i = 1; i <= 2; ++i) {
    RETURN_IF_ERROR(CheckRank(in[i], 3, names[i - 1]));
    // A 16-bit cache beside float32 qkv: a graph built for a mixed-precision trainer, whose
    // pass makes qkv 16-bit too (src/ops/decode_attention.h).
    const bool dtype_ok = in[i].dtype == in[0].dtype ||
                          (in[0].dtype == DType::kFloat32 && IsLowPrecision(in[i].dtype));
    if (!dtype_ok || in[i].shape.dim(0) != dims.batch || in[i].shape.dim(2) != dims.width() ||
        in[i].shape.dim(1) < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          names[i - 1], " is ", in[i].ToString(), "; with qkv ", in[0].ToString(), " it must be [",
          dims.batch, ", max_positions >= 1, ", dims.width(), "] ", DTypeName(in[0].dtype),
          in[0].dtype == DType::kFloat32 ? " (or 16-bit)" : ""));
    }
  }
  if (in[1] != in[2]) {
    return absl::InvalidArgumentError(
        absl::StrCat("v_cache is ", in[2].ToString(), "; k_cache is ", in[1].ToString()));
  }
  dims.max_positions = in[1].shape.dim(1);
  if (in[3] != TensorSpec{Shape{1}, DType::kInt32}) {
    return absl::InvalidArgumentError(
        absl::StrCat("position must be i32[1], got ", in[3].ToString()));
  }
  return dims;
}

absl::StatusOr<std::vector<TensorSpec>> Infer(const Attrs& attrs, absl::Span<const TensorSpec> in) {
  ASSIGN_OR_RETURN(const DecodeDims dims, DimsOf(attrs, in));
  return std::vector<TensorSpec>{{Shape{dims.batch, dims.width()}, in[0].dtype}};
}

absl::Status Cpu(const Node& node, absl::Span<ir::HostTensor* const> in,
                 absl::Span<ir::HostTensor* const> out) {
  std::vector<TensorSpec> specs;
  for (const ir::HostTensor* t : in) specs.push_back(t->spec());
  ASSIGN_OR_RETURN(const DecodeDims dims, DimsOf(node.attrs, specs));
  const int64_t p = in[3]->data<int32_t>()[0];
  if (p < 0 || p >= dims.max_positions) {
    return absl::OutOfRangeError(absl::StrCat("node '", node.name, "': position ", p,
                                              " is outside the cache's ", dims.max_positions,
                                              " positions"));
  }
  const int64_t c = dims.width(), d = dims.head_dim, positions = dims.max_positions;
  return DispatchFloat(in[0]->dtype(), [&]<typename T>() {
    absl::Span<const T> qkv = in[0]->data<T>();
    auto k_cache = in[1]->data<T>();
    auto v_cache = in[2]->data<T>();
    auto y = out[0]->data<T>();
    for (int64_t b = 0; b < dims.batch; ++b) {
      const T* row = qkv.data() + b * 3 * c;
      T* keys = k_cache.data() + b * positions * c;
      T* values = v_cache.data() + b * positions * c;
      std::copy(row + c, row + 2 * c, keys + p * c);
      std::copy(row + 2 * c, row + 3 * c, values + p * c);
      for (int64_t h = 0; h < dims.heads; ++h) {
        std::vector<double> score(p + 1);
        double max_score = -INFINITY;
        for (int64_t t = 0; t <= p; ++t) {
          double s = 0;
          for (int64_t i = 0; i < d; ++i) s += double{row[h * d + i]} * keys[t * c + h * d + i];
          score[t] = s / std::sqrt(static_cast<double>(d));
          max_score = std::max(max_score, score[t]);
        }
        double sum = 0;
        for (double& s : score) sum += (s = std::exp(s - max_score));
        for (int64_t i = 0; i < d; ++i) {
          double acc = 0;
          for (int64_t t = 0; t <= p; ++t) acc += score[t] * values[t * c + h * d + i];
          y[b * c + h * d + i] = static_cast<T>(acc / sum);
        }
      }
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<GpuKernel>> Lower(const LoweringContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(const DecodeDims dims, DimsOf(node.attrs, ctx.input_specs));
  const DType dtype = ctx.input_specs[0].dtype;
  if (!codegen::IsKernelElementType(dtype)) {
    return absl::UnimplementedError(absl::StrCat(
        "node '", node.name, "' (decode_attention): no GPU ", "kernel for ", DTypeName(dtype)));
  }
  if (ctx.input_specs[1].dtype != dtype) {
    return absl::UnimplementedError(absl::StrCat(
        "node '", node.name, "' (decode_attention): ", DTypeName(ctx.input_specs[1].dtype),
        " caches beside ", DTypeName(dtype),
        " qkv; compile it with a trainer whose compute_dtype is the caches' (mixed precision then "
        "makes qkv ",
        DTypeName(ctx.input_specs[1].dtype), " too)"));
  }
  const int64_t shared = codegen::DecodeAttentionSharedBytes(dims.max_positions, dims.head_dim);
  if (shared > 48 * 1024) {
    return absl::UnimplementedError(
        absl::StrCat("node '", node.name, "' (decode_attention): ", dims.max_positions,
                     " cached positions of head width ", dims.head_dim, " need ", shared,
                     " bytes of shared memory; the kernel takes at most 48 KiB"));
  }
  KernelArgs args;
  args.Add(ctx.inputs[0]).Add(ctx.inputs[1]).Add(ctx.inputs[2]).Add(ctx.inputs[3]);
  args.Add(ctx.outputs[0]);
  args.Add(static_cast<int>(dims.heads)).Add(static_cast<int>(dims.head_dim));
  args.Add(static_cast<int>(dims.max_positions));
  args.Add(static_cast<float>(1.0 / std::sqrt(static_cast<double>(dims.head_dim))));
  return NvrtcKernel::Create(
      ctx, node.name, codegen::DecodeAttention(dtype),
      dim3(static_cast<unsigned>(dims.heads), static_cast<unsigned>(dims.batch)),
      dim3(codegen::kDecodeAttentionBlock), static_cast<unsigned>(shared), std::move(args));
}

}  // namespace

const ir::OpDef& DecodeAttentionOp() {
  static const ir::OpDef op{.name = "decode_attention",
                            .kind = ir::OpKind::kReduction,
                            .infer = Infer,
                            .cpu = Cpu,
                            .lower = Lower,
                            .mutated_inputs = {1, 2},
                            .low_precision_lowering = true};
  return op;
}

}  // namespace reprise::ops
