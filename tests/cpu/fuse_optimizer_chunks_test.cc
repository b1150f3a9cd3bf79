// Without data parallelism, the fused SGD updates come in table-sized chunks in the order the
// backward pass makes their gradients, so that on two lanes each chunk runs beside the rest of the
// backward instead of every update waiting for the last gradient.
#include <algorithm>
#include <string>

#include "gtest/gtest.h"
#include "src/autodiff/autodiff.h"
#include "src/codegen/fused_kernels.h"
#include "src/ir/op_def.h"
#include "src/passes/plan.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

TEST(FuseOptimizerChunksTest, ResNetUpdatesRunInChunksAsTheirGradientsAreReady) {
  const autodiff::TrainingGraph training = testing::SmallResNet18Training(Layout::kNHWC);
  const int parameters = static_cast<int>(training.parameters.size());
  ASSERT_GT(parameters, codegen::kSgdTableSize);  // 62: two chunks.
  auto plan = passes::BuildPlan(training, {}, {.lanes = 2});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const Graph& g = plan->graph();
  int updated = 0, chunks = 0, first_chunk = -1, last_weight_gradient = -1;
  for (int i = 0; i < static_cast<int>(plan->launches.size()); ++i) {
    const Node& node = g.node(plan->launches[i].node);
    if (node.op_name() == "conv2d_wgrad") last_weight_gradient = i;
    if (node.op_name() == "sgd_momentum") ++updated;
    if (node.op_name() != "sgd_momentum_multi") continue;
    const int64_t tensors = *ir::IntAttr(node.attrs, "tensors");
    EXPECT_LE(tensors, codegen::kSgdTableSize) << node.name;
    EXPECT_EQ(plan->launches[i].lane, 1) << node.name;
    updated += static_cast<int>(tensors);
    if (chunks++ == 0) first_chunk = i;
  }
  EXPECT_EQ(updated, parameters);  // Every parameter once.
  EXPECT_EQ(chunks, 2);
  // The first chunk (the classifier's end of the network) runs before the backward is done.
  EXPECT_LT(first_chunk, last_weight_gradient);
}

}  // namespace
}  // namespace reprise
