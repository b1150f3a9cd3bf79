// The grid-dependency wait put first in every generated kernel's body, so that any of them may be
// launched as a programmatic dependent launch (src/codegen/grid_dependency.h).
#include "src/codegen/grid_dependency.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/codegen/attention_kernels.h"
#include "src/codegen/batch_norm_kernels.h"
#include "src/codegen/batched_kernels.h"
#include "src/codegen/conv_kernels.h"
#include "src/codegen/decode_kernels.h"
#include "src/codegen/embedding_kernels.h"
#include "src/codegen/gelu_kernels.h"
#include "src/codegen/generated_kernel.h"
#include "src/codegen/layer_norm_backward_kernels.h"
#include "src/codegen/layer_norm_kernels.h"
#include "src/codegen/loss_kernels.h"
#include "src/codegen/loss_scale_kernels.h"
#include "src/codegen/optimizer_kernels.h"
#include "src/codegen/pooling_kernels.h"
#include "src/codegen/resize_rows_kernels.h"
#include "src/codegen/transpose_kernels.h"
#include "src/ops/gpu_kernel.h"
#include "src/runtime/kernel_store.h"

namespace reprise::codegen {
namespace {

// Where the call lands: the text after the body's opening brace.
std::string AfterCall(const std::string& code) {
  const size_t at = code.find(kProducerWaitCall);
  return at == std::string::npos ? "" : code.substr(at + sizeof(kProducerWaitCall) - 1);
}

TEST(GridDependencyTest, TheWaitIsTheBodysFirstStatement) {
  const std::string code =
      "__device__ float twice(float x) { return 2 * x; }\n"
      "extern \"C\" __global__ void __launch_bounds__(256, 4) scale(const float* x, float* y,\n"
      "    int n) {\n  int i = threadIdx.x;\n  if (i < n) y[i] = twice(x[i]);\n}\n";
  auto out = WithProducerWait(code, "scale");
  ASSERT_TRUE(out.has_value());
  // Once, inside scale's body and not in the device function's.
  EXPECT_EQ(out->find(kProducerWaitCall), out->rfind(kProducerWaitCall));
  EXPECT_EQ(out->find("int n) { reprise_wait_for_producers();\n  int i = threadIdx.x;"),
            out->find("int n) {"));
  EXPECT_NE(out->find("griddepcontrol.wait"), std::string::npos);
  EXPECT_NE(out->find("__CUDA_ARCH__ >= 900"), std::string::npos);  // Nothing before Hopper.
  EXPECT_EQ(AfterCall(*out), "\n  int i = threadIdx.x;\n  if (i < n) y[i] = twice(x[i]);\n}\n");
}

TEST(GridDependencyTest, NamesThatOnlyStartAlikeAndDeclarationsAreSkipped) {
  const std::string code =
      "extern \"C\" __global__ void step(int* a);\n"  // A declaration: no body.
      "extern \"C\" __global__ void step_twice(int* a) { a[0] = 2; }\n"
      "__device__ void call_step(int* a) { a[1] = 3; }\n"
      "extern \"C\" __global__ void step(int* a) { a[0] = 1; }\n";
  auto out = WithProducerWait(code, "step");
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(AfterCall(*out), " a[0] = 1; }\n");
}

TEST(GridDependencyTest, ParenthesesInTheParameterListAreMatched) {
  const std::string code =
      "extern \"C\" __global__ void k(float* __restrict__ x, int n = (1 + 2)) { x[0] = n; }\n";
  auto out = WithProducerWait(code, "k");
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(AfterCall(*out), " x[0] = n; }\n");
}

TEST(GridDependencyTest, NoKernelOfThatNameIsNullopt) {
  EXPECT_FALSE(WithProducerWait("__device__ void k(int* a) { a[0] = 1; }", "k").has_value());
  EXPECT_FALSE(WithProducerWait("extern \"C\" __global__ void k(int* a);", "k").has_value());
  EXPECT_FALSE(WithProducerWait("extern \"C\" __global__ void k(int* a) {}", "j").has_value());
  EXPECT_FALSE(WithProducerWait("extern \"C\" __global__ void k(int* a) {}", "").has_value());
}

// Every kernel of the generators' lists waits: with dependent launch on (the default), a kernel
// that did not would be refused at Create.
TEST(GridDependencyTest, EveryGeneratedKernelWaitsAndStillCompiles) {
  std::vector<GeneratedKernel> kernels;
  for (const std::vector<GeneratedKernel>& list :
       {AllKernels(), AttentionKernels(), BatchNormKernels(), BatchedKernels(), ConvKernels(),
        DecodeKernels(), EmbeddingKernels(), GeluKernels(), LayerNormBackwardKernels(),
        LayerNormKernels(), LossKernels(), LossScaleKernels(), OptimizerKernels(), PoolingKernels(),
        ResizeRowsKernels(), TransposeKernels()}) {
    kernels.insert(kernels.end(), list.begin(), list.end());
  }
  ASSERT_GE(kernels.size(), 50u);
  for (const GeneratedKernel& kernel : kernels) {
    const runtime::KernelSource source = ops::ToKernelSource(kernel);
    EXPECT_TRUE(source.waits_for_producers) << kernel.name;
    EXPECT_NE(source.code.find(kProducerWaitCall), std::string::npos) << kernel.name;
  }
  // The waiting source compiles for sm_90 (griddepcontrol) and for sm_80 (the wait left out).
  for (const char* arch : {"sm_90", "sm_80"}) {
    auto compiled = runtime::CompileWithNvrtc(ops::ToKernelSource(kernels.front()), arch);
    ASSERT_TRUE(compiled.ok()) << arch << ": " << compiled.status();
    EXPECT_EQ(compiled->ptx.find("griddepcontrol.wait") != std::string::npos,
              std::string(arch) == "sm_90")
        << arch;
  }
}

}  // namespace
}  // namespace reprise::codegen
