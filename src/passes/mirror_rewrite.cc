#include "src/passes/mirror_rewrite.h"

#include <algorithm>
#include <limits>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "src/ir/op_def.h"
#include "src/ops/batch_norm.h"
#include "src/ops/batch_norm_apply.h"
#include "src/ops/pooling.h"
#include "src/ops/transformer_ops.h"
#include "src/passes/rewrite.h"
#include "src/passes/schedule.h"
#include "src/util/status_macros.h"

namespace reprise::passes {
namespace {

bool IsBatchNorm(const Node& node) { return node.op == &ops::BatchNormTrainOp(); }
bool IsLayerNorm(const Node& node) { return node.op == &ops::LayerNormOp(); }

// What a twin computes and from which values of the original graph.
struct TwinSpec {
  const ir::OpDef* op;
  std::vector<Value> inputs;
};

TwinSpec TwinOf(const Node& node) {
  if (IsBatchNorm(node)) {
    // (x, gamma, beta, saved_mean, saved_invstd): the statistics the forward saved.
    return {&ops::BatchNormApplyOp(),
            {node.inputs[0], node.inputs[1], node.inputs[2], Value{node.id, 1}, Value{node.id, 2}}};
  }
  return {node.op, node.inputs};
}

constexpr int32_t kUnplaced = std::numeric_limits<int32_t>::max();

}  // namespace

bool Recomputable(const Node& node) {
  if (ir::IsLeaf(node) || node.op->cpu == nullptr || node.op->lower == nullptr) return false;
  if (IsBatchNorm(node) || IsLayerNorm(node) || node.op == &ops::MaxPool2dOp()) return true;
  return node.op->kind == ir::OpKind::kPointwise && ir::MutatedInputs(node).empty();
}

bool IsMirroredOutput(const Node& node, int output) {
  return !(IsBatchNorm(node) || IsLayerNorm(node)) || output == 0;
}

absl::StatusOr<MirroredGraph> RewriteMirrored(const autodiff::TrainingGraph& training,
                                              const absl::flat_hash_set<int32_t>& nodes) {
  const Graph& g = training.graph;
  const int32_t forward_end = training.forward_nodes;
  std::vector<int32_t> chosen(nodes.begin(), nodes.end());
  std::sort(chosen.begin(), chosen.end());
  for (int32_t id : chosen) {
    if (id < 0 || id >= forward_end || !Recomputable(g.node(id))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node ", id, id >= 0 && id < g.num_nodes() ? " '" + g.node(id).name + "'" : "",
          " is not a recomputable forward node"));
    }
  }
  auto mirrored = [&](Value v) {
    return nodes.contains(v.node) && IsMirroredOutput(g.node(v.node), v.output);
  };

  // Each twin goes just before its earliest reader: a backward node, or a later twin (whose
  // own place is known first, going down the forward order).
  std::vector<int32_t> place(g.num_nodes(), kUnplaced);
  for (int32_t id = forward_end; id < g.num_nodes(); ++id) {
    for (const Value& v : g.node(id).inputs) {
      if (mirrored(v)) place[v.node] = std::min(place[v.node], id);
    }
  }
  for (auto it = chosen.rbegin(); it != chosen.rend(); ++it) {
    if (place[*it] == kUnplaced) continue;
    for (const Value& v : TwinOf(g.node(*it)).inputs) {
      if (mirrored(v)) place[v.node] = std::min(place[v.node], place[*it]);
    }
  }
  std::map<int32_t, std::vector<int32_t>> twins_at;  // Reader -> twins placed before it, in order.
  for (int32_t id : chosen) {
    if (place[id] != kUnplaced) twins_at[place[id]].push_back(id);
  }

  absl::flat_hash_map<int32_t, std::vector<int32_t>> writers;  // Leaf -> nodes writing it in place.
  for (const Node& node : g.nodes()) {
    if (ir::IsLeaf(node)) continue;
    for (int m : ir::MutatedInputs(node)) writers[node.inputs[m].node].push_back(node.id);
  }

  MirroredGraph out;
  Graph& graph = out.training.graph;
  graph.ShareIdentityWith(g);
  std::vector<int32_t> node_map(g.num_nodes(), -1);
  absl::flat_hash_map<Value, Value> values, twin_values;
  std::vector<std::pair<int32_t, int32_t>> writer_edges;  // (twin, original writer)
  auto add_controls = [&](const Node& node, int32_t new_id) -> absl::Status {
    for (int32_t c : node.control_inputs)
      RETURN_IF_ERROR(graph.AddControlEdge(node_map[c], new_id));
    return absl::OkStatus();
  };
  // Readers of twins copied since the last twin. The next twin waits for them: on another lane (a
  // weight gradient's) nothing else orders them before the backward's later launches, so the
  // memory plan could reuse nothing they read until the end of the step.
  std::vector<int32_t> pending_readers;
  // Readers of twins that the data-gradient chain has not waited for yet. A twin only weight
  // gradients read runs on their lane (src/passes/schedule.h), so its wait orders nothing on the
  // chain's lane: the next backward node that is not a weight gradient waits for them instead.
  std::vector<int32_t> unjoined_readers;
  // The last backward node copied (-1 before the first). The backward pass's first twin waits
  // for it: with nothing ordering it, it could run at any time after its inputs' forward
  // producers, on another lane, so the memory plan could place its outputs over nothing that dies
  // before it. (Later twins wait for the readers of the twins before them; the same wait for every
  // twin without such readers cost ResNet-50 b64 0.4 ms per step on an H200:
  // docs/results/history/2026-11-29_1389a89.md.)
  int32_t last_backward = -1;
  auto emit_twin = [&](const Node& node) -> absl::Status {
    const TwinSpec twin = TwinOf(node);
    std::vector<Value> inputs;
    for (const Value& v : twin.inputs)
      inputs.push_back(mirrored(v) ? twin_values.at(v) : values.at(v));
    const std::string name = absl::StrCat(node.name, ".mirror");
    ASSIGN_OR_RETURN(std::vector<Value> outs, graph.AddOp(*twin.op, name, inputs, node.attrs));
    const int32_t id = graph.num_nodes() - 1;
    for (int o = 0; o < static_cast<int>(outs.size()); ++o)
      twin_values[Value{node.id, o}] = outs[o];
    RETURN_IF_ERROR(add_controls(node, id));
    for (int32_t reader : pending_readers) RETURN_IF_ERROR(graph.AddControlEdge(reader, id));
    if (out.mirrors.empty() && last_backward >= 0) {
      RETURN_IF_ERROR(graph.AddControlEdge(last_backward, id));
    }
    unjoined_readers.insert(unjoined_readers.end(), pending_readers.begin(), pending_readers.end());
    pending_readers.clear();
    for (const Value& v : twin.inputs) {
      auto it = writers.find(v.node);
      if (it == writers.end()) continue;
      for (int32_t writer : it->second) {
        if (writer < node.id) continue;  // The original read the written value too.
        if (writer < place[node.id]) {
          return absl::InvalidArgumentError(
              absl::StrCat("cannot recompute '", node.name, "' before '",
                           g.node(place[node.id]).name, "': '", g.node(writer).name,
                           "' writes its input '", g.node(v.node).name, "' in place before that"));
        }
        writer_edges.emplace_back(id, writer);
      }
    }
    out.mirrors.emplace_back(node.name, name);
    return absl::OkStatus();
  };

  for (const Node& node : g.nodes()) {
    if (auto it = twins_at.find(node.id); it != twins_at.end()) {
      for (int32_t twin : it->second) RETURN_IF_ERROR(emit_twin(g.node(twin)));
    }
    if (ir::IsLeaf(node)) {
      ASSIGN_OR_RETURN(Value v, CopyLeaf(graph, node));
      values[Value{node.id, 0}] = v;
      node_map[node.id] = v.node;
      continue;
    }
    std::vector<Value> inputs;
    bool reads_twin = false;
    for (const Value& v : node.inputs) {
      const bool twin = node.id >= forward_end && mirrored(v);
      inputs.push_back(twin ? twin_values.at(v) : values.at(v));
      reads_twin = reads_twin || twin;
    }
    ASSIGN_OR_RETURN(std::vector<Value> outs, graph.AddOp(*node.op, node.name, inputs, node.attrs));
    node_map[node.id] = graph.num_nodes() - 1;
    if (node.id >= forward_end && !IsWeightGradient(node) &&
        node.op->kind != ir::OpKind::kOptimizer) {
      for (int32_t reader : unjoined_readers)
        RETURN_IF_ERROR(graph.AddControlEdge(reader, node_map[node.id]));
      unjoined_readers.clear();
    }
    if (reads_twin) pending_readers.push_back(node_map[node.id]);
    if (node.id >= forward_end) last_backward = node_map[node.id];
    for (int o = 0; o < static_cast<int>(outs.size()); ++o) values[Value{node.id, o}] = outs[o];
    RETURN_IF_ERROR(add_controls(node, node_map[node.id]));
  }
  for (const auto& [twin, writer] : writer_edges) {
    RETURN_IF_ERROR(graph.AddControlEdge(twin, node_map[writer]));
  }

  autodiff::TrainingGraph& t = out.training;
  t.loss = values.at(training.loss);
  for (int32_t p : training.parameters) t.parameters.push_back(node_map[p]);
  for (const auto& [p, grad] : training.gradients) t.gradients[node_map[p]] = values.at(grad);
  for (int32_t o : training.optimizer_nodes) t.optimizer_nodes.push_back(node_map[o]);
  t.forward_nodes = forward_end;  // Twins all come after the forward nodes.
  return out;
}

}  // namespace reprise::passes
