// Date's clock in a durable run. QuickJS reads the time of day through gettimeofday alone (Date(),
// new Date(), Date.now(), __date_clock; and the seed of its own Math.random, which basal replaces),
// so the worker links with `-Wl,--wrap=gettimeofday` (src/worker/CMakeLists.txt): QuickJS's calls
// land here, and a durable worker answers with its run's clock (durable.h). Every Date behaviour
// stays QuickJS's own (instanceof, subclassing, Date.UTC, parsing, `typeof Date()`), no
// JavaScript is added to any worker, and QuickJS's sources are untouched. A live worker reads the
// real clock, as before. Only ck-basal-worker links this file: nothing else is wrapped.
#include <sys/time.h>

#include "worker/durable.h"

extern "C" {

int __real_gettimeofday(struct timeval* tv, void* tz);

int __wrap_gettimeofday(struct timeval* tv, void* tz) {
  const basal::worker::DurableRun* run = basal::worker::ActiveDurableRun();
  if (!run) return __real_gettimeofday(tv, tz);
  if (tv) {
    tv->tv_sec = static_cast<time_t>(run->clock_us() / 1'000'000);
    tv->tv_usec = static_cast<suseconds_t>(run->clock_us() % 1'000'000);
  }
  if (tz) *static_cast<struct timezone*>(tz) = {};  // obsolete: no time zone to give
  return 0;
}

}  // extern "C"
