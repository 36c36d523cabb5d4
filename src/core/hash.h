// FNV-1a, for the digests that ranks compare: the unique id's checksum, the settings digest at
// set-up and a registered call's tag; and SplitMix64's finaliser, to spread a digest or a count over
// every bit (libyali-nccl's group-order keys). Not for anything adversarial.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace yali {

inline uint64_t fnv1a(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace yali
