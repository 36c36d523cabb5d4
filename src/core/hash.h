// FNV-1a, for the digests that ranks compare: the unique id's checksum, the settings digest at
// set-up and a registered call's tag. Not for anything adversarial.
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

}  // namespace yali
