// The daemon's main numbers over its last hour, for the web console's charts (GET
// /v1/health/history, docs/api.md): the daemon takes a sample of its gauges and totals every
// kHealthSampleInterval and hands it here; what is kept is the gauges as they were and, for the
// totals, what changed since the sample before. Pure: the daemon's timer and clock drive it.
//
// Bound: the newest `capacity` samples (360: an hour), the oldest dropped first.
//
//   HealthHistory history;
//   history.Add(HealthSample{.at_us = now, .queued = queue.queued(), .activations_ok = h.activations_ok, ...});
//   respond(JsonResponse(200, history.ToJson(UtcText)));
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace basal::serve {

inline constexpr std::chrono::seconds kHealthSampleInterval{10};

struct HealthSample {
  int64_t at_us = 0;
  // Gauges: as they are at the sample.
  uint64_t queued = 0, in_flight = 0, workers_busy = 0, workers_live = 0;
  // Totals since the daemon started; kept as the change since the sample before.
  // calls_refused: host calls decided other than "allow" (deny, needs_approval, quota_exceeded).
  uint64_t activations_ok = 0, activations_failed = 0, calls = 0, calls_refused = 0;
};

class HealthHistory {
 public:
  explicit HealthHistory(size_t capacity = 360) : capacity_(capacity == 0 ? 1 : capacity) {}

  // A total smaller than the previous sample's (a counter that went back) counts as no change.
  void Add(const HealthSample& totals);
  // {"interval_ms": 10000, "capacity": 360, "samples": [{"at": TIME, "queued", "in_flight",
  // "workers_busy", "workers_live", "activations_ok", "activations_failed", "calls",
  // "calls_refused"}, ...]}, oldest first; the four last are the changes over the interval that
  // ends at "at" (the first sample's: since the daemon started). `time_text` writes a unix time
  // in microseconds as the API writes times (UtcText).
  nlohmann::json ToJson(const std::function<std::string(int64_t unix_us)>& time_text) const;
  size_t size() const { return samples_.size(); }

 private:
  size_t capacity_;
  std::deque<HealthSample> samples_;      // totals replaced by their changes
  std::optional<HealthSample> last_totals_;
};

}  // namespace basal::serve
