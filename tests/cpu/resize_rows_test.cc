// resize_rows: the shape rule and its refusals, the CPU reference growing (zero rows) and
// shrinking a table in float32 and bfloat16 alike, the gradient rule (resize_rows back) against
// finite differences in float64, and the GPU kernels compiling.
#include "src/ops/resize_rows.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/graph.h"
#include "src/codegen/resize_rows_kernels.h"
#include "src/ir/low_precision.h"
#include "src/ir/reference_executor.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/loss_checks.h"
#include "src/ops/ops.h"
#include "src/runtime/kernel_store.h"
#include "tests/cpu/test_graphs.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ResizeRowsTest, ShapeRuleKeepsTheTrailingDimensionsAndTheDType) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat64}) {
    Graph g;
    Value x = *g.AddInput("x", {Shape{5, 3, 2}, dtype});
    EXPECT_EQ(g.spec(*g.AddOp1(ops::ResizeRowsOp(), "grow", {x}, {{"rows", int64_t{8}}})),
              (TensorSpec{Shape{8, 3, 2}, dtype}));
    EXPECT_EQ(g.spec(*g.AddOp1(ops::ResizeRowsOp(), "shrink", {x}, {{"rows", int64_t{2}}})),
              (TensorSpec{Shape{2, 3, 2}, dtype}));
  }
}

TEST(ResizeRowsTest, BadAttributesAndInputsAreRefusedNamingTheNode) {
  Graph g;
  Value x = *g.AddInput("x", {Shape{5, 3}});
  Value scalar = *g.AddInput("scalar", {Shape{}});
  const auto refused = [&](const char* name, Value in, Attrs attrs, const char* why) {
    const absl::Status status = g.AddOp1(ops::ResizeRowsOp(), name, {in}, attrs).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(status.message(), AllOf(HasSubstr(name), HasSubstr(why)));
  };
  refused("no_rows", x, {}, "missing attribute 'rows'");
  refused("zero_rows", x, {{"rows", int64_t{0}}}, "'rows' must be at least 1, got 0");
  refused("float_rows", x, {{"rows", 4.0}}, "'rows' is not an integer");
  refused("rank0", scalar, {{"rows", int64_t{2}}}, "rank 1 or more");
  Value wide = *g.AddInput("wide", {Shape{2, int64_t{1} << 40}});
  refused("huge", wide, {{"rows", int64_t{1} << 30}}, "overflows int64 bytes");
  EXPECT_FALSE(g.FindNode("no_rows").ok());
}

// Growing appends zero rows; shrinking keeps the first rows. Byte for byte, so a bfloat16 table
// comes through with the same bits.
TEST(ResizeRowsTest, ReferenceCopiesTheFirstRowsAndZeroesTheRest) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Graph g;
    Value x = *g.AddConstant("x", {Shape{3, 4}, dtype}, Initializer::Uniform(1, 2));
    Value grown = *g.AddOp1(ops::ResizeRowsOp(), "grow", {x}, {{"rows", int64_t{5}}});
    Value shrunk = *g.AddOp1(ops::ResizeRowsOp(), "shrink", {x}, {{"rows", int64_t{2}}});
    ir::ReferenceExecutor cpu(g, /*float64=*/false, 3);
    ASSERT_TRUE(cpu.Run().ok());
    const ir::HostTensor& in = **cpu.Tensor(x);
    const ir::HostTensor& big = **cpu.Tensor(grown);
    const ir::HostTensor& small = **cpu.Tensor(shrunk);
    ASSERT_EQ(big.dtype(), dtype);
    EXPECT_EQ(std::memcmp(big.raw(), in.raw(), in.spec().bytes()), 0) << DTypeName(dtype);
    for (int64_t i = 12; i < 20; ++i) EXPECT_EQ(ir::FloatElement(big, i), 0.0) << i;
    EXPECT_EQ(std::memcmp(small.raw(), in.raw(), small.spec().bytes()), 0) << DTypeName(dtype);
    for (int64_t i = 0; i < 12; ++i) EXPECT_GE(ir::FloatElement(in, i), 1.0) << i;  // Not zeros.
  }
}

// The gradient is resize_rows of dy back to x's rows.
TEST(ResizeRowsTest, GradientIsResizeRowsBack) {
  Graph g;
  Value w = *g.AddParameter("w", {Shape{3, 4}, DType::kFloat32}, testing::TestInit());
  Value padded = *g.AddOp1(ops::ResizeRowsOp(), "pad", {w}, {{"rows", int64_t{8}}});
  Value x = *g.AddInput("x", {Shape{6, 4}});
  Value labels = *g.AddInput("labels", {Shape{6}, DType::kInt32});
  Value z = *g.AddOp1(ops::MatmulOp(), "z", {x, padded}, {{"transpose_b", true}});
  Value loss = *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {z, labels},
                         {{ops::kLossClassesAttr, int64_t{3}}});
  auto training = autodiff::BuildBackward(g, loss);
  ASSERT_TRUE(training.ok()) << training.status();
  const Graph& t = training->graph;
  const Node& grad = t.node(training->gradients.at(w.node).node);
  EXPECT_EQ(grad.op, &ops::ResizeRowsOp());
  EXPECT_EQ(std::get<int64_t>(grad.attrs.at("rows")), 3);
  EXPECT_EQ(t.spec(grad.inputs[0]).shape, (Shape{8, 4}));
}

// Float64 finite differences through a padded table (grown, the loss leaving the padding out) and
// a shrunk one (the dropped rows get a zero gradient).
TEST(ResizeRowsTest, GradientsMatchFiniteDifferencesInFloat64) {
  for (const auto& [table_rows, rows, classes] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{3, 8, 3}, {5, 2, 2}}) {
    Graph g;
    Value w = *g.AddParameter("w", {Shape{table_rows, 4}, DType::kFloat32}, testing::TestInit());
    Value resized = *g.AddOp1(ops::ResizeRowsOp(), "resize", {w}, {{"rows", rows}});
    Value x = *g.AddInput("x", {Shape{6, 4}});
    Value labels = *g.AddInput("labels", {Shape{6}, DType::kInt32});
    Value z = *g.AddOp1(ops::MatmulOp(), "z", {x, resized}, {{"transpose_b", true}});
    Attrs attrs;
    if (classes < rows) attrs[ops::kLossClassesAttr] = classes;
    Value loss = *g.AddOp1(ops::SoftmaxCrossEntropyOp(), "loss", {z, labels}, attrs);
    SCOPED_TRACE(::testing::Message() << table_rows << " -> " << rows);
    testing::ExpectGradientsMatchFiniteDifferences(g, loss, {0, 1, 1, 0, 1, 0}, 17);
  }
}

TEST(ResizeRowsTest, KernelsCompileForSm90) {
  for (const codegen::GeneratedKernel& kernel : codegen::ResizeRowsKernels()) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    EXPECT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
  }
}

}  // namespace
}  // namespace reprise
