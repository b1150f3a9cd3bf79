// PadRows: padding a batch to a bucket refuses sizes that would wrap or exhaust memory with a
// Status, never an exception or an empty result.
#include "reprise/bucketed_trainer.h"

#include <cstdint>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#if defined(__SANITIZE_ADDRESS__)
#define REPRISE_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REPRISE_UNDER_ASAN 1
#endif
#endif

namespace reprise {
namespace {

using ::testing::HasSubstr;

TEST(BucketedTrainerTest, PadRowsPadsToTheBucket) {
  const std::vector<float> data = {1, 2, 3, 4};
  const auto padded = PadRows(data, 2, 3, -1.0f);
  ASSERT_TRUE(padded.ok()) << padded.status();
  EXPECT_EQ(*padded, (std::vector<float>{1, 2, 3, 4, -1, -1}));
}

TEST(BucketedTrainerTest, PadRowsRefusesABucketWhoseValueCountWraps) {
  const std::vector<float> data = {1, 2, 3, 4};
  // 2^62 rows of 4 values: the product wraps to 0.
  const auto padded = PadRows(data, 1, int64_t{1} << 62);
  EXPECT_EQ(padded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(padded.status().message(), HasSubstr("4611686018427387904"));
}

TEST(BucketedTrainerTest, PadRowsRefusesMoreThanAVectorHoldsWithoutThrowing) {
  const std::vector<int32_t> labels = {1, 2};
  const auto padded = PadRows(labels, 2, std::numeric_limits<int64_t>::max());
  EXPECT_FALSE(padded.ok());
  EXPECT_THAT(padded.status().message(), HasSubstr("9223372036854775807"));
}

TEST(BucketedTrainerTest, PadRowsRefusesAnAllocationThatFailsWithoutThrowing) {
#ifdef REPRISE_UNDER_ASAN
  GTEST_SKIP() << "AddressSanitizer reports the failed allocation itself";
#endif
  const std::vector<float> data(1024, 0.0f);
  // 2^50 values of 4 bytes: within a vector's max_size, beyond any address space.
  const auto padded = PadRows(data, 1024, int64_t{1} << 50);
  EXPECT_FALSE(padded.ok());
  EXPECT_TRUE(padded.status().code() == absl::StatusCode::kResourceExhausted ||
              padded.status().code() == absl::StatusCode::kInvalidArgument)
      << padded.status();
}

}  // namespace
}  // namespace reprise
