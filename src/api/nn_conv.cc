// The convolutional layer builders of nn.h: each checks its arguments, adds its parameters and
// state, and one op node (whose shape rule reports the shapes that do not fit).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "reprise/nn.h"
#include "src/ops/batch_norm.h"
#include "src/ops/conv.h"
#include "src/ops/pooling.h"
#include "src/util/status_macros.h"

namespace reprise::nn {
namespace {

absl::StatusOr<TensorSpec> ImageSpec(const Graph& graph, Value x, absl::string_view layer,
                                     absl::string_view name) {
  ASSIGN_OR_RETURN(TensorSpec spec, graph.SpecOf(x));
  if (spec.shape.rank() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(layer, " '", name,
                                                   "': input must be 4-D (N, C, H, W or N, H, W, "
                                                   "C), got ",
                                                   spec.ToString()));
  }
  return spec;
}

int64_t Channels(const TensorSpec& spec, Layout layout) {
  return spec.shape.dim(layout == Layout::kNHWC ? 3 : 1);
}

}  // namespace

namespace {
absl::StatusOr<Value> Conv2dSteps(Graph& graph, Value x, int64_t out_channels,
                                  absl::string_view name, const Conv2dOptions& options) {
  ASSIGN_OR_RETURN(TensorSpec x_spec, ImageSpec(graph, x, "Conv2d", name));
  const int64_t in_channels = Channels(x_spec, options.layout);
  const int64_t k = options.kernel;
  if (out_channels <= 0 || k <= 0 || options.groups <= 0 || in_channels % options.groups != 0 ||
      out_channels % options.groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Conv2d '", name, "': needs out_channels, kernel and groups > 0 with groups dividing ",
        in_channels, " input and ", out_channels, " output channels; got kernel ", k, ", groups ",
        options.groups));
  }
  const int64_t per_group = in_channels / options.groups;
  const Shape w_shape = options.layout == Layout::kNHWC ? Shape{out_channels, k, k, per_group}
                                                        : Shape{out_channels, per_group, k, k};
  // The fan-in in double: a huge kernel or channel count must reach AddParameter's size check,
  // not overflow here.
  const double fan_in =
      static_cast<double>(per_group) * static_cast<double>(k) * static_cast<double>(k);
  const double bound = options.weight_bound > 0 ? options.weight_bound : 1.0 / std::sqrt(fan_in);
  ASSIGN_OR_RETURN(Value w,
                   graph.AddParameter(absl::StrCat(name, ".weight"), {w_shape, x_spec.dtype},
                                      Initializer::Uniform(-bound, bound)));
  const std::string layout(LayoutName(options.layout));
  ASSIGN_OR_RETURN(Value y, graph.AddOp1(ops::Conv2dOp(), absl::StrCat(name, ".conv"), {x, w},
                                         {{"stride_h", options.stride},
                                          {"stride_w", options.stride},
                                          {"pad_h", options.padding},
                                          {"pad_w", options.padding},
                                          {"dilation_h", options.dilation},
                                          {"dilation_w", options.dilation},
                                          {"groups", options.groups},
                                          {"layout", layout}}));
  if (!options.bias) return y;
  ASSIGN_OR_RETURN(
      Value b, graph.AddParameter(absl::StrCat(name, ".bias"), {Shape{out_channels}, x_spec.dtype},
                                  Initializer::Uniform(-bound, bound)));
  return graph.AddOp1(ops::ChannelBiasAddOp(), absl::StrCat(name, ".bias_add"), {y, b},
                      {{"layout", layout}});
}
}  // namespace

absl::StatusOr<Value> Conv2d(Graph& graph, Value x, int64_t out_channels, absl::string_view name,
                             const Conv2dOptions& options) {
  return Transactional(graph, [&] { return Conv2dSteps(graph, x, out_channels, name, options); });
}

namespace {
absl::StatusOr<Value> BatchNormSteps(Graph& graph, Value x, absl::string_view name,
                                     const BatchNormOptions& options) {
  ASSIGN_OR_RETURN(TensorSpec x_spec, ImageSpec(graph, x, "BatchNorm", name));
  if (!(std::isfinite(options.epsilon) && options.epsilon > 0) ||
      !(options.momentum >= 0 && options.momentum <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BatchNorm '", name, "': epsilon must be finite and greater than 0 and momentum in [0, 1]",
        "; got epsilon ", options.epsilon, ", momentum ", options.momentum));
  }
  const TensorSpec per_channel{Shape{Channels(x_spec, options.layout)}, x_spec.dtype};
  ASSIGN_OR_RETURN(Value gamma, graph.AddParameter(absl::StrCat(name, ".weight"), per_channel,
                                                   Initializer::Constant(1)));
  ASSIGN_OR_RETURN(Value beta, graph.AddParameter(absl::StrCat(name, ".bias"), per_channel,
                                                  Initializer::Zeros()));
  ASSIGN_OR_RETURN(Value mean, graph.AddState(absl::StrCat(name, ".running_mean"), per_channel,
                                              Initializer::Zeros()));
  ASSIGN_OR_RETURN(Value var, graph.AddState(absl::StrCat(name, ".running_var"), per_channel,
                                             Initializer::Constant(1)));
  const std::string layout(LayoutName(options.layout));
  if (!options.training) {
    return graph.AddOp1(ops::BatchNormInferOp(), name, {x, gamma, beta, mean, var},
                        {{"epsilon", options.epsilon}, {"layout", layout}});
  }
  ASSIGN_OR_RETURN(
      std::vector<Value> outs,
      graph.AddOp(
          ops::BatchNormTrainOp(), name, {x, gamma, beta, mean, var},
          {{"epsilon", options.epsilon}, {"momentum", options.momentum}, {"layout", layout}}));
  return outs[0];
}
}  // namespace

absl::StatusOr<Value> BatchNorm(Graph& graph, Value x, absl::string_view name,
                                const BatchNormOptions& options) {
  return Transactional(graph, [&] { return BatchNormSteps(graph, x, name, options); });
}

absl::StatusOr<Value> MaxPool2d(Graph& graph, Value x, int64_t kernel, int64_t stride,
                                int64_t padding, absl::string_view name, Layout layout) {
  RETURN_IF_ERROR(ImageSpec(graph, x, "MaxPool2d", name).status());
  return graph.AddOp1(ops::MaxPool2dOp(), name, {x},
                      {{"kernel_h", kernel},
                       {"kernel_w", kernel},
                       {"stride_h", stride},
                       {"stride_w", stride},
                       {"pad_h", padding},
                       {"pad_w", padding},
                       {"layout", std::string(LayoutName(layout))}});
}

absl::StatusOr<Value> GlobalAvgPool(Graph& graph, Value x, absl::string_view name, Layout layout) {
  RETURN_IF_ERROR(ImageSpec(graph, x, "GlobalAvgPool", name).status());
  return graph.AddOp1(ops::GlobalAvgPoolOp(), name, {x},
                      {{"layout", std::string(LayoutName(layout))}});
}

absl::StatusOr<Value> Flatten(Graph& graph, Value x, absl::string_view name) {
  return graph.AddOp1(ops::FlattenOp(), name, {x});
}

}  // namespace reprise::nn
