#include "src/passes/channels_last.h"

#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/ir/op_def.h"
#include "src/ops/batch_norm.h"
#include "src/ops/conv.h"
#include "src/ops/pooling.h"
#include "src/ops/transpose.h"
#include "src/util/status_macros.h"

namespace reprise {

absl::string_view ChannelsLastName(ChannelsLast mode) {
  switch (mode) {
    case ChannelsLast::kAuto:
      return "auto";
    case ChannelsLast::kOn:
      return "on";
    case ChannelsLast::kOff:
      return "off";
  }
  return "?";
}

absl::StatusOr<ChannelsLast> ParseChannelsLast(absl::string_view name) {
  for (ChannelsLast mode : {ChannelsLast::kAuto, ChannelsLast::kOn, ChannelsLast::kOff}) {
    if (name == ChannelsLastName(mode)) return mode;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown channels-last mode '", name, "': expected auto, on or off"));
}

}  // namespace reprise

namespace reprise::passes {

absl::StatusOr<Value> LayoutValueMap::Map(Value old) const {
  if (auto it = values.find(old); it != values.end()) return it->second;
  if (nhwc.contains(old)) {
    return absl::NotFoundError(absl::StrCat(
        "output ", old.output, " of node ", old.node,
        " is computed channels-last (NHWC) inside the step and has no NCHW copy; name it in "
        "TrainOptions::fetch to read it"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("output ", old.output, " of node ", old.node, " is not a value of the graph"));
}

namespace {

// The image ops with an NHWC form: every 4-D operand of theirs is an activation or a weight whose
// NHWC form is the NCHW one permuted by 0,2,3,1.
bool IsImageOp(const Node& node) {
  for (const ir::OpDef* op :
       {&ops::Conv2dOp(), &ops::ChannelBiasAddOp(), &ops::BatchNormTrainOp(),
        &ops::BatchNormInferOp(), &ops::MaxPool2dOp(), &ops::GlobalAvgPoolOp()}) {
    if (node.op == op) return true;
  }
  return false;
}

bool IsNchwImageOp(const Node& node) {
  if (!IsImageOp(node)) return false;
  absl::StatusOr<Layout> layout = ops::LayoutAttr(node.attrs);
  return layout.ok() && *layout == Layout::kNCHW;
}

// Pointwise ops that read every operand at the output's own index compute the same thing in any
// layout. Random ops (dropout) are excluded: their mask follows the flat index.
bool IsElementwise4d(const Graph& graph, const Node& node) {
  const ir::PointwiseForm& form = node.op->pointwise;
  if (node.op->kind != ir::OpKind::kPointwise || form.expression.empty() ||
      form.operands.size() != node.inputs.size() || node.outputs.size() != 1 ||
      node.outputs[0].shape.rank() != 4) {
    return false;
  }
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (form.operands[i] != ir::Operand::kElement || graph.spec(node.inputs[i]).shape.rank() != 4) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<Value> CopyLeaf(Graph& g, const Node& node) {
  const TensorSpec& spec = node.outputs[0];
  if (node.op == &ir::InputOp()) return g.AddInput(node.name, spec, node.init);
  if (node.op == &ir::ParameterOp()) return g.AddParameter(node.name, spec, node.init);
  if (node.op == &ir::StateOp()) return g.AddState(node.name, spec, node.init);
  return g.AddConstant(node.name, spec, node.init);
}

// Copies the graph node by node in id order, so the new graph stays topologically ordered; the
// transposes are made when first needed, just before their first reader.
class Converter {
 public:
  explicit Converter(const Graph& old) : old_(old) {
    out_.graph.ShareIdentityWith(old);
    for (const Node& node : old.nodes()) names_.insert(node.name);
  }

  absl::Status CopyNodes() {
    for (const Node& node : old_.nodes()) {
      if (ir::IsLeaf(node)) {
        ASSIGN_OR_RETURN(const Value v, CopyLeaf(out_.graph, node));
        out_.map.values[Value{node.id, 0}] = v;
        node_ids_[node.id] = v.node;
        continue;
      }
      RETURN_IF_ERROR(CopyOp(node));
    }
    return absl::OkStatus();
  }

  // `old` in its own layout, transposed back to NCHW if only its NHWC form exists so far.
  absl::StatusOr<Value> Same(Value old) {
    if (auto it = out_.map.values.find(old); it != out_.map.values.end()) return it->second;
    auto it = out_.map.nhwc.find(old);
    if (it == out_.map.nhwc.end()) {
      return absl::InternalError(absl::StrCat("channels-last: output ", old.output, " of '",
                                              old_.node(old.node).name, "' is read before made"));
    }
    ASSIGN_OR_RETURN(const Value v, AddTranspose(it->second, old, ".to_nchw", ops::kNhwcToNchw));
    out_.map.values[old] = v;
    return v;
  }

  ChannelsLastGraph Finish() && { return std::move(out_); }

 private:
  // `old` (4-D, NCHW) in NHWC, transposed the first time it is asked for.
  absl::StatusOr<Value> Nhwc(Value old) {
    if (auto it = out_.map.nhwc.find(old); it != out_.map.nhwc.end()) return it->second;
    ASSIGN_OR_RETURN(const Value same, Same(old));
    ASSIGN_OR_RETURN(const Value v, AddTranspose(same, old, ".to_nhwc", ops::kNchwToNhwc));
    out_.map.nhwc[old] = v;
    return v;
  }

  absl::StatusOr<Value> AddTranspose(Value from, Value old, absl::string_view suffix,
                                     absl::string_view perm) {
    std::string base = old_.node(old.node).name;
    if (old.output != 0) absl::StrAppend(&base, ".", old.output);
    absl::StrAppend(&base, suffix);
    // A user's node may already carry the name; the pass's nodes give way.
    std::string name = base;
    for (int i = 2; names_.contains(name); ++i) name = absl::StrCat(base, "_", i);
    names_.insert(name);
    ++out_.transposes;
    return out_.graph.AddOp1(ops::TransposeOp(), name, {from}, {{"perm", std::string(perm)}});
  }

  bool Converts(const Node& node) const {
    if (IsNchwImageOp(node)) return true;
    if (!IsElementwise4d(old_, node)) return false;
    // Only inside the channels-last region: an operand already in NHWC.
    for (const Value& v : node.inputs) {
      if (out_.map.nhwc.contains(v)) return true;
    }
    return false;
  }

  absl::Status CopyOp(const Node& node) {
    const bool convert = Converts(node);
    std::vector<Value> inputs;
    for (const Value& v : node.inputs) {
      const bool to_nhwc = convert && old_.spec(v).shape.rank() == 4;
      ASSIGN_OR_RETURN(const Value mapped, to_nhwc ? Nhwc(v) : Same(v));
      inputs.push_back(mapped);
    }
    Attrs attrs = node.attrs;
    if (convert && IsImageOp(node)) attrs["layout"] = std::string(LayoutName(Layout::kNHWC));
    ASSIGN_OR_RETURN(const std::vector<Value> outputs,
                     out_.graph.AddOp(*node.op, node.name, std::move(inputs), std::move(attrs)));
    const int32_t id = out_.graph.num_nodes() - 1;
    node_ids_[node.id] = id;
    for (int32_t before : node.control_inputs) {
      RETURN_IF_ERROR(out_.graph.AddControlEdge(node_ids_.at(before), id));
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Value old{node.id, static_cast<int32_t>(i)};
      if (convert && node.outputs[i].shape.rank() == 4) {
        out_.map.nhwc[old] = outputs[i];
      } else {
        out_.map.values[old] = outputs[i];
      }
    }
    out_.converted_ops += convert ? 1 : 0;
    return absl::OkStatus();
  }

  const Graph& old_;
  ChannelsLastGraph out_;
  absl::flat_hash_set<std::string> names_;          // Old and new node names.
  absl::flat_hash_map<int32_t, int32_t> node_ids_;  // Old node id -> new node id.
};

absl::Status CheckValues(const Graph& graph, Value loss, absl::Span<const Value> keep) {
  RETURN_IF_ERROR(graph.SpecOf(loss).status());
  for (const Value& v : keep) RETURN_IF_ERROR(graph.SpecOf(v).status());
  return absl::OkStatus();
}

ChannelsLastGraph Unchanged(const Graph& graph, Value loss, absl::Span<const Value> keep) {
  ChannelsLastGraph out{.graph = graph, .loss = loss, .kept = {keep.begin(), keep.end()}};
  for (const Node& node : graph.nodes()) {
    for (int32_t i = 0; i < static_cast<int32_t>(node.outputs.size()); ++i) {
      out.map.values[Value{node.id, i}] = Value{node.id, i};
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<ChannelsLastGraph> ConvertToChannelsLast(const Graph& graph, Value loss,
                                                        absl::Span<const Value> keep) {
  RETURN_IF_ERROR(CheckValues(graph, loss, keep));
  if (!HasNchwImageOps(graph)) return Unchanged(graph, loss, keep);
  Converter converter(graph);
  RETURN_IF_ERROR(converter.CopyNodes());
  // The loss and kept values leave the region: they are read in their own layout.
  ASSIGN_OR_RETURN(const Value new_loss, converter.Same(loss));
  std::vector<Value> kept;
  for (const Value& v : keep) {
    ASSIGN_OR_RETURN(const Value mapped, converter.Same(v));
    kept.push_back(mapped);
  }
  ChannelsLastGraph out = std::move(converter).Finish();
  out.loss = new_loss;
  out.kept = std::move(kept);
  return out;
}

bool HasNchwImageOps(const Graph& graph) {
  for (const Node& node : graph.nodes()) {
    if (IsNchwImageOp(node)) return true;
  }
  return false;
}

bool WantsChannelsLast(const Graph& graph, ChannelsLast mode) {
  switch (mode) {
    case ChannelsLast::kOff:
      return false;
    case ChannelsLast::kOn:
      return HasNchwImageOps(graph);
    case ChannelsLast::kAuto:
      for (const Node& node : graph.nodes()) {
        if (node.op == &ops::Conv2dOp() && IsNchwImageOp(node) &&
            graph.spec(node.inputs[0]).dtype == DType::kFloat32) {
          return true;
        }
      }
      return false;
  }
  return false;
}

absl::StatusOr<ChannelsLastGraph> ApplyChannelsLast(const Graph& graph, Value loss,
                                                    absl::Span<const Value> keep,
                                                    ChannelsLast mode) {
  if (WantsChannelsLast(graph, mode)) return ConvertToChannelsLast(graph, loss, keep);
  RETURN_IF_ERROR(CheckValues(graph, loss, keep));
  return Unchanged(graph, loss, keep);
}

}  // namespace reprise::passes
