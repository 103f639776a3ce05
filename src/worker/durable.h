// The time and the chance a flow's script reads, live or in a durable run (docs/runtime.md,
// "Durable runs"; docs/protocol.md for load's "durable" and a result's "clock_us").
//
// Live (a load without "durable", every worker until now): Date and __date_clock read the realtime
// clock, the timers and performance.now() the monotonic clock, Math.random is xorshift64* seeded
// from getrandom (engine.cpp), crypto's bytes come from getrandom (web_natives.cpp).
//
// Durable: one clock, the run's. It starts at load's clock_us and moves only when an answer of the
// parent carries a later clock_us, so CPU work does not move it; Date, __date_clock, the timers and
// performance all read it. Math.random and crypto draw from ChaCha20 keystreams keyed by the run's
// seed (nonce 1: Math.random, nonce 2: crypto). An execution of the run answered as the journal
// answered the first one sees the same values, byte for byte.
//
// Process-wide: a worker runs one flow for life, and QuickJS reads the time through
// gettimeofday, which has no context to look in (date_clock.cpp wraps it at link time).
//
//   StartClocks(load.durable);                                    // at load, before any script runs
//   if (!TakeAnswerClock(result.clock_us, error)) Die(error);      // every result the worker reads
//   if (DurableRun* run = ActiveDurableRun()) x = run->NextMathRandom();
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "protocol/messages.h"
#include "worker/chacha20.h"

namespace basal::worker {

// The keystreams of a durable run, one per consumer, so that one's draws never shift the other's.
inline constexpr uint64_t kMathRandomNonce = 1;
inline constexpr uint64_t kCryptoRandomNonce = 2;

class DurableRun {
 public:
  explicit DurableRun(const protocol::DurableStart& start);

  int64_t clock_us() const { return clock_us_; }
  int64_t start_us() const { return start_us_; }
  // The clock never goes backwards: an earlier time leaves it where it is.
  void Advance(int64_t clock_us) {
    if (clock_us > clock_us_) clock_us_ = clock_us;
  }
  // In [0, 1): the top 53 bits of the Math.random stream's next 8 bytes (little-endian), times 2^-53.
  double NextMathRandom();
  void FillCryptoRandom(uint8_t* out, size_t length) { crypto_.Fill(out, length); }

 private:
  int64_t start_us_;
  int64_t clock_us_;
  ChaCha20Stream math_;
  ChaCha20Stream crypto_;
};

// A worker's clocks: live, or durable with its run. One per process (TheWorkerClocks()); a test
// makes its own.
class WorkerClocks {
 public:
  // Starts the clocks, once, at load: durable for the worker's life when `durable` is set;
  // otherwise live, and now is performance.timeOrigin.
  void Start(const std::optional<protocol::DurableStart>& durable);
  // The durable run; nullptr when the clocks are live.
  DurableRun* durable_run() { return run_ ? &*run_ : nullptr; }
  const DurableRun* durable_run() const { return run_ ? &*run_ : nullptr; }

  // Every result the worker reads goes through this: a durable worker's clock moves to its
  // clock_us. False (with `error`) when the result breaks the rule of docs/protocol.md: a clock
  // sent to a live worker, or none sent to a durable one.
  bool TakeAnswerClock(const std::optional<int64_t>& clock_us, std::string& error);

  // The timers' now, in milliseconds: the monotonic clock with a fraction (the same clock as the
  // parent's loop, which serves timer.sleep), or the run's clock in whole milliseconds (as
  // Date.now()), so that due times are exact integers.
  double TimerMs() const;
  // performance.now(): milliseconds since performance.timeOrigin, to the microsecond.
  double PerformanceNowMs() const;
  // performance.timeOrigin: milliseconds since the Unix epoch (with a fraction) when the clocks
  // started, or the run's start.
  double PerformanceTimeOriginMs() const;

 private:
  std::optional<DurableRun> run_;
  int64_t live_origin_wall_us_ = 0;        // the realtime clock at Start
  int64_t live_origin_monotonic_ns_ = 0;   // the monotonic clock at Start: performance.now() counts from it
};

// The worker's own clocks: process-wide, since a worker runs one flow for life and
// date_clock.cpp's gettimeofday has no context to find them in.
WorkerClocks& TheWorkerClocks();

// Shorthands for TheWorkerClocks().
inline void StartClocks(const std::optional<protocol::DurableStart>& durable) { TheWorkerClocks().Start(durable); }
inline DurableRun* ActiveDurableRun() { return TheWorkerClocks().durable_run(); }
inline bool TakeAnswerClock(const std::optional<int64_t>& clock_us, std::string& error) {
  return TheWorkerClocks().TakeAnswerClock(clock_us, error);
}

}  // namespace basal::worker
