#include "src/codegen/mlp_guard_source.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace reprise::codegen {
namespace {

// One parameter tensor of every model: its name, its velocity's, where its gradient lies in the
// workspace, and its elements.
struct Segment {
  std::string w, v;
  int64_t grad = 0;
  int64_t n = 0;
};

// Float4s each thread takes per round of the vectorised update.
constexpr int kUnroll = 4;

}  // namespace

std::string GuardUpdateSource(const MlpStepPlan& plan, const std::string& lr, const std::string& mu,
                              const std::string& wd) {
  const int layers = plan.layers();
  const auto& d = plan.widths;
  std::vector<Segment> vec, scalar;
  for (int l = 0; l < layers; ++l) {
    const int64_t weights = int64_t{plan.models} * d[l + 1] * d[l];
    const int64_t biases = int64_t{plan.models} * d[l + 1];
    const Segment w{absl::StrCat("w", l), absl::StrCat("vw", l), plan.grad_w_offset[l], weights};
    const Segment b{absl::StrCat("b", l), absl::StrCat("vb", l), plan.grad_b_offset[l], biases};
    // Gradient offsets are 128-byte aligned; parameters are where the target says so.
    for (const Segment& s : {w, b})
      (plan.target.aligned && s.n % 4 == 0 ? vec : scalar).push_back(s);
  }
  std::string code = "    {  // Every parameter's SGD step from its gradient in the workspace.\n";
  if (!vec.empty()) {
    int64_t total = 0;
    for (const Segment& s : vec) total += s.n / 4;
    absl::StrAppend(&code, "      const int stride = gridDim.x * blockDim.x;\n",
                    "      for (int q0 = blockIdx.x * blockDim.x + threadIdx.x; q0 < ", total,
                    "; q0 += ", kUnroll, " * stride) {\n", "        float4* pw[", kUnroll, "];\n",
                    "        float4* pv[", kUnroll, "];\n", "        float4 gq[", kUnroll, "], wq[",
                    kUnroll, "], vq[", kUnroll, "];\n", "#pragma unroll\n",
                    "        for (int u = 0; u < ", kUnroll, "; ++u) {\n",
                    "          const int q = q0 + u * stride;\n", "          pw[u] = nullptr;\n",
                    "          if (q >= ", total, ") continue;\n", "          const float* pg;\n");
    int64_t first = 0;
    for (size_t i = 0; i < vec.size(); ++i) {
      const Segment& s = vec[i];
      const int64_t end = first + s.n / 4;
      absl::StrAppend(&code, "          ", i == 0 ? "" : "} else ",
                      i + 1 == vec.size() ? "{" : absl::StrCat("if (q < ", end, ") {"),
                      "\n            const int j = q - ", first, ";\n",
                      "            pw[u] = reinterpret_cast<float4*>(", s.w, ") + j;\n",
                      "            pv[u] = reinterpret_cast<float4*>(", s.v, ") + j;\n",
                      "            pg = ws + ", s.grad, " + 4 * static_cast<size_t>(j);\n");
      first = end;
    }
    absl::StrAppend(&code, "          }\n", "          gq[u] = LoadCg4(pg);\n",
                    "          wq[u] = *pw[u];\n", "          vq[u] = *pv[u];\n", "        }\n",
                    "#pragma unroll\n", "        for (int u = 0; u < ", kUnroll, "; ++u) {\n",
                    "          if (pw[u] == nullptr) continue;\n",
                    "          mlpg::SgdQuad(wq[u], vq[u], gq[u], ", lr, ", ", mu, ", ", wd, ");\n",
                    "          *pw[u] = wq[u];\n", "          *pv[u] = vq[u];\n", "        }\n",
                    "      }\n");
  }
  for (const Segment& s : scalar) {
    absl::StrAppend(&code, "      mlpg::UpdateScalar(", s.w, ", ", s.v, ", ws + ", s.grad, ", ",
                    s.n, ", ", lr, ", ", mu, ", ", wd, ");\n");
  }
  absl::StrAppend(&code, "    }\n");
  return code;
}

}  // namespace reprise::codegen
