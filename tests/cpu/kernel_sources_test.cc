// Every kernel source the engine generates compiles with NVRTC for sm_90, with no GPU present.
#include "gtest/gtest.h"
#include "src/codegen/generated_kernel.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/kernel_store.h"

namespace reprise {
namespace {

TEST(KernelSourcesTest, EveryGeneratedKernelCompilesForSm90) {
  const std::vector<codegen::GeneratedKernel> kernels = codegen::AllKernels();
  ASSERT_GE(kernels.size(), 8u);
  for (const codegen::GeneratedKernel& kernel : kernels) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernel), "sm_90");
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    EXPECT_FALSE(compiled->cubin.empty()) << kernel.name;
    EXPECT_NE(kernel.code.find(kernel.name), std::string::npos) << kernel.name;
  }
}

}  // namespace
}  // namespace reprise
