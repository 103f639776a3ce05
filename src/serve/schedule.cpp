// Schedule decisions (schedule.h): pure, every time given.
#include "serve/schedule.h"

#include <algorithm>
#include <chrono>
#include <deque>

namespace basal::serve {
namespace {

using SysClock = std::chrono::system_clock;

std::optional<int64_t> NextFireUs(const CronSchedule& schedule, const TimeZone& zone, int64_t after_us) {
  auto next = NextFire(schedule, zone, SysClock::time_point(std::chrono::microseconds(after_us)));
  if (!next) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::microseconds>(next->time_since_epoch()).count();
}

}  // namespace

CatchUpPlan PlanCatchUp(const CronSchedule& schedule, const TimeZone& zone, int64_t mark_us, int64_t now_us,
                        int64_t catch_up_us) {
  CatchUpPlan plan;
  plan.mark = mark_us;
  // The newest kMaxMissedListed + 1 fires (the +1 may be the one that runs now); older ones are
  // counted as they fall out.
  std::deque<int64_t> newest;
  int64_t counted = 0;
  bool jumped = false;
  int64_t cursor = mark_us;
  while (true) {
    auto fire = NextFireUs(schedule, zone, cursor);
    if (!fire || *fire > now_us) break;
    newest.push_back(*fire);
    if (newest.size() > kMaxMissedListed + 1) {
      newest.pop_front();
      ++plan.missed_unlisted;
    }
    cursor = *fire;
    if (++counted == kMaxMissedCounted && !jumped) {
      // Stop counting one by one: jump to just before the newest kMaxMissedListed + 1 minutes of
      // the window, so the fire within catch_up (if any) and the newest missed ones are still
      // found, and the mark still ends at the newest fire before now. The count is a lower bound.
      jumped = true;
      plan.missed_count_capped = true;
      const int64_t resume = now_us - std::max<int64_t>(catch_up_us, 0) - 1;
      if (resume > cursor) {
        plan.missed_unlisted += static_cast<int64_t>(newest.size());
        newest.clear();
        cursor = resume;
      }
    }
  }
  if (newest.empty()) return plan;
  plan.mark = newest.back();
  if (now_us - newest.back() <= catch_up_us) {
    plan.run_now = newest.back();
    newest.pop_back();
  } else if (newest.size() > kMaxMissedListed) {
    newest.pop_front();
    ++plan.missed_unlisted;
  }
  // With run_now taken, at most kMaxMissedListed remain; without it, one was moved to the count.
  while (newest.size() > kMaxMissedListed) {
    newest.pop_front();
    ++plan.missed_unlisted;
  }
  plan.missed.assign(newest.begin(), newest.end());
  return plan;
}

OverlapDecision DecideOverlap(ScheduleTrigger::Overlap policy, size_t open_runs) {
  if (open_runs == 0) return OverlapDecision::kRun;
  if (policy == ScheduleTrigger::Overlap::kBufferOne && open_runs == 1) return OverlapDecision::kBuffer;
  return OverlapDecision::kSkip;
}

const char* OverlapDecisionName(OverlapDecision d) {
  switch (d) {
    case OverlapDecision::kRun:
      return "run";
    case OverlapDecision::kBuffer:
      return "buffer";
    case OverlapDecision::kSkip:
      return "skip";
  }
  return "skip";
}

std::optional<ArmPlan> PlanArm(const CronSchedule& schedule, const TimeZone& zone, int64_t after_us, int64_t now_us) {
  auto fire = NextFireUs(schedule, zone, after_us);
  if (!fire) return std::nullopt;
  ArmPlan plan;
  plan.fire_us = *fire;
  plan.delay_us = std::clamp<int64_t>(*fire - now_us, 0, kMaxArmAheadUs);
  return plan;
}

bool TimerDue(int64_t fire_us, int64_t now_us) { return now_us + 1000 >= fire_us; }

}  // namespace basal::serve
