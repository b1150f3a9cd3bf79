// Trainer: inputs from NumPy arrays (copied), the engine's input buffers, or DLPack tensors (torch,
// CuPy: device memory is bound without a copy), steps, the loss, verify, the report, checkpoints
// and weights.
#include "reprise/trainer.h"

#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "python/src/arrays.h"
#include "python/src/bindings.h"
#include "python/src/errors.h"
#include "python/src/py_trainer.h"
#include "reprise/graph.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace reprise::python {
namespace {

std::unique_ptr<PyTrainer> Create(const Graph& graph, Value loss, const TrainOptions& options) {
  auto py = std::make_unique<PyTrainer>();
  py->device = options.device;
  for (const Node& node : graph.nodes()) {
    const absl::string_view op = node.op_name();
    if (op == "input") py->inputs[node.name] = node.outputs[0];
    if (op == "parameter" || op == "state") py->tensors[node.name] = node.outputs[0];
  }
  absl::StatusOr<std::unique_ptr<Trainer>> trainer;
  {
    nb::gil_scoped_release release;  // Compiles kernels and plans: seconds, maybe minutes.
    trainer = Trainer::Create(graph, loss, options);
  }
  py->trainer = ValueOrThrow(std::move(trainer));
  return py;
}

// Host arrays are copied (Trainer::SetInput); device memory of the trainer's GPU, and pinned host
// memory, is bound (Trainer::BindInput) and read by every step until another set_input.
void SetInput(PyTrainer& py, const std::string& name, nb::object data) {
  nb::ndarray<nb::ro, nb::c_contig> array;
  if (!nb::try_cast(data, array)) {
    throw nb::type_error(
        absl::StrCat("set_input('", name,
                     "'): expected a C-contiguous NumPy array or a DLPack tensor (torch, CuPy), "
                     "got ",
                     nb::type_name(data.type()).c_str())
            .c_str());
  }
  const bool is_f32 = array.dtype() == nb::dtype<float>();
  const bool is_i32 = array.dtype() == nb::dtype<int32_t>();
  const int device_type = array.device_type();
  const bool on_device =
      device_type == nb::device::cuda::value || device_type == nb::device::cuda_host::value;
  auto input = py.inputs.find(name);
  if (input != py.inputs.end()) {
    // The messages are the C++ SetInput's; it checks a host array's dtype itself, but a bound
    // pointer carries no dtype, so that is checked here.
    const TensorSpec& spec = input->second;
    const bool dtype_ok = spec.dtype == DType::kInt32 ? is_i32 : is_f32;
    if ((!is_f32 && !is_i32) || (on_device && !dtype_ok)) {
      ThrowIfError(absl::InvalidArgumentError(
          absl::StrCat("input '", name, "' is ", spec.ToString(), "; got ",
                       is_f32   ? "f32"
                       : is_i32 ? "i32"
                                : DTypeText(array.dtype()),
                       " data", is_f32 || is_i32 ? "" : " (only float32 and int32 are taken)")));
    }
    CheckInputShape(name, spec, array);
  }
  if (on_device) {
    if (device_type == nb::device::cuda::value && array.device_id() != py.device) {
      ThrowIfError(absl::InvalidArgumentError(
          absl::StrCat("input '", name, "': the tensor is on CUDA device ", array.device_id(),
                       ", the trainer on device ", py.device)));
    }
    ThrowIfError(py.trainer->BindInput(name, array.data(), array.nbytes()));
    py.bound[name] = std::move(data);
    return;
  }
  if (device_type != nb::device::cpu::value) {
    ThrowIfError(absl::InvalidArgumentError(absl::StrCat("input '", name, "': DLPack device type ",
                                                         device_type, " is neither CPU nor CUDA")));
  }
  ThrowIfError(py.Unbind(name));
  CopyHostInput(*py.trainer, name, array);
}

// Input `name`'s pinned host buffer in the engine (Trainer::InputBuffer), as a writable NumPy view
// of the input's shape and dtype that keeps the trainer alive. Waits until no queued step reads
// the buffer, so it is called again before each write.
nb::object InputBufferView(nb::handle self, const std::string& name) {
  PyTrainer& py = nb::cast<PyTrainer&>(self);
  auto input = py.inputs.find(name);
  if (input == py.inputs.end()) {
    // The C++ call names the error (an unknown input, or an optimizer input).
    ThrowIfError(py.trainer->InputBuffer(name).status());
    ThrowIfError(absl::NotFoundError(
        absl::StrCat("input_buffer('", name, "'): not an input of the model's graph")));
  }
  const TensorSpec& spec = input->second;
  const std::vector<size_t> shape(spec.shape.dims().begin(), spec.shape.dims().end());
  absl::StatusOr<absl::Span<float>> floats;
  absl::StatusOr<absl::Span<int32_t>> ints;
  {
    nb::gil_scoped_release release;  // May wait for a queued step.
    if (spec.dtype == DType::kInt32) {
      ints = py.trainer->InputBufferInt32(name);
    } else {
      floats = py.trainer->InputBuffer(name);
    }
  }
  if (spec.dtype == DType::kInt32) {
    absl::Span<int32_t> buffer = ValueOrThrow(std::move(ints));
    return nb::cast(
        nb::ndarray<nb::numpy, int32_t>(buffer.data(), shape.size(), shape.data(), self));
  }
  absl::Span<float> buffer = ValueOrThrow(std::move(floats));
  return nb::cast(nb::ndarray<nb::numpy, float>(buffer.data(), shape.size(), shape.data(), self));
}

nb::ndarray<nb::numpy, float> GetParameter(PyTrainer& py, const std::string& name) {
  std::vector<float> values = ValueOrThrow(py.trainer->GetParameter(name));
  auto it = py.tensors.find(name);
  const std::vector<int64_t> flat = {static_cast<int64_t>(values.size())};
  return OwnedArray(std::move(values), it == py.tensors.end() ? flat : it->second.shape.dims());
}

void BindResults(nb::module_& m) {
  nb::class_<VerifyResult>(m, "VerifyResult")
      .def_ro("steps", &VerifyResult::steps)
      .def_ro("tensors_compared", &VerifyResult::tensors_compared)
      .def_ro("gradients_not_materialized", &VerifyResult::gradients_not_materialized)
      .def_prop_ro("ok", &VerifyResult::ok)
      .def_prop_ro("mismatch",
                   [](const VerifyResult& r) -> std::optional<std::string> {
                     if (!r.mismatch.has_value()) return std::nullopt;
                     return r.mismatch->ToString();
                   })
      .def("__bool__", &VerifyResult::ok)
      .def("__str__", &VerifyResult::ToString);
  // Every counter of TrainerStats (reprise/trainer.h), read-only.
  nb::class_<TrainerStats>(m, "TrainerStats")
      .def_ro("steps", &TrainerStats::steps)
      .def_ro("graph_replays", &TrainerStats::graph_replays)
      .def_ro("graph_captures", &TrainerStats::graph_captures)
      .def_ro("graph_instantiations", &TrainerStats::graph_instantiations)
      .def_ro("graph_exec_updates", &TrainerStats::graph_exec_updates)
      .def_ro("graph_node_updates", &TrainerStats::graph_node_updates)
      .def_ro("graph_nodes", &TrainerStats::graph_nodes)
      .def_ro("graph_uploads", &TrainerStats::graph_uploads)
      .def_ro("device_graph_launch", &TrainerStats::device_graph_launch)
      .def_ro("host_launch_reason", &TrainerStats::host_launch_reason)
      .def_ro("graph_launch_measuring", &TrainerStats::graph_launch_measuring)
      .def_ro("graph_launch_measurement", &TrainerStats::graph_launch_measurement)
      .def_ro("launches_per_step", &TrainerStats::launches_per_step)
      .def_ro("lanes", &TrainerStats::lanes)
      .def_ro("arena_bytes", &TrainerStats::arena_bytes)
      .def_ro("parameter_bytes", &TrainerStats::parameter_bytes)
      .def_ro("optimizer_state_bytes", &TrainerStats::optimizer_state_bytes)
      .def_ro("parameter_copy_bytes", &TrainerStats::parameter_copy_bytes)
      .def_ro("activation_peak_bytes", &TrainerStats::activation_peak_bytes)
      .def_ro("activation_peak_unmirrored_bytes", &TrainerStats::activation_peak_unmirrored_bytes)
      .def_ro("mirror_floor_bytes", &TrainerStats::mirror_floor_bytes)
      .def_ro("mirrored_nodes", &TrainerStats::mirrored_nodes)
      .def_ro("workspace_bytes", &TrainerStats::workspace_bytes)
      .def_ro("lane_ticket_bytes", &TrainerStats::lane_ticket_bytes)
      .def_ro("kernel_acquire_ms", &TrainerStats::kernel_acquire_ms)
      .def_ro("create_ms", &TrainerStats::create_ms)
      .def_ro("create_total_ms", &TrainerStats::create_total_ms)
      .def_ro("kernels_compiled", &TrainerStats::kernels_compiled)
      .def_ro("kernel_cache_hits", &TrainerStats::kernel_cache_hits)
      .def_ro("kernel_compile_ms", &TrainerStats::kernel_compile_ms)
      .def_ro("kernel_disk_hits", &TrainerStats::kernel_disk_hits)
      .def_ro("kernel_cache_corrupt", &TrainerStats::kernel_cache_corrupt)
      .def_ro("conv_plans_heuristic", &TrainerStats::conv_plans_heuristic)
      .def_ro("conv_plans_measured", &TrainerStats::conv_plans_measured)
      .def_ro("conv_plans_from_records", &TrainerStats::conv_plans_from_records)
      .def_ro("conv_plan_records_discarded", &TrainerStats::conv_plan_records_discarded)
      .def_ro("conv_candidates_timed", &TrainerStats::conv_candidates_timed)
      .def_ro("conv_measure_ms", &TrainerStats::conv_measure_ms)
      .def_ro("conv_plan_lower_ms", &TrainerStats::conv_plan_lower_ms)
      .def_ro("conv_plan_build_ms", &TrainerStats::conv_plan_build_ms)
      .def_ro("conv_plan_warm_up_ms", &TrainerStats::conv_plan_warm_up_ms)
      .def_ro("conv_legacy_measured", &TrainerStats::conv_legacy_measured)
      .def_ro("conv_legacy_from_records", &TrainerStats::conv_legacy_from_records)
      .def_ro("conv_legacy_records_discarded", &TrainerStats::conv_legacy_records_discarded)
      .def_ro("conv_legacy_measure_ms", &TrainerStats::conv_legacy_measure_ms)
      .def_ro("matmul_choices_measured", &TrainerStats::matmul_choices_measured)
      .def_ro("matmul_choices_from_records", &TrainerStats::matmul_choices_from_records)
      .def_ro("matmul_records_discarded", &TrainerStats::matmul_records_discarded)
      .def_ro("matmul_candidates_timed", &TrainerStats::matmul_candidates_timed)
      .def_ro("matmul_measure_ms", &TrainerStats::matmul_measure_ms)
      .def_ro("gradient_bytes", &TrainerStats::gradient_bytes)
      .def_ro("input_bytes", &TrainerStats::input_bytes)
      .def_ro("constant_bytes", &TrainerStats::constant_bytes)
      .def_ro("fetched_bytes", &TrainerStats::fetched_bytes)
      .def_ro("library_handle_bytes", &TrainerStats::library_handle_bytes)
      .def_ro("host_step_us_mean", &TrainerStats::host_step_us_mean)
      .def_ro("host_step_us_median", &TrainerStats::host_step_us_median)
      .def_ro("verify_runs", &TrainerStats::verify_runs)
      .def_ro("non_finite_policy", &TrainerStats::non_finite_policy)
      .def_ro("skipped_steps", &TrainerStats::skipped_steps)
      .def_ro("whole_step_declined", &TrainerStats::whole_step_declined)
      .def("create_breakdown", &TrainerStats::CreateBreakdown)
      .def("__str__", &TrainerStats::ToString);
  nb::class_<TrainerReport>(m, "TrainerReport")
      .def_ro("stats", &TrainerReport::stats)
      .def("to_text", &TrainerReport::ToText)
      .def("to_json", &TrainerReport::ToJson)
      .def("__str__", &TrainerReport::ToText);
}

}  // namespace

void BindTrainer(nb::module_& m) {
  BindResults(m);
  m.def(
      "no_gpu_reason",
      [] {
        int count = 0;
        const cudaError_t result = cudaGetDeviceCount(&count);
        (void)cudaGetLastError();
        if (result == cudaSuccess && count > 0) return std::string();
        if (result == cudaSuccess) return std::string("the driver reports 0 devices");
        return absl::StrCat(cudaGetErrorName(result), ": ", cudaGetErrorString(result));
      },
      "\"\" when a CUDA device is visible, else why not (what GPU tests print when they skip).");
  nb::class_<PyTrainer> trainer(m, "Trainer");
  trainer
      .def_static("create", &Create, "graph"_a, "loss"_a, "options"_a = TrainOptions(),
                  "Builds and compiles the training step of `loss`; RuntimeError without a GPU.")
      .def("set_input", &SetInput, "name"_a, "data"_a)
      .def(
          "set_learning_rate",
          [](PyTrainer& py, float lr) { ThrowIfError(py.trainer->SetLearningRate(lr)); }, "lr"_a)
      .def("input_buffer", &InputBufferView, "name"_a,
           "The engine's pinned host buffer of input `name`, as a writable NumPy array of the "
           "input's shape and dtype, which the next step copies to the device: write the batch "
           "into it (e.g. TokenLoader.next_into). Waits until no queued step reads it, so call "
           "it again before each write. No label range check is made on data written this way.")
      .def("step", [](PyTrainer& py) { ThrowIfError(py.trainer->Step()); })
      .def(
          "skipped_steps", [](PyTrainer& py) { return ValueOrThrow(py.trainer->SkippedSteps()); },
          "Steps whose update was skipped for a non-finite loss or gradient (loss scaling or the "
          "non-finite guard), read after the queued steps.")
      .def(
          "loss_scale", [](PyTrainer& py) { return ValueOrThrow(py.trainer->LossScale()); },
          "Loss scaling's current scale (1 when it is off), read after the queued steps.")
      .def("synchronize", [](PyTrainer& py) { ThrowIfError(py.trainer->Synchronize()); })
      .def("loss", [](PyTrainer& py) { return ValueOrThrow(py.trainer->Loss()); })
      .def(
          "verify",
          [](PyTrainer& py, int steps) {
            absl::StatusOr<VerifyResult> result;
            {
              nb::gil_scoped_release release;
              result = py.trainer->Verify(steps);
            }
            return ValueOrThrow(std::move(result));
          },
          "steps"_a)
      .def(
          "read",
          [](PyTrainer& py, Value value) {
            std::vector<float> values = ValueOrThrow(py.trainer->Read(value));
            const int64_t n = static_cast<int64_t>(values.size());
            return OwnedArray(std::move(values), {n});  // Flat.
          },
          "value"_a, "A value named in TrainOptions.fetch, flat, as the last step computed it.")
      .def(
          "time_steps",
          [](PyTrainer& py, int steps) { return ValueOrThrow(py.trainer->TimeSteps(steps)); },
          "steps"_a, "Runs `steps` steps with the inputs set; each one's device time in ms.")
      .def("report", [](const PyTrainer& py) { return py.trainer->Report(); })
      .def("stats", [](const PyTrainer& py) { return py.trainer->stats(); })
      .def("parameter_names", [](const PyTrainer& py) { return py.trainer->ParameterNames(); })
      .def("get_parameter", &GetParameter, "name"_a)
      .def(
          "set_parameter",
          [](PyTrainer& py, const std::string& name,
             nb::ndarray<const float, nb::c_contig, nb::device::cpu> values) {
            ThrowIfError(py.trainer->SetParameter(
                name, absl::Span<const float>(values.data(), values.size())));
          },
          "name"_a, "values"_a)
      .def(
          "save_weights",
          [](PyTrainer& py, const std::string& path, bool torch_compatible) {
            ThrowIfError(py.trainer->SaveWeights(path, {.torch_compatible = torch_compatible}));
          },
          "path"_a, "torch_compatible"_a = false)
      .def(
          "load_weights",
          [](PyTrainer& py, const std::string& path, bool allow_missing, bool allow_unexpected) {
            ThrowIfError(py.trainer->LoadWeights(
                path, {.allow_missing = allow_missing, .allow_unexpected = allow_unexpected}));
          },
          "path"_a, "allow_missing"_a = false, "allow_unexpected"_a = true)
      .def(
          "save_checkpoint",
          [](PyTrainer& py, const std::string& path) {
            ThrowIfError(py.trainer->SaveCheckpoint(path));
          },
          "path"_a)
      .def(
          "restore_checkpoint",
          [](PyTrainer& py, const std::string& path) {
            ThrowIfError(py.trainer->RestoreCheckpoint(path));
          },
          "path"_a);
  BindForward(m, trainer);
}

}  // namespace reprise::python
