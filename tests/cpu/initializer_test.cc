// Initialiser arguments are checked where the graph takes them: a NaN or infinite bound would
// start every weight as NaN.
#include "src/ir/initializer.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/graph.h"

namespace reprise {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(InitializerTest, FiniteArgumentsAreAccepted) {
  EXPECT_TRUE(ir::CheckInitializer(Initializer::Zeros(), "w").ok());
  EXPECT_TRUE(ir::CheckInitializer(Initializer::Constant(-2.5), "w").ok());
  EXPECT_TRUE(ir::CheckInitializer(Initializer::Uniform(-1, 1), "w").ok());
  EXPECT_TRUE(ir::CheckInitializer(Initializer::Uniform(3, 3), "w").ok());
}

TEST(InitializerTest, NonFiniteOrReversedArgumentsAreRefusedNamingTheValue) {
  const absl::Status uniform = ir::CheckInitializer(Initializer::Uniform(-kInf, kInf), "fc.weight");
  EXPECT_EQ(uniform.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(uniform.message(), AllOf(HasSubstr("fc.weight"), HasSubstr("inf")));

  const absl::Status constant = ir::CheckInitializer(Initializer::Constant(kNaN), "bn.weight");
  EXPECT_EQ(constant.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(constant.message(), AllOf(HasSubstr("bn.weight"), HasSubstr("nan")));

  // Finite in double, infinite once rounded to float32.
  EXPECT_EQ(ir::CheckInitializer(Initializer::Constant(1e300), "c").code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status reversed = ir::CheckInitializer(Initializer::Uniform(1, -1), "w");
  EXPECT_EQ(reversed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(reversed.message(), HasSubstr("low <= high"));
}

TEST(InitializerTest, TheGraphRefusesBadInitialisersNamingTheNode) {
  Graph g;
  auto w = g.AddParameter("fc.weight", {Shape{4, 4}}, Initializer::Uniform(-kInf, kInf));
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(w.status().message(), HasSubstr("parameter 'fc.weight'"));
  auto c = g.AddConstant("one", {Shape{2}}, Initializer::Constant(kNaN));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("constant 'one'"));
  EXPECT_EQ(g.num_nodes(), 0);
}

}  // namespace
}  // namespace reprise
