// libFuzzer target: the public graph-building API (reprise/graph.h, nn.h, models.h) driven with
// random shapes, layers, options and names. Every call either succeeds, leaving values whose
// element counts and byte sizes fit in int64, or fails leaving the graph exactly as it was; a
// scalar loss then builds a training graph or is refused. Never a crash, an exception or
// undefined behaviour.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "reprise/graph.h"
#include "reprise/models.h"
#include "reprise/nn.h"
#include "src/autodiff/autodiff.h"

namespace reprise {
namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// Extents that are small, at a boundary, or large enough to wrap a product.
int64_t Extent(FuzzedDataProvider& in) {
  static constexpr int64_t kExtents[] = {1,
                                         2,
                                         3,
                                         4,
                                         7,
                                         8,
                                         16,
                                         0,
                                         -1,
                                         int64_t{1} << 31,
                                         int64_t{1} << 32,
                                         int64_t{1} << 40,
                                         int64_t{1} << 62,
                                         std::numeric_limits<int64_t>::max()};
  if (in.ConsumeBool()) return in.ConsumeIntegralInRange<int64_t>(1, 9);
  return in.PickValueInArray(kExtents);
}

std::string Name(FuzzedDataProvider& in) {
  static constexpr const char* kNames[] = {"",     "a", "b",         "fc",         "conv",    "bn",
                                           "loss", "x", "fc.weight", "a.fc0.bias", "rng.step"};
  return in.PickValueInArray(kNames);
}

Shape RandomShape(FuzzedDataProvider& in) {
  std::vector<int64_t> dims(in.ConsumeIntegralInRange<int>(0, 4));
  for (int64_t& d : dims) d = Extent(in);
  return Shape(std::move(dims));
}

void CheckGraph(const Graph& g) {
  for (const Node& n : g.nodes()) {
    for (const TensorSpec& s : n.outputs) Check(s.CheckedBytes().ok());
  }
}

// One builder call; on failure the graph must be as it was before it.
template <typename Result>
void Expect(const Graph& g, const std::string& before, const Result& result,
            std::vector<Value>& values) {
  if (!result.ok()) {
    Check(g.ToString() == before);
    return;
  }
  if constexpr (std::is_same_v<Result, absl::StatusOr<Value>>) values.push_back(*result);
}

void Run(FuzzedDataProvider& in) {
  Graph g;
  std::vector<Value> values;
  std::vector<Value> labels;
  const int steps = in.ConsumeIntegralInRange<int>(1, 24);
  for (int step = 0; step < steps && in.remaining_bytes() > 0; ++step) {
    const std::string before = g.ToString();
    auto pick = [&]() -> Value {
      if (values.empty() || in.ConsumeIntegralInRange<int>(0, 15) == 0) return Value{};
      return values[in.ConsumeIntegralInRange<size_t>(0, values.size() - 1)];
    };
    const std::string name = Name(in);
    switch (in.ConsumeIntegralInRange<int>(0, 14)) {
      case 0: {
        const DType dtype = in.ConsumeBool() ? DType::kFloat32 : DType::kInt32;
        auto v = g.AddInput(name, {RandomShape(in), dtype});
        Expect(g, before, v, values);
        if (v.ok() && dtype == DType::kInt32) labels.push_back(*v);
        break;
      }
      case 1:
        Expect(g, before,
               g.AddParameter(name, {RandomShape(in)},
                              Initializer::Uniform(in.ConsumeFloatingPoint<double>(),
                                                   in.ConsumeFloatingPoint<double>())),
               values);
        break;
      case 2:
        Expect(g, before, nn::Linear(g, pick(), Extent(in), name, in.ConsumeBool()), values);
        break;
      case 3:
        Expect(g, before, nn::Relu(g, pick(), name), values);
        break;
      case 4:
        Expect(g, before, nn::Add(g, pick(), pick(), name), values);
        break;
      case 5: {
        nn::Conv2dOptions o;
        o.kernel = Extent(in);
        o.stride = Extent(in);
        o.padding = in.ConsumeBool() ? Extent(in) - 1 : 0;
        o.dilation = in.ConsumeBool() ? Extent(in) : 1;
        o.groups = in.ConsumeBool() ? Extent(in) : 1;
        o.bias = in.ConsumeBool();
        o.layout = in.ConsumeBool() ? Layout::kNHWC : Layout::kNCHW;
        Expect(g, before, nn::Conv2d(g, pick(), Extent(in), name, o), values);
        break;
      }
      case 6: {
        nn::BatchNormOptions o;
        o.epsilon = in.ConsumeFloatingPoint<double>();
        o.momentum = in.ConsumeFloatingPoint<double>();
        o.training = in.ConsumeBool();
        Expect(g, before, nn::BatchNorm(g, pick(), name, o), values);
        break;
      }
      case 7:
        Expect(g, before,
               nn::MaxPool2d(g, pick(), Extent(in), Extent(in), Extent(in) - 1, name,
                             in.ConsumeBool() ? Layout::kNHWC : Layout::kNCHW),
               values);
        break;
      case 8:
        Expect(g, before, nn::GlobalAvgPool(g, pick(), name), values);
        break;
      case 9:
        Expect(g, before, nn::Flatten(g, pick(), name), values);
        break;
      case 10:
        Expect(g, before, nn::Dropout(g, pick(), in.ConsumeFloatingPoint<double>(), name), values);
        break;
      case 11: {
        const Value l = labels.empty() ? pick() : labels.back();
        Expect(g, before,
               in.ConsumeBool() ? nn::SoftmaxCrossEntropy(g, pick(), l, name)
                                : nn::MaskedSoftmaxCrossEntropy(g, pick(), l, name),
               values);
        break;
      }
      case 12: {
        const models::MlpConfig config{.batch = Extent(in),
                                       .input_features = Extent(in),
                                       .depth = in.ConsumeIntegralInRange<int64_t>(-1, 3),
                                       .width = Extent(in),
                                       .classes = Extent(in)};
        auto mlp = models::AddMlp(g, config, name);
        if (!mlp.ok()) {
          Check(g.ToString() == before);
        } else {
          values.push_back(mlp->loss);
          values.push_back(mlp->logits);
          labels.push_back(mlp->labels);
        }
        break;
      }
      case 13: {
        std::vector<Value> parts = {pick(), pick()};
        Expect(g, before, models::SumLosses(g, parts, name), values);
        break;
      }
      default: {
        const Graph::Mark mark = g.GetMark();
        (void)nn::Relu(g, pick(), "");
        g.RollBack(mark);
        Check(g.ToString() == before);
        break;
      }
    }
    CheckGraph(g);
  }
  for (const Value& v : values) {
    if (g.spec(v).shape.rank() == 0 && g.spec(v).dtype == DType::kFloat32) {
      (void)autodiff::BuildTrainingGraph(g, v, {});
      break;
    }
  }
}

}  // namespace
}  // namespace reprise

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  reprise::Run(in);
  return 0;
}
