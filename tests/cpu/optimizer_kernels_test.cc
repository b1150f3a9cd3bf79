// The optimizer kernels compile with NVRTC for sm_90 with no GPU present, and say what they are.
#include "src/codegen/optimizer_kernels.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/ops/gpu_kernel.h"
#include "src/ops/multi_tensor.h"
#include "src/runtime/kernel_store.h"

namespace reprise {
namespace {

TEST(OptimizerKernelsTest, EveryKernelCompilesForSm90) {
  const std::vector<codegen::GeneratedKernel> kernels = codegen::OptimizerKernels();
  ASSERT_EQ(kernels.size(), 10u);  // SGD's multi-tensor update for three gradient types.
  for (const codegen::GeneratedKernel& kernel : kernels) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
    EXPECT_FALSE(compiled->cubin.empty()) << kernel.name;
    EXPECT_NE(compiled->ptx.find(".entry " + kernel.name), std::string::npos) << kernel.name;
  }
}

// The chunked kernels compile at their largest table too, taking it as a parameter of the size
// of the host's table (ops::ChunkTable) and their gradients' kinds as the next, and the norm's
// and SGD's with no local memory.
TEST(OptimizerKernelsTest, ChunkedTablesMatchTheHostLayout) {
  for (int capacity : {32, codegen::kMaxMultiTensorCapacity}) {
    for (const auto& [kernel, arrays] : {std::pair{codegen::AdamMulti(capacity), 5},
                                         std::pair{codegen::AdamMulti(capacity, true), 6},
                                         std::pair{codegen::SgdMulti(capacity), 4},
                                         std::pair{codegen::SgdMulti(capacity, true), 5},
                                         std::pair{codegen::SgdMulti(capacity, false, true), 4},
                                         std::pair{codegen::SgdMulti(capacity, true, true), 5},
                                         std::pair{codegen::GradSumSquares(capacity), 1}}) {
      auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
      ASSERT_TRUE(compiled.ok()) << kernel.name << ": " << compiled.status();
      const size_t bytes = ops::ChunkTable(capacity, arrays).bytes();
      EXPECT_NE(compiled->ptx.find(absl::StrCat(kernel.name, "_param_0[", bytes, "]")),
                std::string::npos)
          << kernel.name << " with " << capacity << " tensors: " << bytes << " bytes";
      // Then the gradients' kinds, a byte per tensor.
      EXPECT_NE(compiled->ptx.find(absl::StrCat(kernel.name, "_param_1[", capacity, "]")),
                std::string::npos)
          << kernel.name << " with " << capacity << " tensors";
      // The norm's and SGD's kernels (the checked ones too) index their tables in place.
      if (arrays == 1 || absl::StrContains(kernel.name, "sgd")) {
        EXPECT_EQ(compiled->ptx.find(".local"), std::string::npos) << kernel.name;
      }
    }
  }
}

TEST(OptimizerKernelsTest, CapacityIsTheSmallestPowerOfTwoFrom32ThatHoldsTheTensors) {
  EXPECT_EQ(codegen::MultiTensorCapacity(1), 32);
  EXPECT_EQ(codegen::MultiTensorCapacity(32), 32);
  EXPECT_EQ(codegen::MultiTensorCapacity(33), 64);
  EXPECT_EQ(codegen::MultiTensorCapacity(161), 256);  // ResNet-50's parameters.
  EXPECT_EQ(codegen::MultiTensorCapacity(512), 512);
  EXPECT_EQ(codegen::MultiTensorCapacity(10000), codegen::kMaxMultiTensorCapacity);
}

// The SGD and loss-scaling tables travel by value: they must stay well inside the 4 KiB kernel
// parameter space. (The chunked tables' 32 KiB: multi_tensor_test.cc.)
TEST(OptimizerKernelsTest, SgdTablesFitTheKernelParameterSpace) {
  constexpr int n = codegen::kOptimizerTableSize;
  EXPECT_LE(n * (3 * sizeof(void*) + sizeof(long long)) + 8 * sizeof(void*) + 8, 4096u);
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
