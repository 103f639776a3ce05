// A durable run's generators and clock (src/worker/durable.h, chacha20.h). The keystream is held to
// RFC 8439's test vectors and to streams computed by another implementation (OpenSSL's chacha20,
// whose 16-byte IV is state words 12 to 15: the same 64-bit counter and 64-bit nonce), so the values
// a durable run's script draws are fixed by the seed alone, whatever build or process draws them.
#include "worker/durable.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace basal::worker {
namespace {

std::string Hex(const uint8_t* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 0xF];
  }
  return s;
}

ChaCha20Key CountingKey() {  // 00 01 02 ... 1f, RFC 8439's key
  ChaCha20Key key{};
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(i);
  return key;
}

protocol::DurableStart Start(int64_t clock_us, const ChaCha20Key& seed = CountingKey()) {
  protocol::DurableStart d;
  d.clock_us = clock_us;
  d.seed = seed;
  return d;
}

// The first 80 bytes of the streams a durable run keyed by 00..1f draws from (OpenSSL's chacha20).
constexpr const char* kMathStream80 =
    "2fa4f10250808e89a25231e50fdf6ee071c65f21ef9eee784c3f2d89061ae8951eebde59042784fa271fb5de37896daf"
    "0004e4f47d05fe33bc141d746f04fa099f57f35fb52aaf1829b6ae5c52959987";
constexpr const char* kCryptoStream80 =
    "54b275d14c65d8174ac3a499cf3e8406a93cc77ac646cbca744fdf1876ad1a39c2f88e38d3a5f4c688379415594883245a"
    "c338934071cb6eefcfbdb4235499d2a9a3fe55e7eaac6ecb4f3f70ccce61b5";

TEST(ChaCha20Test, TheBlockFunctionGivesRfc8439sVectors) {
  uint8_t out[kChaCha20BlockBytes];
  // Section 2.3.2: key 00..1f, block counter 1, nonce 00:00:00:09:00:00:00:4a:00:00:00:00. In the
  // 64/64 layout, words 12-13 (the counter) are 1 and 0x09000000, words 14-15 (the nonce)
  // 0x4a000000 and 0.
  ChaCha20Block(CountingKey(), uint64_t{0x09000000} << 32 | 1, 0x4a000000, out);
  EXPECT_EQ(Hex(out, sizeof out),
            "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
            "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e");
  // Appendix A.1, test vector 1: all zeros.
  ChaCha20Block(ChaCha20Key{}, 0, 0, out);
  EXPECT_EQ(Hex(out, sizeof out),
            "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
            "da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586");
}

TEST(ChaCha20Test, TheCounterIsSixtyFourBits) {
  // Block 2^32 is not block 0: the counter carries into word 13 (OpenSSL's stream agrees).
  uint8_t out[kChaCha20BlockBytes], zero[kChaCha20BlockBytes];
  ChaCha20Block(CountingKey(), uint64_t{1} << 32, kMathRandomNonce, out);
  EXPECT_EQ(Hex(out, sizeof out),
            "fe6a106b715b47b9e0ecd7605ccc948ef85fad92cdd13c0eb122dd6c2eddc445"
            "46e94d79e8e73fb89b90166f36923ac15e521b85257a6eb504f53137a5b5bb7b");
  ChaCha20Block(CountingKey(), 0, kMathRandomNonce, zero);
  EXPECT_NE(Hex(out, sizeof out), Hex(zero, sizeof zero));
}

TEST(ChaCha20Test, AStreamIsTheSameBytesHoweverItIsRead) {
  ChaCha20Stream whole(CountingKey(), kMathRandomNonce);
  uint8_t all[80];
  whole.Fill(all, sizeof all);
  EXPECT_EQ(Hex(all, sizeof all), kMathStream80);
  // In pieces that straddle the block boundary at 64.
  ChaCha20Stream pieces(CountingKey(), kMathRandomNonce);
  std::vector<uint8_t> got;
  for (const size_t n : {size_t{1}, size_t{7}, size_t{0}, size_t{50}, size_t{13}, size_t{9}}) {
    std::vector<uint8_t> piece(n);
    pieces.Fill(piece.data(), n);
    got.insert(got.end(), piece.begin(), piece.end());
  }
  EXPECT_EQ(Hex(got.data(), got.size()), kMathStream80);
  // Next64 reads the next 8 bytes, little-endian.
  ChaCha20Stream words(CountingKey(), kMathRandomNonce);
  EXPECT_EQ(words.Next64(), 0x898e805002f1a42fULL);
  EXPECT_EQ(words.Next64(), 0xe06edf0fe53152a2ULL);
}

TEST(DurableRunTest, MathRandomAndCryptoAreTheSeedsStreamsApart) {
  DurableRun run(Start(0));
  // The top 53 bits of each 8 bytes of the Math.random stream, over 2^53.
  EXPECT_EQ(run.NextMathRandom(), 4839844194836020.0 * 0x1.0p-53);
  EXPECT_EQ(run.NextMathRandom(), 7896537388328490.0 * 0x1.0p-53);
  EXPECT_EQ(run.NextMathRandom(), 4254920448683000.0 * 0x1.0p-53);
  // crypto's bytes are their own stream: the draws of Math.random above did not move it.
  uint8_t bytes[80];
  run.FillCryptoRandom(bytes, 33);
  run.FillCryptoRandom(bytes + 33, 47);
  EXPECT_EQ(Hex(bytes, sizeof bytes), kCryptoStream80);
}

TEST(DurableRunTest, TheSameSeedDrawsTheSameValuesAndAnotherSeedOthers) {
  ChaCha20Key other = CountingKey();
  other[31] ^= 1;
  DurableRun a(Start(5)), b(Start(99)), c(Start(5, other));
  bool differs = false;
  for (int i = 0; i < 1000; ++i) {
    const double x = a.NextMathRandom();
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    ASSERT_EQ(x, b.NextMathRandom()) << i;  // the clock is not part of the key
    differs = differs || x != c.NextMathRandom();
  }
  EXPECT_TRUE(differs);
  uint8_t ab[64], bb[64], cb[64];
  a.FillCryptoRandom(ab, sizeof ab);
  b.FillCryptoRandom(bb, sizeof bb);
  c.FillCryptoRandom(cb, sizeof cb);
  EXPECT_EQ(Hex(ab, sizeof ab), Hex(bb, sizeof bb));
  EXPECT_NE(Hex(ab, sizeof ab), Hex(cb, sizeof cb));
}

TEST(DurableRunTest, TheClockStartsAtTheRunsStartAndNeverGoesBack) {
  DurableRun run(Start(1'767'225'600'123'456));
  EXPECT_EQ(run.clock_us(), 1'767'225'600'123'456);
  EXPECT_EQ(run.start_us(), 1'767'225'600'123'456);
  run.Advance(1'767'225'600'200'000);
  EXPECT_EQ(run.clock_us(), 1'767'225'600'200'000);
  run.Advance(1'767'225'600'100'000);  // earlier than now, even earlier than the start: ignored
  run.Advance(0);
  EXPECT_EQ(run.clock_us(), 1'767'225'600'200'000);
  EXPECT_EQ(run.start_us(), 1'767'225'600'123'456);
}

TEST(WorkerClocksTest, ADurableWorkerTakesAClockFromEveryAnswerAndNeedsOne) {
  WorkerClocks clocks;
  clocks.Start(Start(1'767'225'600'123'456));
  ASSERT_NE(clocks.durable_run(), nullptr);
  EXPECT_EQ(clocks.PerformanceTimeOriginMs(), 1'767'225'600'123.456);
  EXPECT_EQ(clocks.PerformanceNowMs(), 0.0);
  EXPECT_EQ(clocks.TimerMs(), 1'767'225'600'123.0);  // whole milliseconds, as Date.now()
  std::string error;
  ASSERT_TRUE(clocks.TakeAnswerClock(1'767'225'600'523'457, error)) << error;
  EXPECT_EQ(clocks.durable_run()->clock_us(), 1'767'225'600'523'457);
  EXPECT_EQ(clocks.PerformanceNowMs(), 400.001);
  EXPECT_EQ(clocks.TimerMs(), 1'767'225'600'523.0);
  ASSERT_TRUE(clocks.TakeAnswerClock(1'767'225'600'000'000, error)) << error;  // earlier: stays
  EXPECT_EQ(clocks.PerformanceNowMs(), 400.001);
  EXPECT_FALSE(clocks.TakeAnswerClock(std::nullopt, error));
  EXPECT_EQ(error, "the parent sent a result without clock_us to a worker in durable mode");
}

TEST(WorkerClocksTest, ALiveWorkerRefusesAClockAndReadsTheRealOnes) {
  WorkerClocks clocks;
  clocks.Start(std::nullopt);
  EXPECT_EQ(clocks.durable_run(), nullptr);
  std::string error;
  EXPECT_TRUE(clocks.TakeAnswerClock(std::nullopt, error));
  EXPECT_FALSE(clocks.TakeAnswerClock(5, error));
  EXPECT_NE(error.find("not in durable mode"), std::string::npos) << error;
  // The origin is the realtime clock at Start: after 2020, and with performance.now() counted from
  // it in whole microseconds, never negative and never going back.
  EXPECT_GT(clocks.PerformanceTimeOriginMs(), 1.577e12);
  double last = 0;
  for (int i = 0; i < 100; ++i) {
    const double now = clocks.PerformanceNowMs();
    ASSERT_GE(now, last);
    ASSERT_NEAR(now * 1000, std::round(now * 1000), 1e-6) << now;  // a whole number of microseconds
    last = now;
  }
}

}  // namespace
}  // namespace basal::worker
