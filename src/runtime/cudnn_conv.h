// cuDNN 2-D convolutions (forward, data gradient, filter gradient), planned once and run many
// times, through cuDNN's legacy convolution API.
//
// CudnnConv::Create() builds the descriptors and picks the algorithm (from a process-wide cache,
// else by cuDNN's heuristics or by timing candidates on the device), so that Run() only enqueues
// the convolution: no search, no allocation, no synchronisation. That makes Run() safe under CUDA
// graph capture, and keeps one algorithm, so repeated runs give the same bits.
//
//   ConvShape shape = ...;  // x [2, 64, 56, 56], w [64, 64, 3, 3], pad 1, ...
//   ASSIGN_OR_RETURN(CudnnConv conv, CudnnConv::Create(cudnn, ConvKind::kForward, shape, options,
//                                                       buffers, "node 'conv1'"));
//   RETURN_IF_ERROR(cudnn.Bind(stream, "node 'conv1'"));
//   RETURN_IF_ERROR(conv.Run(cudnn, x, w, y, workspace, "node 'conv1'"));
#ifndef REPRISE_SRC_RUNTIME_CUDNN_CONV_H_
#define REPRISE_SRC_RUNTIME_CUDNN_CONV_H_

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "reprise/tensor.h"
#include "src/runtime/cudnn_handle.h"

namespace reprise::runtime {

class KernelStore;

// Which of the three convolutions: y = conv(x, w); dx from (dy, w); dw from (x, dy).
enum class ConvKind : uint8_t { kForward, kBackwardData, kBackwardFilter };
absl::string_view ConvKindName(ConvKind kind);  // "fwd", "dgrad", "wgrad"

// Everything static about one 2-D convolution. x is [n, c, h, w] (NCHW) or [n, h, w, c] (NHWC);
// the filter is [k, c / groups, r, s] (NCHW) or [k, r, s, c / groups] (NHWC); y is [n, k, p, q]
// or [n, p, q, k]. Cross-correlation, as PyTorch and cuDNN's CUDNN_CROSS_CORRELATION compute.
struct ConvShape {
  Layout layout = Layout::kNCHW;
  DType dtype = DType::kFloat32;
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t k = 0, r = 0, s = 0;
  int64_t p = 0, q = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;

  // E.g. "NCHW x[2, 4, 5, 5] w[4, 4, 3, 3] y[2, 4, 5, 5] stride 1x1 pad 1x1 dilation 1x1 groups 1".
  std::string ToString() const;
  bool operator==(const ConvShape& other) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const ConvShape& s) {
    return H::combine(std::move(h), s.layout, s.dtype, s.n, s.c, s.h, s.w, s.k, s.r, s.s, s.p, s.q,
                      s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.dilation_h, s.dilation_w,
                      s.groups);
  }
};

// How an algorithm may be chosen.
struct ConvOptions {
  // TF32 tensor cores allowed (CUDNN_DEFAULT_MATH / CUDNN_TENSOR_OP_MATH); otherwise strict fp32
  // (CUDNN_FMA_MATH only).
  bool allow_tf32 = false;
  bool deterministic = false;  // Only algorithms cuDNN reports as CUDNN_DETERMINISTIC.
  bool measure = false;        // Time candidates on the device (cudnnFind*AlgorithmEx).
  size_t workspace_limit = 0;  // Bytes of workspace the algorithm may use.
  std::string device;          // Which GPU (name, compute capability): part of the cache key.
  // With `measure`: where measured choices are recorded and looked up first (cudnn_conv_record.h),
  // so that a later process does not time the algorithms again; nullptr keeps none.
  KernelStore* records = nullptr;
};

// One algorithm choice: the cuDNN algorithm enum of its kind, the math type it runs with and the
// workspace it needs.
struct ConvAlgorithm {
  int algo = -1;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t workspace_bytes = 0;
  // Measured: how many algorithms cudnnFind*AlgorithmEx ranked and its time for this one (what
  // its record keeps); 0 for a heuristic choice.
  int64_t candidates = 0;
  double measured_ms = 0;
};

// Everything that determines the choice of algorithm.
struct ConvAlgorithmKey {
  ConvKind kind = ConvKind::kForward;
  ConvShape shape;
  bool allow_tf32 = false;
  bool deterministic = false;
  bool measured = false;
  size_t workspace_limit = 0;
  std::string device;

  bool operator==(const ConvAlgorithmKey& other) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const ConvAlgorithmKey& key) {
    return H::combine(std::move(h), key.kind, key.shape, key.allow_tf32, key.deterministic,
                      key.measured, key.workspace_limit, key.device);
  }
};

// Algorithms already chosen, so that a second Trainer (or a second identical layer) skips the
// search. Thread-safe.
class ConvAlgorithmCache {
 public:
  // The one cache of the process; never destroyed.
  static ConvAlgorithmCache& Global();

  std::optional<ConvAlgorithm> Find(const ConvAlgorithmKey& key) const;
  // Keeps the first choice for a key: runs agree on one algorithm even if two searches raced.
  ConvAlgorithm Insert(const ConvAlgorithmKey& key, const ConvAlgorithm& algorithm);
  size_t size() const;
  // Drops every choice (planned convolutions keep theirs): for tests of the measured records.
  void Clear();

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<ConvAlgorithmKey, ConvAlgorithm> entries_ ABSL_GUARDED_BY(mu_);
};

// Move-only owners of cuDNN's descriptors. `context` names the caller in error messages.
class ConvTensorDescriptor {
 public:
  // A dense 4-D tensor of logical size [n, c, h, w], stored in `layout` order.
  static absl::StatusOr<ConvTensorDescriptor> Create(Layout layout, DType dtype, int64_t n,
                                                     int64_t c, int64_t h, int64_t w,
                                                     absl::string_view context);
  cudnnTensorDescriptor_t get() const { return desc_.get(); }

 private:
  struct Deleter {
    void operator()(cudnnTensorStruct* desc) const;
  };
  std::unique_ptr<cudnnTensorStruct, Deleter> desc_;
};

class ConvFilterDescriptor {
 public:
  // A filter of k outputs, c inputs (per group) and r x s taps, stored KCRS or KRSC by `layout`.
  static absl::StatusOr<ConvFilterDescriptor> Create(Layout layout, DType dtype, int64_t k,
                                                     int64_t c, int64_t r, int64_t s,
                                                     absl::string_view context);
  cudnnFilterStruct* get() const { return desc_.get(); }

 private:
  struct Deleter {
    void operator()(cudnnFilterStruct* desc) const;
  };
  std::unique_ptr<cudnnFilterStruct, Deleter> desc_;
};

class ConvDescriptor {
 public:
  // Strides, padding, dilation and groups of `shape`, with `math` as the math type.
  static absl::StatusOr<ConvDescriptor> Create(const ConvShape& shape, cudnnMathType_t math,
                                               absl::string_view context);
  cudnnConvolutionStruct* get() const { return desc_.get(); }
  absl::Status SetMathType(cudnnMathType_t math, absl::string_view context) const;

 private:
  struct Deleter {
    void operator()(cudnnConvolutionStruct* desc) const;
  };
  std::unique_ptr<cudnnConvolutionStruct, Deleter> desc_;
};

// One planned convolution. Operands by kind, in the ops' input order:
//   kForward:        a = x,  b = w,  out = y
//   kBackwardData:   a = dy, b = w,  out = dx
//   kBackwardFilter: a = x,  b = dy, out = dw
class CudnnConv {
 public:
  // Device buffers the measured search runs on (out and workspace are overwritten). Unused by
  // the heuristic search.
  struct Buffers {
    const void* a = nullptr;
    const void* b = nullptr;
    void* out = nullptr;
    void* workspace = nullptr;
  };

  // Builds the descriptors and picks the first algorithm that cuDNN ranks (by heuristics, or by
  // measured time with options.measure) that succeeds, fits options.workspace_limit, uses an
  // allowed math type and, with options.deterministic, is deterministic. Errors name `context`:
  // kUnimplemented for a dtype other than float32; kInvalidArgument for a dimension cuDNN cannot
  // hold; kNotFound when no algorithm qualifies; cuDNN's own codes otherwise.
  static absl::StatusOr<CudnnConv> Create(const CudnnHandle& handle, ConvKind kind,
                                          const ConvShape& shape, const ConvOptions& options,
                                          const Buffers& buffers, absl::string_view context);

  // Enqueues the convolution on the stream `handle` is bound to. `workspace` must hold
  // algorithm().workspace_bytes. With `accumulate`, out = conv + out (cuDNN's beta = 1: one
  // rounding of the float sum) instead of out = conv.
  absl::Status Run(const CudnnHandle& handle, const void* a, const void* b, void* out,
                   void* workspace, absl::string_view context, bool accumulate = false) const;

  ConvKind kind() const { return kind_; }
  const ConvShape& shape() const { return shape_; }
  const ConvAlgorithm& algorithm() const { return algorithm_; }
  // E.g. "cudnn conv fwd algo 1 ws 123456 math fma".
  std::string Describe() const;

 private:
  CudnnConv(ConvKind kind, const ConvShape& shape, ConvTensorDescriptor x, ConvFilterDescriptor w,
            ConvTensorDescriptor y, ConvDescriptor conv)
      : kind_(kind),
        shape_(shape),
        x_(std::move(x)),
        w_(std::move(w)),
        y_(std::move(y)),
        conv_(std::move(conv)) {}

  ConvKind kind_;
  ConvShape shape_;
  ConvTensorDescriptor x_;
  ConvFilterDescriptor w_;
  ConvTensorDescriptor y_;
  ConvDescriptor conv_;
  ConvAlgorithm algorithm_;
};

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_CUDNN_CONV_H_
