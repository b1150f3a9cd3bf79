// NVRTC needs no GPU, so compiling and keying kernels is tested on every machine.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/runtime/kernel_store.h"

namespace reprise::runtime {
namespace {

using ::testing::HasSubstr;

KernelSource Scale() {
  return KernelSource{
      .name = "scale_by_two",
      .code = R"(extern "C" __global__ void scale_by_two(int n, const float* x, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
})",
      .options = {}};
}

TEST(CompileWithNvrtcTest, CompilesForSm90WithoutAGpu) {
  absl::StatusOr<CompiledKernel> compiled = CompileWithNvrtc(Scale(), "sm_90");
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_GE(compiled->cubin.size(), 4u);
  EXPECT_EQ(compiled->cubin.substr(0, 4),
            "\x7f"
            "ELF");  // A CUBIN is an ELF image.
  EXPECT_GT(compiled->compile_ms, 0.0);
}

TEST(CompileWithNvrtcTest, PassesSourceOptionsToNvrtc) {
  KernelSource source = Scale();
  source.code = "#ifndef FACTOR\n#error FACTOR missing\n#endif\n" + source.code;
  source.options = {"-DFACTOR=3"};
  absl::StatusOr<CompiledKernel> compiled = CompileWithNvrtc(source, "sm_90");
  EXPECT_TRUE(compiled.ok()) << compiled.status();
}

TEST(CompileWithNvrtcTest, SyntaxErrorIsInvalidArgumentWithNameAndLog) {
  KernelSource source = Scale();
  source.name = "broken_kernel";
  source.code =
      R"(extern "C" __global__ void broken_kernel(float* y) { y[0] = undeclared_thing; })";
  absl::StatusOr<CompiledKernel> compiled = CompileWithNvrtc(source, "sm_90");
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(compiled.status().message(), HasSubstr("broken_kernel"));
  EXPECT_THAT(compiled.status().message(), HasSubstr("NVRTC_ERROR_COMPILATION"));
  EXPECT_THAT(compiled.status().message(), HasSubstr("undeclared_thing"));  // From NVRTC's log.
}

TEST(CompileWithNvrtcTest, UnknownArchitectureIsInvalidArgument) {
  absl::StatusOr<CompiledKernel> compiled = CompileWithNvrtc(Scale(), "sm_1");
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(compiled.status().message(), HasSubstr("scale_by_two"));
}

TEST(KernelStoreKeyTest, IsStableHexSha256) {
  const std::string key = KernelStore::Key(Scale(), "sm_90");
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(KernelStore::Key(Scale(), "sm_90"), key);
}

TEST(KernelStoreKeyTest, ChangesWithCodeOptionsArchAndName) {
  const KernelSource base = Scale();
  const std::string key = KernelStore::Key(base, "sm_90");

  KernelSource code = base;
  code.code += " ";
  EXPECT_NE(KernelStore::Key(code, "sm_90"), key);

  KernelSource options = base;
  options.options = {"-DX=1"};
  EXPECT_NE(KernelStore::Key(options, "sm_90"), key);

  EXPECT_NE(KernelStore::Key(base, "sm_80"), key);

  KernelSource name = base;
  name.name = "scale_by_three";
  EXPECT_NE(KernelStore::Key(name, "sm_90"), key);
}

// Without length prefixes these pairs would hash the same bytes.
TEST(KernelStoreKeyTest, FieldBoundariesMatter) {
  KernelSource one = Scale();
  one.options = {"-DA", "-DB"};
  KernelSource two = Scale();
  two.options = {"-DA-DB"};
  EXPECT_NE(KernelStore::Key(one, "sm_90"), KernelStore::Key(two, "sm_90"));

  KernelSource three = Scale();
  three.options = {""};
  EXPECT_NE(KernelStore::Key(three, "sm_90"), KernelStore::Key(Scale(), "sm_90"));
}

}  // namespace
}  // namespace reprise::runtime
