// Initialiser arguments are checked where the graph takes them: a NaN or infinite bound would
// start every weight as NaN.
#include "src/ir/initializer.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "reprise/graph.h"
#include "src/ir/host_tensor.h"
#include "src/util/splitmix64.h"

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

// The uniform stream written out one element after another: the state from the seed and the
// FNV-1a hash of the name, then one SplitMix64 draw per element, rounded through float.
std::vector<float> SequentialUniform(double low, double high, uint64_t seed,
                                     const std::string& name, int64_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  uint64_t state = seed * 0x9e3779b97f4a7c15ull ^ h;
  std::vector<float> out(n);
  for (float& x : out) {
    const double unit = static_cast<double>(util::SplitMix64(state) >> 11) * 0x1.0p-53;
    x = static_cast<float>(low + (high - low) * unit);
  }
  return out;
}

TEST(InitializerTest, LargeTensorsFilledInParallelHoldTheSequentialStream) {
  // Many of the parallel fill's chunks (2^16 elements) and a partial one: every element,
  // across each chunk boundary, is the one a single thread draws.
  const int64_t n = 3 * (int64_t{1} << 18) + 7;
  ir::HostTensor t({Shape{n}, DType::kFloat32});
  ir::FillInitial(Initializer::Uniform(-0.5, 0.25), 1337, "transformer.wte.weight", t);
  const std::vector<float> want = SequentialUniform(-0.5, 0.25, 1337, "transformer.wte.weight", n);
  const absl::Span<const float> got = t.data<float>();
  int64_t differing = 0;
  for (int64_t i = 0; i < n; ++i) differing += got[i] != want[i];
  EXPECT_EQ(differing, 0);
  EXPECT_NE(got[n - 1], got[n - 2]);
  // Any slice drawn alone, across a chunk boundary too, holds the same bits.
  for (int64_t first : {int64_t{0}, (int64_t{1} << 18) - 3, n - 7}) {
    std::vector<float> slice(first + 7 <= n ? 7 : n - first);
    ir::FillInitialSlice(Initializer::Uniform(-0.5, 0.25), 1337, "transformer.wte.weight", first,
                         absl::MakeSpan(slice));
    for (size_t i = 0; i < slice.size(); ++i) EXPECT_EQ(slice[i], want[first + i]) << first + i;
  }

  ir::HostTensor d({Shape{n}, DType::kFloat64});
  ir::FillInitial(Initializer::Uniform(-0.5, 0.25), 1337, "transformer.wte.weight", d);
  differing = 0;
  for (int64_t i = 0; i < n; ++i) differing += d.data<double>()[i] != want[i];
  EXPECT_EQ(differing, 0);
}

TEST(InitializerTest, ZeroBitsAreRecognisedOnlyForPositiveZero) {
  EXPECT_TRUE(ir::WritesZeroBits(Initializer::Zeros()));
  EXPECT_TRUE(ir::WritesZeroBits(Initializer::Constant(0.0)));
  EXPECT_TRUE(ir::WritesZeroBits(Initializer::Constant(1e-60)));  // Rounds to +0 in float.
  EXPECT_TRUE(ir::WritesZeroBits(Initializer::Uniform(0, 0)));
  EXPECT_FALSE(ir::WritesZeroBits(Initializer::Constant(-0.0)));
  EXPECT_FALSE(ir::WritesZeroBits(Initializer::Constant(1.0)));
  EXPECT_FALSE(ir::WritesZeroBits(Initializer::Uniform(-1, 1)));
  // What FillInitial writes for each: all bytes zero exactly where WritesZeroBits says so.
  for (const Initializer& init : {Initializer::Zeros(), Initializer::Constant(0.0),
                                  Initializer::Constant(-0.0), Initializer::Uniform(0, 0)}) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kBFloat16}) {
      ir::HostTensor t({Shape{5}, dtype});
      ir::FillInitial(init, 3, "x", t);
      const auto* bytes = static_cast<const unsigned char*>(t.raw());
      bool zero = true;
      for (int64_t i = 0; i < t.spec().bytes(); ++i) zero = zero && bytes[i] == 0;
      EXPECT_EQ(zero, ir::WritesZeroBits(init) || dtype == DType::kInt32)
          << DTypeName(dtype) << " value " << init.value;
    }
  }
}

}  // namespace
}  // namespace reprise
