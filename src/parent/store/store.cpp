// The names the store writes for its enums, and durability (see store.h, basal/durability.h).
#include "parent/store/store.h"

#include <cmath>
#include <limits>
#include <string>

#include "basal/durability.h"

namespace basal {

const char* EffectName(Effect effect) {
  switch (effect) {
    case Effect::kPure: return "pure";
    case Effect::kIdempotent: return "idempotent";
    case Effect::kExternal: return "external";
  }
  return "external";
}

std::optional<Effect> ParseEffect(std::string_view name) {
  for (Effect e : {Effect::kPure, Effect::kIdempotent, Effect::kExternal})
    if (name == EffectName(e)) return e;
  return std::nullopt;
}

bool KvValuesEqual(const Json& a, const Json& b) {
  // nlohmann's == is already value equality: numbers of different kinds compare by value
  // (an integer against a double as doubles), objects are std::maps (no key order), strings hold
  // the unescaped bytes.
  return a == b;
}

std::optional<int64_t> KvIntegerValue(const Json& value) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    return u > static_cast<uint64_t>(kMax) ? kMax : static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (!value.is_number_float()) return std::nullopt;
  const double d = value.get<double>();
  if (!std::isfinite(d) || std::trunc(d) != d) return std::nullopt;
  if (d >= 9223372036854775808.0) return kMax;  // 2^63: the first double past int64
  if (d < -9223372036854775808.0) return kMin;
  return static_cast<int64_t>(d);
}

const char* CallStateName(CallState state) {
  switch (state) {
    case CallState::kDecided: return "decided";
    case CallState::kStarted: return "started";
    case CallState::kAnswered: return "answered";
    case CallState::kAbandoned: return "abandoned";
    case CallState::kUnknown: return "unknown";
  }
  return "unknown";
}

std::optional<CallState> ParseCallState(std::string_view name) {
  for (CallState s : {CallState::kDecided, CallState::kStarted, CallState::kAnswered, CallState::kAbandoned,
                      CallState::kUnknown})
    if (name == CallStateName(s)) return s;
  return std::nullopt;
}

const char* VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kAllow: return "allow";
    case Verdict::kDeny: return "deny";
    case Verdict::kNeedsApproval: return "needs_approval";
    case Verdict::kQuotaExceeded: return "quota_exceeded";
  }
  return "deny";
}

std::optional<Verdict> ParseVerdict(std::string_view name) {
  for (Verdict v : {Verdict::kAllow, Verdict::kDeny, Verdict::kNeedsApproval, Verdict::kQuotaExceeded})
    if (name == VerdictName(v)) return v;
  return std::nullopt;
}

const char* DurabilityName(Durability durability) {
  switch (durability) {
    case Durability::kNormal: return "normal";
    case Durability::kFull: return "full";
  }
  return "?";
}

Result<Durability> ParseDurability(std::string_view text) {
  if (text == "normal") return Durability::kNormal;
  if (text == "full") return Durability::kFull;
  return MakeError(ErrorCode::kInvalidArgument,
                   "journal durability \"" + std::string(text) +
                       "\" is not known; choose \"normal\" (survives a crash of the parent process) "
                       "or \"full\" (also survives power loss)");
}

}  // namespace basal

namespace basal {

const char* OriginName(Origin origin) {
  switch (origin) {
    case Origin::kUnrecorded: return "unrecorded";
    case Origin::kAdhoc: return "adhoc";
    case Origin::kApproved: return "approved";
    case Origin::kCodemode: return "codemode";
  }
  return "unrecorded";
}

std::optional<Origin> ParseOrigin(std::string_view name) {
  for (Origin o : {Origin::kUnrecorded, Origin::kAdhoc, Origin::kApproved, Origin::kCodemode}) {
    if (name == OriginName(o)) return o;
  }
  return std::nullopt;
}

const char* ApprovalKindName(ApprovalKind kind) { return kind == ApprovalKind::kFlow ? "flow" : "policy"; }

std::optional<ApprovalKind> ParseApprovalKind(std::string_view name) {
  if (name == "flow") return ApprovalKind::kFlow;
  if (name == "policy") return ApprovalKind::kPolicy;
  return std::nullopt;
}

}  // namespace basal

namespace basal {

const char* RunStateName(RunState state) {
  switch (state) {
    case RunState::kQueued: return "queued";
    case RunState::kRunning: return "running";
    case RunState::kEnded: return "ended";
    case RunState::kInterrupted: return "interrupted";
    case RunState::kNeedsReconciliation: return "needs_reconciliation";
    case RunState::kSleeping: return "sleeping";
    case RunState::kWaiting: return "waiting";
    case RunState::kRetrying: return "retrying";
  }
  return "ended";
}

bool RunParked(RunState state) {
  return state == RunState::kSleeping || state == RunState::kWaiting || state == RunState::kRetrying;
}

std::optional<RunState> ParseRunState(std::string_view name) {
  for (RunState s : {RunState::kQueued, RunState::kRunning, RunState::kEnded, RunState::kInterrupted,
                     RunState::kNeedsReconciliation, RunState::kSleeping, RunState::kWaiting, RunState::kRetrying}) {
    if (name == RunStateName(s)) return s;
  }
  return std::nullopt;
}

const char* ResolutionKindName(ResolutionKind kind) {
  switch (kind) {
    case ResolutionKind::kResult: return "result";
    case ResolutionKind::kError: return "error";
    case ResolutionKind::kRetry: return "retry";
  }
  return "retry";
}

std::optional<ResolutionKind> ParseResolutionKind(std::string_view name) {
  for (ResolutionKind k : {ResolutionKind::kResult, ResolutionKind::kError, ResolutionKind::kRetry})
    if (name == ResolutionKindName(k)) return k;
  return std::nullopt;
}

const char* KvAuditOpName(KvAuditOp op) { return op == KvAuditOp::kPut ? "put" : "delete"; }

std::optional<KvAuditOp> ParseKvAuditOp(std::string_view name) {
  if (name == "put") return KvAuditOp::kPut;
  if (name == "delete") return KvAuditOp::kDelete;
  return std::nullopt;
}

}  // namespace basal
