#include "src/passes/gradient_buckets.h"

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/ir/op_def.h"
#include "src/ops/all_reduce.h"
#include "src/ops/cast.h"
#include "src/passes/rewrite.h"
#include "src/passes/schedule.h"
#include "src/util/checked_math.h"
#include "src/util/status_macros.h"

namespace reprise::passes {

absl::StatusOr<std::vector<GradientBucket>> AssignGradientBuckets(
    const autodiff::TrainingGraph& backward, int64_t bucket_bytes) {
  if (bucket_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataParallel::bucket_bytes must be at least 1, got ", bucket_bytes));
  }
  const Graph& g = backward.graph;
  ASSIGN_OR_RETURN(const std::vector<passes::ScheduledLaunch> order,
                   passes::Schedule(g, {.lanes = 1}));
  std::vector<int> position(g.num_nodes(), -1);  // Leaves: ready from the start.
  for (int i = 0; i < static_cast<int>(order.size()); ++i) position[order[i].node] = i;

  absl::flat_hash_map<Value, int> readers;
  for (const Node& node : g.nodes()) {
    for (const Value& v : node.inputs) ++readers[v];
  }
  const absl::flat_hash_set<int32_t> optimizer(backward.optimizer_nodes.begin(),
                                               backward.optimizer_nodes.end());
  auto read_only_by_optimizer = [&](Value v) {
    for (const Node& node : g.nodes()) {
      if (optimizer.contains(node.id)) continue;
      for (const Value& in : node.inputs) {
        if (in == v) return false;
      }
    }
    return true;
  };
  // Each distinct gradient value with its parameters, in parameter order, and what travels.
  struct Gradient {
    Value value;
    std::vector<std::string> parameters;
    Value reduced;       // `value`, or the 16-bit value a cast widens into it.
    int32_t widen = -1;  // That cast.
  };
  std::vector<Gradient> gradients;
  absl::flat_hash_map<Value, int> index;
  for (int32_t p : backward.parameters) {
    const Value v = backward.gradients.at(p);
    auto [it, added] = index.try_emplace(v, static_cast<int>(gradients.size()));
    if (added) {
      Gradient gradient{v, {}, v, -1};
      const Node& producer = g.node(v.node);
      if (producer.op == &ops::CastOp() && IsLowPrecision(g.spec(producer.inputs[0]).dtype) &&
          !ir::IsLeaf(g.node(producer.inputs[0].node)) && readers[producer.inputs[0]] == 1 &&
          producer.control_inputs.empty() && read_only_by_optimizer(v)) {
        gradient.reduced = producer.inputs[0];
        gradient.widen = producer.id;
      }
      gradients.push_back(std::move(gradient));
    }
    gradients[it->second].parameters.push_back(g.node(p).name);
  }
  std::stable_sort(gradients.begin(), gradients.end(), [&](const Gradient& a, const Gradient& b) {
    const int pa = position[a.reduced.node], pb = position[b.reduced.node];
    return pa != pb ? pa < pb : a.reduced.output < b.reduced.output;
  });

  std::vector<GradientBucket> buckets;
  std::map<DType, GradientBucket> open;  // The bucket each type is filling.
  for (const Gradient& gradient : gradients) {
    const TensorSpec& spec = g.spec(gradient.reduced);
    GradientBucket& bucket = open[spec.dtype];
    bucket.dtype = spec.dtype;
    bucket.gradients.push_back(gradient.reduced);
    bucket.widen.push_back(gradient.widen);
    bucket.specs.push_back(spec);
    for (const std::string& name : gradient.parameters) {
      bucket.parameters.push_back(name);
    }
    bucket.bytes = SaturatingAdd(bucket.bytes, spec.bytes());
    bucket.ready = position[gradient.reduced.node];
    if (bucket.bytes >= bucket_bytes) {
      buckets.push_back(std::move(bucket));
      open.erase(spec.dtype);
    }
  }
  for (auto& [dtype, bucket] : open) buckets.push_back(std::move(bucket));
  std::stable_sort(
      buckets.begin(), buckets.end(),
      [](const GradientBucket& a, const GradientBucket& b) { return a.ready < b.ready; });
  return buckets;
}

absl::StatusOr<autodiff::TrainingGraph> AverageGradients(const autodiff::TrainingGraph& t,
                                                         absl::Span<const GradientBucket> buckets) {
  absl::flat_hash_set<Value> gradients;
  for (const auto& [param, gradient] : t.gradients) gradients.insert(gradient);
  // Each bucket value's gradient: itself, or its widening cast's output.
  auto gradient_of = [&](const GradientBucket& b, size_t i) {
    return i < b.widen.size() && b.widen[i] >= 0 ? Value{b.widen[i], 0} : b.gradients[i];
  };
  absl::flat_hash_set<Value> bucketed;
  absl::flat_hash_set<int32_t> moved;  // Widening casts, which move after the all-reduces.
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (size_t i = 0; i < buckets[b].gradients.size(); ++i) {
      const Value v = gradient_of(buckets[b], i);
      if (!gradients.contains(v) || !bucketed.insert(v).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("bucket ", b, " holds value ", v.node, ":", v.output,
                         ", which is no parameter's gradient or is in an earlier bucket"));
      }
      if (v != buckets[b].gradients[i]) moved.insert(v.node);
    }
  }
  for (const auto& [param, gradient] : t.gradients) {
    if (!bucketed.contains(gradient)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the gradient of '", t.graph.node(param).name, "' is in no bucket"));
    }
  }
  const absl::flat_hash_set<int32_t> optimizer(t.optimizer_nodes.begin(), t.optimizer_nodes.end());
  int32_t first_optimizer = t.graph.num_nodes();
  for (int32_t o : t.optimizer_nodes) first_optimizer = std::min(first_optimizer, o);

  autodiff::TrainingGraph out = t;  // Then every node-bearing field is rebuilt.
  out.graph = Graph();
  out.graph.ShareIdentityWith(t.graph);
  out.parameters.clear();
  out.gradients.clear();
  out.optimizer_nodes.clear();
  Graph& g = out.graph;
  std::vector<int32_t> node_of(t.graph.num_nodes(), -1);  // Old node -> new node.
  absl::flat_hash_map<Value, Value> averaged;             // Old gradient -> new average.
  auto add_all_reduces = [&]() -> absl::Status {
    for (size_t b = 0; b < buckets.size(); ++b) {
      std::vector<Value> inputs;
      for (const Value& v : buckets[b].gradients) inputs.push_back({node_of[v.node], v.output});
      ASSIGN_OR_RETURN(
          std::vector<Value> outs,
          g.AddOp(ops::AllReduceOp(), absl::StrCat("grad_allreduce.", b), std::move(inputs)));
      for (size_t i = 0; i < outs.size(); ++i) {
        const Value gradient = gradient_of(buckets[b], i);
        if (gradient == buckets[b].gradients[i]) {
          averaged[gradient] = outs[i];
          // The checks and the norm may read a widened gradient's 16-bit value
          // (autodiff::GradientAsComputed): they read the average too, in float32.
          const Node& made = t.graph.node(gradient.node);
          if (made.op == &ops::CastOp() && IsLowPrecision(t.graph.spec(made.inputs[0]).dtype)) {
            averaged.try_emplace(made.inputs[0], outs[i]);
          }
          continue;
        }
        const Node& cast = t.graph.node(gradient.node);
        ASSIGN_OR_RETURN(averaged[gradient], g.AddOp1(*cast.op, cast.name, {outs[i]}, cast.attrs));
        node_of[cast.id] = averaged[gradient].node;
      }
    }
    return absl::OkStatus();
  };
  for (const Node& node : t.graph.nodes()) {
    if (node.id == first_optimizer) RETURN_IF_ERROR(add_all_reduces());
    if (moved.contains(node.id)) continue;
    if (ir::IsLeaf(node)) {
      ASSIGN_OR_RETURN(const Value v, passes::CopyLeaf(g, node));
      node_of[node.id] = v.node;
      continue;
    }
    std::vector<Value> inputs;
    for (const Value& v : node.inputs) {
      auto it = averaged.find(v);
      inputs.push_back(optimizer.contains(node.id) && it != averaged.end()
                           ? it->second
                           : Value{node_of[v.node], v.output});
    }
    ASSIGN_OR_RETURN(std::vector<Value> outs,
                     g.AddOp(*node.op, node.name, std::move(inputs), node.attrs));
    node_of[node.id] = g.num_nodes() - 1;
    for (int32_t c : node.control_inputs) {
      RETURN_IF_ERROR(g.AddControlEdge(node_of[c], node_of[node.id]));
    }
  }
  if (averaged.empty() && !buckets.empty()) RETURN_IF_ERROR(add_all_reduces());  // No optimizer.

  out.loss = {node_of[t.loss.node], t.loss.output};
  for (int32_t p : t.parameters) {
    out.parameters.push_back(node_of[p]);
    out.gradients[node_of[p]] = averaged.at(t.gradients.at(p));
  }
  for (int32_t o : t.optimizer_nodes) out.optimizer_nodes.push_back(node_of[o]);
  return out;
}

std::string BucketsToString(absl::Span<const GradientBucket> buckets) {
  std::string out;
  for (size_t b = 0; b < buckets.size(); ++b) {
    std::vector<std::string> specs;
    for (const TensorSpec& spec : buckets[b].specs) specs.push_back(spec.ToString());
    absl::StrAppend(&out, "bucket ", b, ": ", DTypeName(buckets[b].dtype), " ", buckets[b].bytes,
                    " bytes after launch ", buckets[b].ready, ": ",
                    absl::StrJoin(buckets[b].parameters, ", "), " as ", absl::StrJoin(specs, ", "),
                    "\n");
  }
  return out;
}

}  // namespace reprise::passes
