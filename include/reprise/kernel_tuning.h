// KernelTuning: which kernels, layouts and algorithms run a training step
// (TrainOptions::kernels). None changes what the step computes beyond the rounding of its sums.
#ifndef REPRISE_INCLUDE_REPRISE_KERNEL_TUNING_H_
#define REPRISE_INCLUDE_REPRISE_KERNEL_TUNING_H_

#include <cstdint>

#include "reprise/channels_last.h"

namespace reprise {

// Switches that only choose which kernels, layouts and algorithms run the same step: the
// defaults are what the benchmarks (docs/benchmarks.md) measured fastest, and a user never needs
// to touch them. TrainOptions::kernels; reprise-bench has a flag for each.
struct KernelTuning {
  bool fuse = true;  // Fuse pointwise chains, GEMM epilogues, loss and optimizer launches.
  // With fuse: run a small ReLU MLP's whole step (forward, loss, backward, SGD) as one persistent
  // kernel where it is faster than library GEMMs, and a batched ensemble of them as one launch for
  // all models; false keeps one launch per layer and pass.
  bool whole_step = true;
  // ResNet-50 b32 TF32 on an H100: 19.9 ms per step NCHW, 14.9 channels-last
  // (docs/results/history/2026-11-23_d971053.md).
  ChannelsLast channels_last = ChannelsLast::kAuto;
  // Choose each convolution's cuDNN algorithm by timing the candidates on the device when the
  // Trainer is created (slower to start) rather than by cuDNN's heuristics. Either way the choice
  // is made once and remembered for that shape in the process.
  bool measure_conv_algorithms = false;
  // Convolutions whose input has at most 4 channels (a network's stem) run as reprise's own
  // tensor-core kernels (src/codegen/narrow_conv_kernels.h) where they apply (NHWC, groups 1,
  // dilation 1, TF32 or 16-bit data): cuDNN runs them at a few percent of the tensor cores' rate.
  // The plan dump names the kernel each convolution runs. False: cuDNN for every convolution.
  bool narrow_convolutions = true;
  // 3x3 weight gradients (pad 1, stride 1, NHWC, float32 with TF32 allowed, channels multiples of
  // 64) of images 28 to 64 wide run as reprise's own kernel (src/codegen/wgrad3x3_kernels.h).
  // Off by default: alone it beats cuDNN's at ResNet-50's layer1 (0.145 against 0.235 ms on an
  // H200), but inside the whole step, beside the data-gradient lane, ResNet-50 b64 TF32 took
  // 17.73 ms with it against 17.40 (H200, docs/results/history/2026-11-29_fb169a8.md). It is the
  // base of a weight gradient that applies the batch norm + ReLU of a mirrored step as it loads.
  bool own_weight_gradients = false;
  // Choose each cuBLASLt product's algorithm by timing cuBLASLt's first 8 candidates on the
  // product's own operands when the Trainer is created (three alternating rounds of 10 runs),
  // instead of taking its heuristic's first. The choice is fixed for the Trainer's life, so its
  // steps keep repeating the same bits, and is recorded in the kernel cache's folder (beside the
  // kernels, keyed by the product, the GPU and cuBLASLt's version): a later Trainer with the same
  // products takes it from the record and times nothing. GPT-2 124M at B=16, T=1024: 1.3% faster
  // on an H200 (1.8 s more for the first Create), 3.7% on an H100 (docs/benchmarks_gpt2*.md). With
  // gelu_product_library's default it also times cuDNN's plan against cuBLASLt's for the GELU
  // layers' forward products.
  bool measure_matmul_algorithms = false;
  // With whole_step: an ensemble's whole step only up to this many models; larger ensembles run
  // the batched per-layer step. -1 (the default): 128 with numerics.allow_tf32, else 64: the whole
  // step (the cluster and group kernels) measured faster at K = 16 to 128 with TF32 and at K = 8 to
  // 64 in f32, slower at K = 128 in f32 (H200, docs/results/history/2026-11-28_357315a.md).
  int ensemble_whole_step_max_models = -1;
  // With fuse: a hidden ReLU layer's backward (ReLU gradient and bias gradient) in the cuBLASLt
  // epilogue of the data-gradient GEMM before it (DRELU_BGRAD, reading a bit mask the forward GEMM
  // keeps). Off by default: on an H100 those epilogue GEMMs made MLP steps slower, not faster
  // (docs/results/history/2026-11-23_b8916d1.md; again on 2026-12-06, MLP 4x1024 b256 TF32 +3.6%,
  // docs/benchmarks.md).
  bool relu_backward_epilogues = false;
  // Sum a linear layer's bias gradient in the epilogue of its weight-gradient product (cuBLASLt's
  // BGRADB) instead of a column sum beside it: 48 launches fewer for GPT-2 124M, but each product
  // slower (c_fc's weight gradient 0.101 -> 0.141 ms alone). Off by default: on an H200 the B=16,
  // T=1024 step took 3.7% longer with it, B=4, T=256 within noise (docs/benchmarks_gpt2.md).
  bool weight_gradient_bias_sums = false;
  // Sum the bias gradient of a linear layer whose output gradient a layer norm's backward writes
  // (a pre-norm transformer's attn.c_proj and mlp.c_proj: the residual stream's gradient) in that
  // kernel as it stores dx, instead of a column sum reading dx again on the weight-gradient lane
  // (layer_norm_grad_column_sum, src/ops/layer_norm_residual.h). Taken before the BGRADB epilogues
  // above.
  bool layer_norm_bias_sums = true;
  // At 2 or more: a language model's output layer (the product x·wᵀ read only by the softmax
  // cross-entropy, the loss with its gradient, and the data gradient dz·w) in this many row
  // slices, each slice's loss pass on a second stream beside the next slices' products
  // (head_loss_chunks, src/ops/ops.h). 0 or 1: one launch each, one after another. -1 (the
  // default): two slices where the logits hold at least 2^28 elements, one launch each below.
  // The slices write the logits' gradient over the logits. On an H100, two slices took GPT-2
  // 124M's B=16, T=1024 step (logits of 2^29.6 elements) 0.7% faster and 1.4 GiB smaller, and
  // left B=4, T=256 (2^25.6) unchanged (docs/benchmarks_gpt2_h100.md).
  int head_loss_chunks = -1;
  // In mixed precision with Adam or AdamW: keep the parameters' 16-bit copies between steps and
  // write them in the update, instead of casting every weight at the start of each step
  // (src/passes/parameter_copies.h). Same bits either way (the CPU reference's); a host write of
  // the weights makes the next step cast them again. On an H200 GPT-2 124M's step took 3.2% less
  // at B=4, T=256 and 0.4% less at B=16, T=1024 (docs/benchmarks_gpt2.md).
  bool update_writes_parameter_copies = true;
  // Which cuDNN API runs the convolutions cuDNN runs: kGraph (cuDNN's graph API through
  // cudnn-frontend: one execution plan per shape, chosen by heuristics, deterministic ones only
  // under numerics.deterministic; a shape cuDNN has no plan for runs on the legacy call, which the
  // plan dump says) or kLegacy (cudnnConvolutionForward and its kin for every one). kGraph by
  // default: on an H200 ResNet-50's steps are the same or faster with it (b32 bf16 5.646 against
  // 5.666 ms, docs/benchmarks_resnet.md).
  enum class ConvApi : uint8_t { kLegacy, kGraph };
  ConvApi conv_api = ConvApi::kGraph;
  // A residual block's input gradient (data gradient + the skip's) that a convolution sums: true,
  // written over the skip's by the legacy call's beta = 1, the one in-place sum cuDNN promises;
  // false (the default), with kGraph, the graph API's fused sum into memory of its own
  // (conv2d_dgrad_add; where cuDNN has no fused plan, as for strict float32 NCHW, its plain plan
  // and then our add kernel), so that no legacy call runs. Few sums are left to the convolutions by
  // default (residual_sums_in_batch_norm below).
  bool conv_sums_in_place = false;
  // A residual block's input gradient (data gradient + the skip's) not summed by a convolution
  // at all: the batch-norm gradient that reads it (the previous block's ReLU and batch norm, which
  // writes its masked gradient anyway) loads both summands and adds them, so the sum is never
  // written and the data gradient runs with no epilogue; the sums it cannot take (the stem's
  // pooling gradient reads one) are the convolution's, as conv_sums_in_place says. The same bytes
  // moved as the in-place sums. On by default, from residual_sums_min_elements on.
  bool residual_sums_in_batch_norm = true;
  // With residual_sums_in_batch_norm: only the sums of at least this many elements; the smaller
  // ones are summed by their convolution, where the statistics kernel's second stream of loads
  // costs more than the sum's own pass. At least 0 (0: every sum). 4M by default: with it and the
  // two defaults above, ResNet-50 runs no legacy call, and on an H100 (2026-12-06) stepped 1.0%
  // faster at b256 bf16 than with the legacy in-place sums, the same in TF32 at b32 (+0.06%) and
  // 0.4% slower in bf16 at b32 (docs/benchmarks_resnet.md, "No legacy call by default").
  int64_t residual_sums_min_elements = 4'000'000;
  // With conv_api kGraph and fuse: a convolution followed by a training batch norm (and its
  // residual add and ReLU) runs as one node whose batch-norm statistics cuDNN sums in the
  // convolution's epilogue, where cuDNN has a plan for that and training is not deterministic
  // (src/ops/conv_bn.h; elsewhere the node runs the two lowerings and the plan dump says why).
  bool conv_batch_norm_stats = false;
  // With fuse: a residual block's ReLU after a batch norm (channels-last, channels a multiple of
  // 16) also writes a keep mask (a bit per element, four to a byte), which its gradient's
  // batch-norm statistics read instead of the ReLU's 16- or 32-bit output (the same bits).
  bool batch_norm_relu_bits = true;
  // Our own kernels launched as programmatic dependent launches of our own kernels or cuDNN's
  // convolutions before them (GPUs of compute capability 9.0 and later): each may be scheduled
  // while the kernel ahead of it drains, and waits for it before touching memory (docs/engine.md).
  bool dependent_launch = true;
  // With dependent_launch: also after every other library kernel (cuBLASLt's products, cuDNN's
  // attention). Measured slower for GPT-2 and MLPs on an H200; for measuring.
  bool dependent_launch_after_libraries = false;
  // The tiled batch norms' statistics kernels finalize in their last blocks to finish (counting
  // arrivals on the lane's tickets) instead of a finalize launch after them: a launch fewer per
  // batch-norm pass, the same bits. Off: on an H200 ResNet-50 stepped 2 to 3% slower with it at
  // batch 32 and 0.5% faster at 256 (2026-12-05, docs/benchmarks_resnet.md).
  bool batch_norm_finalize_in_stats = false;
  // SGD's updates that wait for every gradient anyway (clipped, or checked by loss scaling or the
  // non-finite guard, which is on by default) in one launch of a chunked kernel, whatever their
  // weight decays and gradient types, instead of a launch per 32 tensors (ResNet-50: 6); in mixed
  // precision that launch also writes the parameters' 16-bit copies (with
  // update_writes_parameter_copies), so no cast of every weight starts the step. The same bits.
  // On by default: on an H200 ResNet-50's step took 0.2 to 0.9% less with it (2026-12-05,
  // docs/benchmarks_resnet.md).
  bool sgd_one_launch = true;
  // With sgd_one_launch, for the non-finite guard without loss scaling or clipping: the check of
  // the gradients and the loss and the step's verdict in that update's own launch (a cooperative
  // launch whose blocks meet on a grid barrier before any of them updates), instead of two
  // launches before it. The same bits and counters. On by default: on an H100 the guarded MLP
  // 4x1024 b256 TF32 step took 6% less with it (0.1762 -> 0.1654 ms), ResNet-50 b32 the same
  // (2026-12-06, docs/benchmarks_guard.md).
  bool sgd_checks_in_launch = true;
  // Which library runs a GELU layer's forward product (bias, GELU, and its pre-activation kept),
  // with fuse. kFastest, the default: with measure_matmul_algorithms, cuDNN's graph-API plan
  // (src/runtime/cudnn_gelu_product.h; the fastest of its first 8) and cuBLASLt's measured
  // GELU_AUX_BIAS epilogue are timed in turns on the node's buffers and the faster runs, the plan
  // dump giving both times; the outcome is recorded beside cuBLASLt's measured choices, so a later
  // process runs the same library's same plan untimed (src/ops/gelu_product_race.h). Where cuDNN
  // has no plan for the shape or fails to build one, cuBLASLt's runs and the plan dump says why.
  // Without measuring, cuBLASLt's epilogue (cuDNN's first plan ran slower: 0.1650 against 0.1609
  // ms). kCublasLt: cuBLASLt's epilogue always. kCudnn: cuDNN's plan wherever cuDNN has one (its
  // first, or where measuring its fastest of 8, not raced); where it has none, cuBLASLt's with
  // cuDNN's reason in the plan dump; any other cuDNN error fails the build of the step. On an H100
  // (2026-12-07, docs/benchmarks_gpt2.md) at GPT-2 124M's B=16 shape cuDNN's measured plan took
  // 0.122 ms against cuBLASLt's 0.150 and the step 0.5% less; at B=4 the two tie. cuDNN's
  // data-gradient form (times GELU's derivative) took 0.1828 ms against cuBLASLt's DGELU 0.1532,
  // so the backward stays on cuBLASLt.
  enum class GeluProductLibrary : uint8_t { kFastest, kCublasLt, kCudnn };
  GeluProductLibrary gelu_product_library = GeluProductLibrary::kFastest;
};

}  // namespace reprise

#endif  // REPRISE_INCLUDE_REPRISE_KERNEL_TUNING_H_
