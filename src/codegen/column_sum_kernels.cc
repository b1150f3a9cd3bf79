#include "src/codegen/column_sum_kernels.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/codegen/element_type.h"

namespace reprise::codegen {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The chain's steps for one element, its inputs already declared as floats in0, in1, ...
std::string Steps(const FusedPointwiseSpec& spec) {
  std::string body;
  for (size_t k = 0; k < spec.expressions.size(); ++k) {
    absl::StrAppend(&body, "        const float s", k, " = ", spec.expressions[k], ";\n");
  }
  return body;
}

// Four adjacent columns of row r (columns c0 .. c0 + 3, i = r * cols + c0): one load and store
// per array, the steps per column.
std::string VectorBody(const FusedPointwiseSpec& spec) {
  std::string body;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    absl::StrAppend(&body, "      const float4 in", i, "_4 = Load4(in", i, "_ptr + ",
                    spec.inputs[i] == Broadcast::kRow ? "c0" : "i", ");\n");
  }
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    absl::StrAppend(&body, "      float4 out", o, "_4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);\n");
  }
  absl::StrAppend(&body, "#pragma unroll\n      for (int v = 0; v < 4; ++v) {\n");
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    absl::StrAppend(&body, "        const float in", i, " = Lane4(in", i, "_4, v);\n");
  }
  absl::StrAppend(&body, Steps(spec));
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    absl::StrAppend(&body, "        SetLane4(out", o, "_4, v, s", spec.outputs[o], ");\n");
  }
  absl::StrAppend(&body, "        acc[v] = __fadd_rn(acc[v], s", spec.column_sum, ");\n      }\n");
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    absl::StrAppend(&body, "      Store4(out", o, " + i, out", o, "_4);\n");
  }
  return body;
}

// The same for columns that are not a multiple of four or arrays that are not aligned: element
// by element, the same arithmetic.
std::string ScalarBody(const FusedPointwiseSpec& spec) {
  std::string body =
      "#pragma unroll\n      for (int v = 0; v < 4; ++v) {\n        const long long c = c0 + v;\n"
      "        if (c >= cols) break;\n        const long long i = r * cols + c;\n";
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    absl::StrAppend(&body, "        const float in", i, " = ToFloat(in", i, "_ptr[",
                    spec.inputs[i] == Broadcast::kRow ? "c" : "i", "]);\n");
  }
  absl::StrAppend(&body, Steps(spec));
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    absl::StrAppend(&body, "        out", o, "[i] = FromFloat(s", spec.outputs[o], ");\n");
  }
  absl::StrAppend(&body, "        acc[v] = __fadd_rn(acc[v], s", spec.column_sum, ");\n      }\n");
  return body;
}

constexpr char kLaneHelpers[] = R"(
__device__ __forceinline__ float Lane4(const float4& a, int v) {
  return v == 0 ? a.x : v == 1 ? a.y : v == 2 ? a.z : a.w;
}
__device__ __forceinline__ void SetLane4(float4& a, int v, float x) {
  if (v == 0) a.x = x; else if (v == 1) a.y = x; else if (v == 2) a.z = x; else a.w = x;
}
)";

}  // namespace

ColumnSumSplit ColumnSumSplitFor(int64_t rows, int64_t cols, int sm_count) {
  ColumnSumSplit s = UnsplitColumnSum(rows, cols);
  const int64_t target = int64_t{std::max(sm_count, 1)} * kColumnSumBlocksPerSm;
  const int64_t most = std::max<int64_t>(1, rows / kColumnSumMinRowsPerBlock);
  const int64_t row_blocks = std::min(most, std::max<int64_t>(1, target / s.column_blocks));
  if (row_blocks <= 1) return s;
  s.rows_per_block = CeilDiv(rows, row_blocks);
  s.row_blocks = CeilDiv(rows, s.rows_per_block);
  return s;
}

ColumnSumSplit UnsplitColumnSum(int64_t rows, int64_t cols) {
  return {.column_blocks = std::max<int64_t>(1, CeilDiv(cols, kColumnSumBlockColumns)),
          .row_blocks = 1,
          .rows_per_block = std::max<int64_t>(rows, 1)};
}

GeneratedKernel ColumnSumKernel(const std::string& name, const FusedPointwiseSpec& spec) {
  std::vector<std::string> params;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    params.push_back(absl::StrCat("const elem_t* __restrict__ in", i, "_ptr"));
  }
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    params.push_back(absl::StrCat("elem_t* __restrict__ out", o));
  }
  for (const char* p :
       {"elem_t* __restrict__ column_sum", "float* __restrict__ partial", "long long rows",
        "long long cols", "long long rows_per_block", "int vector"}) {
    params.push_back(p);
  }
  std::string code = absl::StrCat(
      ElementTypeSource(spec.dtype), kLaneHelpers, "#define REPRISE_COLSUM_WARPS ", kColumnSumWarps,
      "\nextern \"C\" __global__ void ", name, "(", absl::StrJoin(params, ", "), R"() {
  __shared__ float4 warp_sums[REPRISE_COLSUM_WARPS][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const long long c0 = (blockIdx.x * 32LL + lane) * 4;
  const long long row_begin = blockIdx.y * rows_per_block;
  const long long row_end = min(rows, row_begin + rows_per_block);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (c0 < cols && vector) {
#pragma unroll 4
    for (long long r = row_begin + warp; r < row_end; r += REPRISE_COLSUM_WARPS) {
      const long long i = r * cols + c0;
)",
      VectorBody(spec), R"(    }
  } else if (c0 < cols) {
    for (long long r = row_begin + warp; r < row_end; r += REPRISE_COLSUM_WARPS) {
)",
      ScalarBody(spec), R"(    }
  }
  warp_sums[warp][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  __syncthreads();
  if (warp != 0 || c0 >= cols) return;
  float4 total = warp_sums[0][lane];
  for (int w = 1; w < REPRISE_COLSUM_WARPS; ++w) {
    const float4 x = warp_sums[w][lane];
    total = make_float4(__fadd_rn(total.x, x.x), __fadd_rn(total.y, x.y), __fadd_rn(total.z, x.z),
                        __fadd_rn(total.w, x.w));
  }
  for (int v = 0; v < 4 && c0 + v < cols; ++v) {
    if (partial != nullptr) {
      partial[blockIdx.y * cols + c0 + v] = Lane4(total, v);
    } else {
      column_sum[c0 + v] = FromFloat(Lane4(total, v));
    }
  }
}
)");
  return {name, std::move(code)};
}

GeneratedKernel ColumnSumFinalize(DType dtype) {
  const std::string name = ElementKernelName("reprise_column_sum_finalize", dtype);
  return {name, absl::StrCat(ElementTypeSource(dtype), "extern \"C\" __global__ void ", name, R"((
    const float* __restrict__ partial, elem_t* __restrict__ column_sum, int row_blocks,
    long long cols) {
  const long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float total = 0.0f;
#pragma unroll 8
  for (int b = 0; b < row_blocks; ++b) total = __fadd_rn(total, partial[b * cols + c]);
  column_sum[c] = FromFloat(total);
}
)")};
}

}  // namespace reprise::codegen
