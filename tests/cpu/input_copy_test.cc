// The step's input copy without a GPU: what it stages from the host as inputs are bound and
// unbound (its description names the bytes; the GPU test BindingsGpuTest checks the copies).
#include <vector>

#include "absl/strings/str_cat.h"
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

// With the staging's device address, the copies are one gather kernel while every bound source is
// device memory, the staged bytes are few and the copies fit its list; else memcpy nodes again.
TEST(InputCopyTest, GathersOnlyDeviceSourcesAndFewSmallStagedStretches) {
  std::vector<char> device(2 * capture::InputCopy::kGatherMaxStagedBytes), host(device.size());
  char* d = device.data();
  capture::InputCopy big(d, host.data(), device.size(), /*host_on_device=*/host.data());
  EXPECT_FALSE(big.Gathers());  // Too many staged bytes: DMA.
  EXPECT_THAT(big.Describe(), StartsWith("memcpy H2D"));
  big.Bind(d, host.data(), device.size() / 2 + 16, /*on_device=*/true);
  EXPECT_TRUE(big.Gathers());
  EXPECT_EQ(big.Describe(), absl::StrCat("gather kernel, H2D ", device.size() / 2 - 16,
                                         " bytes + 1 bound input copies"));
  big.Bind(d, host.data(), device.size() / 2 + 16, /*on_device=*/false);  // Pinned host source.
  EXPECT_FALSE(big.Gathers());
  big.Bind(d, nullptr, 0);

  capture::InputCopy small(d, host.data(), 100, /*host_on_device=*/host.data());
  EXPECT_TRUE(small.Gathers());
  for (int i = 0; i < 3; ++i) small.Bind(d + 20 * i + 10, host.data(), 5, /*on_device=*/true);
  EXPECT_TRUE(small.Gathers());  // 4 staged stretches and 3 bound inputs: 7 copies.
  small.Bind(d + 70, host.data(), 5, /*on_device=*/true);
  EXPECT_FALSE(small.Gathers());  // 5 and 4: more than a GatherList holds.
  EXPECT_EQ(small.Describe(), "memcpy H2D 80 bytes + 4 bound input copies");
  capture::InputCopy unmapped(d, host.data(), 100);
  EXPECT_FALSE(unmapped.Gathers());
  unmapped.Bind(d, host.data(), 100, /*on_device=*/true);
  EXPECT_TRUE(unmapped.Gathers());  // Nothing staged: no mapped staging needed.
}

}  // namespace
}  // namespace reprise
