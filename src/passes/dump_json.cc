#include "src/passes/dump_json.h"

#include <variant>

#include "src/ir/op_def.h"
#include "src/passes/plan_dump.h"

namespace reprise::passes {
namespace {

using util::JsonWriter;

void WriteAttr(const AttrValue& value, JsonWriter& w) {
  std::visit(
      [&w](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          w.Bool(x);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          w.Int(x);
        } else if constexpr (std::is_same_v<T, double>) {
          w.Double(x);
        } else {
          w.String(x);
        }
      },
      value);
}

void WriteInit(const Initializer& init, JsonWriter& w) {
  w.BeginObject(JsonWriter::kInline);
  switch (init.kind) {
    case Initializer::Kind::kZeros:
      w.Key("kind").String("zeros");
      break;
    case Initializer::Kind::kConstant:
      w.Key("kind").String("constant").Key("value").Double(init.value);
      break;
    case Initializer::Kind::kUniform:
      w.Key("kind").String("uniform").Key("low").Double(init.low).Key("high").Double(init.high);
      break;
  }
  w.EndObject();
}

void WriteStrings(const std::vector<std::string>& strings, JsonWriter& w) {
  w.BeginArray(JsonWriter::kInline);
  for (const std::string& s : strings) w.String(s);
  w.EndArray();
}

void WriteNode(const Graph& graph, const Node& n, JsonWriter& w) {
  w.BeginObject();
  w.Key("id").Int(n.id).Key("name").String(n.name).Key("op").String(n.op_name());
  w.Key("inputs").BeginArray(JsonWriter::kInline);
  for (const Value& v : n.inputs) WriteValue(graph, v, w);
  w.EndArray();
  w.Key("control_inputs").BeginArray(JsonWriter::kInline);
  for (int32_t id : n.control_inputs) w.Int(id);
  w.EndArray();
  w.Key("outputs").BeginArray(JsonWriter::kInline);
  for (const TensorSpec& spec : n.outputs) {
    w.BeginObject().Key("dtype").String(DTypeName(spec.dtype)).Key("shape").BeginArray();
    for (int64_t d : spec.shape.dims()) w.Int(d);
    w.EndArray().EndObject();
  }
  w.EndArray();
  w.Key("attrs").BeginObject(JsonWriter::kInline);
  for (const auto& [key, value] : n.attrs) {
    w.Key(key);
    WriteAttr(value, w);
  }
  w.EndObject();
  w.Key("fused_nodes");
  WriteStrings(FusedNodeNames(n), w);
  if (ir::IsLeaf(n)) {
    w.Key("init");
    WriteInit(n.init, w);
  }
  w.EndObject();
}

constexpr BufferClass kClasses[] = {BufferClass::kParameter,     BufferClass::kOptimizerState,
                                    BufferClass::kParameterCopy, BufferClass::kConstant,
                                    BufferClass::kFetched,       BufferClass::kInput,
                                    BufferClass::kActivation};

void WriteMemory(const Plan& plan, JsonWriter& w) {
  const MemoryPlan& m = plan.memory;
  w.Key("input_copy").BeginObject(JsonWriter::kInline);
  w.Key("lane").Int(0).Key("offset").Int(m.input_offset).Key("bytes").Int(m.input_bytes);
  w.EndObject();
  w.Key("memory").BeginObject();
  w.Key("arena_bytes").Int(m.arena_bytes);
  w.Key("input_offset").Int(m.input_offset).Key("input_bytes").Int(m.input_bytes);
  w.Key("transient_offset").Int(m.transient_offset).Key("transient_peak").Int(m.transient_peak);
  w.Key("bytes_by_class").BeginObject(JsonWriter::kInline);
  for (BufferClass c : kClasses) {
    auto it = m.bytes_by_class.find(c);
    w.Key(BufferClassName(c)).Int(it == m.bytes_by_class.end() ? 0 : it->second);
  }
  w.EndObject();
  w.EndObject();
  w.Key("buffers").BeginArray();
  for (const Buffer& b : m.buffers) {
    w.BeginObject(JsonWriter::kInline).Key("value");
    WriteValue(plan.graph(), b.value, w);
    w.Key("class").String(BufferClassName(b.cls)).Key("offset").Int(b.offset);
    w.Key("bytes").Int(b.bytes).Key("first").Int(b.first).Key("last").Int(b.last);
    w.EndObject();
  }
  w.EndArray();
}

}  // namespace

void WriteValue(const Graph& graph, Value v, JsonWriter& w) {
  w.BeginObject(JsonWriter::kInline);
  w.Key("node").Int(v.node).Key("output").Int(v.output).Key("name").String(graph.node(v.node).name);
  w.EndObject();
}

void WriteGraphMembers(const Graph& graph, Value loss, absl::string_view stage, JsonWriter& w) {
  w.Key("schema").String(kDumpSchema);
  w.Key("stage").String(stage);
  w.Key("parameter_count").Int(graph.NumParameterElements());
  w.Key("num_nodes").Int(graph.num_nodes());
  if (loss.valid()) {
    w.Key("loss");
    WriteValue(graph, loss, w);
  }
  w.Key("nodes").BeginArray();
  for (const Node& n : graph.nodes()) WriteNode(graph, n, w);
  w.EndArray();
}

void WritePlanMembers(const Plan& plan, absl::string_view stage, JsonWriter& w) {
  const Graph& g = plan.graph();
  WriteGraphMembers(g, plan.training.loss, stage, w);
  w.Key("plan").BeginObject();
  w.Key("launches").BeginArray();
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    const ScheduledLaunch& launch = plan.launches[i];
    const Node& n = g.node(launch.node);
    w.BeginObject(JsonWriter::kInline);
    w.Key("index").Int(static_cast<int64_t>(i)).Key("node").Int(n.id).Key("name").String(n.name);
    w.Key("op").String(n.op_name()).Key("lane").Int(launch.lane);
    w.Key("waits").BeginArray();
    for (int wait : launch.waits) w.Int(wait);
    w.EndArray();
    w.Key("fused_nodes");
    WriteStrings(FusedNodeNames(n), w);
    w.EndObject();
  }
  w.EndArray();
  WriteMemory(plan, w);
  w.Key("fused_groups").BeginArray();
  for (const auto& [node, members] : plan.fused_groups) {
    w.BeginObject(JsonWriter::kInline).Key("node").String(node).Key("fused_nodes");
    WriteStrings(members, w);
    w.EndObject();
  }
  w.EndArray();
  w.Key("kept").BeginArray(JsonWriter::kInline);
  for (const Value& v : plan.kept) WriteValue(g, v, w);
  w.EndArray();
  w.Key("mirror").BeginObject();
  w.Key("activation_peak_unmirrored").Int(plan.activation_peak_unmirrored);
  w.Key("floor").Int(plan.mirror_floor);
  w.Key("evaluations").Int(plan.mirror_evaluations);
  w.Key("mirrored").BeginArray();
  for (const auto& [original, twin] : plan.mirrored) {
    w.BeginObject(JsonWriter::kInline).Key("node").String(original).Key("mirror").String(twin);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  w.EndObject();
}

std::string ForwardToJson(const Graph& graph, Value loss) {
  JsonWriter w;
  w.BeginObject();
  WriteGraphMembers(graph, loss, "ir", w);
  w.EndObject();
  return std::move(w).str();
}

std::string TrainingToJson(const autodiff::TrainingGraph& training) {
  const Graph& g = training.graph;
  JsonWriter w;
  w.BeginObject();
  WriteGraphMembers(g, training.loss, "training", w);
  w.Key("parameters").BeginArray();
  for (int32_t id : training.parameters) {
    w.BeginObject(JsonWriter::kInline).Key("node").Int(id).Key("name").String(g.node(id).name);
    w.Key("elements").Int(g.node(id).outputs[0].NumElements());
    auto grad = training.gradients.find(id);
    if (grad != training.gradients.end()) {
      w.Key("gradient");
      WriteValue(g, grad->second, w);
    }
    w.EndObject();
  }
  w.EndArray();
  w.Key("optimizer_nodes").BeginArray(JsonWriter::kInline);
  for (int32_t id : training.optimizer_nodes) w.Int(id);
  w.EndArray();
  w.EndObject();
  return std::move(w).str();
}

std::string PlanToJson(const Plan& plan) {
  JsonWriter w;
  w.BeginObject();
  WritePlanMembers(plan, "plan", w);
  w.EndObject();
  return std::move(w).str();
}

}  // namespace reprise::passes
