// The call gate: every host call a flow makes passes here, and only here are call records written.
//
//   decide (manifest) -> journal -> dispatch (handler) -> journal the answer -> answer the worker
//
// Pure calls are journaled once, with their answer. Idempotent and external calls are journaled
// `started` first and their handler runs only after that record is committed (RunStarted, called
// by the loop right after its commit): intent before effect. A denied call is journaled with its
// decision and answered PermissionDenied. When an activation ends with calls in flight they become
// `abandoned`; an answer that still arrives is written into that record and goes no further.
// docs/journal.md has the lifecycle.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "basal/host_call.h"
#include "basal/manifest.h"
#include "basal/module.h"
#include "parent/loop/event_loop.h"
#include "parent/store/store.h"
#include "protocol/messages.h"

namespace basal {

// Shared by a module's replies and the gate: how an answer from any thread finds the gate, and
// how a reply learns that the module is gone.
struct ReplyLink {
  std::mutex mu;
  class CallGate* gate = nullptr;  // null once the module is gone
  EventLoop* loop = nullptr;
};

struct CallGateHooks {
  // Queue an answer frame for the activation's worker; sent after the batch commits.
  std::function<void(ActivationId, std::string payload)> send;
  // A journal write failed: the batch must not commit (the loop rolls it back and fails its work).
  std::function<void(std::string why)> journal_failed;
  std::function<void(ModuleEvent)> event;
  std::function<void()> count_denied;
};

class CallGate {
 public:
  CallGate(HostCallRegistry& registry, JournalStore& journal, std::string journal_id, EventLoop& loop,
           CallGateHooks hooks);
  ~CallGate();  // unlinks every reply still held: they answer into nothing
  CallGate(const CallGate&) = delete;
  CallGate& operator=(const CallGate&) = delete;

  // A call frame of a running activation (already checked to belong to it).
  void OnCall(ActivationId activation, const Flow& flow, protocol::Call call);
  // After the loop's commit: runs the handlers whose `started` record is now durable.
  void RunStarted();
  bool has_started_waiting() const { return !awaiting_commit_.empty(); }
  // The commit failed: nothing waiting for it may run. Returns their activations (to fail).
  std::vector<ActivationId> DropStartedWaiting();
  // The activation ended: its calls in flight become abandoned.
  void EndCalls(ActivationId activation);
  // From HostCallReply, on the loop thread.
  void OnAnswer(ActivationId activation, int64_t call_id, bool ok, Json value, std::string name, std::string message);

  size_t in_flight() const { return calls_.size(); }

 private:
  enum class Stage { kAwaitingCommit, kRunning, kAbandoned };
  struct InFlight {
    const HostCallSpec* spec = nullptr;
    Stage stage = Stage::kRunning;
    bool recorded = false;  // a record exists (started, or abandoned)
    std::string flow;
    std::string args_journal;  // kept only until the record is written
    Decision decision;
    Json args;                 // kept only until the handler runs
    int64_t start_unix_us = 0;
  };
  using Key = std::pair<ActivationId, int64_t>;

  Decision Decide(const Flow& flow, const protocol::Call& call, const HostCallSpec* spec);
  void Dispatch(const Key& key, InFlight& call);
  void Record(const CallRecord& record);
  void Update(const CallUpdate& update);
  std::string ResultForJournal(const HostCallSpec& spec, const Json& value);

  HostCallRegistry& registry_;
  JournalStore& journal_;
  const std::string journal_id_;
  CallGateHooks hooks_;
  std::shared_ptr<ReplyLink> link_;
  std::map<Key, InFlight> calls_;  // freed when answered (or abandoned and never started)
  std::vector<Key> awaiting_commit_;
};

}  // namespace basal
