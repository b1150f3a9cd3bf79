// Graphs, the nn builders and the ready-made models.
#include "reprise/graph.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <vector>

#include "python/src/bindings.h"
#include "python/src/errors.h"
#include "reprise/models.h"
#include "reprise/nn.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace reprise::python {
namespace {

TensorSpec SpecOf(const std::vector<int64_t>& shape, DType dtype) { return {Shape(shape), dtype}; }

void BindTensor(nb::module_& m) {
  nb::enum_<DType>(m, "DType")
      .value("float32", DType::kFloat32)
      .value("float64", DType::kFloat64)
      .value("int32", DType::kInt32)
      .value("bfloat16", DType::kBFloat16)
      .value("float16", DType::kFloat16);
  nb::enum_<Layout>(m, "Layout").value("NCHW", Layout::kNCHW).value("NHWC", Layout::kNHWC);
  nb::class_<Value>(m, "Value")
      .def_ro("node", &Value::node)
      .def_ro("output", &Value::output)
      .def("__eq__", [](const Value& a, const Value& b) { return a == b; })
      .def("__repr__", [](const Value& v) {
        return "Value(node=" + std::to_string(v.node) + ", output=" + std::to_string(v.output) +
               ")";
      });
}

void BindGraph(nb::module_& m) {
  nb::class_<Graph>(m, "Graph")
      .def(nb::init<>())
      .def(
          "add_input",
          [](Graph& g, const std::string& name, const std::vector<int64_t>& shape, DType dtype) {
            return ValueOrThrow(g.AddInput(name, SpecOf(shape, dtype)));
          },
          "name"_a, "shape"_a, "dtype"_a = DType::kFloat32)
      .def(
          "shape", [](const Graph& g, Value v) { return ValueOrThrow(g.SpecOf(v)).shape.dims(); },
          "value"_a)
      .def(
          "dtype", [](const Graph& g, Value v) { return ValueOrThrow(g.SpecOf(v)).dtype; },
          "value"_a)
      .def_prop_ro("num_nodes", &Graph::num_nodes)
      .def_prop_ro("num_parameter_elements", &Graph::NumParameterElements)
      .def_prop_ro(
          "parameter_names",
          [](const Graph& g) {
            std::vector<std::string> names;
            for (int32_t id : g.NodesOf("parameter")) names.push_back(g.node(id).name);
            return names;
          },
          "The parameters' names, in the order they were added.")
      .def("__str__", &Graph::ToString);
}

void BindNn(nb::module_& m) {
  nb::module_ nn = m.def_submodule("nn", "Layers: each adds its nodes to a Graph.");
  nn.def(
      "linear",
      [](Graph& g, Value x, int64_t out_features, const std::string& name, bool bias) {
        return ValueOrThrow(nn::Linear(g, x, out_features, name, bias));
      },
      "graph"_a, "x"_a, "out_features"_a, "name"_a, "bias"_a = true);
  nn.def(
      "relu",
      [](Graph& g, Value x, const std::string& name) { return ValueOrThrow(nn::Relu(g, x, name)); },
      "graph"_a, "x"_a, "name"_a = "");
  nn.def(
      "add",
      [](Graph& g, Value a, Value b, const std::string& name) {
        return ValueOrThrow(nn::Add(g, a, b, name));
      },
      "graph"_a, "a"_a, "b"_a, "name"_a = "");
  nn.def(
      "conv2d",
      [](Graph& g, Value x, int64_t out_channels, const std::string& name, int64_t kernel,
         int64_t stride, int64_t padding, int64_t dilation, int64_t groups, bool bias,
         Layout layout) {
        return ValueOrThrow(nn::Conv2d(g, x, out_channels, name,
                                       {.kernel = kernel,
                                        .stride = stride,
                                        .padding = padding,
                                        .dilation = dilation,
                                        .groups = groups,
                                        .bias = bias,
                                        .layout = layout}));
      },
      "graph"_a, "x"_a, "out_channels"_a, "name"_a, "kernel"_a = 3, "stride"_a = 1, "padding"_a = 0,
      "dilation"_a = 1, "groups"_a = 1, "bias"_a = false, "layout"_a = Layout::kNCHW);
  nn.def(
      "batch_norm",
      [](Graph& g, Value x, const std::string& name, double epsilon, double momentum, Layout layout,
         bool training) {
        return ValueOrThrow(nn::BatchNorm(
            g, x, name,
            {.epsilon = epsilon, .momentum = momentum, .layout = layout, .training = training}));
      },
      "graph"_a, "x"_a, "name"_a, "epsilon"_a = 1e-5, "momentum"_a = 0.1,
      "layout"_a = Layout::kNCHW, "training"_a = true);
  nn.def(
      "max_pool2d",
      [](Graph& g, Value x, int64_t kernel, int64_t stride, int64_t padding,
         const std::string& name, Layout layout) {
        return ValueOrThrow(nn::MaxPool2d(g, x, kernel, stride, padding, name, layout));
      },
      "graph"_a, "x"_a, "kernel"_a, "stride"_a, "padding"_a, "name"_a, "layout"_a = Layout::kNCHW);
  nn.def(
      "global_avg_pool",
      [](Graph& g, Value x, const std::string& name, Layout layout) {
        return ValueOrThrow(nn::GlobalAvgPool(g, x, name, layout));
      },
      "graph"_a, "x"_a, "name"_a, "layout"_a = Layout::kNCHW);
  nn.def(
      "flatten",
      [](Graph& g, Value x, const std::string& name) {
        return ValueOrThrow(nn::Flatten(g, x, name));
      },
      "graph"_a, "x"_a, "name"_a = "");
  nn.def(
      "dropout",
      [](Graph& g, Value x, double rate, const std::string& name, uint64_t seed) {
        return ValueOrThrow(nn::Dropout(g, x, rate, name, seed));
      },
      "graph"_a, "x"_a, "rate"_a, "name"_a, "seed"_a = 0);
  nn.def(
      "softmax_cross_entropy",
      [](Graph& g, Value logits, Value labels, const std::string& name) {
        return ValueOrThrow(nn::SoftmaxCrossEntropy(g, logits, labels, name));
      },
      "graph"_a, "logits"_a, "labels"_a, "name"_a = "");
  nn.def(
      "masked_softmax_cross_entropy",
      [](Graph& g, Value logits, Value labels, const std::string& name) {
        return ValueOrThrow(nn::MaskedSoftmaxCrossEntropy(g, logits, labels, name));
      },
      "graph"_a, "logits"_a, "labels"_a, "name"_a = "");
}

// Gpt2Config field for field, with a keyword constructor whose defaults are the C++ ones.
void BindGpt2(nb::module_& models) {
  const models::Gpt2Config d;
  nb::class_<models::Gpt2Config>(models, "Gpt2Config")
      .def(
          "__init__",
          [](models::Gpt2Config* c, int64_t batch, int64_t seq, int64_t max_positions,
             int64_t vocab, int64_t layers, int64_t heads, int64_t width, double init_std,
             int64_t padded_vocab) {
            new (c) models::Gpt2Config{batch, seq,   max_positions, vocab,       layers,
                                       heads, width, init_std,      padded_vocab};
          },
          "batch"_a = d.batch, "seq"_a = d.seq, "max_positions"_a = d.max_positions,
          "vocab"_a = d.vocab, "layers"_a = d.layers, "heads"_a = d.heads, "width"_a = d.width,
          "init_std"_a = d.init_std, "padded_vocab"_a = d.padded_vocab)
      .def_rw("batch", &models::Gpt2Config::batch)
      .def_rw("seq", &models::Gpt2Config::seq)
      .def_rw("max_positions", &models::Gpt2Config::max_positions)
      .def_rw("vocab", &models::Gpt2Config::vocab)
      .def_rw("layers", &models::Gpt2Config::layers)
      .def_rw("heads", &models::Gpt2Config::heads)
      .def_rw("width", &models::Gpt2Config::width)
      .def_rw("init_std", &models::Gpt2Config::init_std)
      .def_rw("padded_vocab", &models::Gpt2Config::padded_vocab,
              "columns of the logits: 0 pads vocab to a multiple of 128, vocab pads nothing");
  models.def("gpt2_logits_width", &models::Gpt2LogitsWidth, "config"_a,
             "The logits' columns for `config`: padded_vocab, or vocab rounded up to 128 if 0.");
  nb::class_<models::Gpt2>(models, "Gpt2")
      .def_ro("graph", &models::Gpt2::graph, nb::rv_policy::reference_internal)
      .def_ro("tokens", &models::Gpt2::tokens)
      .def_ro("targets", &models::Gpt2::targets)
      .def_ro("logits", &models::Gpt2::logits)
      .def_ro("loss", &models::Gpt2::loss);
  models.def(
      "build_gpt2",
      [](const models::Gpt2Config& config) { return ValueOrThrow(models::BuildGpt2(config)); },
      "config"_a = d,
      "nanoGPT's GPT-2 (124M by default) under its state dict's names, the output projection "
      "tied to transformer.wte.weight; inputs 'tokens' and 'targets' int32 [batch, seq]; logits "
      "[batch*seq, gpt2_logits_width(config)], the columns past vocab zero padding.");
}

void BindModels(nb::module_& m) {
  nb::module_ models = m.def_submodule("models", "Ready-made models.");
  nb::class_<models::Mlp>(models, "Mlp")
      .def_ro("graph", &models::Mlp::graph, nb::rv_policy::reference_internal)
      .def_ro("features", &models::Mlp::features)
      .def_ro("labels", &models::Mlp::labels)
      .def_ro("logits", &models::Mlp::logits)
      .def_ro("loss", &models::Mlp::loss);
  models.def(
      "mlp",
      [](int64_t batch, int64_t input_features, int64_t depth, int64_t width, int64_t classes) {
        return ValueOrThrow(models::BuildMlp({.batch = batch,
                                              .input_features = input_features,
                                              .depth = depth,
                                              .width = width,
                                              .classes = classes}));
      },
      "batch"_a = 32, "input_features"_a = 256, "depth"_a = 8, "width"_a = 256, "classes"_a = 10,
      "depth x (Linear(width) + ReLU), Linear(classes), softmax cross-entropy; layers fc0...");
  nb::class_<models::ResNet>(models, "ResNet")
      .def_ro("graph", &models::ResNet::graph, nb::rv_policy::reference_internal)
      .def_ro("images", &models::ResNet::images)
      .def_ro("labels", &models::ResNet::labels)
      .def_ro("logits", &models::ResNet::logits)
      .def_ro("loss", &models::ResNet::loss);
  models.def(
      "resnet",
      [](int depth, int64_t batch, int64_t classes, int64_t image_size, Layout layout,
         int64_t image_channels) {
        return ValueOrThrow(models::BuildResNet({.depth = depth,
                                                 .batch = batch,
                                                 .classes = classes,
                                                 .image_size = image_size,
                                                 .layout = layout,
                                                 .image_channels = image_channels}));
      },
      "depth"_a = 50, "batch"_a = 32, "classes"_a = 1000, "image_size"_a = 224,
      "layout"_a = Layout::kNCHW, "image_channels"_a = 3,
      "torchvision's ResNet with torchvision's parameter names; image_channels=4 is MLPerf's "
      "stem, for images padded with a fourth channel of zeros.");
  BindGpt2(models);
}

}  // namespace

void BindGraphs(nb::module_& m) {
  BindTensor(m);
  BindGraph(m);
  BindNn(m);
  BindModels(m);
}

}  // namespace reprise::python
