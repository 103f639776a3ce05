#include "worker/durable.h"

#include <time.h>

namespace basal::worker {
namespace {

int64_t ClockNs(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);  // through the vDSO; the call it may fall back to is admitted
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

DurableRun::DurableRun(const protocol::DurableStart& start)
    : start_us_(start.clock_us),
      clock_us_(start.clock_us),
      math_(start.seed, kMathRandomNonce),
      crypto_(start.seed, kCryptoRandomNonce) {}

double DurableRun::NextMathRandom() { return static_cast<double>(math_.Next64() >> 11) * 0x1.0p-53; }

void WorkerClocks::Start(const std::optional<protocol::DurableStart>& durable) {
  if (durable) {
    run_.emplace(*durable);
    return;
  }
  live_origin_wall_us_ = ClockNs(CLOCK_REALTIME) / 1000;
  live_origin_monotonic_ns_ = ClockNs(CLOCK_MONOTONIC);
}

bool WorkerClocks::TakeAnswerClock(const std::optional<int64_t>& clock_us, std::string& error) {
  if (!run_) {
    if (!clock_us) return true;
    error = "the parent sent clock_us to a worker that is not in durable mode (its load had no \"durable\")";
    return false;
  }
  if (!clock_us) {
    error = "the parent sent a result without clock_us to a worker in durable mode";
    return false;
  }
  run_->Advance(*clock_us);
  return true;
}

double WorkerClocks::TimerMs() const {
  if (run_) return static_cast<double>(run_->clock_us() / 1000);
  return static_cast<double>(ClockNs(CLOCK_MONOTONIC)) / 1e6;
}

double WorkerClocks::PerformanceNowMs() const {
  if (run_) return static_cast<double>(run_->clock_us() - run_->start_us()) / 1e3;
  return static_cast<double>((ClockNs(CLOCK_MONOTONIC) - live_origin_monotonic_ns_) / 1000) / 1e3;
}

double WorkerClocks::PerformanceTimeOriginMs() const {
  return static_cast<double>(run_ ? run_->start_us() : live_origin_wall_us_) / 1e3;
}

WorkerClocks& TheWorkerClocks() {
  static WorkerClocks clocks;
  return clocks;
}

}  // namespace basal::worker
