#include "src/codegen/embedding_kernels.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "src/codegen/element_type.h"
#include "src/codegen/vector16.h"

namespace reprise::codegen {
namespace {

// `device_code` (helper functions) goes before the kernel.
GeneratedKernel Make(const char* base, DType dtype, const std::string& signature,
                     const std::string& body, const char* device_code = "") {
  const std::string name = ElementKernelName(base, dtype);
  return {name, absl::StrCat(ElementTypeSource(dtype), "#define CHUNK ", kEmbeddingChunk, "\n",
                             device_code, "extern \"C\" __global__ void ", name, "(", signature,
                             ") {\n", body, "}\n")};
}

}  // namespace

GeneratedKernel EmbeddingForward(DType dtype) {
  return Make("reprise_embedding", dtype,
              "const int* __restrict__ ids, const elem_t* __restrict__ table, "
              "elem_t* __restrict__ out, long long tokens, int cols, int vocab",
              R"(
  const long long n = tokens * cols;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const int id = ids[i / cols];
    out[i] = (id >= 0 && id < vocab) ? table[(long long)id * cols + i % cols] : FromFloat(0.0f);
  }
)");
}

GeneratedKernel EmbeddingSortChunks() {
  return Make("reprise_embedding_sort_chunks", DType::kFloat32,
              "const int* __restrict__ ids, unsigned* __restrict__ keys, long long tokens, "
              "int vocab",
              R"(
  __shared__ unsigned s[CHUNK];
  const int i = threadIdx.x;
  const long long t = (long long)blockIdx.x * CHUNK + i;
  const int id = t < tokens ? ids[t] : -1;
  s[i] = (id >= 0 && id < vocab) ? (unsigned)id * CHUNK + i : 0xffffffffu;
  __syncthreads();
  // Bitonic sort, ascending; the keys are distinct except for padding, so the result is unique.
  for (int k = 2; k <= CHUNK; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      const int partner = i ^ j;
      if (partner > i) {
        const unsigned a = s[i], b = s[partner];
        const bool ascending = (i & k) == 0;
        if ((a > b) == ascending) {
          s[i] = b;
          s[partner] = a;
        }
      }
      __syncthreads();
    }
  }
  keys[(long long)blockIdx.x * CHUNK + i] = s[i];
)");
}

namespace {

// Device code both gradient kernels share: the search for a row's tokens in a sorted chunk, and
// the sum of a row's tokens over chunks [first, chunks) in (chunk, position) order.
const char kRowSums[] = R"(
// The first position in the sorted chunk whose key is >= key (CHUNK where there is none).
__device__ __forceinline__ int FirstAtLeast(const unsigned* chunk, unsigned key) {
  int lo = 0, hi = CHUNK;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (chunk[mid] < key) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// x rounded to elem_t and back: what a stored gradient would hold.
__device__ __forceinline__ float Rounded(float x) { return ToFloat(FromFloat(x)); }

// Row v of dtable: the sum of the dy rows of its tokens, chunk k's from r[2k] to r[2k + 1], for k
// in [first, chunks); where base is not null the sum is rounded to elem_t, then base's row added
// (as embedding_grad, then add, would round). base may be dtable itself: a lane reads each of its
// columns before it writes them. `vector`: four adjacent columns a lane (cols % 4 == 0, all
// three aligned to four elements).
__device__ void SumRow(const unsigned* __restrict__ keys, const int* r, int first, int chunks,
                       const elem_t* __restrict__ dy, const elem_t* base, elem_t* dtable,
                       long long v, int cols, int vector, int lane) {
  if (vector) {
    for (int c = 4 * lane; c < cols; c += 128) {
      float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int k = first; k < chunks; ++k) {
        const unsigned* chunk = keys + (long long)k * CHUNK;
        for (int j = r[2 * k]; j < r[2 * k + 1]; ++j) {
          const long long t = (long long)k * CHUNK + (chunk[j] % CHUNK);
          const float4 g = Load4(dy + t * cols + c);
          sum.x += g.x;
          sum.y += g.y;
          sum.z += g.z;
          sum.w += g.w;
        }
      }
      if (base != nullptr) {
        const float4 b = Load4(base + v * cols + c);
        sum = make_float4(Rounded(sum.x) + b.x, Rounded(sum.y) + b.y, Rounded(sum.z) + b.z,
                          Rounded(sum.w) + b.w);
      }
      Store4(dtable + v * cols + c, sum);
    }
    return;
  }
  for (int c = lane; c < cols; c += 32) {
    float sum = 0.0f;
    for (int k = first; k < chunks; ++k) {
      const unsigned* chunk = keys + (long long)k * CHUNK;
      for (int j = r[2 * k]; j < r[2 * k + 1]; ++j) {
        const long long t = (long long)k * CHUNK + (chunk[j] % CHUNK);
        sum += ToFloat(dy[t * cols + c]);
      }
    }
    if (base != nullptr) sum = Rounded(sum) + ToFloat(base[v * cols + c]);
    dtable[v * cols + c] = FromFloat(sum);
  }
}
)";

}  // namespace

GeneratedKernel EmbeddingGrad(DType dtype) {
  return Make("reprise_embedding_grad", dtype,
              "const unsigned* __restrict__ keys, const elem_t* __restrict__ dy, "
              "const elem_t* __restrict__ base, elem_t* __restrict__ dtable, int chunks, "
              "int cols, int vocab, int vector",
              absl::StrCat("#define ROWS_PER_BLOCK ", kEmbeddingGradRowsPerBlock, R"(
  // [ROWS_PER_BLOCK][chunks][2]: each warp's row's first and end position in every chunk.
  extern __shared__ int range[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long v = (long long)blockIdx.x * ROWS_PER_BLOCK + warp;
  if (v >= vocab) return;  // Warps share nothing but their own slice of `range`.
  int* const r = range + warp * 2 * chunks;
  const unsigned first_key = (unsigned)v * CHUNK, end_key = first_key + CHUNK;
  // The row's 2·chunks binary searches side by side, one per lane (they used to run one after
  // another in one thread per chunk: a chain of dependent loads that bounded the kernel).
  for (int s = lane; s < 2 * chunks; s += 32) {
    r[s] = FirstAtLeast(keys + (long long)(s / 2) * CHUNK, (s & 1) == 0 ? first_key : end_key);
  }
  __syncwarp();
  SumRow(keys, r, 0, chunks, dy, base, dtable, v, cols, vector, lane);
)"),
              kRowSums);
}

GeneratedKernel EmbeddingGradInPlace(DType dtype) {
  return Make("reprise_embedding_grad_in_place", dtype,
              "const unsigned* __restrict__ keys, const elem_t* __restrict__ dy, "
              "elem_t* table, int chunks, int cols, int vector",
              absl::StrCat("#define WARPS ", kEmbeddingGradRowsPerBlock, R"(
  // [WARPS][chunks][2]: each warp's row's first and end position in every chunk.
  extern __shared__ int range[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long slot = (long long)blockIdx.x * WARPS + warp;  // k·CHUNK + position
  if (slot >= (long long)chunks * CHUNK) return;
  const int k = (int)(slot / CHUNK), p = (int)(slot % CHUNK);
  const unsigned* const chunk = keys + (long long)k * CHUNK;
  const unsigned key = chunk[p];
  // Padding sorts last; a row is summed by the warp of its first token in its first chunk.
  if (key == 0xffffffffu || (p > 0 && chunk[p - 1] / CHUNK == key / CHUNK)) return;
  const unsigned v = key / CHUNK, first_key = v * CHUNK, end_key = first_key + CHUNK;
  bool earlier = false;
  for (int j = lane; j < k; j += 32) {
    const unsigned* other = keys + (long long)j * CHUNK;
    const int at = FirstAtLeast(other, first_key);
    earlier = earlier || (at < CHUNK && other[at] < end_key);
  }
  if (__any_sync(0xffffffffu, earlier)) return;
  int* const r = range + warp * 2 * chunks;
  for (int s = 2 * k + lane; s < 2 * chunks; s += 32) {
    r[s] = s == 2 * k ? p : FirstAtLeast(keys + (long long)(s / 2) * CHUNK,
                                         (s & 1) == 0 ? first_key : end_key);
  }
  __syncwarp();
  SumRow(keys, r, k, chunks, dy, table, table, v, cols, vector, lane);
)"),
              kRowSums);
}

GeneratedKernel AddPositions(DType dtype) {
  return Make("reprise_add_positions", dtype,
              "const elem_t* __restrict__ x, const elem_t* __restrict__ table, "
              "elem_t* __restrict__ y, long long rows, int cols, int positions",
              R"(
  const long long n = rows * cols;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const long long p = (i / cols) % positions;
    y[i] = FromFloat(ToFloat(x[i]) + ToFloat(table[p * cols + i % cols]));
  }
)");
}

GeneratedKernel AddPositionsGrad(DType dtype) {
  return Make("reprise_add_positions_grad", dtype,
              "const elem_t* __restrict__ dy, elem_t* __restrict__ dtable, long long rows, "
              "int cols, int positions, int table_rows",
              R"(
  const long long n = (long long)table_rows * cols;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const long long p = i / cols;
    float sum = 0.0f;
    if (p < positions) {
      for (long long r = p; r < rows; r += positions) sum += ToFloat(dy[r * cols + i % cols]);
    }
    dtable[i] = FromFloat(sum);
  }
)");
}

// The 16-byte vector forms: each thread takes VEC consecutive elements of a row (cols % VEC == 0,
// the tensors 16-byte aligned), with the scalar forms' arithmetic element by element.
GeneratedKernel EmbeddingForwardVec(DType dtype) {
  return Make("reprise_embedding_vec", dtype,
              "const int* __restrict__ ids, const elem_t* __restrict__ table, "
              "elem_t* __restrict__ out, long long tokens, int cols, int vocab",
              R"(
  const long long n = tokens * cols / VEC;
  for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v < n;
       v += (long long)gridDim.x * blockDim.x) {
    const long long i = v * VEC;
    const int id = ids[i / cols];
    // The row's bits as they are: a copy, not a widening and a rounding.
    *reinterpret_cast<vec_t*>(out + i) =
        (id >= 0 && id < vocab) ? LoadVec(table + (long long)id * cols + i % cols) : ZeroVec();
  }
)",
              Vector16Source(dtype).c_str());
}

GeneratedKernel AddPositionsVec(DType dtype) {
  return Make("reprise_add_positions_vec", dtype,
              "const elem_t* __restrict__ x, const elem_t* __restrict__ table, "
              "elem_t* __restrict__ y, long long rows, int cols, int positions",
              R"(
  const long long n = rows * cols / VEC;
  for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v < n;
       v += (long long)gridDim.x * blockDim.x) {
    const long long i = v * VEC, p = (i / cols) % positions;
    const vec_t a = LoadVec(x + i), b = LoadVec(table + p * cols + i % cols);
    float o[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) o[k] = VecAt(a, k) + VecAt(b, k);
    StoreVec(y + i, o);
  }
)",
              Vector16Source(dtype).c_str());
}

GeneratedKernel AddPositionsGradVec(DType dtype) {
  return Make("reprise_add_positions_grad_vec", dtype,
              "const elem_t* __restrict__ dy, elem_t* __restrict__ dtable, long long rows, "
              "int cols, int positions, int table_rows",
              R"(
  const long long n = (long long)table_rows * cols / VEC;
  for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v < n;
       v += (long long)gridDim.x * blockDim.x) {
    const long long i = v * VEC, p = i / cols;
    float sum[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) sum[k] = 0.0f;
    if (p < positions) {
      // Several rows' loads in flight at once; each element still adds its rows in order.
#pragma unroll 4
      for (long long r = p; r < rows; r += positions) {
        const vec_t d = LoadVec(dy + r * cols + i % cols);
#pragma unroll
        for (int k = 0; k < VEC; ++k) sum[k] += VecAt(d, k);
      }
    }
    StoreVec(dtable + i, sum);
  }
)",
              Vector16Source(dtype).c_str());
}

std::vector<GeneratedKernel> EmbeddingKernels() {
  std::vector<GeneratedKernel> kernels = {EmbeddingSortChunks()};
  for (DType dtype : kKernelElementTypes) {
    for (GeneratedKernel (*make)(DType) :
         {EmbeddingForward, EmbeddingGrad, EmbeddingGradInPlace, AddPositions, AddPositionsGrad,
          EmbeddingForwardVec, AddPositionsVec, AddPositionsGradVec}) {
      kernels.push_back(make(dtype));
    }
  }
  return kernels;
}

}  // namespace reprise::codegen
