// What the soak run reads about processes from /proc: its own children (the pool's workers, and
// anything left over at the end), its descriptors and its memory. Linux only, like the sandbox.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace basal::soak {

struct ChildProcess {
  pid_t pid = 0;
  std::string comm;     // the name in /proc/PID/stat
  char state = '?';     // R, S, D, Z, ...
  uint64_t cpu_ticks = 0;  // utime + stime, in clock ticks
};

// Every process whose parent is this one (a scan of /proc/*/stat for ppid == getpid()).
std::vector<ChildProcess> Children();

// Entries in /proc/self/fd (the descriptor opendir uses to read it is not counted).
int OpenDescriptors();

// A field of /proc/self/status in KiB ("VmRSS", "VmHWM"); 0 if absent.
uint64_t SelfStatusKib(const char* field);

// getrusage(RUSAGE_SELF).ru_maxrss: the peak resident set of this process, in KiB.
uint64_t PeakRssKib();

// CPU time (user + system) in seconds: RUSAGE_SELF, or RUSAGE_CHILDREN (the children reaped so far).
double CpuSeconds(bool children);

// The size of a file in bytes; 0 if it does not exist.
uint64_t FileBytes(const std::string& path);

}  // namespace basal::soak
