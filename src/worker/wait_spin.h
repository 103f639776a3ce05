// How long the worker polls its stdin before it blocks on it (Channel::Read, Linux only).
//
// A worker that blocks on an empty pipe leaves its CPU idle, and on the virtual machines basal runs
// on an idle vCPU is halted: the parent's next frame then waits for the host to run that vCPU again,
// about 30 us here (docs/performance.md, "Issue 30: the worker polls before it blocks"), longer than
// the whole of a trivial host call's answer. The kernel's own answer, haltpoll's polling before the
// halt, is switched off in these guests (haltpoll.guest_halt_poll_ns=0), so the worker polls in user
// space, as the parent's loop already does (ModuleOptions::busy_poll), with the same adaptive rule
// as haltpoll: a window that grows while frames keep arriving soon after the wait began and shrinks
// to nothing while they do not. A flow whose calls are answered at once (kv, a registered call, the
// next activation of a sequential caller) gets its frames without a halted CPU between; one whose
// calls take long (http.fetch, a person's approval, an idle pooled worker) stops polling after a
// few waits and blocks at once, as before.
//
// Only when the parent allows it: its last `activate` or `result` carried `"poll": true`, which it
// writes whenever its busy_poll is on, to every worker but a codemode script's
// (Module::Impl::WorkerMayPoll), a backlog's too: the worker yields between two looks, so the loop
// or another worker runnable on its CPU runs first.
//
// Bounds: one wait polls at most kMax (50 us), with poll(2) on stdin alone and no timeout (the
// seccomp row OneFdNoWait) and sched_yield(2) between two looks (a task runnable on the worker's CPU
// runs first), then blocks in read(2). The CPU it spends is the worker's own, counted
// like the rest: inside an activation against the flow's CPU budget, between activations against
// the idle-CPU limit (ModuleOptions::idle_cpu_max, 200 ms by default, which 50 us per wait cannot
// approach: a wait is one per frame the parent sends).
#pragma once

#include <algorithm>
#include <chrono>

namespace basal::worker {

struct WaitSpin {
  static constexpr std::chrono::microseconds kMax{50};        // the longest one wait polls
  static constexpr std::chrono::microseconds kGrowStart{10};  // the first window after none
  static constexpr std::chrono::microseconds kShortWait{100};  // a blocked wait shorter than this grows it

  std::chrono::microseconds window{0};  // the next wait polls this long before it blocks

  // After a wait that lasted `waited` from its start to its first bytes; `caught` when polling saw
  // them (the window was long enough: it stays). A blocked wait that was short (the frame came
  // soon after the window ran out, or the window was none) doubles it, from kGrowStart up to kMax;
  // a long one halves it, and below kGrowStart / 2 it is none.
  void After(std::chrono::nanoseconds waited, bool caught) {
    if (caught) return;
    if (waited < kShortWait) {
      window = window < kGrowStart ? kGrowStart : std::min(window * 2, kMax);
    } else {
      window /= 2;
      if (window < kGrowStart / 2) window = std::chrono::microseconds(0);
    }
  }
};

}  // namespace basal::worker
