// The step's input copy without a GPU: what it stages from the host as inputs are bound and
// unbound (its description names the bytes; the GPU test BindingsGpuTest checks the copies).
#include "capture/lowered_step.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reprise {
namespace {

using ::testing::StartsWith;

TEST(InputCopyTest, BindingsTakeTheirBytesOffTheHostCopyAndUnbindingPutsThemBack) {
  char device[100], host[100];
  capture::InputCopy copy(device, host, sizeof(device));
  EXPECT_EQ(copy.Describe(), "memcpy H2D 100 bytes");
  int source = 0;
  copy.Bind(device + 40, &source, 20);  // The middle: two host stretches remain.
  EXPECT_EQ(copy.Describe(), "memcpy H2D 80 bytes + 1 bound input copies");
  copy.Bind(device, &source, 40);  // Adjacent to the first binding.
  EXPECT_EQ(copy.Describe(), "memcpy H2D 40 bytes + 2 bound input copies");
  copy.Bind(device + 60, &source, 40);  // Everything bound.
  EXPECT_EQ(copy.Describe(), "memcpy H2D 0 bytes + 3 bound input copies");
  EXPECT_TRUE(copy.IsBound(device + 60));
  copy.Bind(device + 40, nullptr, 0);
  EXPECT_THAT(copy.Describe(), StartsWith("memcpy H2D 20 bytes"));
  EXPECT_FALSE(copy.IsBound(device + 40));
}

}  // namespace
}  // namespace reprise
