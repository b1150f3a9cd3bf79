// TrainOptions and the structs it holds, field for field as in reprise/trainer.h and
// reprise/optimizer.h (python/reprise/__init__.py adds keyword constructors).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "python/src/bindings.h"
#include "python/src/errors.h"
#include "reprise/optimizer.h"
#include "reprise/trainer.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace reprise::python {
namespace {

void BindEnums(nb::module_& m) {
  nb::enum_<ExecMode>(m, "ExecMode")
      .value("sync", ExecMode::kSync)
      .value("bulked", ExecMode::kBulked)
      .value("graph", ExecMode::kGraph);
  nb::enum_<GraphLaunch>(m, "GraphLaunch")
      .value("auto", GraphLaunch::kAuto)
      .value("host", GraphLaunch::kHost)
      .value("device", GraphLaunch::kDevice);
  nb::enum_<KernelTuning::ConvApi>(m, "ConvApi")
      .value("legacy", KernelTuning::ConvApi::kLegacy)
      .value("graph", KernelTuning::ConvApi::kGraph);
  nb::enum_<KernelTuning::GeluProductLibrary>(m, "GeluProductLibrary")
      .value("fastest", KernelTuning::GeluProductLibrary::kFastest)
      .value("cublaslt", KernelTuning::GeluProductLibrary::kCublasLt)
      .value("cudnn", KernelTuning::GeluProductLibrary::kCudnn);
  nb::enum_<ChannelsLast>(m, "ChannelsLast")
      .value("auto", ChannelsLast::kAuto)
      .value("on", ChannelsLast::kOn)
      .value("off", ChannelsLast::kOff);
  nb::enum_<NonFinitePolicy>(m, "NonFinitePolicy")
      .value("skip", NonFinitePolicy::kSkipStep)
      .value("stop", NonFinitePolicy::kStop)
      .value("ignore", NonFinitePolicy::kIgnore);
  nb::enum_<OptimizerKind>(m, "OptimizerKind")
      .value("sgd", OptimizerKind::kSgd)
      .value("adam", OptimizerKind::kAdam)
      .value("adamw", OptimizerKind::kAdamW);
  nb::enum_<LrDecay>(m, "LrDecay")
      .value("constant", LrDecay::kConstant)
      .value("cosine", LrDecay::kCosine)
      .value("step", LrDecay::kStep);
  nb::enum_<LossScaling>(m, "LossScaling")
      .value("auto", LossScaling::kAuto)
      .value("off", LossScaling::kOff)
      .value("static", LossScaling::kStatic)
      .value("dynamic", LossScaling::kDynamic);
  nb::enum_<MirrorOptions::Policy>(m, "MirrorPolicy")
      .value("off", MirrorOptions::Policy::kOff)
      .value("auto", MirrorOptions::Policy::kAuto)
      .value("budget", MirrorOptions::Policy::kBudget);
}

void BindOptimizer(nb::module_& m) {
  nb::class_<SgdOptions>(m, "SgdOptions")
      .def(nb::init<>())
      .def_rw("learning_rate", &SgdOptions::learning_rate)
      .def_rw("momentum", &SgdOptions::momentum)
      .def_rw("weight_decay", &SgdOptions::weight_decay);
  nb::class_<LrSchedule>(m, "LrSchedule")
      .def(nb::init<>())
      .def_rw("warmup_steps", &LrSchedule::warmup_steps)
      .def_rw("decay", &LrSchedule::decay)
      .def_rw("total_steps", &LrSchedule::total_steps)
      .def_rw("min_lr_factor", &LrSchedule::min_lr_factor)
      .def_rw("step_size", &LrSchedule::step_size)
      .def_rw("gamma", &LrSchedule::gamma);
  nb::class_<OptimizerOptions>(m, "OptimizerOptions")
      .def(nb::init<>())
      .def_rw("kind", &OptimizerOptions::kind)
      .def_rw("learning_rate", &OptimizerOptions::learning_rate)
      .def_rw("momentum", &OptimizerOptions::momentum)
      .def_rw("nesterov", &OptimizerOptions::nesterov)
      .def_rw("beta1", &OptimizerOptions::beta1)
      .def_rw("beta2", &OptimizerOptions::beta2)
      .def_rw("epsilon", &OptimizerOptions::epsilon)
      .def_rw("weight_decay", &OptimizerOptions::weight_decay)
      .def_rw("decay_rank1", &OptimizerOptions::decay_rank1)
      .def_rw("max_grad_norm", &OptimizerOptions::max_grad_norm)
      .def_rw("schedule", &OptimizerOptions::schedule);
  nb::class_<LossScaleOptions>(m, "LossScaleOptions")
      .def(nb::init<>())
      .def_rw("mode", &LossScaleOptions::mode)
      .def_rw("init_scale", &LossScaleOptions::init_scale)
      .def_rw("growth_factor", &LossScaleOptions::growth_factor)
      .def_rw("backoff_factor", &LossScaleOptions::backoff_factor)
      .def_rw("growth_interval", &LossScaleOptions::growth_interval);
  nb::class_<MirrorOptions>(m, "MirrorOptions")
      .def(nb::init<>())
      .def_rw("policy", &MirrorOptions::policy)
      .def_rw("budget_bytes", &MirrorOptions::budget_bytes)
      .def_static(
          "parse", [](const std::string& text) { return ValueOrThrow(ParseMirrorOptions(text)); },
          "text"_a, "\"off\", \"auto\" or a byte budget, as the tools' --mirror flags take it.")
      .def("__str__", &MirrorOptionsToString);
}

}  // namespace

void BindOptions(nb::module_& m) {
  BindEnums(m);
  BindOptimizer(m);
  nb::class_<NonFiniteOptions>(m, "NonFiniteOptions")
      .def(nb::init<>())
      .def_rw("policy", &NonFiniteOptions::policy);
  nb::class_<KernelTuning>(m, "KernelTuning")
      .def(nb::init<>())
      .def_rw("fuse", &KernelTuning::fuse)
      .def_rw("whole_step", &KernelTuning::whole_step)
      .def_rw("channels_last", &KernelTuning::channels_last)
      .def_rw("measure_conv_algorithms", &KernelTuning::measure_conv_algorithms)
      .def_rw("narrow_convolutions", &KernelTuning::narrow_convolutions)
      .def_rw("own_weight_gradients", &KernelTuning::own_weight_gradients)
      .def_rw("measure_matmul_algorithms", &KernelTuning::measure_matmul_algorithms)
      .def_rw("ensemble_whole_step_max_models", &KernelTuning::ensemble_whole_step_max_models)
      .def_rw("relu_backward_epilogues", &KernelTuning::relu_backward_epilogues)
      .def_rw("weight_gradient_bias_sums", &KernelTuning::weight_gradient_bias_sums)
      .def_rw("layer_norm_bias_sums", &KernelTuning::layer_norm_bias_sums)
      .def_rw("head_loss_chunks", &KernelTuning::head_loss_chunks)
      .def_rw("update_writes_parameter_copies", &KernelTuning::update_writes_parameter_copies)
      .def_rw("conv_api", &KernelTuning::conv_api)
      .def_rw("conv_sums_in_place", &KernelTuning::conv_sums_in_place)
      .def_rw("residual_sums_in_batch_norm", &KernelTuning::residual_sums_in_batch_norm)
      .def_rw("residual_sums_min_elements", &KernelTuning::residual_sums_min_elements)
      .def_rw("conv_batch_norm_stats", &KernelTuning::conv_batch_norm_stats)
      .def_rw("batch_norm_relu_bits", &KernelTuning::batch_norm_relu_bits)
      .def_rw("dependent_launch", &KernelTuning::dependent_launch)
      .def_rw("dependent_launch_after_libraries", &KernelTuning::dependent_launch_after_libraries)
      .def_rw("batch_norm_finalize_in_stats", &KernelTuning::batch_norm_finalize_in_stats)
      .def_rw("sgd_one_launch", &KernelTuning::sgd_one_launch)
      .def_rw("sgd_checks_in_launch", &KernelTuning::sgd_checks_in_launch)
      .def_rw("gelu_product_library", &KernelTuning::gelu_product_library);
  nb::class_<NumericsOptions>(m, "NumericsOptions")
      .def(nb::init<>())
      .def_rw("compute_dtype", &NumericsOptions::compute_dtype)
      .def_rw("allow_tf32", &NumericsOptions::allow_tf32)
      .def_rw("loss_scale", &NumericsOptions::loss_scale)
      .def_rw("non_finite", &NumericsOptions::non_finite)
      .def_rw("deterministic", &NumericsOptions::deterministic);
  // All but data_parallel (one process per GPU: use the C++ API).
  nb::class_<ParallelOptions>(m, "ParallelOptions")
      .def(nb::init<>())
      .def_rw("batch_ensembles", &ParallelOptions::batch_ensembles)
      .def_rw("ensemble_min_models", &ParallelOptions::ensemble_min_models);
  nb::class_<LaunchOptions>(m, "LaunchOptions")
      .def(nb::init<>())
      .def_rw("mode", &LaunchOptions::mode)
      .def_rw("graph_launch", &LaunchOptions::graph_launch)
      .def_rw("lanes", &LaunchOptions::lanes);
  // Every field of the C++ TrainOptions, grouped as there (python/reprise/__init__.py also takes
  // and gives the old flat names).
  nb::class_<TrainOptions>(m, "TrainOptions")
      .def(nb::init<>())
      .def_rw("optimizer", &TrainOptions::optimizer)
      .def_rw("numerics", &TrainOptions::numerics)
      .def_rw("mirror", &TrainOptions::mirror)
      .def_rw("parallel", &TrainOptions::parallel)
      .def_rw("launch", &TrainOptions::launch)
      .def_rw("kernels", &TrainOptions::kernels)
      .def_rw("device", &TrainOptions::device)
      .def_rw("seed", &TrainOptions::seed)
      .def_rw("fetch", &TrainOptions::fetch);
}

}  // namespace reprise::python
