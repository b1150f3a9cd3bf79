// cuBLASLt's candidates for GPT-2 124M's products in bfloat16, each timed: what the heuristic's
// first choice leaves on the table, product by product. At B=16, T=1024 also the configurations
// beyond the heuristic's for the two GELU epilogues; at B=4, T=256 (1,024 rows, products that
// fill the GPU once at most) for every product. Benchmarks, not tests (speed is measured, not
// asserted): run them with --gtest_also_run_disabled_tests; about two minutes each on an H200.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "src/runtime/cuda_status.h"
#include "src/runtime/device.h"
#include "src/runtime/lt_matmul.h"
#include "src/runtime/owners.h"
#include "src/util/status_macros.h"
#include "tests/gpu/gpu_test_util.h"

namespace reprise::runtime {
namespace {

constexpr int64_t kC = 768, kVocab = 50304;
constexpr size_t kWorkspaceBytes = 32 << 20;

struct Product {
  const char* name;
  MatmulShape shape;
  MatmulEpilogue::Kind epilogue;
  bool search = false;  // Also time configurations beyond the heuristic's (slow: minutes).
};

MatmulShape Bf16(int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  return MatmulShape{m, n, k, ta, tb, DType::kBFloat16};
}

// Forward products read weights stored [out, in] (transpose_b); data gradients dX = dY·W; weight
// gradients dW = dYᵀ·X (transpose_a). `search_all`: search every product, not only the GELU ones.
std::vector<Product> Gpt2Products(int64_t rows, bool search_all) {
  using K = MatmulEpilogue::Kind;
  std::vector<Product> products = {
      {"c_attn fwd +bias", Bf16(rows, 3 * kC, kC, false, true), K::kBias},
      {"attn.c_proj fwd +bias+residual", Bf16(rows, kC, kC, false, true), K::kBiasResidual},
      {"c_fc fwd +bias+gelu_aux", Bf16(rows, 4 * kC, kC, false, true), K::kGeluAuxBias, true},
      {"c_fc fwd plain", Bf16(rows, 4 * kC, kC, false, true), K::kNone},
      {"mlp.c_proj fwd +bias+residual", Bf16(rows, kC, 4 * kC, false, true), K::kBiasResidual},
      {"lm_head fwd", Bf16(rows, kVocab, kC, false, true), K::kNone},
      {"lm_head dgrad", Bf16(rows, kC, kVocab, false, false), K::kNone},
      {"mlp.c_proj dgrad +dgelu", Bf16(rows, 4 * kC, kC, false, false), K::kDGelu, true},
      {"mlp.c_proj dgrad plain", Bf16(rows, 4 * kC, kC, false, false), K::kNone},
      {"c_fc dgrad", Bf16(rows, kC, 4 * kC, false, false), K::kNone},
      {"c_attn dgrad", Bf16(rows, kC, 3 * kC, false, false), K::kNone},
      {"attn.c_proj dgrad", Bf16(rows, kC, kC, false, false), K::kNone},
      {"lm_head wgrad", Bf16(kVocab, kC, rows, true, false), K::kNone},
      {"c_attn wgrad", Bf16(3 * kC, kC, rows, true, false), K::kNone},
      {"c_fc wgrad", Bf16(4 * kC, kC, rows, true, false), K::kNone},
      {"mlp.c_proj wgrad", Bf16(kC, 4 * kC, rows, true, false), K::kNone},
  };
  if (search_all) {
    for (Product& p : products) p.search = true;
  }
  return products;
}

// A device buffer of `elements` bfloat16 values uniform in [-1, 1] (a pattern of 1M values
// repeated: the products' speed, not their values, is measured).
absl::StatusOr<DeviceBuffer> RandomBf16(int64_t elements, std::mt19937& rng) {
  constexpr int64_t kPattern = 1 << 20;
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<uint16_t> pattern(kPattern);
  for (uint16_t& v : pattern) {
    const float f = uniform(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    v = static_cast<uint16_t>(bits >> 16);
  }
  ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Create(elements * sizeof(uint16_t)));
  for (int64_t at = 0; at < elements; at += kPattern) {
    const int64_t count = std::min(kPattern, elements - at);
    CUDA_RETURN_IF_ERROR(cudaMemcpy(static_cast<uint16_t*>(buffer.data()) + at, pattern.data(),
                                    count * sizeof(uint16_t), cudaMemcpyHostToDevice),
                         "fill");
  }
  return buffer;
}

// Times every product's candidates at `rows` tokens, and configurations beyond the heuristic's
// (at most `searched`) for the products that search.
void TimeGpt2Products(int64_t rows, bool search_all, int searched) {
  REPRISE_ASSERT_OK(UseDevice(0).status());
  REPRISE_ASSERT_OK_AND_ASSIGN(LtHandle handle, LtHandle::Create());
  REPRISE_ASSERT_OK_AND_ASSIGN(Stream stream, Stream::Create());
  std::mt19937 rng(7);
  const int64_t big = rows * kVocab;  // The largest operand and output.
  REPRISE_ASSERT_OK_AND_ASSIGN(DeviceBuffer a, RandomBf16(big, rng));
  REPRISE_ASSERT_OK_AND_ASSIGN(DeviceBuffer b, RandomBf16(big, rng));
  REPRISE_ASSERT_OK_AND_ASSIGN(DeviceBuffer c, DeviceBuffer::Create(big * sizeof(uint16_t)));
  REPRISE_ASSERT_OK_AND_ASSIGN(DeviceBuffer bias, RandomBf16(kVocab, rng));
  REPRISE_ASSERT_OK_AND_ASSIGN(DeviceBuffer aux, RandomBf16(rows * 4 * kC, rng));
  REPRISE_ASSERT_OK_AND_ASSIGN(DeviceBuffer residual, RandomBf16(rows * kC, rng));
  REPRISE_ASSERT_OK_AND_ASSIGN(DeviceBuffer workspace, DeviceBuffer::Create(kWorkspaceBytes));
  constexpr int kCandidates = 32, kRepeats = 10, kRounds = 2, kShown = 10;
  double first_total = 0, best_total = 0;
  for (const Product& p : Gpt2Products(rows, search_all)) {
    MatmulEpilogue epilogue{.kind = p.epilogue,
                            .bias = bias.data(),
                            .gelu_input = aux.data(),
                            .residual = residual.data()};
    REPRISE_ASSERT_OK_AND_ASSIGN(
        LtMatmul matmul, LtMatmul::Create(handle, p.shape, /*allow_tf32=*/false, kWorkspaceBytes,
                                          epilogue, kCandidates));
    const int heuristic = matmul.candidate_count();
    int added = 0;
    if (p.search) {
      const absl::Time start = absl::Now();
      REPRISE_ASSERT_OK_AND_ASSIGN(added, matmul.AddConfiguredCandidates(searched));
      std::printf("%s: %d configurations listed in %.1f ms\n", p.name, added,
                  absl::ToDoubleMilliseconds(absl::Now() - start));
    }
    // Rounds alternate over all candidates (TimeCandidates), so a clock change touches all.
    REPRISE_ASSERT_OK_AND_ASSIGN(const std::vector<float> again,
                                 matmul.TimeCandidates(stream.get(), a.data(), b.data(), c.data(),
                                                       workspace.data(), kRepeats, kRounds));
    std::vector<int> order(again.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::sort(order.begin(), order.end(), [&](int x, int y) { return again[x] < again[y]; });
    const double tflop = 2.0 * p.shape.m * p.shape.n * p.shape.k / 1e12;
    const int best = static_cast<int>(std::min_element(again.begin(), again.end()) - again.begin());
    std::printf(
        "%s: %s; %d from the heuristic, %d more configured; first %.4f ms (%.0f TFLOP/s), "
        "best #%d %.4f ms (%.0f)\n",
        p.name, matmul.Describe().c_str(), heuristic, added, again[0], tflop / again[0] * 1e3,
        best + 1, again[best], tflop / again[best] * 1e3);
    for (int r = 0; r < std::min<int>(kShown, static_cast<int>(order.size())); ++r) {
      const int i = order[r];
      std::printf("  #%-3d %8.4f ms %4.0f TFLOP/s  %s%s\n", i + 1, again[i], tflop / again[i] * 1e3,
                  matmul.CandidateText(i).c_str(), i < heuristic ? " (heuristic)" : "");
    }
    first_total += again[0];
    best_total += again[best];
  }
  std::printf("one of each: heuristic's first %.4f ms, fastest %.4f ms\n", first_total, best_total);
}

TEST(LtMatmulCandidatesGpuTest, DISABLED_Gpt2B16Products) {
  REPRISE_REQUIRE_GPU();
  TimeGpt2Products(16384, /*search_all=*/false, 200);
}

TEST(LtMatmulCandidatesGpuTest, DISABLED_Gpt2B4Products) {
  REPRISE_REQUIRE_GPU();
  TimeGpt2Products(1024, /*search_all=*/true, 2000);
}

}  // namespace
}  // namespace reprise::runtime
