#include "confinement/linux/startup_checks.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/personality.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <string>

namespace basal::confinement {
namespace {

// Reads a whole /proc file with open/read (never stdio, which would keep a stream around).
StepStatus ReadProcFile(const char* path, std::string& out) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return StepStatus::Failed(SyscallFailure((std::string("open ") + path).c_str(), errno));
  out.clear();
  std::array<char, 4096> buf;
  for (;;) {
    const ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      close(fd);
      return StepStatus::Failed(SyscallFailure((std::string("read ") + path).c_str(), saved));
    }
    if (n == 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
  }
  close(fd);
  return StepStatus::Passed();
}

const char* FileTypeName(mode_t mode) {
  if (S_ISREG(mode)) return "regular file";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISLNK(mode)) return "symbolic link";
  if (S_ISFIFO(mode)) return "pipe";
  return "unknown file type";
}

const char* AccessName(int access_mode) {
  switch (access_mode) {
    case O_RDONLY: return "read-only";
    case O_WRONLY: return "write-only";
    case O_RDWR: return "read-write";
    default: return "with an unknown access mode";
  }
}

StepStatus CheckOnePipe(int fd, const char* name, int want_access) {
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    if (errno == EBADF) return StepStatus::Failed(std::string(name) + " is not open");
    return StepStatus::Failed(SyscallFailure((std::string("fstat ") + name).c_str(), errno));
  }
  if (!S_ISFIFO(st.st_mode)) {
    return StepStatus::Failed(std::string(name) + " is not a pipe (" + FileTypeName(st.st_mode) + ")");
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return StepStatus::Failed(SyscallFailure((std::string("fcntl F_GETFL ") + name).c_str(), errno));
  if ((flags & O_ACCMODE) != want_access) {
    return StepStatus::Failed(std::string(name) + " is open " + AccessName(flags & O_ACCMODE) + ", not " +
                              AccessName(want_access) + (want_access == O_RDONLY ? " (the read end)" : " (a write end)"));
  }
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  std::array<char, 256> target{};
  const ssize_t n = readlink(link.c_str(), target.data(), target.size() - 1);
  if (n < 0) return StepStatus::Failed(SyscallFailure(("readlink " + link).c_str(), errno));
  const std::string_view t(target.data(), static_cast<size_t>(n));
  if (t.substr(0, 6) != "pipe:[") {
    return StepStatus::Failed(std::string(name) + " is a named FIFO (" + std::string(t) + "), not an anonymous pipe");
  }
  return StepStatus::Passed();
}

}  // namespace

StepStatus CheckStatText(std::string_view stat, long expected_pid) {
  const size_t space = stat.find(' ');
  long pid = 0;
  const auto [ptr, ec] = std::from_chars(stat.data(), stat.data() + (space == std::string_view::npos ? stat.size() : space), pid);
  if (ec != std::errc() || space == std::string_view::npos || ptr != stat.data() + space) {
    return StepStatus::Failed("/proc/self/stat does not start with a pid");
  }
  if (pid != expected_pid) {
    return StepStatus::Failed("/proc/self/stat describes pid " + std::to_string(pid) + ", not this process (pid " +
                              std::to_string(expected_pid) + "): /proc is not this process's procfs");
  }
  return StepStatus::Passed();
}

StepStatus CheckProcIsGenuine() {
  struct statfs fs {};
  if (statfs("/proc", &fs) != 0) return StepStatus::Failed(SyscallFailure("statfs /proc", errno));
  if (static_cast<unsigned long>(fs.f_type) != PROC_SUPER_MAGIC) {
    return StepStatus::Failed("/proc is not a procfs (statfs magic 0x" + [&] {
      std::array<char, 24> hex{};
      auto r = std::to_chars(hex.data(), hex.data() + hex.size(), static_cast<unsigned long>(fs.f_type), 16);
      return std::string(hex.data(), r.ptr);
    }() + ", want 0x9fa0)");
  }
  std::string stat;
  if (StepStatus s = ReadProcFile("/proc/self/stat", stat); !s.ok()) return s;
  return CheckStatText(stat, static_cast<long>(getpid()));
}

StepStatus CheckStatusText(std::string_view status) {
  constexpr std::string_view kKey = "\nThreads:";
  const size_t at = status.find(kKey);
  if (at == std::string_view::npos) return StepStatus::Failed("/proc/self/status has no Threads: line");
  size_t p = at + kKey.size();
  while (p < status.size() && (status[p] == ' ' || status[p] == '\t')) ++p;
  long threads = 0;
  const auto [ptr, ec] = std::from_chars(status.data() + p, status.data() + status.size(), threads);
  if (ec != std::errc()) return StepStatus::Failed("/proc/self/status has an unreadable Threads: line");
  (void)ptr;
  if (threads != 1) {
    return StepStatus::Failed("the worker has " + std::to_string(threads) + " threads, not exactly one");
  }
  return StepStatus::Passed();
}

StepStatus CheckSingleThreaded() {
  std::string status;
  if (StepStatus s = ReadProcFile("/proc/self/status", status); !s.ok()) return s;
  return CheckStatusText(status);
}

StepStatus CheckStdioAreAnonymousPipes() {
  if (StepStatus s = CheckOnePipe(STDIN_FILENO, "stdin", O_RDONLY); !s.ok()) return s;
  if (StepStatus s = CheckOnePipe(STDOUT_FILENO, "stdout", O_WRONLY); !s.ok()) return s;
  return CheckOnePipe(STDERR_FILENO, "stderr", O_WRONLY);
}

StepStatus CheckReadImpliesExecOff() {
  const int persona = personality(0xffffffff);
  if (persona == -1) return StepStatus::Failed(SyscallFailure("personality(0xffffffff)", errno));
  if ((persona & READ_IMPLIES_EXEC) != 0) return StepStatus::Failed("the READ_IMPLIES_EXEC personality is on");
  return StepStatus::Passed();
}

StepStatus CheckMapsText(std::string_view maps) {
  // Each line: "start-end perms offset dev inode [path]", perms like "rw-p" or "r-xs".
  while (!maps.empty()) {
    const size_t eol = maps.find('\n');
    const std::string_view line = maps.substr(0, eol);
    maps = eol == std::string_view::npos ? std::string_view() : maps.substr(eol + 1);
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.size() < sp + 5) {
      return StepStatus::Failed("/proc/self/maps has an unreadable line: " + std::string(line));
    }
    const std::string_view range = line.substr(0, sp);
    const std::string_view perms = line.substr(sp + 1, 4);
    const bool writable = perms[1] == 'w';
    const bool executable = perms[2] == 'x';
    const bool shared = perms[3] == 's';
    // The design refuses a shared, writable and executable mapping; a private one is refused
    // too, since nothing in the worker may be writable and executable at once.
    if (writable && executable) {
      return StepStatus::Failed(std::string("mapping ") + std::string(range) + " is " + (shared ? "shared, " : "") +
                                "writable and executable (" + std::string(perms) + ")");
    }
    if (line.size() >= 7 && line.substr(line.size() - 7) == "[stack]" && executable) {
      return StepStatus::Failed("the stack " + std::string(range) + " is executable (" + std::string(perms) + ")");
    }
  }
  return StepStatus::Passed();
}

StepStatus CheckMappings() {
  std::string maps;
  if (StepStatus s = ReadProcFile("/proc/self/maps", maps); !s.ok()) return s;
  return CheckMapsText(maps);
}

StepStatus RunStartupChecks() {
  // /proc first: the thread, pipe and mapping checks read it.
  if (StepStatus s = CheckProcIsGenuine(); !s.ok()) return s;
  if (StepStatus s = CheckSingleThreaded(); !s.ok()) return s;
  if (StepStatus s = CheckStdioAreAnonymousPipes(); !s.ok()) return s;
  if (StepStatus s = CheckReadImpliesExecOff(); !s.ok()) return s;
  return CheckMappings();
}

}  // namespace basal::confinement
