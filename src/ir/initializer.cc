#include "src/ir/initializer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/ir/low_precision.h"
#include "src/util/parallel_for.h"
#include "src/util/splitmix64.h"

namespace reprise::ir {
namespace {

using util::SplitMix64;

uint64_t NameHash(absl::string_view name) {  // FNV-1a: only spreads streams, needs no strength.
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

constexpr uint64_t kSplitMixGamma = 0x9e3779b97f4a7c15ull;  // SplitMix64's step.
// Elements per task of a parallel fill, and the size below which one thread does it all.
constexpr int64_t kFillChunk = int64_t{1} << 16;

template <typename T>
void FillSequential(const Initializer& init, uint64_t state, absl::Span<T> out) {
  for (T& x : out) {
    double v = 0;
    switch (init.kind) {
      case Initializer::Kind::kZeros:
        v = 0;
        break;
      case Initializer::Kind::kConstant:
        v = init.value;
        break;
      case Initializer::Kind::kUniform: {
        const double unit = static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;
        v = init.low + (init.high - init.low) * unit;
        break;
      }
    }
    // Round through float so an f64 reference starts from the same values as an f32 run.
    x = static_cast<T>(static_cast<float>(v));
  }
}

// The same values as FillSequential over the whole span, on several threads: a uniform element
// takes one SplitMix64 draw, and SplitMix64's state only advances by a constant per draw, so the
// chunk from element `first` starts from state + first * gamma (mod 2^64), exactly where the
// sequential loop would be. The values do not depend on the thread count.
template <typename T>
void Fill(const Initializer& init, uint64_t state, absl::Span<T> out) {
  const int64_t size = static_cast<int64_t>(out.size());
  if (size <= kFillChunk) return FillSequential(init, state, out);
  const int64_t chunks = (size + kFillChunk - 1) / kFillChunk;
  ParallelFor(chunks, HardwareThreads(), [&](int64_t c) {
    const int64_t first = c * kFillChunk;
    const int64_t count = std::min(kFillChunk, size - first);
    FillSequential(init, state + static_cast<uint64_t>(first) * kSplitMixGamma,
                   out.subspan(static_cast<size_t>(first), static_cast<size_t>(count)));
  });
}

bool FitsFloat(double v) {
  return std::isfinite(v) && std::fabs(v) <= std::numeric_limits<float>::max();
}

}  // namespace

absl::Status CheckInitializer(const Initializer& init, absl::string_view what) {
  switch (init.kind) {
    case Initializer::Kind::kZeros:
      return absl::OkStatus();
    case Initializer::Kind::kConstant:
      if (!FitsFloat(init.value)) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": constant initialiser value ",
                                                       init.value, " is not a finite float32"));
      }
      return absl::OkStatus();
    case Initializer::Kind::kUniform:
      if (!FitsFloat(init.low) || !FitsFloat(init.high)) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": uniform initialiser bounds [",
                                                       init.low, ", ", init.high,
                                                       "] are not finite float32 values"));
      }
      if (!(init.low <= init.high)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": uniform initialiser needs low <= ", "high, not [", init.low, ", ",
                         init.high, "]"));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(what, ": unknown initialiser kind"));
}

namespace {

uint64_t StreamState(uint64_t seed, absl::string_view name) {
  return seed * kSplitMixGamma ^ NameHash(name);
}

}  // namespace

void FillInitialSlice(const Initializer& init, uint64_t seed, absl::string_view name, int64_t first,
                      absl::Span<float> out) {
  Fill(init, StreamState(seed, name) + static_cast<uint64_t>(first) * kSplitMixGamma, out);
}

void FillInitial(const Initializer& init, uint64_t seed, absl::string_view name,
                 HostTensor& tensor) {
  const uint64_t state = StreamState(seed, name);
  switch (tensor.dtype()) {
    case DType::kFloat32:
      Fill(init, state, tensor.data<float>());
      break;
    case DType::kFloat64:
      Fill(init, state, tensor.data<double>());
      break;
    case DType::kInt32:
      Fill(init, state, tensor.data<int32_t>());
      break;
    case DType::kBFloat16:
    case DType::kFloat16: {  // Drawn as float32, then rounded to the 16-bit type.
      std::vector<float> values(tensor.size());
      Fill(init, state, absl::MakeSpan(values));
      for (int64_t i = 0; i < tensor.size(); ++i) SetFloatElement(tensor, i, values[i]);
      break;
    }
  }
}

bool WritesZeroBits(const Initializer& init) {
  switch (init.kind) {
    case Initializer::Kind::kZeros:
      return true;
    case Initializer::Kind::kConstant:
      // Rounded through float as FillInitial does: a value that rounds to +0 writes zero bits.
      return static_cast<float>(init.value) == 0.0f &&
             !std::signbit(static_cast<float>(init.value));
    case Initializer::Kind::kUniform:
      return init.low == 0 && init.high == 0;
  }
  return false;
}

}  // namespace reprise::ir
