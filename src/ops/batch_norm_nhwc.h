// Batch normalization on our own NVRTC kernels (src/codegen/batch_norm_kernels.h) rather than
// cuDNN's legacy batch norm: its NHWC form runs ~100x below memory bandwidth, and its NCHW form
// sums in float32, which left ResNet-18's NCHW updates 4% from the double-summing CPU reference
// after two steps, where ours agree to 2e-3 (tests/gpu/resnet_gpu_test.cc). x is viewed as
// [rows = N·H·W, channels]: row-major for channels-last data (`plane` 0), or NCHW data with
// plane = H·W (each lowering's `plane` field). The [rows, channels] arrays hold `dtype`: float32,
// or bfloat16 under mixed precision; per-channel arrays are float32 either way (as PyTorch's and
// cuDNN's mixed-precision batch norms keep them), and all arithmetic is float (sums double).
// Each training lowering is three launches (partial sums, per-channel finalize, pointwise apply)
// with the lane's workspace as scratch, or two where the lane has tickets
// (LoweringContext::tickets, options.batch_norm_finalize_in_stats): the partial sums' kernel then
// finalizes in the blocks that finish last, with the same sums and bits. Results are
// deterministic and depend on the shapes only, not on the GPU.
//
// The optional residual, ReLU and masked gradient let a fuse pass fold
// relu(batch_norm(x) + residual) and its backward into these kernels. No output may overlap an
// input (the kernels read through __restrict__ pointers), except running statistics, which are
// updated in place.
#ifndef REPRISE_SRC_OPS_BATCH_NORM_NHWC_H_
#define REPRISE_SRC_OPS_BATCH_NORM_NHWC_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reprise/graph.h"
#include "reprise/tensor.h"
#include "src/ops/gpu_kernel.h"

namespace reprise::ops {

// The element type of a channels-last batch-norm node's [rows, channels] data on the GPU: the
// dtype of its inputs at `data_inputs` (at least one), which must be all float32 or all bfloat16,
// while every other input (a per-channel tensor) must be float32. kUnimplemented naming the node
// and the offending spec otherwise (float64 and float16 have no GPU batch norm, nor have bfloat16
// per-channel tensors: mixed precision keeps them float32).
// Inputs at `other_inputs` (a ReLU's keep bits) are not checked.
absl::StatusOr<DType> NhwcDataType(const Node& node, absl::Span<const TensorSpec> inputs,
                                   absl::Span<const int> data_inputs,
                                   absl::Span<const int> other_inputs = {});

// Device addresses and sizes of one training forward. x, residual and y are [rows, channels] of
// `dtype`; per-channel arrays hold `channels` floats. y = act((x - mean)·invstd·gamma + beta +
// residual), act = max(·, 0) when relu, computed in float and rounded once to `dtype`; saved_mean
// and saved_invstd = 1/sqrt(biased var + epsilon) as batch_norm_train (src/ops/batch_norm.h)
// defines them; running_mean and running_var are updated in place (unbiased variance).
struct NhwcBatchNormForward {
  const void* x;
  const float* gamma;
  const float* beta;
  float* running_mean;
  float* running_var;
  const void* residual = nullptr;  // Added before the activation when set.
  void* y;
  float* saved_mean;
  float* saved_invstd;
  int64_t rows = 0, channels = 0;
  int64_t plane = 0;  // 0: channels-last; H·W: NCHW.
  double epsilon = 1e-5, momentum = 0.1;
  bool relu = false;
  DType dtype = DType::kFloat32;  // Of x, residual and y: kFloat32 or kBFloat16.
  // When set (channels-last, relu, channels % 16 == 0): receives the ReLU's keep mask, bit e % 4
  // of byte e / 4 set where element e of y is > 0 (rows·channels / 4 bytes; codegen::
  // BatchNormApply's write_bits).
  void* keep_bits = nullptr;
};

// The launches of one forward. Errors name `node_name`: kInvalidArgument for a dtype other
// than float32 or bfloat16, rows < 2, channels < 1 or a missing address; kResourceExhausted when
// the scratch does not fit in ctx.workspace_bytes; kFailedPrecondition without a kernel store;
// compile errors as the kernel store reports them.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerNhwcBatchNormTrain(
    const LoweringContext& ctx, const std::string& node_name, const NhwcBatchNormForward& args);

// Device addresses and sizes of one backward, batch_norm_grad's with g in place of dy:
// g = act_out ? (act_out > 0 ? dy : 0) : dy, dbeta = Σg, dgamma = Σg·x̂,
// dx = gamma·invstd·(g - (dbeta + x̂·dgamma)/rows). dy, act_out, x, dx and masked_dy are
// [rows, channels] of `dtype`; the rest are float32 per channel.
struct NhwcBatchNormBackward {
  const void* dy;
  const void* act_out = nullptr;  // ReLU output: gradient masked by act_out > 0.
  // Without act_out: the ReLU that followed the batch norm, its mask recomputed from x as the
  // forward's apply writes y (relu(batch norm of x) > 0 in x's type), so y need not be read.
  const float* relu_beta = nullptr;
  const void* x;
  const float* gamma;
  const float* saved_mean;
  const float* saved_invstd;
  void* dx;
  float* dgamma;
  float* dbeta;
  void* masked_dy = nullptr;  // When set, receives the masked gradient g.
  // When set (with masked_dy): dy's second summand, [rows, channels] of `dtype`. g is then taken
  // from the sum dy + dy_addend rounded to `dtype`, the bits an add node's output would hold.
  const void* dy_addend = nullptr;
  // Instead of act_out or relu_beta: the forward's keep bits (NhwcBatchNormForward::keep_bits).
  const void* act_bits = nullptr;
  int64_t rows = 0, channels = 0;
  int64_t plane = 0;              // 0: channels-last; H·W: NCHW.
  DType dtype = DType::kFloat32;  // Of the [rows, channels] arrays: kFloat32 or kBFloat16.
};

// The launches of one backward; errors as LowerNhwcBatchNormTrain's (rows >= 1 suffices).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerNhwcBatchNormGrad(
    const LoweringContext& ctx, const std::string& node_name, const NhwcBatchNormBackward& args);

// batch_norm_apply (src/ops/batch_norm_apply.h) in channels-last: the forward's apply launch from
// saved statistics, y = act((x - saved_mean)·(gamma·saved_invstd) + beta (+ residual)) with the
// forward's expression, so y has batch_norm_train's bits. x, residual and y are [rows, channels]
// of `dtype`; the rest are float32 per channel.
struct NhwcBatchNormRecompute {
  const void* x;
  const float* gamma;
  const float* beta;
  const float* saved_mean;
  const float* saved_invstd;
  const void* residual = nullptr;  // Added before the activation when set.
  void* y;
  int64_t rows = 0, channels = 0;
  int64_t plane = 0;  // 0: channels-last; H·W: NCHW.
  bool relu = false;
  DType dtype = DType::kFloat32;  // Of x, residual and y: kFloat32 or kBFloat16.
};

// One launch, no scratch. Errors as LowerNhwcBatchNormTrain's, less the workspace (rows >= 1).
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerNhwcBatchNormRecompute(
    const LoweringContext& ctx, const std::string& node_name, const NhwcBatchNormRecompute& args);

// Device addresses and sizes of a batch_norm_apply_chain (src/ops/batch_norm_apply.h): each step
// as NhwcBatchNormRecompute's, y null for the first (its value only feeds the second). Every x and
// y is [rows, channels] of `dtype`.
struct NhwcBatchNormChainStep {
  const void* x;
  const float* gamma;
  const float* beta;
  const float* saved_mean;
  const float* saved_invstd;
  void* y;
};
struct NhwcBatchNormChain {
  std::vector<NhwcBatchNormChainStep> steps;
  int64_t rows = 0, channels = 0;
  int64_t plane = 0;  // 0: channels-last; H·W: NCHW.
  DType dtype = DType::kFloat32;
};

// One launch, no scratch; 2 to codegen::kBatchNormChainMaxSteps steps. Errors as
// LowerNhwcBatchNormRecompute's.
absl::StatusOr<std::unique_ptr<GpuKernel>> LowerNhwcBatchNormChain(const LoweringContext& ctx,
                                                                   const std::string& node_name,
                                                                   const NhwcBatchNormChain& chain);

}  // namespace reprise::ops

#endif  // REPRISE_SRC_OPS_BATCH_NORM_NHWC_H_
