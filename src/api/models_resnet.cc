// ResNet-18/34/50/101/152 as torchvision builds them, named as torchvision names them.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "src/util/status_macros.h"

namespace reprise::models {
namespace {

struct Builder {
  Graph& g;
  Layout layout;

  // torchvision's kaiming_normal_(mode="fan_out", nonlinearity="relu") has std sqrt(2 / fan_out);
  // a uniform draw with the same variance has bound sqrt(3) times that.
  absl::StatusOr<Value> Conv(Value x, int64_t out, int64_t kernel, int64_t stride,
                             const std::string& name) {
    nn::Conv2dOptions options{.kernel = kernel,
                              .stride = stride,
                              .padding = kernel / 2,
                              .layout = layout,
                              .weight_bound = std::sqrt(6.0 / (out * kernel * kernel))};
    return nn::Conv2d(g, x, out, name, options);
  }
  absl::StatusOr<Value> Bn(Value x, const std::string& name) {
    return nn::BatchNorm(g, x, name, {.layout = layout});
  }
  absl::StatusOr<Value> ConvBnRelu(Value x, int64_t out, int64_t kernel, int64_t stride,
                                   const std::string& prefix, int index) {
    ASSIGN_OR_RETURN(Value y, Conv(x, out, kernel, stride, absl::StrCat(prefix, "conv", index)));
    ASSIGN_OR_RETURN(y, Bn(y, absl::StrCat(prefix, "bn", index)));
    return nn::Relu(g, y, absl::StrCat(prefix, "relu", index));
  }

  // One residual block; `bottleneck` picks 1×1-3×3-1×1 (×4 channels) over 3×3-3×3.
  absl::StatusOr<Value> Block(Value x, int64_t in, int64_t planes, int64_t stride, bool bottleneck,
                              const std::string& prefix) {
    const int64_t out = bottleneck ? planes * 4 : planes;
    Value y;
    std::string last;
    if (bottleneck) {
      ASSIGN_OR_RETURN(y, ConvBnRelu(x, planes, 1, 1, prefix, 1));
      ASSIGN_OR_RETURN(y, ConvBnRelu(y, planes, 3, stride, prefix, 2));
      ASSIGN_OR_RETURN(y, Conv(y, out, 1, 1, absl::StrCat(prefix, "conv3")));
      last = absl::StrCat(prefix, "bn3");
    } else {
      ASSIGN_OR_RETURN(y, ConvBnRelu(x, planes, 3, stride, prefix, 1));
      ASSIGN_OR_RETURN(y, Conv(y, out, 3, 1, absl::StrCat(prefix, "conv2")));
      last = absl::StrCat(prefix, "bn2");
    }
    ASSIGN_OR_RETURN(y, Bn(y, last));
    Value shortcut = x;
    if (stride != 1 || in != out) {
      ASSIGN_OR_RETURN(shortcut, Conv(x, out, 1, stride, absl::StrCat(prefix, "downsample.0")));
      ASSIGN_OR_RETURN(shortcut, Bn(shortcut, absl::StrCat(prefix, "downsample.1")));
    }
    ASSIGN_OR_RETURN(y, nn::Add(g, y, shortcut, absl::StrCat(prefix, "add")));
    return nn::Relu(g, y, absl::StrCat(prefix, "relu"));
  }
};

absl::StatusOr<std::vector<int>> BlocksPerStage(int depth) {
  switch (depth) {
    case 18:
      return std::vector<int>{2, 2, 2, 2};
    case 34:
    case 50:
      return std::vector<int>{3, 4, 6, 3};
    case 101:
      return std::vector<int>{3, 4, 23, 3};
    case 152:
      return std::vector<int>{3, 8, 36, 3};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("ResNet depth must be 18, 34, 50, 101 or 152; got ", depth));
}

}  // namespace

absl::StatusOr<ResNet> BuildResNet(const ResNetConfig& config) {
  ASSIGN_OR_RETURN(const std::vector<int> blocks, BlocksPerStage(config.depth));
  if (config.batch <= 0 || config.classes <= 1 || config.image_size < 32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ResNet needs batch > 0, classes > 1 and image_size >= 32; got batch=", config.batch,
        " classes=", config.classes, " image_size=", config.image_size));
  }
  if (config.dtype != DType::kFloat32 && config.dtype != DType::kFloat64) {
    return absl::UnimplementedError(absl::StrCat("ResNet graphs are built in f32 (or f64), not ",
                                                 DTypeName(config.dtype),
                                                 ": for bf16/f16 training build it in f32 and set "
                                                 "TrainOptions::numerics.compute_dtype (16-bit "
                                                 "compute with f32 master weights)"));
  }
  if (config.image_channels != 3 && config.image_channels != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("ResNet takes images of 3 channels, or 4 (MLPerf's stem: the fourth zero); "
                     "got image_channels=",
                     config.image_channels));
  }
  ResNet net;
  Graph& g = net.graph;
  const int64_t n = config.batch, s = config.image_size, c = config.image_channels;
  const Shape image_shape = config.layout == Layout::kNHWC ? Shape{n, s, s, c} : Shape{n, c, s, s};
  ASSIGN_OR_RETURN(net.images, g.AddInput("images", {image_shape, config.dtype}));
  ASSIGN_OR_RETURN(net.labels, g.AddInput("labels", {Shape{n}, DType::kInt32}));
  Builder b{g, config.layout};
  ASSIGN_OR_RETURN(Value h, b.ConvBnRelu(net.images, 64, 7, 2, "", 1));
  ASSIGN_OR_RETURN(h, nn::MaxPool2d(g, h, 3, 2, 1, "maxpool", config.layout));
  const bool bottleneck = config.depth >= 50;
  int64_t channels = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = int64_t{64} << stage;
    for (int j = 0; j < blocks[stage]; ++j) {
      const int64_t stride = (stage > 0 && j == 0) ? 2 : 1;
      ASSIGN_OR_RETURN(h, b.Block(h, channels, planes, stride, bottleneck,
                                  absl::StrCat("layer", stage + 1, ".", j, ".")));
      channels = bottleneck ? planes * 4 : planes;
    }
  }
  ASSIGN_OR_RETURN(h, nn::GlobalAvgPool(g, h, "avgpool", config.layout));
  ASSIGN_OR_RETURN(net.logits, nn::Linear(g, h, config.classes, "fc"));
  ASSIGN_OR_RETURN(net.loss, nn::SoftmaxCrossEntropy(g, net.logits, net.labels, "loss"));
  return net;
}

}  // namespace reprise::models
