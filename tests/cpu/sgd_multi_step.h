// SGD updates of tensors whose gradients are float32, bfloat16 and float16 in turn (the sizes of
// sixteen_bit_gradient_step.h), each with one of two weight decays, built two ways with the same
// leaves in the same order (so a seed gives both the same values): one sgd_multi reading the
// 16-bit gradients itself, or one sgd_momentum per tensor reading its gradient's float32 cast.
// Shared by the CPU test and the GPU test.
#ifndef REPRISE_TESTS_CPU_SGD_MULTI_STEP_H_
#define REPRISE_TESTS_CPU_SGD_MULTI_STEP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "reprise/graph.h"
#include "src/ops/cast.h"
#include "src/ops/ops.h"
#include "src/util/status_macros.h"
#include "tests/cpu/sixteen_bit_gradient_step.h"

namespace reprise::testing {

struct SgdMultiStepOptions {
  int tensors = 6;
  bool one_node = true;  // One sgd_multi; else sgd_momentum per tensor.
  bool clip = false;     // Input "clip", a clip coefficient of 0.5.
  bool checked = false;  // Input "check" (f32[2]: 1 / scale, found non-finite), attr loss_scaled.
  bool nesterov = false;
  // With one_node: the first `copies` weights have 16-bit copies ("t<i>.copy", bfloat16 and
  // float16 in turn, initialised at random), and the state "stale" (1) is their flag.
  int copies = 0;
};

inline absl::StatusOr<Graph> BuildSgdMultiStep(const SgdMultiStepOptions& o) {
  Graph g;
  const TensorSpec scalar{Shape{}, DType::kFloat32};
  const Initializer uniform = Initializer::Uniform(-1, 1);
  std::vector<std::vector<Value>> per_tensor;  // w, g, v
  for (int t = 0; t < o.tensors; ++t) {
    const std::string name = "t" + std::to_string(t);
    const Shape shape = GradientStepShape(t);
    per_tensor.push_back({*g.AddParameter(name, {shape}, uniform),
                          *g.AddConstant(name + ".g", {shape, GradientTypeOf(t)}, uniform),
                          *g.AddState(name + ".v", {shape}, uniform)});
  }
  const Value lr = *g.AddInput("lr", scalar, Initializer::Constant(0.05));
  const Value momentum = *g.AddInput("momentum", scalar, Initializer::Constant(0.9));
  const Value wd = *g.AddInput("wd", scalar, Initializer::Constant(0.01));
  const Value no_wd = *g.AddConstant("wd.none", scalar, Initializer::Zeros());
  const Value clip = o.clip ? *g.AddInput("clip", scalar, Initializer::Constant(0.5)) : Value{};
  const Value check = o.checked ? *g.AddInput("check", {Shape{2}}, Initializer::Zeros()) : Value{};
  std::vector<Value> copies;
  if (o.one_node && o.copies > 0) {
    for (int t = 0; t < o.copies; ++t) {
      const DType type = t % 2 == 0 ? DType::kBFloat16 : DType::kFloat16;
      copies.push_back(
          *g.AddState("t" + std::to_string(t) + ".copy", {GradientStepShape(t), type}, uniform));
    }
    copies.push_back(*g.AddState("stale", {Shape{}, DType::kInt32}, Initializer::Constant(1)));
  }
  Attrs attrs;
  if (o.checked) attrs["loss_scaled"] = true;
  if (o.nesterov) attrs["nesterov"] = true;
  auto shared_tail = [&](std::vector<Value>& inputs) {
    if (o.clip) inputs.push_back(clip);
    if (o.checked) inputs.push_back(check);
  };
  if (!o.one_node) {
    for (int t = 0; t < o.tensors; ++t) {
      Value gradient = per_tensor[t][1];
      if (GradientTypeOf(t) != DType::kFloat32) {
        ASSIGN_OR_RETURN(gradient,
                         g.AddOp1(ops::CastOp(), "t" + std::to_string(t) + ".g.to_f32", {gradient},
                                  {{"dtype", ops::DTypeAttr(DType::kFloat32)}}));
      }
      std::vector<Value> inputs = {per_tensor[t][0],       gradient, per_tensor[t][2], lr, momentum,
                                   t % 4 == 1 ? no_wd : wd};
      shared_tail(inputs);
      RETURN_IF_ERROR(
          g.AddOp(ops::SgdMomentumOp(), "sgd." + std::to_string(t), inputs, attrs).status());
    }
    return g;
  }
  std::vector<Value> inputs;
  for (int t = 0; t < o.tensors; ++t) {
    inputs.insert(inputs.end(),
                  {per_tensor[t][0], per_tensor[t][1], per_tensor[t][2], t % 4 == 1 ? no_wd : wd});
  }
  inputs.insert(inputs.end(), {lr, momentum});
  shared_tail(inputs);
  inputs.insert(inputs.end(), copies.begin(), copies.end());
  attrs["tensors"] = int64_t{o.tensors};
  if (o.copies > 0) attrs["copies"] = int64_t{o.copies};
  RETURN_IF_ERROR(g.AddOp(ops::SgdMultiOp(), "sgd.all", inputs, attrs).status());
  return g;
}

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_CPU_SGD_MULTI_STEP_H_
