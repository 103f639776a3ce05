// See soak_proc.h.
#include "soak/soak_proc.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

namespace basal::soak {
namespace {

// The text of /proc/PID/stat, or "" if the process is gone. The scan reads every process on the
// machine, and one that exits between the open and the read fails the read with ESRCH (which
// std::ifstream turns into an exception): not ours, and not an error.
std::string ReadStat(const char* pid) {
  const int fd = ::open((std::string("/proc/") + pid + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buf[1024];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

bool IsNumber(const char* name) {
  if (*name == '\0') return false;
  for (const char* p = name; *p; ++p)
    if (*p < '0' || *p > '9') return false;
  return true;
}

}  // namespace

std::vector<ChildProcess> Children() {
  std::vector<ChildProcess> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  const pid_t self = getpid();
  while (dirent* e = readdir(d)) {
    if (!IsNumber(e->d_name)) continue;
    const std::string stat = ReadStat(e->d_name);
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split at the last ')'.
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid != self) continue;
    // Fields 5..13 (pgrp .. cmajflt) come before utime (14) and stime (15).
    std::string skip;
    for (int i = 0; i < 9; ++i) rest >> skip;
    uint64_t utime = 0, stime = 0;
    rest >> utime >> stime;
    ChildProcess c;
    c.pid = static_cast<pid_t>(std::strtol(e->d_name, nullptr, 10));
    c.comm = stat.substr(open + 1, close - open - 1);
    c.state = state.empty() ? '?' : state[0];
    c.cpu_ticks = utime + stime;
    out.push_back(std::move(c));
  }
  closedir(d);
  return out;
}

int OpenDescriptors() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d))
    if (IsNumber(e->d_name) && std::atoi(e->d_name) != dirfd(d)) ++n;
  closedir(d);
  return n;
}

uint64_t SelfStatusKib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(f, line))
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':')
      return std::strtoull(line.c_str() + n + 1, nullptr, 10);
  return 0;
}

uint64_t PeakRssKib() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<uint64_t>(u.ru_maxrss);
}

double CpuSeconds(bool children) {
  rusage u{};
  if (getrusage(children ? RUSAGE_CHILDREN : RUSAGE_SELF, &u) != 0) return 0;
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

uint64_t FileBytes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace basal::soak
