// JSON dumps of the small MLP read back with an independent parser: every node with its inputs,
// shapes, dtypes and attributes, the parameter count, and the plan's launches, fused groups and
// memory plan, all checked against the graph and plan they came from.
#include "src/passes/dump_json.h"

#include <string>
#include <variant>

#include "gtest/gtest.h"
#include "src/passes/plan_dump.h"
#include "tests/cpu/dump_test_util.h"
#include "tests/cpu/json_reader.h"

namespace reprise::passes {
namespace {

using ::reprise::testing::JsonValue;
using ::reprise::testing::MlpStages;
using ::reprise::testing::ParseJson;
using ::reprise::testing::SmallMlpStages;

JsonValue Parse(const std::string& text) {
  auto parsed = ParseJson(text);
  EXPECT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  return parsed.ok() ? *std::move(parsed) : JsonValue();
}

const JsonValue* NodeNamed(const JsonValue& dump, absl::string_view name) {
  for (const JsonValue& node : dump["nodes"].array) {
    if (node["name"].string == name) return &node;
  }
  return nullptr;
}

// Every node of `graph` is in `dump`, in id order, with its op, inputs, outputs and attributes.
void ExpectNodesMatch(const JsonValue& dump, const Graph& graph) {
  EXPECT_EQ(dump["num_nodes"].integer, graph.num_nodes());
  ASSERT_EQ(dump["nodes"].array.size(), static_cast<size_t>(graph.num_nodes()));
  for (const Node& n : graph.nodes()) {
    SCOPED_TRACE(n.name);
    const JsonValue& j = dump["nodes"].array[n.id];
    EXPECT_EQ(j["id"].integer, n.id);
    EXPECT_EQ(j["name"].string, n.name);
    EXPECT_EQ(j["op"].string, n.op_name());
    ASSERT_EQ(j["inputs"].array.size(), n.inputs.size());
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      EXPECT_EQ(j["inputs"].array[i]["node"].integer, n.inputs[i].node);
      EXPECT_EQ(j["inputs"].array[i]["output"].integer, n.inputs[i].output);
      EXPECT_EQ(j["inputs"].array[i]["name"].string, graph.node(n.inputs[i].node).name);
    }
    ASSERT_EQ(j["control_inputs"].array.size(), n.control_inputs.size());
    for (size_t i = 0; i < n.control_inputs.size(); ++i) {
      EXPECT_EQ(j["control_inputs"].array[i].integer, n.control_inputs[i]);
    }
    ASSERT_EQ(j["outputs"].array.size(), n.outputs.size());
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const JsonValue& out = j["outputs"].array[o];
      EXPECT_EQ(out["dtype"].string, DTypeName(n.outputs[o].dtype));
      ASSERT_EQ(out["shape"].array.size(), static_cast<size_t>(n.outputs[o].shape.rank()));
      for (int d = 0; d < n.outputs[o].shape.rank(); ++d) {
        EXPECT_EQ(out["shape"].array[d].integer, n.outputs[o].shape.dim(d));
      }
    }
    EXPECT_EQ(j["attrs"].object.size(), n.attrs.size());
    const std::vector<std::string> fused = FusedNodeNames(n);
    ASSERT_EQ(j["fused_nodes"].array.size(), fused.size());
    for (size_t i = 0; i < fused.size(); ++i) EXPECT_EQ(j["fused_nodes"].array[i].string, fused[i]);
  }
}

TEST(DumpJsonTest, ForwardDumpHasEveryNodeShapeAndTheParameterCount) {
  const MlpStages s = SmallMlpStages();
  const JsonValue dump = Parse(ForwardToJson(s.mlp.graph, s.mlp.loss));
  EXPECT_EQ(dump["schema"].string, kDumpSchema);
  EXPECT_EQ(dump["stage"].string, "ir");
  ExpectNodesMatch(dump, s.mlp.graph);
  // 8x8+8, 8x8+8 and 10x8+10 weights and biases.
  EXPECT_EQ(dump["parameter_count"].integer, 234);
  EXPECT_EQ(dump["parameter_count"].integer, s.mlp.graph.NumParameterElements());
  EXPECT_EQ(dump["loss"]["name"].string, "loss");

  const JsonValue* matmul = NodeNamed(dump, "fc0.matmul");
  ASSERT_NE(matmul, nullptr);
  EXPECT_EQ((*matmul)["outputs"].array[0]["dtype"].string, "f32");
  ASSERT_EQ((*matmul)["outputs"].array[0]["shape"].array.size(), 2u);
  EXPECT_EQ((*matmul)["outputs"].array[0]["shape"].array[0].integer, 32);
  EXPECT_EQ((*matmul)["outputs"].array[0]["shape"].array[1].integer, 8);
  EXPECT_TRUE((*matmul)["attrs"]["transpose_b"].boolean);
  const JsonValue* labels = NodeNamed(dump, "labels");
  ASSERT_NE(labels, nullptr);
  EXPECT_EQ((*labels)["outputs"].array[0]["dtype"].string, "i32");
  EXPECT_EQ((*labels)["init"]["kind"].string, "zeros");
}

TEST(DumpJsonTest, TrainingDumpListsParametersWithTheirGradients) {
  const MlpStages s = SmallMlpStages();
  const JsonValue dump = Parse(TrainingToJson(s.training));
  EXPECT_EQ(dump["stage"].string, "training");
  ExpectNodesMatch(dump, s.training.graph);
  EXPECT_EQ(dump["parameter_count"].integer, 234);
  ASSERT_EQ(dump["parameters"].array.size(), s.training.parameters.size());
  for (size_t i = 0; i < s.training.parameters.size(); ++i) {
    const int32_t id = s.training.parameters[i];
    const JsonValue& p = dump["parameters"].array[i];
    EXPECT_EQ(p["node"].integer, id);
    EXPECT_EQ(p["gradient"]["node"].integer, s.training.gradients.at(id).node);
  }
  EXPECT_EQ(dump["optimizer_nodes"].array.size(), s.training.optimizer_nodes.size());
}

TEST(DumpJsonTest, PlanDumpHasLaunchesFusedGroupsAndTheMemoryPlan) {
  const MlpStages s = SmallMlpStages(/*fuse=*/true);
  const Plan& plan = s.plan;
  const JsonValue dump = Parse(PlanToJson(plan));
  EXPECT_EQ(dump["stage"].string, "plan");
  ExpectNodesMatch(dump, plan.graph());
  EXPECT_EQ(dump["parameter_count"].integer, 234);

  const JsonValue& p = dump["plan"];
  ASSERT_EQ(p["launches"].array.size(), plan.launches.size());
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    const JsonValue& launch = p["launches"].array[i];
    EXPECT_EQ(launch["index"].integer, static_cast<int64_t>(i));
    EXPECT_EQ(launch["node"].integer, plan.launches[i].node);
    EXPECT_EQ(launch["lane"].integer, plan.launches[i].lane);
    EXPECT_EQ(launch["waits"].array.size(), plan.launches[i].waits.size());
    EXPECT_EQ(launch["fused_nodes"].array.size(),
              FusedNodeNames(plan.graph().node(plan.launches[i].node)).size());
  }

  ASSERT_FALSE(plan.fused_groups.empty());
  ASSERT_EQ(p["fused_groups"].array.size(), plan.fused_groups.size());
  for (size_t i = 0; i < plan.fused_groups.size(); ++i) {
    EXPECT_EQ(p["fused_groups"].array[i]["node"].string, plan.fused_groups[i].first);
    ASSERT_EQ(p["fused_groups"].array[i]["fused_nodes"].array.size(),
              plan.fused_groups[i].second.size());
  }
  const JsonValue* first_layer = NodeNamed(dump, "fc0.matmul+bias+relu");
  ASSERT_NE(first_layer, nullptr);
  ASSERT_EQ((*first_layer)["fused_nodes"].array.size(), 3u);
  EXPECT_EQ((*first_layer)["fused_nodes"].array[0].string, "fc0.matmul");

  EXPECT_EQ(p["memory"]["arena_bytes"].integer, plan.memory.arena_bytes);
  EXPECT_EQ(p["memory"]["transient_peak"].integer, plan.memory.transient_peak);
  EXPECT_EQ(p["input_copy"]["bytes"].integer, plan.memory.input_bytes);
  ASSERT_EQ(p["buffers"].array.size(), plan.memory.buffers.size());
  for (size_t i = 0; i < plan.memory.buffers.size(); ++i) {
    const Buffer& b = plan.memory.buffers[i];
    const JsonValue& j = p["buffers"].array[i];
    EXPECT_EQ(j["value"]["node"].integer, b.value.node);
    EXPECT_EQ(j["value"]["output"].integer, b.value.output);
    EXPECT_EQ(j["class"].string, BufferClassName(b.cls));
    EXPECT_EQ(j["offset"].integer, b.offset);
    EXPECT_EQ(j["bytes"].integer, b.bytes);
    EXPECT_EQ(j["first"].integer, b.first);
    EXPECT_EQ(j["last"].integer, b.last);
  }
  ASSERT_EQ(p["kept"].array.size(), plan.kept.size());
  EXPECT_EQ(p["kept"].array[0]["node"].integer, plan.training.loss.node);
}

TEST(DumpJsonTest, UnfusedPlanHasNoFusedGroups) {
  const MlpStages s = SmallMlpStages(/*fuse=*/false);
  const JsonValue dump = Parse(PlanToJson(s.plan));
  ExpectNodesMatch(dump, s.plan.graph());
  EXPECT_TRUE(dump["plan"]["fused_groups"].array.empty());
  for (const JsonValue& launch : dump["plan"]["launches"].array) {
    EXPECT_TRUE(launch["fused_nodes"].array.empty());
  }
}

}  // namespace
}  // namespace reprise::passes
