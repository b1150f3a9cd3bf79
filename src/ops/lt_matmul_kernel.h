// What every cuBLASLt product op (matmul, its fused epilogue forms and the batched ones) shares:
// the GPU kernel that enqueues a product planned at lowering, and the CPU reference product.
#ifndef REPRISE_SRC_OPS_LT_MATMUL_KERNEL_H_
#define REPRISE_SRC_OPS_LT_MATMUL_KERNEL_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/ir/op_def.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/lt_matmul.h"

namespace reprise::ops {

// A product's sizes and orientation: attrs transpose_a and transpose_b, and the last two
// dimensions of A and B, each of rank `rank` (2 for matmul, 3 for a stack of products along a
// leading model dimension, the same positive count in both) and of one float dtype.
// InvalidArgument naming the shapes otherwise.
struct ProductDims {
  int64_t models = 1;  // The stacked products; 1 for rank 2.
  int64_t m, n, k;
  bool ta, tb;
  bool stacked = false;  // Rank 3: every tensor of the op leads with the model dimension.

  // `dims` after the model dimension where the operands have one: C is Stack({m, n}).
  Shape Stack(std::initializer_list<int64_t> dims) const;
  // The cuBLASLt product: one, or a strided batch of `models`.
  runtime::MatmulShape Matmul(DType dtype) const;
};
absl::StatusOr<ProductDims> ProductDimsOf(const Attrs& attrs, const TensorSpec& a,
                                          const TensorSpec& b, int rank);

// Plans `shape` with `epilogue` for `node` (A, B = inputs 0 and 1, C = output 0) on the node's
// lane workspace. Errors name the node. With LoweringOptions::measure_matmul_algorithms the
// configuration is the fastest of cuBLASLt's candidates, timed on the node's own buffers, or the
// one a record of an earlier measurement names (plan_record.h, kept in ctx.kernels' lower layer).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerLtMatmul(const LoweringContext& ctx,
                                                         const Node& node,
                                                         const runtime::MatmulShape& shape,
                                                         const runtime::MatmulEpilogue& epilogue);

// How this process's measured cuBLASLt choices were made, summed over all lowerings; a GELU
// product's race between cuDNN and cuBLASLt (src/ops/gelu_product_race.h) counts as one more.
struct MatmulChoiceStats {
  int64_t measured = 0;           // Timed: the candidates' fastest chosen.
  int64_t from_records = 0;       // Named by a record of an earlier measurement.
  int64_t records_discarded = 0;  // Records that did not decode or name a usable configuration.
  int64_t candidates_timed = 0;
  double measure_ms = 0;

  MatmulChoiceStats Since(const MatmulChoiceStats& before) const;
  // E.g. "cuBLASLt choices measured 30 (1840 ms), from records 0"; "" when none since `before`.
  std::string MeasuredSince(const MatmulChoiceStats& before) const;
};
MatmulChoiceStats MatmulChoices();
// Adds a choice made beside LtMatmul's own (the GELU products' race) to MatmulChoices().
void CountMatmulChoice(const MatmulChoiceStats& choice);

// c[m, n] = op(a)·op(b), all row-major (a stored [k, m] when ta, b stored [n, k] when tb), each
// entry summed in double: far below the GPU's float32 error.
template <typename T>
void ReferenceProduct(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k, bool ta,
                      bool tb) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const T av = ta ? a[p * m + i] : a[i * k + p];
        const T bv = tb ? b[j * k + p] : b[p * n + j];
        sum += static_cast<double>(av) * static_cast<double>(bv);
      }
      c[i * n + j] = static_cast<T>(sum);
    }
  }
}

// ReferenceProduct for each of d.models stacked products.
template <typename T>
void ReferenceProducts(const ProductDims& d, const T* a, const T* b, T* c) {
  for (int64_t model = 0; model < d.models; ++model) {
    ReferenceProduct(a + model * d.m * d.k, b + model * d.k * d.n, c + model * d.m * d.n, d.m, d.n,
                     d.k, d.ta, d.tb);
  }
}

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_LT_MATMUL_KERNEL_H_
