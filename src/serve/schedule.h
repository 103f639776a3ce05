// The decisions of basal serve's schedule triggers, as pure functions of the time they are given:
// what to do with the fires missed while the daemon was down (or while the machine slept, or the
// clock stepped forward), whether a fire runs or is skipped when earlier runs of the trigger are
// still open, and when to arm the next timer. The daemon (daemon.cpp) performs what they decide
// (journals, runs, timers); keeping the decisions here lets the tests drive them with any `now`.
//
//   CatchUpPlan p = PlanCatchUp(cron, berlin, mark_us, now_us, catch_up_us);
//   for (int64_t f : p.missed) ... journal f as missed ...;   // p.missed_unlisted more, counted
//   if (p.run_now) ... start a run for *p.run_now ...;
//   store p.mark as the trigger's new mark; ArmSchedule from p.mark
//
// Times are microseconds since the Unix epoch (UTC), like the journal's.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "serve/config.h"
#include "serve/cron.h"

namespace basal::serve {

// At most this many missed fires are journaled one by one; older ones are only counted.
inline constexpr size_t kMaxMissedListed = 100;
// Counting missed fires stops after this many (an every-minute schedule down for two years); the
// count is then a lower bound. Bounds the work of one catch-up.
inline constexpr int64_t kMaxMissedCounted = 1'000'000;
// A schedule's timer may wake this late (a busy loop, a slow journal commit) and the fire it was
// armed for is still on time, whatever the trigger's catch_up: see the daemon's timer path.
inline constexpr int64_t kTimerSlackUs = 60'000'000;
// A timer is armed at most this far ahead and then re-armed from the wall clock, so a clock step
// or a suspended machine is noticed within it.
inline constexpr int64_t kMaxArmAheadUs = 3'600'000'000;

struct CatchUpPlan {
  // Fires in (mark, now] that do not run, oldest first: the newest kMaxMissedListed of them.
  std::vector<int64_t> missed;
  // Missed fires older than those listed: counted, not listed.
  int64_t missed_unlisted = 0;
  // missed_unlisted stopped counting at kMaxMissedCounted: it is a lower bound.
  bool missed_count_capped = false;
  // The newest fire in (mark, now], when it is within catch_up of now: it runs now, once.
  std::optional<int64_t> run_now;
  // The new mark (the last fire handled, run or missed): `mark` itself when nothing was due.
  int64_t mark = 0;
  int64_t missed_total() const { return static_cast<int64_t>(missed.size()) + missed_unlisted; }
};

// The fires of `schedule` in `zone` after `mark_us` (the last fire the trigger handled) up to and
// including `now_us`. The newest of them runs now if it is at most `catch_up_us` old (0: only a
// fire at exactly now); every other one is missed. Daylight saving follows NextFire (cron.h):
// a fire in a spring-forward gap happens once after the gap, a repeated local time once.
// A mark at or after now (the clock stepped back) yields an empty plan keeping the mark.
CatchUpPlan PlanCatchUp(const CronSchedule& schedule, const TimeZone& zone, int64_t mark_us, int64_t now_us,
                        int64_t catch_up_us);

// What a fire does, given the trigger's overlap policy and how many of its runs are open (queued,
// running, or buffered to run after the running one):
//   skip:       0 open -> run; otherwise skip.
//   buffer_one: 0 open -> run; 1 open -> buffer (journaled now, started when the open run ends);
//               2 or more (one running and one buffered) -> skip.
enum class OverlapDecision { kRun, kBuffer, kSkip };
OverlapDecision DecideOverlap(ScheduleTrigger::Overlap policy, size_t open_runs);
const char* OverlapDecisionName(OverlapDecision d);  // "run", "buffer", "skip"

struct ArmPlan {
  int64_t fire_us = 0;   // the fire the timer is for
  int64_t delay_us = 0;  // from now: the time to the fire, at least 0 and at most kMaxArmAheadUs
};
// The next fire strictly after `after_us` and how long from `now_us` to wait for it; nullopt when
// the schedule has no fire within five years. A delay shorter than the fire's distance (capped at
// kMaxArmAheadUs) means the timer wakes early: TimerDue then says it is not due, and the daemon
// arms again for the same fire (PlanArm(fire_us - 1, now)).
std::optional<ArmPlan> PlanArm(const CronSchedule& schedule, const TimeZone& zone, int64_t after_us, int64_t now_us);

// Whether a timer armed for `fire_us` that wakes at `now_us` should act: the fire is due (within a
// millisecond, the loop's timer resolution), else the timer woke early (the 1 h cap, a clock
// stepped back) and is armed again.
bool TimerDue(int64_t fire_us, int64_t now_us);

}  // namespace basal::serve
