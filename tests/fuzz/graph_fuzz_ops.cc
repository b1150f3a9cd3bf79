#include "tests/fuzz/graph_fuzz_ops.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "src/ops/ops.h"

namespace reprise::fuzz {

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
                                         std::numeric_limits<int64_t>::max(),
                                         std::numeric_limits<int64_t>::min()};
  if (in.ConsumeBool()) return in.ConsumeIntegralInRange<int64_t>(1, 9);
  return in.PickValueInArray(kExtents);
}

Shape RandomShape(FuzzedDataProvider& in) {
  std::vector<int64_t> dims(in.ConsumeIntegralInRange<int>(0, 5));
  for (int64_t& d : dims) d = Extent(in);
  return Shape(std::move(dims));
}

DType RandomDType(FuzzedDataProvider& in) {
  static constexpr DType kDTypes[] = {DType::kFloat32, DType::kInt32, DType::kFloat64,
                                      DType::kBFloat16, DType::kFloat16};
  // Mostly float32, the engine's common case.
  if (in.ConsumeBool()) return DType::kFloat32;
  return in.PickValueInArray(kDTypes);
}

Layout RandomLayout(FuzzedDataProvider& in) {
  return in.ConsumeBool() ? Layout::kNHWC : Layout::kNCHW;
}

double RandomDouble(FuzzedDataProvider& in) {
  static constexpr double kValues[] = {0,
                                       1,
                                       -1,
                                       0.5,
                                       0.1,
                                       1e-5,
                                       2,
                                       1e300,
                                       -1e300,
                                       std::numeric_limits<double>::denorm_min(),
                                       std::numeric_limits<double>::infinity(),
                                       -std::numeric_limits<double>::infinity(),
                                       std::numeric_limits<double>::quiet_NaN()};
  if (in.ConsumeBool()) return in.PickValueInArray(kValues);
  return in.ConsumeFloatingPoint<double>();
}

Initializer RandomInitializer(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0:
      return Initializer::Zeros();
    case 1:
      return Initializer::Constant(RandomDouble(in));
    default: {
      const double low = RandomDouble(in);
      return Initializer::Uniform(low, RandomDouble(in));
    }
  }
}

const ir::OpDef& RandomOp(FuzzedDataProvider& in) {
  static const std::vector<const ir::OpDef*> ops = ops::AllOps();
  return *ops[in.ConsumeIntegralInRange<size_t>(0, ops.size() - 1)];
}

namespace {

// Every attribute name the ops read (src/ops), so that random attributes reach their checks.
constexpr const char* kAttrNames[] = {
    "backoff_factor", "classes",      "clip_norm",   "column_sum",    "count",
    "decay",          "decoupled",    "dilation_h",  "dilation_w",    "dtype",
    "epsilon",        "gamma",        "groups",      "growth_factor", "growth_interval",
    "heads",          "height",       "input_h",     "input_w",       "kernel_h",
    "kernel_w",       "layers",       "layout",      "loss_scaled",   "masked_output",
    "min_factor",     "models",       "momentum",    "nesterov",      "non_finite",
    "outputs",        "pad_h",        "pad_w",       "perm",          "positions",
    "rows",           "rate",         "relu",        "relu_from_x",   "residual",
    "role",           "seed",         "seq",         "shape",         "step_size",
    "steps",          "sticky",       "stream",      "stride_h",      "stride_w",
    "table_rows",     "tensors",      "total_steps", "transpose_a",   "transpose_b",
    "vocab",          "warmup_steps", "width"};

// Strings the ops parse: layouts, dtypes, roles, schedules, shapes, permutations and fused
// programs, well formed or not.
constexpr const char* kAttrStrings[] = {"",
                                        "NCHW",
                                        "NHWC",
                                        "f32",
                                        "bf16",
                                        "f16",
                                        "float32",
                                        "dgrad",
                                        "wgrad",
                                        "constant",
                                        "cosine",
                                        "step",
                                        "skip",
                                        "stop",
                                        "0",
                                        "1",
                                        "-1",
                                        "0,1",
                                        "1,0",
                                        "0,2,3,1",
                                        "0,3,1,2",
                                        "0,0",
                                        "2,3",
                                        "4,-1",
                                        "x,y",
                                        "99999999999999999999",
                                        "relu:0",
                                        "add:0,1",
                                        "relu:0;add:s0,1",
                                        "bias_add:0,1",
                                        "relu:s5",
                                        "add:0,s-1",
                                        ":",
                                        "relu:0;relu:s0;add:s1,s0"};

std::string RandomString(FuzzedDataProvider& in) {
  if (in.ConsumeBool()) return in.PickValueInArray(kAttrStrings);
  // A comma-separated list of extents: a shape or a permutation.
  std::vector<int64_t> parts(in.ConsumeIntegralInRange<int>(0, 5));
  for (int64_t& p : parts)
    p = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-1, 5) : Extent(in);
  return absl::StrJoin(parts, ",");
}

}  // namespace

Attrs RandomAttrs(FuzzedDataProvider& in) {
  Attrs attrs;
  const int count = in.ConsumeIntegralInRange<int>(0, 8);
  for (int i = 0; i < count; ++i) {
    const std::string name = in.PickValueInArray(kAttrNames);
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0:
        attrs[name] = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-2, 8) : Extent(in);
        break;
      case 1:
        attrs[name] = RandomDouble(in);
        break;
      case 2:
        attrs[name] = in.ConsumeBool();
        break;
      default:
        attrs[name] = RandomString(in);
        break;
    }
  }
  return attrs;
}

bool IsSmall(const Graph& graph) {
  constexpr int64_t kMaxElements = 4096;
  int64_t total = 0;
  for (const Node& n : graph.nodes()) {
    for (const TensorSpec& s : n.outputs) {
      absl::StatusOr<int64_t> elements = s.shape.CheckedNumElements();
      if (!elements.ok() || *elements > kMaxElements) return false;
      total += *elements;
      if (total > 16 * kMaxElements) return false;
    }
  }
  return true;
}

void FillInputs(FuzzedDataProvider& in, const Graph& graph, ir::ReferenceExecutor& executor) {
  for (const Node& n : graph.nodes()) {
    if (n.op != &ir::InputOp() || in.ConsumeBool()) continue;  // Some keep their defaults.
    const int64_t size = n.outputs[0].NumElements();
    if (n.outputs[0].dtype == DType::kInt32) {
      // Mostly in a small range (labels, ids), sometimes anything.
      std::vector<int32_t> values(size);
      const int32_t high = in.ConsumeIntegralInRange<int32_t>(0, 16);
      for (int32_t& v : values) {
        v = in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(-1, high)
                             : in.ConsumeIntegral<int32_t>();
      }
      Check(executor.SetLeaf(n.name, values).ok());
    } else {
      std::vector<double> values(size);
      for (double& v : values)
        v = in.ConsumeBool() ? in.ConsumeProbability<double>() : RandomDouble(in);
      Check(executor.SetLeaf(n.name, values).ok());
    }
  }
}

}  // namespace reprise::fuzz
