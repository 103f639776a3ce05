// The live tail of basal serve (GET /v1/tail, `basal tail`; docs/api.md, "The live tail"): what the
// module's activations do, as it happens, as server-sent events. Its sources are the module's
// observer (ModuleObserver::OnActivity: starts, ends, host calls) and its log sink (console lines).
//
//   event: activation_start  data: {"activation_id", "run_id", "flow", "started"}
//   event: activation_end    data: {"activation_id", "run_id", "flow", "outcome", "error", "ended", "ms"}
//   event: log               data: {"activation_id", "run_id", "flow", "level", "message"}
//   event: call              data: {"activation_id", "run_id", "flow", "call_id", "name", "decision", "rule", "state"}
//   event: dropped           data: {"count"}     events this subscriber lost to its buffer's bound
//   event: closed            data: {"reason"}    the credential the stream was opened with no longer
//                                                admits it (a revoked token): the stream ends here
//   : keepalive                                  every 15 s while nothing else is sent
//
// A stream opened over TCP is admitted again at every keepalive tick (every 15 s, whether or not the
// keepalive is sent): a token revoked through `basal token revoke` (another process) ends its
// streams within 15 s, not when the client leaves.
//
// Bounds: at most limits.tail_subscribers streams at once (more: 503 tail_full); each holds at most
// limits.tail_buffer_bytes its client has not read. An event that does not fit is dropped for that
// subscriber alone and counted; once events fit again the subscriber first gets `dropped` with the
// count, and goes on. A log line is at most what the log host call passes (4 KiB, and within the
// flow's log_kb per activation: lines past it are dropped before they reach the sink); an error's
// message and stack are cut at 4 KiB each.
//
//   Tail tail({.loop = loop, .limits = config.limits, .run_of = ...});
//   auto s = tail.Subscribe("hello");  // the stream to answer with, or 503
//   module observer: if (tail.wanted()) tail.OnActivity(e);  log sink: tail.OnLog(ctx, level, message);
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>

#include "basal/host_call.h"
#include "basal/module_event.h"
#include "parent/loop/event_loop.h"
#include "serve/config.h"
#include "serve/http_message.h"

namespace basal::serve {

class Tail {
 public:
  struct Options {
    EventLoop& loop;
    const LimitsConfig& limits;  // read at each use: a reload changes it in place
    // The run of an activation whose start this tail did not see (0: none): a console line's
    // context names only its activation.
    std::function<int64_t(int64_t activation_id)> run_of;
    std::chrono::milliseconds keepalive{15'000};
  };
  explicit Tail(Options options);
  ~Tail();  // every stream ends
  Tail(const Tail&) = delete;
  Tail& operator=(const Tail&) = delete;

  // Whether the stream's credential still admits it: nullopt if so, else why not (sent to the
  // client as the `closed` event's reason). Called on the loop, at each keepalive tick.
  using StillAdmitted = std::function<std::optional<std::string>()>;

  // A new subscriber, to the events of one flow or (nullopt) of all: the stream to answer with
  // (its first bytes are written already), or 503 tail_full / draining. `still_admitted` (null:
  // always) is asked again at every keepalive tick.
  std::variant<std::shared_ptr<HttpStream>, HttpResponse> Subscribe(std::optional<std::string> flow,
                                                                    StillAdmitted still_admitted = nullptr);
  bool wanted() const { return !subscribers_.empty(); }
  size_t subscribers() const { return subscribers_.size(); }

  void OnActivity(const ActivityEvent& event);
  void OnLog(const HostCallContext& context, std::string_view level, std::string_view message);
  // Every stream ends (the daemon drains); no new subscriber is taken.
  void Drain();

 private:
  struct Subscriber {
    std::optional<std::string> flow;
    std::shared_ptr<HttpStream> stream;
    uint64_t dropped = 0;  // events lost since the last `dropped` event
    StillAdmitted still_admitted;
  };
  // Sends `event` (its name and data) to every subscriber of `flow`.
  void Publish(const std::string& flow, std::string_view name, const nlohmann::json& data);
  void Send(Subscriber& s, const std::string& frame);
  void Keepalive();
  void Forget(uint64_t id);
  int64_t RunOf(int64_t activation_id);

  Options o_;
  std::map<uint64_t, Subscriber> subscribers_;
  uint64_t next_id_ = 1;
  bool draining_ = false;
  std::optional<EventLoop::TimerId> keepalive_;
  // The runs of activations started and not ended (bounded: cleared past kMaxKnownActivations).
  std::unordered_map<int64_t, int64_t> run_of_activation_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace basal::serve
