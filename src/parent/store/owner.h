// Who owns an unfinished activation, and when a parent may close another parent's activations as
// abandoned (JournalStore::RecoverAbandoned). Backend-independent: every store uses these rules
// and writes these texts, so the journal reads the same whatever holds it.
//
//   ActivationOwner self = ThisProcessOwner();
//   if (OwnerIsGone(row.owner, row.lease_until_unix_us, self, now)) { ... close it ... }
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "parent/store/store.h"

namespace basal {

// This process as an owner: gethostname(), getpid() and its start time in clock ticks since boot
// (field 22 of /proc/self/stat).
ActivationOwner ThisProcessOwner();

// Field 22 (starttime) of /proc/PID/stat, or nullopt when there is no such process or the file
// cannot be read or parsed. The command name (field 2) may hold spaces and parentheses, so the
// fields are counted after the LAST ')'.
std::optional<int64_t> ProcessStartTicks(int64_t pid);

// True when `owner`'s activations may be closed by `self`:
//   - never when `owner` is `self` (same host, pid and start time);
//   - on the same host: no live process has owner.pid, or it started at another time (a reused pid);
//     a process that exists but whose start time cannot be read counts as alive (we cannot tell);
//   - on another host: its lease ended before `now_unix_us`.
bool OwnerIsGone(const ActivationOwner& owner, int64_t lease_until_unix_us, const ActivationOwner& self,
                 int64_t now_unix_us);

// The error JSON of an activation closed as abandoned:
// {"kind":"abandoned","message":"its parent (host H, pid P) died while it ran; closed by pid Q at <UTC>"}
// A unix time in microseconds as RFC 3339 UTC text with milliseconds: 2026-12-04T14:39:25.123Z.
std::string UtcText(int64_t unix_us);

std::string AbandonedActivationErrorJson(const ActivationOwner& owner, const ActivationOwner& self,
                                         int64_t now_unix_us);
// The error JSON of a call that was `started` when its parent died (state `unknown`).
std::string UnknownCallErrorJson();
// The error JSON of a call that was only `decided` when its parent died (state `abandoned`).
std::string AbandonedCallErrorJson();

// "2026-12-02T15:00:54.706Z"
std::string UtcText(int64_t unix_us);

}  // namespace basal
