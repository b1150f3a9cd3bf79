// One 2-D convolution planned through cuDNN's graph (backend) API: an operation graph of the
// single convolution, an engine configuration from cuDNN's heuristics (or the fastest of its first
// candidates, timed), and the finalized execution plan.
//
// Why beside the legacy API (src/runtime/cudnn_conv.h): for tensor-core convolutions the graph
// API's heuristics pick engines the legacy algorithm enums do not reach. On an H200 (cuDNN 9.19,
// ResNet-50's layers at batch 64, TF32, NHWC) they ran 1.2x to 2.4x faster in every kind
// (docs/benchmarks.md, session 16). CudnnConv uses this class for TF32, bfloat16 and float16
// convolutions with one group; strict fp32 keeps the legacy API's FMA algorithms.
//
// Run() only builds the variant pack (the operand addresses) and executes: no search, no
// allocation, no synchronisation, so it is safe under CUDA graph capture.
#ifndef REPRISE_SRC_RUNTIME_CUDNN_GRAPH_CONV_H_
#define REPRISE_SRC_RUNTIME_CUDNN_GRAPH_CONV_H_

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/runtime/cudnn_conv.h"
#include "src/runtime/cudnn_handle.h"

namespace reprise::runtime {

// Owns one cudnnBackendDescriptor_t.
class BackendDescriptor {
 public:
  static absl::StatusOr<BackendDescriptor> Create(cudnnBackendDescriptorType_t type,
                                                  absl::string_view context);
  cudnnBackendDescriptor_t get() const { return desc_.get(); }

 private:
  struct Deleter {
    void operator()(void* desc) const;
  };
  std::unique_ptr<void, Deleter> desc_;
};

class GraphConvPlan {
 public:
  // Plans `kind` of `shape` (one group; TF32 or 16-bit data) for out = conv (or out += conv with
  // options.accumulate). The engine is the first of cuDNN's heuristic (mode A) candidates that
  // finalizes, fits options.workspace_limit, is not compiled at run time and, with
  // options.deterministic, is deterministic; with options.measure, the fastest of the first four
  // such candidates timed on `buffers`. `rank`, when not negative, takes the candidate of that
  // position among the qualifying ones instead (a choice remembered by ConvAlgorithmCache).
  // kNotFound when no candidate qualifies, naming the shape and what was seen.
  static absl::StatusOr<std::shared_ptr<const GraphConvPlan>> Create(
      const CudnnHandle& handle, ConvKind kind, const ConvShape& shape, const ConvOptions& options,
      const CudnnConv::Buffers& buffers, int rank, absl::string_view context);

  // Operands as CudnnConv::Run takes them: (x, w, y), (dy, w, dx) or (x, dy, dw).
  absl::Status Run(const CudnnHandle& handle, const void* a, const void* b, void* out,
                   void* workspace, absl::string_view context) const;

  int64_t engine() const { return engine_; }  // cuDNN's global engine index.
  int rank() const { return rank_; }          // Position among the qualifying candidates.
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  GraphConvPlan() = default;

  ConvKind kind_ = ConvKind::kForward;
  // The descriptors the plan was built from stay alive with it.
  std::vector<BackendDescriptor> parts_;
  BackendDescriptor plan_;
  int64_t engine_ = -1;
  int rank_ = -1;
  size_t workspace_bytes_ = 0;
};

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_CUDNN_GRAPH_CONV_H_
