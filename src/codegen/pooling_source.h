// What the pooling kernels' sources share (pooling_kernels.cc, pooling_nhwc4_kernels.cc): the
// image index helpers, the size parameters and the entry that picks 32- or 64-bit indexing.
#ifndef REPRISE_SRC_CODEGEN_POOLING_SOURCE_H_
#define REPRISE_SRC_CODEGEN_POOLING_SOURCE_H_

#include <string>

#include "src/codegen/pooling_kernels.h"

namespace reprise::codegen::pooling_source {

// Device helpers: ImageOffset, ImageCoords, GroupCoords (four channels of a channels-last tensor)
// and CoveringWindows (the windows that cover an input element).
extern const char kImageIndexing[];

// Every max-pooling kernel's size parameters, and the same names as arguments.
inline constexpr char kSizeParams[] =
    "long long n, long long c, long long h, long long w, long long oh, long long ow, int kh, "
    "int kw, int sh, int sw, int ph, int pw, int channels_last";
// The gradient kernels' tensors (dy, x, y, dx), before the sizes.
inline constexpr char kGradTensorParams[] =
    "const elem_t* __restrict__ dy, const elem_t* __restrict__ x, const elem_t* __restrict__ y, "
    "elem_t* __restrict__ dx, ";

// The size arguments a kernel's entry passes to its body: the entry's own parameters, or (sizes
// given) the sizes themselves as literals, so that the window arithmetic divides by constants (a
// multiply and a shift) instead of by registers.
std::string SizeArgs(const PoolSizes* sizes);

// "extern "C" __global__ void name(params) { ... }" calling body<int>(tensors, sizes[, extra])
// where the tensors index in 32 bits (n·c·h·w < 2^31), else body<long long>(...).
std::string EntryFor(const std::string& name, const std::string& params, const std::string& body,
                     const std::string& tensors, const PoolSizes* sizes = nullptr,
                     const std::string& extra = "");

}  // namespace reprise::codegen::pooling_source

#endif  // REPRISE_SRC_CODEGEN_POOLING_SOURCE_H_
