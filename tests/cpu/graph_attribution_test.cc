// Attributing captured CUDA graph nodes to plan launches: exact by memcpy and NVRTC kernel name,
// inferred for library calls only where the counts decide it, unknown (with candidates) otherwise.
#include "capture/graph_attribution.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reprise::capture {
namespace {

using ::testing::ElementsAre;

LaunchSignature Copy() { return {"copy_inputs", 0, true, {}}; }
LaunchSignature Library(const char* node) { return {node, 0, false, {}}; }
LaunchSignature Nvrtc(const char* node, std::vector<std::string> kernels) {
  return {node, 0, false, std::move(kernels)};
}
CapturedNode Kernel(const char* name) { return {"kernel", name, 0}; }
CapturedNode Of(const char* type) { return {type, "", 0}; }

std::vector<int> Launches(const std::vector<NodeOrigin>& origins) {
  std::vector<int> out;
  for (const NodeOrigin& o : origins) out.push_back(o.launch);
  return out;
}
std::vector<Attribution> Hows(const std::vector<NodeOrigin>& origins) {
  std::vector<Attribution> out;
  for (const NodeOrigin& o : origins) out.push_back(o.how);
  return out;
}

constexpr Attribution kExact = Attribution::kExact;
constexpr Attribution kInferred = Attribution::kInferred;
constexpr Attribution kUnknown = Attribution::kUnknown;

TEST(GraphAttributionTest, OneNodePerLaunchIsMatchedThroughout) {
  const std::vector<LaunchSignature> launches = {Copy(), Library("fc0"), Nvrtc("loss", {"xent"}),
                                                 Library("dgrad"), Nvrtc("sgd", {"sgd"})};
  const std::vector<CapturedNode> nodes = {Of("memcpy"), Kernel("sm90_gemm"), Kernel("xent"),
                                           Kernel("sm90_gemm"), Kernel("sgd")};
  const std::vector<NodeOrigin> origins = AttributeNodes(nodes, launches);
  EXPECT_THAT(Launches(origins), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(Hows(origins), ElementsAre(kExact, kInferred, kExact, kInferred, kExact));
}

TEST(GraphAttributionTest, ExtraLibraryNodesGoToTheOnlyLibraryLaunchInTheGap) {
  // A split-K GEMM: a memset, the GEMM and a reduction, all between two NVRTC anchors.
  const std::vector<LaunchSignature> launches = {Nvrtc("a", {"ka"}), Library("gemm"),
                                                 Nvrtc("b", {"kb"})};
  const std::vector<CapturedNode> nodes = {Kernel("ka"), Of("memset"), Kernel("gemm_splitk"),
                                           Kernel("splitk_reduce"), Kernel("kb")};
  const std::vector<NodeOrigin> origins = AttributeNodes(nodes, launches);
  EXPECT_THAT(Launches(origins), ElementsAre(0, 1, 1, 1, 2));
  EXPECT_THAT(Hows(origins), ElementsAre(kExact, kInferred, kInferred, kInferred, kExact));
}

TEST(GraphAttributionTest, AmbiguousGapIsUnknownWithItsCandidates) {
  // Two GEMMs back to back with three nodes between anchors: which has two we cannot tell.
  const std::vector<LaunchSignature> launches = {Nvrtc("a", {"ka"}), Library("dgrad"),
                                                 Library("wgrad"), Nvrtc("b", {"kb"})};
  const std::vector<CapturedNode> nodes = {Kernel("ka"), Kernel("g1"), Of("memset"), Kernel("g2"),
                                           Kernel("kb")};
  const std::vector<NodeOrigin> origins = AttributeNodes(nodes, launches);
  EXPECT_THAT(Launches(origins), ElementsAre(0, -1, -1, -1, 3));
  EXPECT_THAT(Hows(origins), ElementsAre(kExact, kUnknown, kUnknown, kUnknown, kExact));
  EXPECT_THAT(origins[1].candidates, ElementsAre(1, 2));
}

TEST(GraphAttributionTest, AsManyNodesAsLibraryLaunchesAreMatchedOneToOne) {
  const std::vector<LaunchSignature> launches = {Library("dgrad"), Library("wgrad"),
                                                 Nvrtc("b", {"kb"})};
  const std::vector<CapturedNode> nodes = {Kernel("g1"), Kernel("g2"), Kernel("kb")};
  EXPECT_THAT(Launches(AttributeNodes(nodes, launches)), ElementsAre(0, 1, 2));
}

TEST(GraphAttributionTest, MultiKernelLaunchMatchesEachKernelInOrder) {
  const std::vector<LaunchSignature> launches = {Nvrtc("sgd", {"sgd", "sgd"}), Library("tail")};
  const std::vector<CapturedNode> nodes = {Kernel("sgd"), Kernel("sgd"), Kernel("t1"),
                                           Of("memset")};
  const std::vector<NodeOrigin> origins = AttributeNodes(nodes, launches);
  EXPECT_THAT(Launches(origins), ElementsAre(0, 0, 1, 1));
  EXPECT_THAT(Hows(origins), ElementsAre(kExact, kExact, kInferred, kInferred));
}

TEST(GraphAttributionTest, NodesNoLaunchExplainsAreUnknownWithoutCandidates) {
  const std::vector<LaunchSignature> launches = {Nvrtc("a", {"ka"}), Nvrtc("b", {"kb"})};
  const std::vector<CapturedNode> nodes = {Kernel("ka"), Of("empty"), Kernel("kb")};
  const std::vector<NodeOrigin> origins = AttributeNodes(nodes, launches);
  EXPECT_THAT(Launches(origins), ElementsAre(0, -1, 1));
  EXPECT_TRUE(origins[1].candidates.empty());
}

TEST(GraphAttributionTest, MissingAnchorMakesItsGapUnknown) {
  // Kernel "kx" never appears: its launch may have added nothing, so the count proves nothing.
  const std::vector<LaunchSignature> launches = {Nvrtc("a", {"ka"}), Library("gemm"),
                                                 Nvrtc("x", {"kx"}), Nvrtc("b", {"kb"})};
  const std::vector<CapturedNode> nodes = {Kernel("ka"), Kernel("g"), Kernel("kb")};
  const std::vector<NodeOrigin> origins = AttributeNodes(nodes, launches);
  EXPECT_THAT(Launches(origins), ElementsAre(0, -1, 3));
  EXPECT_THAT(origins[1].candidates, ElementsAre(1, 2));
}

TEST(GraphAttributionTest, NamesEachAttribution) {
  EXPECT_EQ(AttributionName(kExact), "exact");
  EXPECT_EQ(AttributionName(kInferred), "inferred");
  EXPECT_EQ(AttributionName(kUnknown), "unknown");
}

}  // namespace
}  // namespace reprise::capture
