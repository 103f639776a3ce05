// The worker's table of web globals (web_globals.h): which names load which installer on first use.
// Apart from the mechanism (web_globals.cpp) so that a test can build the mechanism and the
// natives without the engine that fetch and the timers need (script_host.h).
#include "worker/web_fetch.h"
#include "worker/web_globals.h"
#include "worker/web_natives.h"
#include "worker/web_timers.h"

namespace basal::worker {
namespace {

constexpr const char* kFetchNames[] = {"fetch", "Request", "Response", "Headers"};
constexpr const char* kTimerNames[] = {"setTimeout", "clearTimeout", "setInterval", "clearInterval"};
constexpr const char* kDurableNames[] = {"sleep", "waitForEvent", "step"};

constexpr LazyGlobal kWebGlobals[] = {
    {kUrlNames, InstallUrl},
    {kCoreNames, InstallCore},
    {kFetchNames, InstallFetchGlobals},
    {kTimerNames, InstallTimerGlobals},
    {kDurableNames, InstallDurableGlobals},
    {kPerformanceNames, InstallPerformance},
};

}  // namespace

std::span<const LazyGlobal> WebGlobals() { return kWebGlobals; }

}  // namespace basal::worker
