// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the bootstrap's challenge-response
// (bootstrap.cc). Written here because libyali may depend on the CUDA runtime only, not OpenSSL.
// Speed does not matter: the bootstrap hashes a few hundred bytes per connection.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace yali {

constexpr size_t kSha256Bytes = 32;
constexpr size_t kSha256BlockBytes = 64;

// Incremental SHA-256: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  void finish(uint8_t digest[kSha256Bytes]);

 private:
  void compressBlock(const uint8_t block[kSha256BlockBytes]);
  uint32_t state_[8];
  uint64_t totalBytes_ = 0;
  uint8_t pending_[kSha256BlockBytes];  // the start of a block that update() has not filled yet
  size_t pendingBytes_ = 0;
};

// Incremental HMAC-SHA256, so that a MAC over several fields needs no concatenated copy.
class HmacSha256 {
 public:
  HmacSha256(const void* key, size_t keyBytes);
  void update(const void* data, size_t bytes);
  void finish(uint8_t mac[kSha256Bytes]);

 private:
  Sha256 inner_;
  uint8_t outerKeyPad_[kSha256BlockBytes];
};

void sha256(const void* data, size_t bytes, uint8_t digest[kSha256Bytes]);
void hmacSha256(const void* key, size_t keyBytes, const void* data, size_t bytes,
                uint8_t mac[kSha256Bytes]);

// True when the n bytes are equal. Takes the same time wherever they differ, so that a peer who
// guesses a MAC byte by byte learns nothing from how long the refusal took.
bool constantTimeEqual(const void* a, const void* b, size_t n);

}  // namespace yali
