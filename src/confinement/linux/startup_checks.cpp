#include "confinement/linux/startup_checks.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/personality.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
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
  // An anonymous pipe's inode lives on pipefs; a named FIFO's on the file system that holds its
  // name. One fstatfs tells them apart without a walk through /proc/self/fd (the link, which
  // reads "pipe:[...]" for an anonymous pipe, only names a FIFO that is refused).
  struct statfs fs {};
  if (fstatfs(fd, &fs) != 0) return StepStatus::Failed(SyscallFailure((std::string("fstatfs ") + name).c_str(), errno));
  if (static_cast<unsigned long>(fs.f_type) == PIPEFS_MAGIC) return StepStatus::Passed();
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  std::array<char, 256> target{};
  const ssize_t n = readlink(link.c_str(), target.data(), target.size() - 1);
  const std::string where = n < 0 ? SyscallFailure(("readlink " + link).c_str(), errno)
                                  : std::string(target.data(), static_cast<size_t>(n));
  return StepStatus::Failed(std::string(name) + " is a named FIFO (" + where + "), not an anonymous pipe");
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

namespace {

// statfs("/proc") has PROC_SUPER_MAGIC; then /proc/self/stat, read once into `stat`, names getpid().
StepStatus CheckProcIsGenuine(std::string& stat) {
  struct statfs fs {};
  if (statfs("/proc", &fs) != 0) return StepStatus::Failed(SyscallFailure("statfs /proc", errno));
  if (static_cast<unsigned long>(fs.f_type) != PROC_SUPER_MAGIC) {
    return StepStatus::Failed("/proc is not a procfs (statfs magic 0x" + [&] {
      std::array<char, 24> hex{};
      auto r = std::to_chars(hex.data(), hex.data() + hex.size(), static_cast<unsigned long>(fs.f_type), 16);
      return std::string(hex.data(), r.ptr);
    }() + ", want 0x9fa0)");
  }
  if (StepStatus s = ReadProcFile("/proc/self/stat", stat); !s.ok()) return s;
  return CheckStatText(stat, static_cast<long>(getpid()));
}

}  // namespace

StepStatus CheckProcIsGenuine() {
  std::string stat;
  return CheckProcIsGenuine(stat);
}

StepStatus CheckStatThreadsText(std::string_view stat) {
  // "pid (comm) state ppid ... num_threads ...": the command name may hold spaces and parentheses,
  // so the fields are counted from its last ')'; the first after it is field 3 (state), and
  // num_threads is field 20, the same count the Threads: line of /proc/self/status shows.
  const size_t close = stat.rfind(')');
  if (close == std::string_view::npos) return StepStatus::Failed("/proc/self/stat has no command name");
  std::string_view rest = stat.substr(close + 1);
  std::string_view field;
  for (int n = 3; n <= 20; ++n) {
    const size_t start = rest.find_first_not_of(' ');
    if (start == std::string_view::npos) return StepStatus::Failed("/proc/self/stat has no thread count (field 20)");
    rest.remove_prefix(start);
    const size_t end = std::min(rest.find_first_of(" \n"), rest.size());
    field = rest.substr(0, end);
    rest.remove_prefix(end);
  }
  long threads = 0;
  const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), threads);
  if (ec != std::errc() || ptr != field.data() + field.size())
    return StepStatus::Failed("/proc/self/stat has an unreadable thread count (field 20)");
  if (threads != 1) {
    return StepStatus::Failed("the worker has " + std::to_string(threads) + " threads, not exactly one");
  }
  return StepStatus::Passed();
}

StepStatus CheckSingleThreaded() {
  std::string stat;
  if (StepStatus s = ReadProcFile("/proc/self/stat", stat); !s.ok()) return s;
  return CheckStatThreadsText(stat);
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
  // /proc first: the thread and mapping checks read it (the thread count from the same read of
  // /proc/self/stat that named this process), and a named FIFO is named through it.
  std::string stat;
  if (StepStatus s = CheckProcIsGenuine(stat); !s.ok()) return s;
  if (StepStatus s = CheckStatThreadsText(stat); !s.ok()) return s;
  if (StepStatus s = CheckStdioAreAnonymousPipes(); !s.ok()) return s;
  if (StepStatus s = CheckReadImpliesExecOff(); !s.ok()) return s;
  return CheckMappings();
}

}  // namespace basal::confinement
