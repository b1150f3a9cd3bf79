// The trainer's own stream (lane 0) has the device's greatest priority; a plain stream keeps the
// default.
#include <cuda_runtime.h>

#include "gtest/gtest.h"
#include "src/runtime/owners.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise {
namespace {

TEST(StreamPriorityGpuTest, HighestPriorityStreamHasTheDevicesGreatestPriority) {
  REPRISE_REQUIRE_GPU();
  int least = 0, greatest = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  auto high = runtime::Stream::CreateHighestPriority();
  ASSERT_TRUE(high.ok()) << high.status();
  auto plain = runtime::Stream::Create();
  ASSERT_TRUE(plain.ok()) << plain.status();
  int priority = 1;
  ASSERT_EQ(cudaStreamGetPriority(high->get(), &priority), cudaSuccess);
  EXPECT_EQ(priority, greatest);
  ASSERT_EQ(cudaStreamGetPriority(plain->get(), &priority), cudaSuccess);
  EXPECT_EQ(priority, 0);
  EXPECT_LE(greatest, least);  // Lower numbers are higher priorities.
}

}  // namespace
}  // namespace reprise
