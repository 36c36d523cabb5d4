#include "core/sha256.h"

#include <string.h>

namespace yali {
namespace {

// FIPS 180-4, 4.2.2: the first 32 bits of the fractional parts of the cube roots of the first 64
// primes.
constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// FIPS 180-4, 5.3.3: the first 32 bits of the fractional parts of the square roots of the first 8
// primes.
constexpr uint32_t kInitialState[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

constexpr uint8_t kInnerPad = 0x36;  // RFC 2104's ipad and opad bytes
constexpr uint8_t kOuterPad = 0x5c;

inline uint32_t rotateRight(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

inline uint32_t loadBigEndian32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

inline void storeBigEndian32(uint32_t v, uint8_t* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

}  // namespace

Sha256::Sha256() { memcpy(state_, kInitialState, sizeof(state_)); }

void Sha256::compressBlock(const uint8_t block[kSha256BlockBytes]) {
  uint32_t schedule[64];
  for (int t = 0; t < 16; ++t) schedule[t] = loadBigEndian32(block + 4 * t);
  for (int t = 16; t < 64; ++t) {
    uint32_t s0 = rotateRight(schedule[t - 15], 7) ^ rotateRight(schedule[t - 15], 18) ^
                  (schedule[t - 15] >> 3);
    uint32_t s1 = rotateRight(schedule[t - 2], 17) ^ rotateRight(schedule[t - 2], 19) ^
                  (schedule[t - 2] >> 10);
    schedule[t] = schedule[t - 16] + s0 + schedule[t - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int t = 0; t < 64; ++t) {
    uint32_t sum1 = rotateRight(e, 6) ^ rotateRight(e, 11) ^ rotateRight(e, 25);
    uint32_t choose = (e & f) ^ (~e & g);
    uint32_t t1 = h + sum1 + choose + kRoundConstants[t] + schedule[t];
    uint32_t sum0 = rotateRight(a, 2) ^ rotateRight(a, 13) ^ rotateRight(a, 22);
    uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = sum0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::update(const void* data, size_t bytes) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  totalBytes_ += bytes;
  while (bytes > 0) {
    if (pendingBytes_ == 0 && bytes >= kSha256BlockBytes) {
      compressBlock(p);
      p += kSha256BlockBytes;
      bytes -= kSha256BlockBytes;
      continue;
    }
    size_t take = kSha256BlockBytes - pendingBytes_;
    if (take > bytes) take = bytes;
    memcpy(pending_ + pendingBytes_, p, take);
    pendingBytes_ += take;
    p += take;
    bytes -= take;
    if (pendingBytes_ == kSha256BlockBytes) {
      compressBlock(pending_);
      pendingBytes_ = 0;
    }
  }
}

void Sha256::finish(uint8_t digest[kSha256Bytes]) {
  // FIPS 180-4, 5.1.1: a 1 bit, zeros up to 56 bytes mod 64, then the length in bits (64-bit
  // big-endian).
  const uint64_t totalBits = totalBytes_ * 8;
  const uint8_t one = 0x80;
  update(&one, 1);
  const uint8_t zero = 0;
  while (pendingBytes_ != kSha256BlockBytes - 8) update(&zero, 1);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(totalBits >> (56 - 8 * i));
  update(length, 8);
  for (int i = 0; i < 8; ++i) storeBigEndian32(state_[i], digest + 4 * i);
}

HmacSha256::HmacSha256(const void* key, size_t keyBytes) {
  // RFC 2104: a key longer than a block is replaced by its hash; shorter keys are zero-padded.
  uint8_t blockKey[kSha256BlockBytes] = {};
  if (keyBytes > kSha256BlockBytes)
    sha256(key, keyBytes, blockKey);
  else
    memcpy(blockKey, key, keyBytes);
  uint8_t innerKeyPad[kSha256BlockBytes];
  for (size_t i = 0; i < kSha256BlockBytes; ++i) {
    innerKeyPad[i] = blockKey[i] ^ kInnerPad;
    outerKeyPad_[i] = blockKey[i] ^ kOuterPad;
  }
  inner_.update(innerKeyPad, sizeof(innerKeyPad));
}

void HmacSha256::update(const void* data, size_t bytes) { inner_.update(data, bytes); }

void HmacSha256::finish(uint8_t mac[kSha256Bytes]) {
  uint8_t innerDigest[kSha256Bytes];
  inner_.finish(innerDigest);
  Sha256 outer;
  outer.update(outerKeyPad_, sizeof(outerKeyPad_));
  outer.update(innerDigest, sizeof(innerDigest));
  outer.finish(mac);
}

void sha256(const void* data, size_t bytes, uint8_t digest[kSha256Bytes]) {
  Sha256 h;
  h.update(data, bytes);
  h.finish(digest);
}

void hmacSha256(const void* key, size_t keyBytes, const void* data, size_t bytes,
                uint8_t mac[kSha256Bytes]) {
  HmacSha256 h(key, keyBytes);
  h.update(data, bytes);
  h.finish(mac);
}

bool constantTimeEqual(const void* a, const void* b, size_t n) {
  const volatile uint8_t* x = static_cast<const volatile uint8_t*>(a);
  const volatile uint8_t* y = static_cast<const volatile uint8_t*>(b);
  uint8_t difference = 0;
  for (size_t i = 0; i < n; ++i) difference |= x[i] ^ y[i];
  return difference == 0;
}

}  // namespace yali
