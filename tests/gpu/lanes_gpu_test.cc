// Lanes: weight gradients run beside the data-gradient chain as separate branches of the captured
// graph (and with three or four lanes, side branches beside the main chain), and the step computes
// the same bits as with one lane.
#include <queue>
#include <random>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/reprise.h"
#include "src/api/trainer_impl.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

models::MlpConfig Mlp() {
  return {.batch = 32, .input_features = 24, .depth = 4, .width = 64, .classes = 6};
}

TrainOptions Options(ExecMode mode, int lanes, bool fuse = true) {
  TrainOptions options;
  options.launch.mode = mode;
  options.launch.lanes = lanes;
  options.kernels.fuse = fuse;
  options.kernels.whole_step =
      false;  // Lanes split per-layer launches; the whole-step kernel has none.
  options.seed = 3;
  return options;
}

std::vector<float> Train(Trainer& t, int steps) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    std::vector<float> x(32 * 24);
    for (float& v : x) v = normal(rng);
    std::vector<int32_t> y(32);
    for (int i = 0; i < 32; ++i) y[i] = (x[i * 24] > 0) + 2 * (x[i * 24 + 1] > 0);
    EXPECT_TRUE(t.SetInput("features", x).ok());
    EXPECT_TRUE(t.SetInput("labels", y).ok());
    EXPECT_TRUE(t.Step().ok());
    losses.push_back(*t.Loss());
  }
  return losses;
}

class LanesGpuTest : public ::testing::TestWithParam<bool> {};

TEST_P(LanesGpuTest, TwoLanesGiveTheBitsOfOne) {
  REPRISE_REQUIRE_GPU();
  const bool fuse = GetParam();
  auto mlp = models::BuildMlp(Mlp());
  ASSERT_TRUE(mlp.ok());
  auto one = Trainer::Create(mlp->graph, mlp->loss, Options(ExecMode::kGraph, 1, fuse));
  auto two = Trainer::Create(mlp->graph, mlp->loss, Options(ExecMode::kGraph, 2, fuse));
  auto two_bulked = Trainer::Create(mlp->graph, mlp->loss, Options(ExecMode::kBulked, 2, fuse));
  ASSERT_TRUE(one.ok() && two.ok() && two_bulked.ok()) << two.status();
  EXPECT_EQ((*two)->stats().lanes, 2);
  const std::vector<float> a = Train(**one, 50), b = Train(**two, 50), c = Train(**two_bulked, 50);
  EXPECT_EQ(a, b);
  EXPECT_EQ(b, c);
  for (const std::string& name : (*one)->ParameterNames()) {
    EXPECT_EQ(*(*one)->GetParameter(name), *(*two)->GetParameter(name)) << name;
  }
  EXPECT_EQ((*two)->stats().graph_instantiations, 1);
}

INSTANTIATE_TEST_SUITE_P(FusedAndUnfused, LanesGpuTest, ::testing::Bool());

// Every node reachable from `from` through the graph's edges.
absl::flat_hash_set<cudaGraphNode_t> Reachable(cudaGraph_t graph,
                                               const std::vector<cudaGraphNode_t>& from) {
  size_t count = 0;
  EXPECT_EQ(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count), cudaSuccess);
  std::vector<cudaGraphNode_t> src(count), dst(count);
  std::vector<cudaGraphEdgeData> data(count);
  EXPECT_EQ(cudaGraphGetEdges(graph, src.data(), dst.data(), data.data(), &count), cudaSuccess);
  absl::flat_hash_map<cudaGraphNode_t, std::vector<cudaGraphNode_t>> next;
  for (size_t i = 0; i < count; ++i) next[src[i]].push_back(dst[i]);
  absl::flat_hash_set<cudaGraphNode_t> seen(from.begin(), from.end());
  std::queue<cudaGraphNode_t> todo;
  for (cudaGraphNode_t n : from) todo.push(n);
  while (!todo.empty()) {
    cudaGraphNode_t n = todo.front();
    todo.pop();
    for (cudaGraphNode_t m : next[n]) {
      if (seen.insert(m).second) todo.push(m);
    }
  }
  return seen;
}

// Counts layers whose dgrad and wgrad launches are joined by a path in the captured graph.
int LayersWithDgradWgradPath(int lanes) {
  auto mlp = models::BuildMlp(Mlp());
  auto impl = Trainer::Impl::Create(mlp->graph, mlp->loss, Options(ExecMode::kGraph, lanes));
  EXPECT_TRUE(impl.ok()) << impl.status();
  if (!impl.ok()) return -1;
  const capture::CapturedStep* step = (*impl)->captured();
  const auto& launches = (*impl)->launches();
  EXPECT_EQ(step->launch_nodes().size(), launches.size());
  auto nodes_of = [&](const std::string& name) {
    for (size_t i = 0; i < launches.size(); ++i) {
      // A fused launch is named for its first node ("fc2.matmul.dgrad+fc1.relu.grad+...").
      if (absl::StartsWith(launches[i].node_name, name)) return step->launch_nodes()[i];
    }
    return std::vector<cudaGraphNode_t>{};
  };
  int joined = 0, layers = 0;
  for (int layer = 1; layer <= Mlp().depth; ++layer) {
    const std::string prefix = absl::StrCat("fc", layer, ".matmul.");
    const std::vector<cudaGraphNode_t> dgrad = nodes_of(prefix + "dgrad");
    const std::vector<cudaGraphNode_t> wgrad = nodes_of(prefix + "wgrad");
    EXPECT_FALSE(dgrad.empty() || wgrad.empty()) << prefix;
    ++layers;
    const auto from_dgrad = Reachable(step->graph().get(), dgrad);
    const auto from_wgrad = Reachable(step->graph().get(), wgrad);
    bool path = false;
    for (cudaGraphNode_t n : wgrad) path = path || from_dgrad.contains(n);
    for (cudaGraphNode_t n : dgrad) path = path || from_wgrad.contains(n);
    joined += path;
  }
  EXPECT_EQ(layers, Mlp().depth);
  return joined;
}

TEST(LanesGpuTest, DgradAndWgradAreUnorderedBranchesOfTheCapturedGraph) {
  REPRISE_REQUIRE_GPU();
  EXPECT_EQ(LayersWithDgradWgradPath(2), 0);
  // The check can fail: with one lane every pair is ordered.
  EXPECT_EQ(LayersWithDgradWgradPath(1), Mlp().depth);
}

TEST(LanesGpuTest, BadLaneCountIsAClearError) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(Mlp());
  auto t = Trainer::Create(mlp->graph, mlp->loss, Options(ExecMode::kGraph, 5));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(t.status().message(), "lanes must be 0 (auto) or 1 to 4"));
}

// Three and four lanes put ResNet's downsample branches (and their gradients) beside the main
// chain; the arithmetic is unchanged, so the bits are those of one lane.
// ResNet-18's step on 3 and on 4 lanes against 1 lane: the same losses and weights, bit for bit.
// One lane count per test, so that racecheck (tools/device/gpu_suite_sanitized.sh), under which
// every kernel runs many times slower, can run the two side by side; under a sanitizer two steps
// are taken instead of five (testing::UnderComputeSanitizer).
class ResNetLanesGpuTest : public ::testing::TestWithParam<int> {};

TEST_P(ResNetLanesGpuTest, GivesTheBitsOfOneLane) {
  REPRISE_REQUIRE_GPU();
  const int steps = testing::UnderComputeSanitizer() ? 2 : 5;
  auto net = models::BuildResNet({.depth = 18, .batch = 4, .classes = 4, .image_size = 32});
  ASSERT_TRUE(net.ok()) << net.status();
  std::vector<std::vector<float>> losses;
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (int lanes : {1, GetParam()}) {
    TrainOptions options = Options(ExecMode::kGraph, lanes);
    options.numerics.deterministic = true;
    auto t = Trainer::Create(net->graph, net->loss, options);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ((*t)->stats().lanes, lanes);
    std::mt19937 rng(2);
    std::normal_distribution<float> normal;
    std::vector<float> x(4 * 3 * 32 * 32), run;
    for (int s = 0; s < steps; ++s) {
      for (float& v : x) v = normal(rng);
      EXPECT_TRUE((*t)->SetInput("images", x).ok());
      EXPECT_TRUE((*t)->SetInput("labels", std::vector<int32_t>{0, 1, 2, s % 4}).ok());
      EXPECT_TRUE((*t)->Step().ok());
      run.push_back(*(*t)->Loss());
    }
    losses.push_back(run);
    trainers.push_back(*std::move(t));
  }
  EXPECT_EQ(losses[0], losses[1]);
  for (const std::string& name : trainers[0]->ParameterNames()) {
    EXPECT_EQ(*trainers[0]->GetParameter(name), *trainers[1]->GetParameter(name)) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(ThreeAndFourLanes, ResNetLanesGpuTest, ::testing::Values(3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat(info.param, "Lanes");
                         });

// TimeLanes: every launch once, on the plan's lanes. Each launch's measured end comes after the
// measured ends of its lane's previous launch and of what it waits for (its start).
TEST(LanesGpuTest, TimeLanesGivesEachLaunchItsSpanOnItsLane) {
  REPRISE_REQUIRE_GPU();
  auto mlp = models::BuildMlp(Mlp());
  ASSERT_TRUE(mlp.ok());
  auto t = Trainer::Create(mlp->graph, mlp->loss, Options(ExecMode::kBulked, 2));
  ASSERT_TRUE(t.ok()) << t.status();
  Train(**t, 1);
  EXPECT_EQ((*t)->TimeLanes(0).status().code(), absl::StatusCode::kInvalidArgument);
  auto spans = (*t)->TimeLanes(3);
  ASSERT_TRUE(spans.ok()) << spans.status();
  ASSERT_EQ(static_cast<int64_t>(spans->size()), (*t)->stats().launches_per_step);
  std::vector<float> lane_end(2, 0.0f);
  int waits = 0;
  for (size_t i = 0; i < spans->size(); ++i) {
    const Trainer::LaunchSpan& s = (*spans)[i];
    ASSERT_TRUE(s.lane == 0 || s.lane == 1) << s.node;
    EXPECT_FALSE(s.kernel.empty()) << s.node;
    EXPECT_GE(s.start_ms, lane_end[s.lane]) << s.node;
    EXPECT_GE(s.end_ms, s.start_ms) << s.node;
    for (int w : s.waits) {
      ASSERT_LT(w, static_cast<int>(i)) << s.node;
      EXPECT_NE((*spans)[w].lane, s.lane) << s.node;
      EXPECT_GE(s.start_ms, (*spans)[w].end_ms) << s.node;
      ++waits;
    }
    lane_end[s.lane] = s.end_ms;
  }
  EXPECT_GT(waits, 0);  // The lanes join: updates wait for gradients, the chain for nothing.
  EXPECT_GT(lane_end[1], 0.0f);
  // A captured step's own graph is untouched by the timed one.
  auto graph = Trainer::Create(mlp->graph, mlp->loss, Options(ExecMode::kGraph, 2));
  ASSERT_TRUE(graph.ok()) << graph.status();
  Train(**graph, 1);
  ASSERT_TRUE((*graph)->TimeLanes(2).ok());
  Train(**graph, 1);
  EXPECT_EQ((*graph)->stats().graph_instantiations, 1);
  EXPECT_EQ((*graph)->stats().graph_replays, 2);
}

}  // namespace
}  // namespace reprise
