#include "src/codegen/resize_rows_kernels.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace reprise::codegen {
namespace {

// The CUDA type of a word and its zero.
struct Word {
  const char* type;
  const char* zero;
};

Word WordOf(int word_bytes) {
  switch (word_bytes) {
    case 16:
      return {"uint4", "make_uint4(0u, 0u, 0u, 0u)"};
    case 8:
      return {"unsigned long long", "0ull"};
    case 4:
      return {"unsigned int", "0u"};
    case 2:
      return {"unsigned short", "(unsigned short)0"};
    default:
      return {"unsigned char", "(unsigned char)0"};
  }
}

}  // namespace

GeneratedKernel ResizeRows(int word_bytes) {
  const Word word = WordOf(word_bytes);
  const std::string name = absl::StrCat("reprise_resize_rows_w", word_bytes);
  return {name, absl::StrCat("typedef ", word.type, " word_t;\n#define RESIZE_ZERO ", word.zero,
                             "\nextern \"C\" __global__ void ", name, R"((
    const word_t* __restrict__ x, word_t* __restrict__ y, long long kept, long long total) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    y[i] = i < kept ? x[i] : RESIZE_ZERO;
  }
}
)")};
}

std::vector<GeneratedKernel> ResizeRowsKernels() {
  std::vector<GeneratedKernel> kernels;
  for (int word_bytes : kResizeRowsWordBytes) kernels.push_back(ResizeRows(word_bytes));
  return kernels;
}

}  // namespace reprise::codegen
