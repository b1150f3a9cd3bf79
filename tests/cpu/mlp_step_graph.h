// A graph of leaves and one mlp_train_step node, its leaves named as models::BuildMlp and
// autodiff::BuildTrainingGraph name theirs, so that values can be copied between the two by name.
// Header-only: the CPU and the GPU tests both use it.
#ifndef REPRISE_TESTS_CPU_MLP_STEP_GRAPH_H_
#define REPRISE_TESTS_CPU_MLP_STEP_GRAPH_H_

#include <cmath>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "reprise/graph.h"
#include "reprise/models.h"
#include "reprise/trainer.h"
#include "src/codegen/mlp_step_kernel.h"
#include "src/ir/op_def.h"
#include "src/ir/reference_executor.h"
#include "src/ops/mlp_step.h"
#include "src/util/status_macros.h"

namespace reprise::testing {

struct FusedMlpStep {
  Graph graph;
  int32_t node = -1;  // The mlp_train_step node.
  Value loss, logits;
  int layers = 0;
};

inline absl::StatusOr<FusedMlpStep> BuildFusedMlpStep(const models::MlpConfig& config,
                                                      const SgdOptions& sgd) {
  FusedMlpStep f;
  Graph& g = f.graph;
  const TensorSpec scalar{Shape{}, DType::kFloat32};
  std::vector<Value> in;
  ASSIGN_OR_RETURN(Value x, g.AddInput("features", {Shape{config.batch, config.input_features}}));
  ASSIGN_OR_RETURN(Value labels, g.AddInput("labels", {Shape{config.batch}, DType::kInt32}));
  ASSIGN_OR_RETURN(Value dloss, g.AddInput("dloss", scalar, Initializer::Constant(1.0)));
  ASSIGN_OR_RETURN(Value lr,
                   g.AddInput("learning_rate", scalar, Initializer::Constant(sgd.learning_rate)));
  ASSIGN_OR_RETURN(Value mu, g.AddInput("momentum", scalar, Initializer::Constant(sgd.momentum)));
  ASSIGN_OR_RETURN(Value wd,
                   g.AddInput("weight_decay", scalar, Initializer::Constant(sgd.weight_decay)));
  in = {x, labels, dloss, lr, mu, wd};
  f.layers = static_cast<int>(config.depth) + 1;
  int64_t fan_in = config.input_features;
  for (int l = 0; l < f.layers; ++l) {
    const int64_t out = l + 1 < f.layers ? config.width : config.classes;
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    const std::string name = absl::StrCat("fc", l);
    ASSIGN_OR_RETURN(Value w, g.AddParameter(name + ".weight", {Shape{out, fan_in}},
                                             Initializer::Uniform(-bound, bound)));
    ASSIGN_OR_RETURN(
        Value b, g.AddParameter(name + ".bias", {Shape{out}}, Initializer::Uniform(-bound, bound)));
    ASSIGN_OR_RETURN(Value vw, g.AddState(name + ".weight.momentum", {Shape{out, fan_in}},
                                          Initializer::Zeros()));
    ASSIGN_OR_RETURN(Value vb,
                     g.AddState(name + ".bias.momentum", {Shape{out}}, Initializer::Zeros()));
    in.insert(in.end(), {w, b, vw, vb});
    fan_in = out;
  }
  ASSIGN_OR_RETURN(Value barrier, g.AddState("mlp_step.barrier",
                                             {Shape{codegen::kMlpStepBarrierWords}, DType::kInt32},
                                             Initializer::Zeros()));
  in.push_back(barrier);
  ASSIGN_OR_RETURN(std::vector<Value> out,
                   g.AddOp(ops::MlpTrainStepOp(), "mlp_step", in, {{"layers", int64_t{f.layers}}}));
  f.node = out[0].node;
  f.loss = out[0];
  f.logits = out[1];
  return f;
}

// Copies every leaf of `to_graph` that `from_graph` has under the same name and spec.
inline absl::Status CopyLeavesByName(const Graph& from_graph, ir::ReferenceExecutor& from,
                                     const Graph& to_graph, ir::ReferenceExecutor& to) {
  for (const Node& n : to_graph.nodes()) {
    if (!ir::IsLeaf(n)) continue;
    auto source = from_graph.FindNode(n.name);
    if (!source.ok()) continue;
    ASSIGN_OR_RETURN(ir::HostTensor * src, from.Leaf(n.name));
    ASSIGN_OR_RETURN(ir::HostTensor * dst, to.Leaf(n.name));
    if (!(src->spec() == dst->spec())) {
      return absl::InvalidArgumentError(absl::StrCat("leaf '", n.name,
                                                     "' differs: ", src->spec().ToString(), " and ",
                                                     dst->spec().ToString()));
    }
    std::memcpy(dst->raw(), src->raw(), src->spec().bytes());
  }
  return absl::OkStatus();
}

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_CPU_MLP_STEP_GRAPH_H_
