// A GELU layer's forward product through cuDNN's graph API (cudnn-frontend), where cuBLASLt's
// GELU_AUX_BIAS epilogue (src/runtime/lt_matmul.h) runs well below the plain product's rate:
//
//   pre = op(A)·op(B) + bias,  out = gelu(pre)     (both written: the backward reads pre)
//
// row-major, out and pre [m, n], op(A) [m, k], op(B) [k, n] (transpose_a: A stored [k, m];
// transpose_b: B stored [n, k]), the bias n values; bfloat16 or float16 in and out, accumulated and
// activated in float32; GELU is the tanh form (cuDNN's GELU_APPROX_TANH_FWD). The backward's form
// (the data gradient times gelu'(pre), GELU_APPROX_TANH_BWD) measured slower in cuDNN than
// cuBLASLt's DGELU (tools/device/matmul_gelu_probe.cu), so it stays there. This header exposes
// none of the frontend's types: only cudnn_gelu_product.cc includes them.
//
// Create() builds the graph for one shape, or finds it built in a process-wide cache: execution
// plans from heuristics mode A then the fallback list, the first that builds (or, with `measure`,
// the fastest of the first kMeasuredGeluProductCandidates on the caller's buffers), its first run
// made in a throw-away capture. Run() only enqueues, so it is safe under CUDA graph capture, and
// one plan per shape gives the same bits on every run. Unimplemented where cuDNN has no plan for
// the graph: the caller then runs cuBLASLt's epilogue.
#ifndef REPRISE_SRC_RUNTIME_CUDNN_GELU_PRODUCT_H_
#define REPRISE_SRC_RUNTIME_CUDNN_GELU_PRODUCT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reprise/tensor.h"
#include "src/runtime/cudnn_handle.h"

namespace reprise::runtime {

struct GeluProductShape {
  int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
  DType dtype = DType::kBFloat16;  // kBFloat16 or kFloat16.

  std::string ToString() const;  // "gelu bf16 [16384x768]·[3072x768]^T"
  bool operator==(const GeluProductShape& other) const = default;
};

// The device addresses of one run: reads a, b and bias, writes pre and out.
struct GeluProductBuffers {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* bias = nullptr;
  void* pre = nullptr;
  void* out = nullptr;
};

struct GeluProductOptions {
  std::string device;  // Which GPU (name, compute capability): part of the cache key.
  // Time the first kMeasuredCandidates plans that build on `buffers` (three alternating rounds)
  // and keep the fastest, instead of the first that builds. The buffers' contents are overwritten.
  bool measure = false;
  // Build cuDNN's candidate of this name (CudnnGeluProduct::engine(), as a record keeps it),
  // neither the first nor a measured one: kNotFound where no candidate has it.
  std::string plan_name;
  GeluProductBuffers buffers;
  void* workspace = nullptr;   // For measuring; at least workspace_limit bytes.
  size_t workspace_limit = 0;  // Plans needing more are passed over.
};

inline constexpr int kMeasuredGeluProductCandidates = 8;

// Unimplemented unless cuDNN's fused graph can take the shape at all (16-bit types, n and k
// multiples of 8, nothing empty).
absl::Status GeluProductShapeSupported(const GeluProductShape& shape);

// The key of the record of a race between cuDNN's plan and cuBLASLt's epilogue for this product
// (src/ops/gelu_product_race.h): the shape, the workspace limit, the device and both libraries'
// versions.
std::string GeluProductRaceRecordKey(const GeluProductShape& shape, size_t workspace_limit,
                                     absl::string_view device, int64_t cublaslt_version);

class CudnnGeluProduct {
 public:
  struct Plan;

  static absl::StatusOr<CudnnGeluProduct> Create(const CudnnHandle& handle,
                                                 const GeluProductShape& shape,
                                                 const GeluProductOptions& options,
                                                 absl::string_view context);

  // Enqueues the product on the handle's stream (CudnnHandle::Bind).
  absl::Status Run(const CudnnHandle& handle, const GeluProductBuffers& buffers, void* workspace,
                   absl::string_view context) const;

  size_t workspace_bytes() const;
  // cuDNN's name for the plan, e.g. eng4_k24=2 (what GeluProductOptions::plan_name asks for).
  const std::string& engine() const;
  // "cudnn gelu bf16 [..]·[..] engine <name> ws <bytes>[ measured <ms> ms of <n>]"
  std::string Describe() const;

  // Plans built so far in this process (for tests).
  static size_t CacheSize();

 private:
  CudnnGeluProduct(GeluProductShape shape, std::shared_ptr<const Plan> plan)
      : shape_(shape), plan_(std::move(plan)) {}

  GeluProductShape shape_;
  std::shared_ptr<const Plan> plan_;
};

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_CUDNN_GELU_PRODUCT_H_
