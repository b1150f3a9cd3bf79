// SplitMix64 (Steele, Lea, Flood 2014): a fixed, well-mixed sequence of 64-bit values from any
// 64-bit state, the same on every compiler and platform. For seeded initialisers and shuffles.
#ifndef REPRISE_SRC_UTIL_SPLITMIX64_H_
#define REPRISE_SRC_UTIL_SPLITMIX64_H_

#include <cstdint>

namespace reprise::util {

// The next value; advances `state`.
inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace reprise::util

#endif  // REPRISE_SRC_UTIL_SPLITMIX64_H_
