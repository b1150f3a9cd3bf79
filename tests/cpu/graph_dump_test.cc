// Formatting a captured CUDA graph's dump, on a hand-made dump so that no GPU is needed: text
// lines, the JSON's "cuda_graph" member on top of the plan's dump, and DOT that Graphviz accepts.
#include "capture/graph_dump.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/util/graphviz.h"
#include "tests/cpu/dump_test_util.h"
#include "tests/cpu/json_reader.h"

namespace reprise::capture {
namespace {

using ::reprise::testing::JsonValue;
using ::reprise::testing::SmallMlpStages;
using ::testing::HasSubstr;

// copy_inputs, a GEMM that added a memset and a kernel, and an NVRTC loss kernel.
CudaGraphDump SmallDump() {
  CudaGraphDump d;
  d.launches = {{"copy_inputs", 0, true, {}},
                {"fc0.matmul+bias+relu", 0, false, {}},
                {"loss+grad", 0, false, {"reprise_softmax_xent_with_grad"}}};
  d.nodes = {{{"memcpy", "", 1}, {0, Attribution::kExact, {}}},
             {{"memset", "", 2}, {1, Attribution::kInferred, {}}},
             {{"kernel", "sm90_xmma_gemm_f32f32_tn_n_tilesize64x64x8_stage3_warpsize2x2x1", 3},
              {1, Attribution::kInferred, {}}},
             {{"kernel", "reprise_softmax_xent_with_grad", 4}, {2, Attribution::kExact, {}}},
             {{"empty", "", 5}, {-1, Attribution::kUnknown, {1, 2}}}};
  d.edges = {{0, 1}, {1, 2}, {2, 3}, {3, 4}};
  d.programmatic_edges = 1;  // The GEMM into the loss kernel.
  return d;
}

TEST(GraphDumpTest, CountsNodesByTypeAndNamesTheirRepriseNodes) {
  const CudaGraphDump d = SmallDump();
  EXPECT_EQ(d.NumNodesOfType("kernel"), 2);
  EXPECT_EQ(d.NumNodesOfType("memset"), 1);
  EXPECT_EQ(d.RepriseNodeName(d.nodes[2]), "fc0.matmul+bias+relu");
  EXPECT_EQ(d.RepriseNodeName(d.nodes[4]), "unknown");
}

TEST(GraphDumpTest, TextHasOneLinePerNodeAndTheEdges) {
  const std::string text = CudaGraphToText(SmallDump());
  EXPECT_THAT(text, HasSubstr("cuda graph: 5 nodes (1 empty, 2 kernel, 1 memcpy, 1 memset), 4 "
                              "edges (1 programmatic); plan: 3 launches\n"));
  EXPECT_THAT(text, HasSubstr("node 0: memcpy -> copy_inputs [exact]\n"));
  EXPECT_THAT(text,
              HasSubstr("node 3: kernel reprise_softmax_xent_with_grad -> loss+grad [exact]"));
  EXPECT_THAT(text, HasSubstr("node 4: empty -> unknown [unknown] (one of fc0.matmul+bias+relu, "
                              "loss+grad)"));
  EXPECT_THAT(text, HasSubstr("  2 -> 3\n"));
}

TEST(GraphDumpTest, JsonExtendsThePlanDumpWithTheCudaGraph) {
  const auto stages = SmallMlpStages();
  auto parsed = testing::ParseJson(CudaGraphToJson(stages.plan, SmallDump()));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const JsonValue& dump = *parsed;
  EXPECT_EQ(dump["stage"].string, "cuda-graph");
  EXPECT_EQ(dump["parameter_count"].integer, 234);
  EXPECT_EQ(dump["plan"]["launches"].array.size(), stages.plan.launches.size());
  const JsonValue& g = dump["cuda_graph"];
  EXPECT_EQ(g["num_nodes"].integer, 5);
  EXPECT_EQ(g["num_edges"].integer, 4);
  EXPECT_EQ(g["num_programmatic_edges"].integer, 1);
  EXPECT_EQ(g["node_types"]["kernel"].integer, 2);
  ASSERT_EQ(g["launches"].array.size(), 3u);
  EXPECT_EQ(g["launches"].array[0]["kind"].string, "copy");
  EXPECT_EQ(g["launches"].array[1]["kind"].string, "library");
  EXPECT_EQ(g["launches"].array[2]["kind"].string, "nvrtc");
  ASSERT_EQ(g["nodes"].array.size(), 5u);
  EXPECT_EQ(g["nodes"].array[3]["kernel"].string, "reprise_softmax_xent_with_grad");
  EXPECT_EQ(g["nodes"].array[3]["launch"].integer, 2);
  EXPECT_EQ(g["nodes"].array[3]["reprise_node"].string, "loss+grad");
  EXPECT_EQ(g["nodes"].array[2]["attribution"].string, "inferred");
  EXPECT_EQ(g["nodes"].array[4]["launch"].type, JsonValue::Type::kNull);
  EXPECT_EQ(g["nodes"].array[4]["candidates"].array.size(), 2u);
  ASSERT_EQ(g["edges"].array.size(), 4u);
  EXPECT_EQ(g["edges"].array[1].array[0].integer, 1);
  EXPECT_EQ(g["edges"].array[1].array[1].integer, 2);
}

TEST(GraphDumpTest, DotClustersByLaneAndGraphvizAcceptsIt) {
  const std::string dot = CudaGraphToDot(SmallDump());
  EXPECT_THAT(dot, HasSubstr("subgraph cluster_lane0 {"));
  EXPECT_THAT(dot, HasSubstr("c2 -> c3;"));
  EXPECT_THAT(dot, HasSubstr("sm90_xmma_gemm_f32f32_tn_n_tilesize64x64x8_st...\\n"));  // Shortened.
  EXPECT_THAT(dot, HasSubstr("tooltip=\"sm90_xmma_gemm_f32f32_tn_n_tilesize64x64x8_stage3"));
  if (util::FindDotProgram().empty()) GTEST_SKIP() << "Graphviz 'dot' is not on PATH";
  auto svg = util::RenderSvg(dot);
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_THAT(*svg, HasSubstr("<svg"));
}

}  // namespace
}  // namespace reprise::capture
