// ChaCha20 as a keystream: the generator a durable run's Math.random and crypto draw from
// (durable.h). The block function is RFC 8439's (section 2.3: 20 rounds, the "expand 32-byte k"
// constants, a 256-bit key), with D. J. Bernstein's original layout of the last four state words: a
// 64-bit block counter (words 12 and 13) and a 64-bit nonce (words 14 and 15), so one stream never
// wraps. Written for basal, with no crypto library: the worker links none.
//
//   ChaCha20Stream math(seed, /*nonce=*/1);
//   uint64_t bits = math.Next64();       // the stream's next 8 bytes, little-endian
//   math.Fill(buffer, length);           // or its next `length` bytes
//
// Not a cipher API: there is no plaintext, no authentication, nothing secret beyond the run's
// seed, which the parent journals.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace basal::worker {

inline constexpr size_t kChaCha20KeyBytes = 32;
inline constexpr size_t kChaCha20BlockBytes = 64;
using ChaCha20Key = std::array<uint8_t, kChaCha20KeyBytes>;

// One 64-byte block of keystream: the state after 20 rounds plus the state before, serialized
// little-endian.
void ChaCha20Block(const ChaCha20Key& key, uint64_t counter, uint64_t nonce, uint8_t out[kChaCha20BlockBytes]);

// The keystream of one (key, nonce), read from its first byte on: blocks 0, 1, 2... in order.
class ChaCha20Stream {
 public:
  ChaCha20Stream(const ChaCha20Key& key, uint64_t nonce) : key_(key), nonce_(nonce) {}

  void Fill(uint8_t* out, size_t length);
  uint64_t Next64();

 private:
  ChaCha20Key key_;
  uint64_t nonce_;
  uint64_t counter_ = 0;  // the next block to compute
  uint8_t block_[kChaCha20BlockBytes] = {};
  size_t used_ = kChaCha20BlockBytes;  // bytes of block_ already handed out
};

}  // namespace basal::worker
