// cuDNN 2-D convolutions (forward, data gradient, weight gradient) through cuDNN's graph API,
// built with cudnn-frontend. This header exposes none of the frontend's types: its headers are
// heavy, and only cudnn_conv_graph.cc includes them.
//
// CudnnConvGraph::Create() builds the cuDNN graph of one convolution (validate, operation graph,
// engine configurations from heuristics mode A then the fallback list, filtered by numerical
// notes, support check, plan build, workspace query), or finds it built already in a
// process-wide cache, so that Run() only enqueues: no search, no allocation, no synchronisation,
// which makes it safe under CUDA graph capture and keeps one plan, so repeated runs give the same
// bits.
//
// A forward convolution may carry two fusions that cuDNN runs in the same kernel where it supports
// them (ConvFusion): a prologue that normalises its input as batch norm's apply and ReLU do
// (x' = relu(x · scale + bias), per input channel), and an epilogue that sums each output channel
// and its squares (batch norm's statistics); a data gradient may add a tensor to itself.
// Create() answers Unimplemented where cuDNN has no plan for the pattern at that shape, so the
// caller keeps its own kernels.
//
//   ASSIGN_OR_RETURN(CudnnConvGraph conv, CudnnConvGraph::Create(cudnn, ConvKind::kForward, shape,
//                                                                 {}, options, "node 'conv1'"));
//   RETURN_IF_ERROR(cudnn.Bind(stream, "node 'conv1'"));
//   RETURN_IF_ERROR(conv.Run(cudnn, {.a = x, .b = w, .out = y}, workspace, "node 'conv1'"));
#ifndef REPRISE_SRC_RUNTIME_CUDNN_CONV_GRAPH_H_
#define REPRISE_SRC_RUNTIME_CUDNN_CONV_GRAPH_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/runtime/cudnn_conv.h"
#include "src/runtime/cudnn_handle.h"

namespace reprise::runtime {

class KernelStore;

// Device addresses of one run. Operands by kind, in the ops' input order:
//   kForward:        a = x,  b = w,  out = y
//   kBackwardData:   a = dy, b = w,  out = dx
//   kBackwardFilter: a = x,  b = dy, out = dw
// scale and bias for ConvFusion::scale_bias_relu_input, sum and sq_sum for output_stats, acc for
// add_to_output (null: out, in place).
struct ConvGraphBuffers {
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  const void* acc = nullptr;
  const void* scale = nullptr;
  const void* bias = nullptr;
  void* sum = nullptr;
  void* sq_sum = nullptr;
};

// How a plan may be chosen.
struct ConvGraphOptions {
  // float32 data may run on TF32 tensor cores; otherwise only engines without cuDNN's
  // TENSOR_CORE numerical note (nor FFT or Winograd ones) run float32 convolutions.
  bool allow_tf32 = false;
  // Only engines without the NONDETERMINISTIC numerical note: every run gives the same bits.
  bool deterministic = false;
  size_t workspace_limit = 0;  // Bytes of workspace the plan may use.
  std::string device;          // Which GPU (name, compute capability): part of the cache key.
  // Time the candidates cuDNN's heuristics list (the first kConvMeasuredCandidates that build and
  // fit the workspace, kConvMeasureRuns runs each after one warm-up) and run the one of least
  // median time, instead of the heuristics' first (TrainOptions::kernels.measure_conv_algorithms).
  // The runs read and overwrite measure_buffers (every buffer the fusion needs) and
  // measure_workspace (workspace_limit bytes), on the stream the handle is bound to, which they
  // synchronise: never under capture. The plan's first run, captured and discarded ahead of the
  // step's capture, names the same buffers where they are all given (else an allocation of its
  // own).
  bool measure = false;
  ConvGraphBuffers measure_buffers;
  void* measure_workspace = nullptr;
  // Where a measured choice is kept between processes (KernelStore::FindRecord, beside the
  // kernels on disk, keyed by the convolution, these options, the GPU and the cuDNN and
  // cudnn-frontend versions); null: each process measures again. A record that does not decode
  // or whose engine no longer builds is measured again and replaced, and counted.
  KernelStore* records = nullptr;
};

inline constexpr int kConvMeasuredCandidates = 8;
inline constexpr int kConvMeasureRuns = 5;

// How this process's graph-API convolution plans were chosen (CudnnConvGraph::Stats).
struct ConvGraphStats {
  int64_t heuristic_plans = 0;    // Built from the heuristics' first choice.
  int64_t measured_plans = 0;     // Chosen by timing candidates now.
  int64_t record_plans = 0;       // Rebuilt from a measured record found on disk.
  int64_t records_discarded = 0;  // Records that did not decode or no longer built.
  int64_t candidates_timed = 0;
  double measure_ms = 0;  // Wall time spent building and timing candidates.
  // Where the plans' wall time went outside measuring, for the warm start's budget: the graphs
  // validated, lowered and their candidates listed; the chosen plans built (where cuDNN compiles
  // a runtime-fused engine); the first runs in a throwaway capture (WarmUpInThrowawayCapture).
  double lower_ms = 0;
  double build_ms = 0;
  double warm_up_ms = 0;
  // The one plan whose build took longest, e.g. "conv wgrad ... eng0 (12 ms)".
  std::string slowest_build;
  double slowest_build_ms = 0;

  // The counts since `before` (an earlier Stats()): each field's difference (the slowest build
  // is this object's).
  ConvGraphStats Since(const ConvGraphStats& before) const;
  // What was chosen since `before` (an earlier Stats()), e.g. "cuDNN conv plans measured 59
  // (506 ms), from records 0"; "" when no plan was measured or taken from a record.
  std::string MeasuredSince(const ConvGraphStats& before) const;
  // Where the plans' time went since `before`, e.g. "cuDNN conv plans 59: lowering 180 ms,
  // builds 240 (slowest 31: conv fwd ... eng0), first runs 90"; "" when none was built.
  std::string TimingSince(const ConvGraphStats& before) const;
};

// What a convolution computes besides its product. The first two need cuDNN's fused engines
// (Hopper and later for 16-bit NHWC data).
struct ConvFusion {
  // Forward y = conv(relu(x · scale + bias), w), weight gradient dw = wgrad(dy, relu(x · scale +
  // bias)): scale and bias [C] in x's dtype, the previous batch norm's apply and ReLU folded into
  // the convolution's load of x (the weight gradient then reads the batch norm's input, not a
  // stored output of it).
  bool scale_bias_relu_input = false;
  // sum[k] = Σ y[., k, ., .] and sq_sum[k] = Σ y², float32 [K].
  bool output_stats = false;
  // Data gradients only: out = dgrad(dy, w) + acc (ConvGraphBuffers::acc), one rounding of the
  // float sum. acc may be out itself (the legacy API's beta = 1), but cuDNN's graph API does not
  // promise that an engine reads each element of an input before it writes the output aliasing
  // it (a split or multi-pass engine may not), so the lowerings do not ask for it in place.
  bool add_to_output = false;

  bool any() const { return scale_bias_relu_input || output_stats || add_to_output; }
  bool operator==(const ConvFusion& other) const = default;
  std::string ToString() const;  // "", "sbr", "stats", "sbr+stats" or "acc".
};

class CudnnConvGraph {
 public:
  // Builds (or finds in the cache) the plan. Errors name `context`, the frontend's step and its
  // message: Unimplemented for a dtype other than float32, bfloat16 or float16, for fusions on a
  // kind it does not apply to, or where no engine supports the graph under the options (the
  // frontend's support check); InvalidArgument for groups that do not divide the channels;
  // Internal for other frontend failures.
  static absl::StatusOr<CudnnConvGraph> Create(const CudnnHandle& handle, ConvKind kind,
                                               const ConvShape& shape, const ConvFusion& fusion,
                                               const ConvGraphOptions& options,
                                               absl::string_view context);

  // Enqueues the plan on the stream `handle` is bound to. `workspace` holds workspace_bytes() (it
  // may be null when that is 0); every buffer the fusion needs must be set.
  absl::Status Run(const CudnnHandle& handle, const ConvGraphBuffers& buffers, void* workspace,
                   absl::string_view context) const;

  ConvKind kind() const { return kind_; }
  const ConvShape& shape() const { return shape_; }
  const ConvFusion& fusion() const { return fusion_; }
  size_t workspace_bytes() const;
  // The engine cuDNN runs (its name) and how it was chosen, e.g.
  // "cudnn graph conv fwd sbr+stats eng12_k2=3 ws 1024 deterministic" or
  // "cudnn graph conv wgrad eng1_k2=1 ws 0 measured 0.0412 ms of 8 (record)".
  std::string Describe() const;

  // Plans built so far in this process (for tests of the cache).
  static size_t CacheSize();
  static ConvGraphStats Stats();
  // Drops the process's plans (runners keep theirs), so that the next Create of a key builds it
  // again: for tests of the measured records.
  static void ForgetPlans();

  struct Plan;  // The built frontend graph (cudnn_conv_graph.cc).

 private:
  CudnnConvGraph(ConvKind kind, const ConvShape& shape, const ConvFusion& fusion,
                 std::shared_ptr<const Plan> plan)
      : kind_(kind), shape_(shape), fusion_(fusion), plan_(std::move(plan)) {}

  ConvKind kind_;
  ConvShape shape_;
  ConvFusion fusion_;
  std::shared_ptr<const Plan> plan_;  // Shared by every runner of one key.
};

}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_CUDNN_CONV_GRAPH_H_
