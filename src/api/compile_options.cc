#include "src/api/compile_options.h"

#include "src/autodiff/optimizer_graph.h"

namespace reprise {
namespace {

// TrainOptions::kernels.ensemble_whole_step_max_models, its default (-1) resolved: 128 models with
// TF32, else 64 (the whole step's cluster and group kernels).
int64_t WholeStepMaxModels(const TrainOptions& options) {
  if (options.kernels.ensemble_whole_step_max_models >= 0)
    return options.kernels.ensemble_whole_step_max_models;
  return options.numerics.allow_tf32 ? 128 : 64;
}

ops::LoweringOptions::GeluProductLibrary LoweringGeluProductLibrary(
    KernelTuning::GeluProductLibrary library) {
  using Lowering = ops::LoweringOptions::GeluProductLibrary;
  switch (library) {
    case KernelTuning::GeluProductLibrary::kCublasLt:
      return Lowering::kCublasLt;
    case KernelTuning::GeluProductLibrary::kCudnn:
      return Lowering::kCudnn;
    case KernelTuning::GeluProductLibrary::kFastest:
      break;
  }
  return Lowering::kFastest;
}

}  // namespace

passes::CompileOptions CompileOptionsFor(const TrainOptions& options,
                                         const codegen::MlpStepTarget& mlp_step_target) {
  passes::CompileOptions compile;
  compile.batch_ensembles = options.parallel.batch_ensembles;
  compile.ensembles.min_models = options.parallel.ensemble_min_models;
  compile.channels_last = options.kernels.channels_last;
  compile.compute_dtype = options.numerics.compute_dtype;
  compile.optimizer = options.optimizer;
  compile.loss_scale = options.numerics.loss_scale;
  compile.non_finite = options.numerics.non_finite;
  compile.data_parallel = options.parallel.data_parallel;
  compile.plan.mirror = options.mirror;
  compile.plan.fuse = options.kernels.fuse;
  compile.plan.lanes = options.launch.lanes;
  compile.plan.fusion.mlp_step_target = mlp_step_target;
  // The whole-step kernel keeps its gradients to itself: data parallelism needs them averaged.
  compile.plan.fusion.whole_mlp_step =
      options.kernels.whole_step && !options.parallel.data_parallel.has_value();
  compile.plan.fusion.whole_step_max_models = WholeStepMaxModels(options);
  compile.plan.fusion.relu_backward_epilogues = options.kernels.relu_backward_epilogues;
  compile.plan.fusion.weight_gradient_bias_sums = options.kernels.weight_gradient_bias_sums;
  compile.plan.fusion.layer_norm_bias_sums = options.kernels.layer_norm_bias_sums;
  compile.plan.fusion.head_loss_chunks = options.kernels.head_loss_chunks;
  compile.plan.fusion.update_writes_copies = options.kernels.update_writes_parameter_copies;
  compile.plan.fusion.sgd_one_launch = options.kernels.sgd_one_launch;
  compile.plan.fusion.sgd_checks_in_launch = options.kernels.sgd_checks_in_launch;
  compile.plan.fusion.conv_dgrad_add_apart =
      options.kernels.conv_api == KernelTuning::ConvApi::kGraph &&
      (!options.kernels.conv_sums_in_place || (options.kernels.residual_sums_in_batch_norm &&
                                               options.kernels.residual_sums_min_elements == 0));
  compile.plan.fusion.batch_norm_grad_sums = options.kernels.residual_sums_in_batch_norm;
  compile.plan.fusion.batch_norm_grad_sums_min_elements =
      options.kernels.residual_sums_min_elements;
  compile.plan.fusion.conv_batch_norm_stats =
      options.kernels.conv_api == KernelTuning::ConvApi::kGraph &&
      options.kernels.conv_batch_norm_stats;
  compile.plan.fusion.batch_norm_relu_bits = options.kernels.batch_norm_relu_bits;
  compile.fetch = options.fetch;
  return compile;
}

ops::LoweringOptions LoweringOptionsFor(const TrainOptions& options) {
  return {.allow_tf32 = options.numerics.allow_tf32,
          .deterministic = options.numerics.deterministic,
          .measure_conv_algorithms = options.kernels.measure_conv_algorithms,
          .measure_matmul_algorithms = options.kernels.measure_matmul_algorithms,
          .narrow_convolutions = options.kernels.narrow_convolutions,
          .own_weight_gradients = options.kernels.own_weight_gradients,
          .conv_api = options.kernels.conv_api == KernelTuning::ConvApi::kGraph
                          ? ops::LoweringOptions::ConvApi::kGraph
                          : ops::LoweringOptions::ConvApi::kLegacy,
          .dependent_launch = options.kernels.dependent_launch,
          .dependent_launch_after_libraries = options.kernels.dependent_launch_after_libraries,
          .batch_norm_finalize_in_stats = options.kernels.batch_norm_finalize_in_stats,
          .gelu_product_library = LoweringGeluProductLibrary(options.kernels.gelu_product_library)};
}

}  // namespace reprise
