// What attention.cc (shape rules, gradient, CPU reference) and attention_lowering.cc (GPU) share:
// the dimensions of a causal_attention or causal_attention_grad node, and the lowerings.
#ifndef REPRISE_SRC_OPS_ATTENTION_INTERNAL_H_
#define REPRISE_SRC_OPS_ATTENTION_INTERNAL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "src/ops/gpu_kernel.h"

namespace reprise::ops {

struct AttentionDims {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  bool packed = false;  // One qkv input [B, T, 3·C]; else q, k and v [B, T, C].
  bool flat = false;    // Rank 2: [B·T, ...] (attr seq), y likewise.
  DType dtype = DType::kFloat32;

  int64_t width() const { return heads * head_dim; }  // C
  // Elements between sequence positions of q, k and v (and of their gradients).
  int64_t row() const { return packed ? 3 * width() : width(); }
  // Offsets of k and v from q's first element (packed), in elements.
  int64_t k_offset() const { return packed ? width() : 0; }
  int64_t v_offset() const { return packed ? 2 * width() : 0; }
  int num_qkv() const { return packed ? 1 : 3; }  // Inputs that hold q, k and v.
  TensorSpec y_spec() const {
    return {flat ? Shape{batch * seq, width()} : Shape{batch, seq, width()}, dtype};
  }
  TensorSpec stats_spec() const {
    return {Shape{batch, heads, seq}, dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32};
  }
};

// The dimensions of causal_attention's inputs (q, k and v, or qkv); InvalidArgument naming the
// shapes that do not fit.
absl::StatusOr<AttentionDims> ForwardDims(const Attrs& attrs, absl::Span<const TensorSpec> in);
// Of causal_attention_grad's inputs: those of the forward, then y, stats and dy.
absl::StatusOr<AttentionDims> GradDims(const Attrs& attrs, absl::Span<const TensorSpec> in);

absl::StatusOr<std::unique_ptr<GpuKernel>> LowerCausalAttention(const LoweringContext& ctx,
                                                                const Node& node);
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerCausalAttentionGrad(const LoweringContext& ctx,
                                                                    const Node& node);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_ATTENTION_INTERNAL_H_
