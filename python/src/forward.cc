// Forward-only graphs on a trainer's parameters (Trainer.compile_forward: validation losses, a
// decode step) and GPT-2's text generation (reprise/gpt2_decode.h), with NumPy arrays for data.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "python/src/arrays.h"
#include "python/src/bindings.h"
#include "python/src/errors.h"
#include "python/src/py_trainer.h"
#include "reprise/forward_runner.h"
#include "reprise/gpt2_decode.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace reprise::python {
namespace {

// A ForwardRunner and the shapes of its inputs and outputs (for arrays in the graph's shapes).
struct PyForwardRunner {
  std::unique_ptr<ForwardRunner> runner;
  std::map<std::string, TensorSpec> inputs;
  std::map<std::pair<int32_t, int32_t>, std::vector<int64_t>> outputs;
};

void SetInput(PyForwardRunner& py, const std::string& name, nb::handle data) {
  nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> array;
  if (!nb::try_cast(data, array)) {
    throw nb::type_error(absl::StrCat("set_input('", name,
                                      "'): expected a C-contiguous NumPy array (host memory), got ",
                                      nb::type_name(data.type()).c_str())
                             .c_str());
  }
  const bool is_f32 = array.dtype() == nb::dtype<float>();
  const bool is_i32 = array.dtype() == nb::dtype<int32_t>();
  if (auto input = py.inputs.find(name); input != py.inputs.end()) {
    const TensorSpec& spec = input->second;
    if (!(spec.dtype == DType::kInt32 ? is_i32 : is_f32)) {
      ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
          "input '", name, "' is ", spec.ToString(), "; got ", DTypeText(array.dtype()), " data")));
    }
    CheckInputShape(name, spec, array);
  }
  // An unknown name or another dtype: the C++ call names the error.
  CopyHostInput(*py.runner, name, array);
}

// `output`'s values after the queued runs, in its shape (float32; int32 where `ints`).
nb::object Read(PyForwardRunner& py, Value output, bool ints) {
  auto shape = py.outputs.find({output.node, output.output});
  const std::vector<int64_t> dims =
      shape == py.outputs.end() ? std::vector<int64_t>() : shape->second;
  if (ints) {
    absl::StatusOr<std::vector<int32_t>> values;
    {
      nb::gil_scoped_release release;
      values = py.runner->ReadInt32(output);
    }
    return nb::cast(OwnedArray(ValueOrThrow(std::move(values)), dims));
  }
  absl::StatusOr<std::vector<float>> values;
  {
    nb::gil_scoped_release release;
    values = py.runner->Read(output);
  }
  return nb::cast(OwnedArray(ValueOrThrow(std::move(values)), dims));
}

std::unique_ptr<PyForwardRunner> CompileForward(PyTrainer& trainer, const Graph& graph,
                                                const std::vector<Value>& outputs, ExecMode mode,
                                                bool fuse) {
  auto py = std::make_unique<PyForwardRunner>();
  for (const Node& node : graph.nodes()) {
    if (node.op_name() == "input") py->inputs[node.name] = node.outputs[0];
  }
  for (const Value& v : outputs) {
    if (absl::StatusOr<TensorSpec> spec = graph.SpecOf(v); spec.ok()) {
      py->outputs[{v.node, v.output}] = spec->shape.dims();
    }  // Else CompileForward names the bad value.
  }
  absl::StatusOr<std::unique_ptr<ForwardRunner>> runner;
  {
    nb::gil_scoped_release release;  // Compiles kernels and plans.
    runner = trainer.trainer->CompileForward(graph, outputs, {.mode = mode, .fuse = fuse});
  }
  py->runner = ValueOrThrow(std::move(runner));
  return py;
}

void BindForwardRunner(nb::module_& m) {
  nb::class_<ForwardStats>(m, "ForwardStats")
      .def_ro("runs", &ForwardStats::runs)
      .def_ro("graph_replays", &ForwardStats::graph_replays)
      .def_ro("graph_captures", &ForwardStats::graph_captures)
      .def_ro("graph_nodes", &ForwardStats::graph_nodes)
      .def_ro("launches_per_run", &ForwardStats::launches_per_run)
      .def_ro("arena_bytes", &ForwardStats::arena_bytes)
      .def_ro("shared_parameter_bytes", &ForwardStats::shared_parameter_bytes)
      .def_ro("state_bytes", &ForwardStats::state_bytes)
      .def_ro("activation_peak_bytes", &ForwardStats::activation_peak_bytes)
      .def("__str__", &ForwardStats::ToString);
  nb::class_<PyForwardRunner>(m, "ForwardRunner",
                              "A forward-only graph run on a trainer's GPU with the trainer's "
                              "current parameters, read in place (Trainer.compile_forward).")
      .def("set_input", &SetInput, "name"_a, "data"_a,
           "The next run's value of an input (float32 or int32 by its dtype), copied.")
      .def(
          "run", [](PyForwardRunner& py) { ThrowIfError(py.runner->Run()); },
          "Runs the graph once on the trainer's stream, after its queued steps.")
      .def(
          "read", [](PyForwardRunner& py, Value v) { return Read(py, v, false); }, "output"_a,
          "An output's values (float32, in its shape) after the queued runs.")
      .def(
          "read_int32", [](PyForwardRunner& py, Value v) { return Read(py, v, true); }, "output"_a,
          "An int32 output's values, in its shape, after the queued runs.")
      .def(
          "reset_state", [](PyForwardRunner& py) { ThrowIfError(py.runner->ResetState()); },
          "Sets every state tensor (a decoder's caches and position) back to its initial value.")
      .def("synchronize", [](PyForwardRunner& py) { ThrowIfError(py.runner->Synchronize()); })
      .def("stats", [](const PyForwardRunner& py) { return py.runner->stats(); });
}

void BindGeneration(nb::module_& m) {
  nb::module_ models = nb::borrow<nb::module_>(m.attr("models"));  // BindGraphs made it.
  nb::class_<models::Gpt2Decoder>(models, "Gpt2Decoder")
      .def_ro("graph", &models::Gpt2Decoder::graph, nb::rv_policy::reference_internal)
      .def_ro("tokens", &models::Gpt2Decoder::tokens)
      .def_ro("logits", &models::Gpt2Decoder::logits)
      .def_ro("position", &models::Gpt2Decoder::position);
  models.def(
      "build_gpt2_decoder",
      [](const models::Gpt2Config& config, DType cache_dtype) {
        return ValueOrThrow(models::BuildGpt2Decoder(config, cache_dtype));
      },
      "config"_a, "cache_dtype"_a = DType::kFloat32,
      "GPT-2's decode step: one token per sequence in ('tokens' int32 [batch]), the next "
      "token's logits out, with a key/value cache per layer of cache_dtype (the trainer's "
      "compute dtype).");
  models.def(
      "sample_token",
      [](nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu> logits,
         double uniform, float temperature, int top_k) {
        return ValueOrThrow(
            models::SampleToken(absl::Span<const float>(logits.data(), logits.size()),
                                {.temperature = temperature, .top_k = top_k}, uniform));
      },
      "logits"_a, "uniform"_a, "temperature"_a = 1.0f, "top_k"_a = 0,
      "A token drawn from float32 logits with `uniform` a draw from [0, 1): greedy (the first "
      "largest logit) at temperature 0, else softmax(logits / temperature) over the top_k "
      "largest (0: all).");
  nb::class_<models::Gpt2Generator>(models, "Gpt2Generator",
                                    "GPT-2's decode step compiled on a trainer, one captured "
                                    "graph replay per token, reading the trainer's parameters.")
      .def_static(
          "create",
          [](PyTrainer& trainer, const models::Gpt2Config& config, ExecMode mode, bool fuse) {
            absl::StatusOr<std::unique_ptr<models::Gpt2Generator>> generator;
            {
              nb::gil_scoped_release release;
              generator = models::Gpt2Generator::Create(*trainer.trainer, config,
                                                        {.mode = mode, .fuse = fuse});
            }
            return ValueOrThrow(std::move(generator));
          },
          "trainer"_a, "config"_a, "mode"_a = ExecMode::kGraph, "fuse"_a = true,
          nb::keep_alive<0, 1>(),
          "config: the trained model's widths; its batch is how many sequences generate at once.")
      .def(
          "generate",
          [](models::Gpt2Generator& g, const std::vector<std::vector<int32_t>>& prompts,
             int new_tokens, float temperature, int top_k, uint64_t seed) {
            absl::StatusOr<std::vector<std::vector<int32_t>>> tokens;
            {
              nb::gil_scoped_release release;
              tokens = g.Generate(prompts, new_tokens,
                                  {.temperature = temperature, .top_k = top_k, .seed = seed});
            }
            return ValueOrThrow(std::move(tokens));
          },
          "prompts"_a, "new_tokens"_a, "temperature"_a = 1.0f, "top_k"_a = 0, "seed"_a = 0,
          "Continues each of config.batch prompts (lists of token ids) by new_tokens tokens; "
          "returns the new tokens of each.");
}

}  // namespace

void BindForward(nb::module_& m, nb::class_<PyTrainer>& trainer) {
  BindForwardRunner(m);
  trainer.def("compile_forward", &CompileForward, "graph"_a, "outputs"_a,
              "mode"_a = ExecMode::kGraph, "fuse"_a = true, nb::keep_alive<0, 1>(),
              "A ForwardRunner of `graph` (inputs, outputs and parameters named as the trainer's "
              "graph names them), reading the trainer's parameters in place.");
  BindGeneration(m);
}

}  // namespace reprise::python
