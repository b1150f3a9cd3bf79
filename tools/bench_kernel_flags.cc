// reprise-bench's flags that tune kernels (TrainOptions::kernels, reprise::KernelTuning), in a
// file of their own; reprise-bench's --help lists them with its other flags (cli::Program).
#include "tools/bench_kernel_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "tools/cli.h"

ABSL_FLAG(int, ensemble_whole_step_max_models, -1,
          "TrainOptions::kernels.ensemble_whole_step_max_models (0: the batched per-layer step at "
          "any K); -1 keeps its default");
ABSL_FLAG(bool, measure_conv, false, "pick convolution algorithms by timing them");
ABSL_FLAG(bool, narrow_conv, true,
          "convolutions of inputs with at most 4 channels (the stem) run as reprise's own "
          "kernels (false: cuDNN)");
ABSL_FLAG(
    bool, own_wgrad, false,
    "TrainOptions::kernels.own_weight_gradients: 3x3 weight gradients of wide NHWC TF32 images run "
    "as reprise's own kernel (false: cuDNN)");
ABSL_FLAG(std::string, conv_api, "graph",
          "TrainOptions::kernels.conv_api: legacy or graph (cuDNN's graph API through "
          "cudnn-frontend)");
ABSL_FLAG(bool, conv_bn_stats, false,
          "TrainOptions::kernels.conv_batch_norm_stats: with --conv_api=graph, batch-norm "
          "statistics summed in the convolution's epilogue (float16 NHWC models: cuDNN has no "
          "engine for it in bfloat16 or float32)");
ABSL_FLAG(bool, conv_sums_in_place, reprise::KernelTuning{}.conv_sums_in_place,
          "TrainOptions::kernels.conv_sums_in_place: residual blocks' input gradients summed in "
          "place by cuDNN's legacy call; false: with --conv_api=graph, the graph API's fused sum "
          "written apart");
ABSL_FLAG(bool, residual_sums_in_bn, reprise::KernelTuning{}.residual_sums_in_batch_norm,
          "TrainOptions::kernels.residual_sums_in_batch_norm: residual blocks' input gradients "
          "summed by the batch-norm gradients that read them, as they load them");
ABSL_FLAG(int64_t, residual_sums_min_elements, reprise::KernelTuning{}.residual_sums_min_elements,
          "TrainOptions::kernels.residual_sums_min_elements: with --residual_sums_in_bn, only "
          "sums of at least this many elements (the smaller ones summed by their convolution)");
ABSL_FLAG(bool, measure_matmul, false,
          "TrainOptions::kernels.measure_matmul_algorithms: time cuBLASLt's candidates at Create");
ABSL_FLAG(bool, relu_epilogues, false,
          "with fusion: hidden ReLU layers' backward in cuBLASLt DRELU_BGRAD epilogues "
          "(TrainOptions::kernels.relu_backward_epilogues)");
ABSL_FLAG(bool, bias_sum_epilogues, false,
          "with fusion: linear layers' bias gradients in their weight-gradient products' BGRADB "
          "epilogues (TrainOptions::kernels.weight_gradient_bias_sums)");
ABSL_FLAG(bool, layer_norm_bias_sums, true,
          "with fusion: a transformer's projection bias gradients summed in the layer norm "
          "backward that writes their dY (TrainOptions::kernels.layer_norm_bias_sums)");
ABSL_FLAG(int, head_loss_chunks, -1,
          "At 2 or more: the output layer's product, loss and data gradient in this many row "
          "slices, the loss passes on a second stream; 0 or 1 apart; -1 two slices for logits of "
          "at least 2^28 elements (TrainOptions::kernels.head_loss_chunks)");
ABSL_FLAG(bool, update_copies, true,
          "mixed precision with Adam(W): the parameters' 16-bit copies kept between steps and "
          "written by the update (TrainOptions::kernels.update_writes_parameter_copies)");
ABSL_FLAG(
    bool, relu_bits, true,
    "TrainOptions::kernels.batch_norm_relu_bits: residual ReLUs keep masks (four elements to a "
    "byte) for their gradients (channels-last, channels a multiple of 16)");
ABSL_FLAG(bool, dependent_launch, true,
          "TrainOptions::kernels.dependent_launch: our kernels launched as programmatic dependent "
          "launches (sm_90 and later)");
ABSL_FLAG(bool, dependent_launch_after_libraries, false,
          "TrainOptions::kernels.dependent_launch_after_libraries: dependent launches after "
          "library kernels too");
ABSL_FLAG(bool, bn_finalize_in_stats, false,
          "TrainOptions::kernels.batch_norm_finalize_in_stats: the batch norms' statistics "
          "kernels finalize in their last blocks (no finalize launch)");

ABSL_FLAG(bool, sgd_one_launch, true,
          "TrainOptions::kernels.sgd_one_launch: SGD's checked or clipped updates in one chunked "
          "launch that also writes mixed precision's 16-bit parameter copies");
ABSL_FLAG(bool, sgd_checks_in_launch, true,
          "TrainOptions::kernels.sgd_checks_in_launch: the non-finite guard's check and verdict "
          "in that SGD launch (a cooperative launch with a grid barrier), not two launches before");
ABSL_FLAG(std::string, gelu_product_library, "fastest",
          "TrainOptions::kernels.gelu_product_library for GELU layers' forward products: fastest "
          "(with --measure_matmul cuDNN's graph-API plan raced against cuBLASLt's GELU_AUX_BIAS "
          "epilogue for each node; without, cuBLASLt's), cublaslt, or cudnn");

namespace reprise::tools {

const char kBenchKernelFlagsFile[] = __FILE__;

namespace {
absl::StatusOr<KernelTuning::ConvApi> ConvApiFlag() {
  const std::string value = absl::GetFlag(FLAGS_conv_api);
  if (value == "legacy") return KernelTuning::ConvApi::kLegacy;
  if (value == "graph") return KernelTuning::ConvApi::kGraph;
  return absl::InvalidArgumentError(
      absl::StrCat("--conv_api must be legacy or graph, not '", value, "'"));
}

absl::StatusOr<KernelTuning::GeluProductLibrary> GeluProductLibraryFlag() {
  const std::string value = absl::GetFlag(FLAGS_gelu_product_library);
  if (value == "fastest") return KernelTuning::GeluProductLibrary::kFastest;
  if (value == "cublaslt") return KernelTuning::GeluProductLibrary::kCublasLt;
  if (value == "cudnn") return KernelTuning::GeluProductLibrary::kCudnn;
  return absl::InvalidArgumentError(
      absl::StrCat("--gelu_product_library must be fastest, cublaslt or cudnn, not '", value, "'"));
}

}  // namespace

absl::StatusOr<KernelTuning> KernelTuningFromFlags() {
  KernelTuning kernels;
  kernels.relu_backward_epilogues = absl::GetFlag(FLAGS_relu_epilogues);
  kernels.weight_gradient_bias_sums = absl::GetFlag(FLAGS_bias_sum_epilogues);
  kernels.layer_norm_bias_sums = absl::GetFlag(FLAGS_layer_norm_bias_sums);
  kernels.head_loss_chunks = absl::GetFlag(FLAGS_head_loss_chunks);
  kernels.update_writes_parameter_copies = absl::GetFlag(FLAGS_update_copies);
  kernels.measure_conv_algorithms = absl::GetFlag(FLAGS_measure_conv);
  kernels.narrow_convolutions = absl::GetFlag(FLAGS_narrow_conv);
  kernels.own_weight_gradients = absl::GetFlag(FLAGS_own_wgrad);
  kernels.measure_matmul_algorithms = absl::GetFlag(FLAGS_measure_matmul);
  if (absl::GetFlag(FLAGS_ensemble_whole_step_max_models) >= 0) {
    kernels.ensemble_whole_step_max_models = absl::GetFlag(FLAGS_ensemble_whole_step_max_models);
  }
  if (absl::Status at_least =
          cli::AtLeast("residual_sums_min_elements", FLAGS_residual_sums_min_elements, 0);
      !at_least.ok()) {
    return at_least;
  }
  if (absl::Status at_least = cli::AtLeast("head_loss_chunks", FLAGS_head_loss_chunks, -1);
      !at_least.ok()) {
    return at_least;
  }
  auto conv_api = ConvApiFlag();
  if (!conv_api.ok()) return conv_api.status();
  kernels.conv_api = *conv_api;
  kernels.conv_batch_norm_stats = absl::GetFlag(FLAGS_conv_bn_stats);
  kernels.conv_sums_in_place = absl::GetFlag(FLAGS_conv_sums_in_place);
  kernels.residual_sums_in_batch_norm = absl::GetFlag(FLAGS_residual_sums_in_bn);
  kernels.residual_sums_min_elements = absl::GetFlag(FLAGS_residual_sums_min_elements);
  kernels.batch_norm_relu_bits = absl::GetFlag(FLAGS_relu_bits);
  kernels.dependent_launch = absl::GetFlag(FLAGS_dependent_launch);
  kernels.dependent_launch_after_libraries = absl::GetFlag(FLAGS_dependent_launch_after_libraries);
  kernels.batch_norm_finalize_in_stats = absl::GetFlag(FLAGS_bn_finalize_in_stats);
  kernels.sgd_one_launch = absl::GetFlag(FLAGS_sgd_one_launch);
  kernels.sgd_checks_in_launch = absl::GetFlag(FLAGS_sgd_checks_in_launch);
  auto gelu_library = GeluProductLibraryFlag();
  if (!gelu_library.ok()) return gelu_library.status();
  kernels.gelu_product_library = *gelu_library;
  return kernels;
}

std::string KernelFlagsText() {
  return absl::StrCat(
      absl::GetFlag(FLAGS_narrow_conv) ? "" : " narrow_conv=0",
      absl::GetFlag(FLAGS_own_wgrad) ? " own_wgrad=1" : "",
      absl::GetFlag(FLAGS_conv_sums_in_place) ? " conv_sums_in_place=1" : "",
      absl::GetFlag(FLAGS_residual_sums_in_bn) ? "" : " residual_sums_in_bn=0",
      absl::GetFlag(FLAGS_residual_sums_min_elements) != KernelTuning{}.residual_sums_min_elements
          ? absl::StrCat(" residual_sums_min_elements=",
                         absl::GetFlag(FLAGS_residual_sums_min_elements))
          : "",
      absl::GetFlag(FLAGS_head_loss_chunks) != KernelTuning{}.head_loss_chunks
          ? absl::StrCat(" head_loss_chunks=", absl::GetFlag(FLAGS_head_loss_chunks))
          : "",
      absl::GetFlag(FLAGS_relu_bits) ? "" : " relu_bits=0",
      absl::GetFlag(FLAGS_dependent_launch) ? "" : " dependent_launch=0",
      absl::GetFlag(FLAGS_dependent_launch_after_libraries) ? " dependent_launch_after_libraries=1"
                                                            : "",
      absl::GetFlag(FLAGS_bn_finalize_in_stats) ? " bn_finalize_in_stats=1" : "",
      absl::GetFlag(FLAGS_sgd_one_launch) ? "" : " sgd_one_launch=0",
      absl::GetFlag(FLAGS_sgd_checks_in_launch) ? "" : " sgd_checks_in_launch=0",
      absl::GetFlag(FLAGS_gelu_product_library) == "fastest"
          ? ""
          : absl::StrCat(" gelu_product_library=", absl::GetFlag(FLAGS_gelu_product_library)));
}

}  // namespace reprise::tools
