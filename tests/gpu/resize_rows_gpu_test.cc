// resize_rows on the GPU: the same bits as the CPU reference in float32 and bfloat16, growing and
// shrinking, with sizes that take each word width (16 bytes down to 2), up to GPT-2's embedding
// table padded from 50,257 to 50,304 rows and its gradient sliced back.
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "reprise/graph.h"
#include "src/ir/reference_executor.h"
#include "src/ops/resize_rows.h"
#include "tests/gpu/gpu_graph_run.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

class ResizeRowsGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(ResizeRowsGpuTest, GivesTheCpuReferencesBits) {
  REPRISE_REQUIRE_GPU();
  const DType dtype = GetParam();
  // (rows, cols, new rows): 16-byte words, 4- or 2-byte words (odd columns), shrinking, GPT-2's.
  for (auto [rows, cols, resized] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {3, 8, 5}, {3, 3, 7}, {7, 5, 2}, {50257, 768, 50304}, {50304, 768, 50257}}) {
    Graph g;
    Value x = *g.AddConstant("x", {Shape{rows, cols}, dtype}, Initializer::Uniform(-2, 2));
    Value y = *g.AddOp1(ops::ResizeRowsOp(), "y", {x}, {{"rows", resized}});
    ir::ReferenceExecutor cpu(g, /*float64=*/false, 5);
    ASSERT_TRUE(cpu.Run().ok());
    REPRISE_ASSERT_OK_AND_ASSIGN(std::vector<ir::HostTensor> got, RunOnGpu(g, cpu, {y}));
    const ir::HostTensor& expected = **cpu.Tensor(y);
    ASSERT_EQ(got[0].spec(), expected.spec());
    EXPECT_EQ(std::memcmp(got[0].raw(), expected.raw(), expected.spec().bytes()), 0)
        << rows << "x" << cols << " -> " << resized;
  }
}

INSTANTIATE_TEST_SUITE_P(Float32AndBFloat16, ResizeRowsGpuTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace reprise
