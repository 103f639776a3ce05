// The daemon's main numbers over its last hour (health_history.h).
#include "serve/health_history.h"

namespace basal::serve {

void HealthHistory::Add(const HealthSample& totals) {
  HealthSample s = totals;
  if (last_totals_) {
    auto change = [](uint64_t now, uint64_t before) { return now >= before ? now - before : 0; };
    s.activations_ok = change(totals.activations_ok, last_totals_->activations_ok);
    s.activations_failed = change(totals.activations_failed, last_totals_->activations_failed);
    s.calls = change(totals.calls, last_totals_->calls);
    s.calls_refused = change(totals.calls_refused, last_totals_->calls_refused);
  }
  last_totals_ = totals;
  samples_.push_back(s);
  while (samples_.size() > capacity_) samples_.pop_front();
}

nlohmann::json HealthHistory::ToJson(const std::function<std::string(int64_t)>& time_text) const {
  nlohmann::json samples = nlohmann::json::array();
  for (const HealthSample& s : samples_)
    samples.push_back({{"at", time_text(s.at_us)},
                       {"queued", s.queued},
                       {"in_flight", s.in_flight},
                       {"workers_busy", s.workers_busy},
                       {"workers_live", s.workers_live},
                       {"activations_ok", s.activations_ok},
                       {"activations_failed", s.activations_failed},
                       {"calls", s.calls},
                       {"calls_refused", s.calls_refused}});
  return {{"interval_ms", std::chrono::duration_cast<std::chrono::milliseconds>(kHealthSampleInterval).count()},
          {"capacity", capacity_},
          {"samples", std::move(samples)}};
}

}  // namespace basal::serve
