#include "worker/chacha20.h"

#include <algorithm>
#include <cstring>

namespace basal::worker {
namespace {

uint32_t Rotl(uint32_t v, int n) { return (v << n) | (v >> (32 - n)); }

void QuarterRound(uint32_t* x, int a, int b, int c, int d) {
  x[a] += x[b];
  x[d] = Rotl(x[d] ^ x[a], 16);
  x[c] += x[d];
  x[b] = Rotl(x[b] ^ x[c], 12);
  x[a] += x[b];
  x[d] = Rotl(x[d] ^ x[a], 8);
  x[c] += x[d];
  x[b] = Rotl(x[b] ^ x[c], 7);
}

uint32_t LoadLe32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

void StoreLe32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}

}  // namespace

void ChaCha20Block(const ChaCha20Key& key, uint64_t counter, uint64_t nonce, uint8_t out[kChaCha20BlockBytes]) {
  uint32_t state[16] = {0x61707865, 0x3320646e, 0x79622d32, 0x6b206574};  // "expand 32-byte k"
  for (int i = 0; i < 8; ++i) state[4 + i] = LoadLe32(key.data() + 4 * i);
  state[12] = static_cast<uint32_t>(counter);
  state[13] = static_cast<uint32_t>(counter >> 32);
  state[14] = static_cast<uint32_t>(nonce);
  state[15] = static_cast<uint32_t>(nonce >> 32);
  uint32_t x[16];
  std::memcpy(x, state, sizeof x);
  for (int round = 0; round < 10; ++round) {  // 10 double rounds: a column round, then a diagonal one
    QuarterRound(x, 0, 4, 8, 12);
    QuarterRound(x, 1, 5, 9, 13);
    QuarterRound(x, 2, 6, 10, 14);
    QuarterRound(x, 3, 7, 11, 15);
    QuarterRound(x, 0, 5, 10, 15);
    QuarterRound(x, 1, 6, 11, 12);
    QuarterRound(x, 2, 7, 8, 13);
    QuarterRound(x, 3, 4, 9, 14);
  }
  for (int i = 0; i < 16; ++i) StoreLe32(out + 4 * i, x[i] + state[i]);
}

void ChaCha20Stream::Fill(uint8_t* out, size_t length) {
  while (length > 0) {
    if (used_ == kChaCha20BlockBytes) {
      ChaCha20Block(key_, counter_++, nonce_, block_);
      used_ = 0;
    }
    const size_t n = std::min(length, kChaCha20BlockBytes - used_);
    std::memcpy(out, block_ + used_, n);
    used_ += n;
    out += n;
    length -= n;
  }
}

uint64_t ChaCha20Stream::Next64() {
  uint8_t b[8];
  Fill(b, sizeof b);
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | b[i];
  return v;
}

}  // namespace basal::worker
