// Overflow-checked int64 arithmetic for element counts, byte sizes, offsets and padding. Every
// size the engine derives from user input goes through these, so an extent such as 2^32 x 2^32
// is refused with a Status instead of wrapping to a small (or negative) count.
#ifndef REPRISE_SRC_UTIL_CHECKED_MATH_H_
#define REPRISE_SRC_UTIL_CHECKED_MATH_H_

#include <cstdint>
#include <limits>
#include <optional>

#include "absl/types/span.h"

namespace reprise {

// a * b, or nullopt when it does not fit in int64.
inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a + b, or nullopt when it does not fit in int64.
inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a - b, or nullopt when it does not fit in int64.
inline std::optional<int64_t> CheckedSub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The product of non-negative extents, or nullopt when one is negative or the product overflows.
inline std::optional<int64_t> CheckedProduct(absl::Span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

// a + b and a * b for non-negative estimates (costs, traffic, thresholds compared against):
// INT64_MAX where the exact value would not fit, which still compares as "more than any limit".
inline int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}
inline int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}

// `value` rounded up to a multiple of `alignment` (> 0), or nullopt when that overflows or
// `value` is negative.
inline std::optional<int64_t> CheckedAlignUp(int64_t value, int64_t alignment) {
  if (value < 0 || alignment <= 0) return std::nullopt;
  const int64_t rem = value % alignment;
  if (rem == 0) return value;
  return CheckedAdd(value, alignment - rem);
}

}  // namespace reprise

#endif  // REPRISE_SRC_UTIL_CHECKED_MATH_H_
