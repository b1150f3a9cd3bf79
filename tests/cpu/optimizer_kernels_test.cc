// The optimizer kernels compile with NVRTC for sm_90 with no GPU present, and say what they are.
#include "src/codegen/optimizer_kernels.h"

#include "gtest/gtest.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/kernel_store.h"

namespace reprise {
namespace {

TEST(OptimizerKernelsTest, EveryKernelCompilesForSm90) {
  const std::vector<codegen::GeneratedKernel> kernels = codegen::OptimizerKernels();
  ASSERT_EQ(kernels.size(), 7u);
  for (const codegen::GeneratedKernel& kernel : kernels) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
    EXPECT_FALSE(compiled->cubin.empty()) << kernel.name;
    EXPECT_NE(compiled->ptx.find(".entry " + kernel.name), std::string::npos) << kernel.name;
  }
}

// The tables travel by value: they must stay well inside the 4 KiB kernel parameter space.
TEST(OptimizerKernelsTest, MultiTensorTablesFitTheKernelParameterSpace) {
  constexpr int n = codegen::kOptimizerTableSize;
  EXPECT_LE(n * (4 * sizeof(void*) + sizeof(long long)) + 8 * sizeof(void*) + 8, 4096u);
}

TEST(OptimizerKernelsTest, AdamStepScalars) {
  const codegen::AdamStep first = codegen::AdamStepOf(0.1, 0.9, 0.999, 0.01, true, 0);
  EXPECT_NEAR(first.step_size, 0.1 / (1 - 0.9), 1e-15);
  EXPECT_NEAR(first.bc2_sqrt, std::sqrt(1 - 0.999), 1e-15);
  EXPECT_DOUBLE_EQ(first.decay, 1 - 0.1 * 0.01);
  EXPECT_DOUBLE_EQ(codegen::AdamStepOf(0.1, 0.9, 0.999, 0.01, false, 5).decay, 1.0);
  EXPECT_DOUBLE_EQ(codegen::ClipCoefficient(1.0, 10.0), 1.0);
  EXPECT_NEAR(codegen::ClipCoefficient(4.0, 1.0), 0.25, 1e-7);
}

}  // namespace
}  // namespace reprise
