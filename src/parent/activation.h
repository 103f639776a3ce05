// One activation: what it runs, who waits for it, its deadline and how it ended. Its host calls in
// flight are the call gate's (call_gate.h); the worker running it is the pool's (pool.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "basal/flow.h"
#include "parent/loop/event_loop.h"
#include "parent/module_host.h"
#include "parent/store/store.h"
#include "protocol/messages.h"

namespace basal {

struct PooledWorker;

// Where a durable run's activation parked (docs/durable.md): the call whose answer is written when
// the run wakes, and where that answer falls in the order the worker gets answers.
struct ParkedCall {
  bool wait = false;          // waitForEvent (else sleep)
  int64_t call_id = 0;
  int64_t wake_unix_us = 0;   // the sleep's end, or the wait's timeout
  std::string name, key;      // wait: the event's name and key
  int64_t timeout_ms = 0;     // wait
  int64_t answer_seq = 0;     // the answer's place in the order
  int64_t clock_us = 0;       // the run's clock when it parked
};

struct Activation {
  ActivationId id = 0;
  FlowRef flow;
  std::string input_json;  // serialized once: journaled and sent as is
  int64_t start_unix_us = 0;
  DoneCallback done;
  // The run it executes (0: a bare activation), who hears of the run's stop, and for a durable
  // run the clock and seed its worker is loaded with.
  RunId run_id = 0;
  RunCallback run_done;
  std::optional<protocol::DurableStart> durable;
  int64_t attempt = 1;  // a durable run's retry attempt (docs/durable.md#retries)
  std::optional<ParkedCall> parked;  // set when it ends parked
  PooledWorker* worker = nullptr;  // set once it is on a worker
  // Its deadline and the parent's own check of its CPU budget share one timer, due at the earlier
  // of the two (Module::Impl::ArmBudgets): one timer armed and cancelled per activation, not two.
  std::optional<EventLoop::TimerId> budget_timer;
  EventLoop::Clock::time_point deadline_at = EventLoop::Clock::time_point::max();
  EventLoop::Clock::time_point cpu_check_at = EventLoop::Clock::time_point::max();  // max: no check left
  std::chrono::nanoseconds cpu_base{0};         // its worker's CPU time when it started on it
  int64_t last_call_id = 0;  // call ids must rise within an activation
  bool started = false;      // the activate frame was sent
  bool queued = false;       // waiting in the module's queue for a worker
  // A load check (Module::CheckLoad), not an activation: its id is negative and never journaled;
  // it ends when its worker has loaded the flow, and no activate frame is sent.
  bool load_only = false;
  // Another host took its run over (its lease lapsed): it ends here without writing anything.
  bool fenced = false;
  std::function<void(const LoadCheck&)> checked;      // load_only: called instead of `done`
  std::optional<protocol::ScriptError> load_error;  // the worker's failed `loaded`, as it sent it
  // Its answers on their way to the worker (the module's flow control, docs/sandbox.md): bytes
  // journaled in the open batch, then answers held, oldest first, until the worker has read
  // enough of what was sent before them.
  uint64_t answers_in_batch_bytes = 0;
  // From held_head on (a vector and its head, not a deque: a deque allocates twice when it is made,
  // and most activations never hold an answer).
  std::vector<std::string> held_answers;
  size_t held_head = 0;
  uint64_t held_bytes = 0;
  bool room_posted = false;  // the calls that wait for room are to run in the next pass
  // While more than worker_output_max_bytes waits: what the worker had read, and since when it
  // has read nothing more; and the timer that looks again.
  struct Stall {
    uint64_t read = 0;
    EventLoop::Clock::time_point since;
  };
  std::optional<Stall> stall;
  std::optional<EventLoop::TimerId> stall_timer;
};

// What a worker's `done` (or failed `loaded`) means. `retire` is set when the worker's engine state
// is not to be trusted after it (an exhausted budget).
// The done's result and texts are moved out of it.
ActivationResult ResultFromDone(protocol::Done&& done, bool& retire);
ActivationResult ResultFromFailedLoad(const Flow& flow, const protocol::ScriptError& error);
ActivationResult Failure(Outcome outcome, std::string message);

// The journal's end record for a finished activation; its result or error is capped at
// `value_max_bytes` (journal_value.h).
ActivationEnd EndRecord(ActivationId id, const ActivationResult& result, int64_t end_unix_us, size_t value_max_bytes);

int64_t NowUnixUs();

}  // namespace basal
