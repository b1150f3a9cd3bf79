// The CPU reference runs whole training steps, and training lowers the loss.
#include <random>

#include "gtest/gtest.h"
#include "reprise/models.h"
#include "src/autodiff/autodiff.h"
#include "src/ir/reference_executor.h"

namespace reprise {
namespace {

TEST(CpuTrainingTest, SgdOnLinearlySeparableDataLowersTheLoss) {
  auto mlp =
      models::BuildMlp({.batch = 16, .input_features = 4, .depth = 1, .width = 16, .classes = 2});
  ASSERT_TRUE(mlp.ok());
  auto t = autodiff::BuildTrainingGraph(mlp->graph, mlp->loss, {.learning_rate = 0.1f});
  ASSERT_TRUE(t.ok()) << t.status();
  ir::ReferenceExecutor exec(t->graph, /*float64=*/false, /*seed=*/3);
  std::mt19937 rng(11);
  std::normal_distribution<double> normal;
  std::vector<double> x(16 * 4);
  std::vector<int32_t> y(16);
  float first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 4; ++j) x[i * 4 + j] = normal(rng);
      y[i] = x[i * 4] + 0.5 * x[i * 4 + 1] > 0 ? 1 : 0;
    }
    ASSERT_TRUE(exec.SetLeaf("features", x).ok());
    ASSERT_TRUE(exec.SetLeaf("labels", y).ok());
    ASSERT_TRUE(exec.Run().ok());
    const float loss = (*exec.Tensor(mlp->loss))->data<float>()[0];
    if (step < 10) first += loss / 10;
    if (step >= 190) last += loss / 10;
  }
  EXPECT_LT(last, 0.5f * first);
}

TEST(CpuTrainingTest, LabelOutsideTheClassesIsAnErrorNamingTheNode) {
  auto mlp =
      models::BuildMlp({.batch = 2, .input_features = 2, .depth = 1, .width = 4, .classes = 3});
  ir::ReferenceExecutor exec(mlp->graph, false, 1);
  ASSERT_TRUE(exec.SetLeaf("labels", std::vector<int32_t>{0, 3}).ok());
  absl::Status s = exec.Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("loss"), std::string::npos) << s;
}

}  // namespace
}  // namespace reprise
