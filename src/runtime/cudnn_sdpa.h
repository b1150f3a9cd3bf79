// Causal scaled-dot-product attention through cuDNN's fused (flash) attention, forward and
// backward, built with cudnn-frontend's graph API. This header exposes none of the frontend's
// types: its headers are heavy, and only cudnn_sdpa.cc includes them.
//
// CudnnSdpa::Create() builds the cuDNN graph for one shape (validate, operation graph, execution
// plans by heuristics, support check, plan build, workspace query) or finds it built already in a
// process-wide cache, so that Run*() only enqueues: no search, no allocation, no synchronisation,
// which makes it safe under CUDA graph capture.
//
// Tensors are [batch, seq, heads, head_dim] in memory, rows of `row_stride` elements for Q, K and
// V (3·heads·head_dim for GPT-2's packed c_attn output [B, T, 3, H, D], where K and V begin
// heads·head_dim elements after Q; heads·head_dim when Q, K and V are separate tensors) and of
// heads·head_dim for O, dO, dQ, dK and dV (dQ, dK and dV share Q's row stride). stats is float32
// [batch, heads, seq]: the log-sum-exp of each query's scaled scores, which the backward reads.
//
//   SdpaShape shape{.batch = 2, .heads = 12, .seq = 256, .head_dim = 64,
//                   .dtype = DType::kBFloat16, .row_stride = 3 * 12 * 64};
//   ASSIGN_OR_RETURN(CudnnSdpa fwd, CudnnSdpa::Create(cudnn, SdpaPass::kForward, shape, {},
//                                                      "node 'attn'"));
//   RETURN_IF_ERROR(cudnn.Bind(stream, "node 'attn'"));
//   RETURN_IF_ERROR(fwd.RunForward(cudnn, {q, k, v, o, stats}, workspace, "node 'attn'"));
#ifndef REPRISE_SRC_RUNTIME_CUDNN_SDPA_H_
#define REPRISE_SRC_RUNTIME_CUDNN_SDPA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reprise/tensor.h"
#include "src/runtime/cudnn_handle.h"

namespace reprise::runtime {

enum class SdpaPass : uint8_t { kForward, kBackward };

struct SdpaShape {
  int64_t batch = 0, heads = 0, seq = 0, head_dim = 0;
  DType dtype = DType::kBFloat16;  // kBFloat16 or kFloat16.
  int64_t row_stride = 0;          // Elements between Q's rows (sequence positions).

  std::string ToString() const;  // "bf16 B=2 H=12 T=256 D=64 row 2304"
  bool operator==(const SdpaShape& other) const = default;
};

struct SdpaOptions {
  // Backward only: ask cuDNN for its deterministic algorithm (no atomic accumulation of dQ), so
  // that every run gives the same bits. Slower, and on Hopper it takes a workspace of
  // batch·heads·seq²·2 bytes.
  bool deterministic = false;
  std::string device;  // Which GPU (name, compute capability): part of the cache key.
};

struct SdpaForwardBuffers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  void* stats = nullptr;
};

struct SdpaBackwardBuffers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* d_o = nullptr;
  const void* stats = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
};

// Whether cuDNN's fused attention can take the shape, before any device work: OK, or
// Unimplemented saying why (dtype, head_dim not a multiple of 8 or above 256, a row stride that
// is not a multiple of 8 elements). The frontend's own checks at Create() may refuse more.
absl::Status SdpaShapeSupported(const SdpaShape& shape);

// One plan cuDNN offers for a pass, as TimeSdpaCandidates found it.
struct SdpaCandidate {
  std::string implementation;  // The forward's SDPA node: "unified" or "composite"; "" backward.
  std::string engine;          // cuDNN's name of the plan ("" where none was listed).
  int64_t workspace_bytes = 0;
  double median_ms = -1;  // Of the timed runs; negative where the plan did not build or run.
  std::string error;      // Why not, where it did not.
};

// A diagnostic of cuDNN's choices: every plan its heuristics (modes A and B, and the fallback
// list) offer for `pass` at `shape` (the forward's under both SDPA implementations), each plan
// once however many modes list it, run once and then timed `runs` times with CUDA events on the
// stream `handle` is bound to, on buffers of its own: Q, K, V and dO hold a constant, and the
// backward reads O and the statistics of a forward run by the default plan. It allocates and
// synchronises: never under capture.
absl::StatusOr<std::vector<SdpaCandidate>> TimeSdpaCandidates(const CudnnHandle& handle,
                                                              SdpaPass pass, const SdpaShape& shape,
                                                              int runs, absl::string_view context);

class CudnnSdpa {
 public:
  // Builds (or finds in the cache) the graph of `pass` for `shape`: causal (top-left aligned),
  // scale 1/sqrt(head_dim), float32 softmax. Errors name `context` and the frontend's step and
  // message: Unimplemented for a shape cuDNN cannot run (SdpaShapeSupported, or the frontend's
  // support check), Internal for other frontend failures.
  static absl::StatusOr<CudnnSdpa> Create(const CudnnHandle& handle, SdpaPass pass,
                                          const SdpaShape& shape, const SdpaOptions& options,
                                          absl::string_view context);

  // Enqueue on the stream `handle` is bound to. `workspace` holds workspace_bytes() (it may be
  // null when that is 0). The pass must match Create's.
  absl::Status RunForward(const CudnnHandle& handle, const SdpaForwardBuffers& buffers,
                          void* workspace, absl::string_view context) const;
  absl::Status RunBackward(const CudnnHandle& handle, const SdpaBackwardBuffers& buffers,
                           void* workspace, absl::string_view context) const;

  SdpaPass pass() const { return pass_; }
  const SdpaShape& shape() const { return shape_; }
  size_t workspace_bytes() const;
  // E.g. "cudnn sdpa bwd bf16 B=2 H=12 T=256 D=64 row 2304 deterministic ws 3145728".
  std::string Describe() const;

  // Graphs built so far in this process (for tests of the cache).
  static size_t CacheSize();

  struct Plan;  // The built frontend graph (cudnn_sdpa.cc).

 private:
  CudnnSdpa(SdpaPass pass, const SdpaShape& shape, bool deterministic,
            std::shared_ptr<const Plan> plan)
      : pass_(pass), shape_(shape), deterministic_(deterministic), plan_(std::move(plan)) {}

  SdpaPass pass_;
  SdpaShape shape_;
  bool deterministic_;
  std::shared_ptr<const Plan> plan_;  // Shared by every runner of one key.
};

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_CUDNN_SDPA_H_
