// Verify mode's comparison on host buffers: bit for bit, the first differing element with both
// values exactly, and the first tensor in write order.
#include "src/api/verify_compare.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reprise {
namespace {

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

TEST(FirstDifferenceTest, EqualBitsAgree) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::string a = Bytes<float>({1.0f, nan, -2.5f});
  EXPECT_FALSE(FirstDifference(a, a, DType::kFloat32).has_value());  // The same NaN bits agree.
}

TEST(FirstDifferenceTest, ReportsTheFirstElementAndBothValuesExactly) {
  const std::string a = Bytes<float>({1.0f, 2.0f, 3.0f, 4.0f});
  const std::string b = Bytes<float>({1.0f, 2.0f, std::nextafter(3.0f, 4.0f), 5.0f});
  std::optional<ElementDifference> d = FirstDifference(a, b, DType::kFloat32);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->element, 2);
  EXPECT_EQ(d->a, "3 (0x40400000)");
  EXPECT_EQ(d->b, "3.00000024 (0x40400001)");
}

TEST(FirstDifferenceTest, SignedZerosDiffer) {
  std::optional<ElementDifference> d =
      FirstDifference(Bytes<float>({0.0f}), Bytes<float>({-0.0f}), DType::kFloat32);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->element, 0);
  EXPECT_EQ(d->b, "-0 (0x80000000)");
}

TEST(FirstDifferenceTest, OtherDTypes) {
  std::optional<ElementDifference> d =
      FirstDifference(Bytes<int32_t>({7, 8}), Bytes<int32_t>({7, -7}), DType::kInt32);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->element, 1);
  EXPECT_EQ(d->a, "8 (0x00000008)");
  EXPECT_EQ(d->b, "-7 (0xfffffff9)");
  d = FirstDifference(Bytes<double>({0.1}), Bytes<double>({0.2}), DType::kFloat64);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->a, "0.10000000000000001 (0x3fb999999999999a)");
  // bfloat16 1.0 is 0x3f80, float16 1.0 is 0x3c00.
  d = FirstDifference(Bytes<uint16_t>({0x3f80}), Bytes<uint16_t>({0x4000}), DType::kBFloat16);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->a, "1 (0x3f80)");
  EXPECT_EQ(d->b, "2 (0x4000)");
  d = FirstDifference(Bytes<uint16_t>({0x3c00}), Bytes<uint16_t>({0xc000}), DType::kFloat16);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->a, "1 (0x3c00)");
  EXPECT_EQ(d->b, "-2 (0xc000)");
}

TEST(FirstDifferenceTest, DifferenceInALaterByteOfAnElement) {
  // Elements differ only in their last byte: still element 1, not byte 7.
  std::string a = Bytes<float>({1.0f, 1.0f});
  std::string b = a;
  b[7] ^= 0x01;
  std::optional<ElementDifference> d = FirstDifference(a, b, DType::kFloat32);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->element, 1);
}

TEST(CompareSnapshotsTest, FirstTensorInTheGivenOrderIsReported) {
  // Snapshot layout: loss (1 float) then gradient (2) then weight (2).
  std::vector<ComparedTensor> tensors = {
      {"loss", "loss", "loss", "softmax_cross_entropy", DType::kFloat32, 0, 4, 10},
      {"fc.weight.grad", "gradient", "fc.wgrad", "matmul", DType::kFloat32, 4, 8, 20},
      {"fc.weight", "parameter", "adam.fc", "adam", DType::kFloat32, 12, 8, 30},
  };
  const std::string graph = Bytes<float>({0.5f, 1, 2, 3, 4});
  EXPECT_FALSE(CompareSnapshots(tensors, graph, graph, 0).has_value());

  const std::string eager = Bytes<float>({0.5f, 1, 2.5f, 3, 4.5f});
  std::optional<VerifyMismatch> m = CompareSnapshots(tensors, graph, eager, 7);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step, 7);
  EXPECT_EQ(m->tensor, "fc.weight.grad");
  EXPECT_EQ(m->kind, "gradient");
  EXPECT_EQ(m->node, "fc.wgrad");
  EXPECT_EQ(m->op, "matmul");
  EXPECT_EQ(m->element, 1);
  EXPECT_EQ(m->graph_value, "2 (0x40000000)");
  EXPECT_EQ(m->eager_value, "2.5 (0x40200000)");
  EXPECT_THAT(m->ToString(), ::testing::HasSubstr("step 7: gradient 'fc.weight.grad' (written by "
                                                  "node 'fc.wgrad', op matmul) differs first at "
                                                  "element 1: graph 2 (0x40000000), eager 2.5"));

  VerifyResult result;
  result.steps = 8;
  result.tensors_compared = 3;
  EXPECT_THAT(result.ToString(), ::testing::HasSubstr("verify passed: 8 steps"));
  result.mismatch = m;
  EXPECT_FALSE(result.ok());
  EXPECT_THAT(result.ToString(), ::testing::HasSubstr("verify FAILED"));
  EXPECT_THAT(result.ToString(), ::testing::HasSubstr("fc.weight.grad"));
}

}  // namespace
}  // namespace reprise
