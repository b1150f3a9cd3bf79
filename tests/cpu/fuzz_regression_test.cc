// Inputs that the fuzzers (tests/fuzz) found to crash or to reach undefined behaviour, each kept
// as the smallest graph or call that did. They pass in any build; the sanitizer build
// (docs/testing.md) is what sees the undefined behaviour they used to reach.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "reprise/graph.h"
#include "src/ops/ops.h"

namespace reprise {
namespace {

constexpr int64_t kHugeCounts[] = {std::numeric_limits<int64_t>::max(),
                                   std::numeric_limits<int64_t>::min(), int64_t{1} << 62,
                                   (int64_t{1} << 62) + 1};

// A multi-tensor update's "tensors" attribute was multiplied by the inputs per tensor before it
// was bounded: a huge count overflowed int64.
TEST(FuzzRegressionTest, MultiTensorUpdatesRefuseHugeTensorCounts) {
  for (const ir::OpDef* op : {&ops::AdamMultiOp(), &ops::SgdMomentumMultiOp()}) {
    Graph g;
    std::vector<Value> inputs;
    for (int i = 0; i < 12; ++i) {
      auto v = g.AddParameter(absl::StrCat("p", i), {Shape{4}}, Initializer::Zeros());
      ASSERT_TRUE(v.ok()) << v.status();
      inputs.push_back(*v);
    }
    const std::string before = g.ToString();
    for (int64_t tensors : kHugeCounts) {
      auto added = g.AddOp(*op, "update", inputs, {{"tensors", tensors}});
      EXPECT_EQ(added.status().code(), absl::StatusCode::kInvalidArgument)
          << op->name << " tensors=" << tensors;
      EXPECT_EQ(g.ToString(), before);
    }
  }
}

}  // namespace
}  // namespace reprise
