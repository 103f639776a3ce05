// Runs a body in a forked child of the (single-threaded) test process, with stdin, stdout and
// stderr set to pipes (or to what a test wants to see refused), and collects how it ended.
// The body never returns into GoogleTest: the child always leaves through _exit.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace basal::confinement::testing {

enum class StdinKind { kPipe, kRegularFile, kNamedFifo };

struct ChildSetup {
  StdinKind stdin_kind = StdinKind::kPipe;
  bool stdout_is_read_end = false;
};

struct ChildResult {
  int status = 0;
  std::string out;
  std::string err;

  bool KilledBy(int sig) const { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }
  bool ExitedWith(int code) const { return WIFEXITED(status) && WEXITSTATUS(status) == code; }
  std::string Describe() const {
    std::string d;
    if (WIFEXITED(status)) d = "exited " + std::to_string(WEXITSTATUS(status));
    else if (WIFSIGNALED(status)) d = std::string("killed by ") + strsignal(WTERMSIG(status));
    else d = "status " + std::to_string(status);
    return d + "; stdout: " + out + "; stderr: " + err;
  }
};

// Raw write for use in a confined child (never stdio).
inline void RawWrite(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = write(fd, s.data(), s.size());
    if (n <= 0) return;
    s.remove_prefix(static_cast<size_t>(n));
  }
}

inline ChildResult RunChild(const ChildSetup& setup, const std::function<void()>& body) {
  ChildResult result;
  int in[2];
  int out[2];
  int err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return result;
  }
  int stdin_src = in[0];
  char dir[] = "/tmp/basal-confinement-test-XXXXXX";
  std::string path;
  if (setup.stdin_kind != StdinKind::kPipe) {
    if (mkdtemp(dir) == nullptr) {
      ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
      return result;
    }
    path = std::string(dir) + (setup.stdin_kind == StdinKind::kRegularFile ? "/input" : "/fifo");
    if (setup.stdin_kind == StdinKind::kRegularFile) {
      stdin_src = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    } else {
      if (mkfifo(path.c_str(), 0600) != 0) ADD_FAILURE() << "mkfifo: " << std::strerror(errno);
      stdin_src = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    }
    if (setup.stdin_kind == StdinKind::kRegularFile && stdin_src >= 0) {
      // A regular file opened read-only, so only its type is wrong.
      close(stdin_src);
      stdin_src = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    }
    if (stdin_src < 0) ADD_FAILURE() << "open " << path << ": " << std::strerror(errno);
  }
  const pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return result;
  }
  if (pid == 0) {
    dup2(stdin_src, STDIN_FILENO);
    dup2(setup.stdout_is_read_end ? out[0] : out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1], stdin_src}) {
      if (fd > STDERR_FILENO) close(fd);
    }
    body();
    _exit(0);
  }
  close(in[0]);
  close(in[1]);  // the child reads EOF on stdin
  close(out[1]);
  close(err[1]);
  if (stdin_src != in[0]) close(stdin_src);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_count = 2;
  while (open_count > 0) {
    if (poll(fds, 2, 10000) <= 0) {
      ADD_FAILURE() << "the child did not finish within 10 s";
      kill(pid, SIGKILL);
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        fds[i].fd = -1;
        --open_count;
      }
    }
  }
  close(out[0]);
  close(err[0]);
  waitpid(pid, &result.status, 0);
  if (!path.empty()) {
    unlink(path.c_str());
    rmdir(dir);
  }
  return result;
}

inline bool SanitizedBuild() {
#if defined(BASAL_SANITIZE) || defined(__SANITIZE_ADDRESS__)
  return true;
#else
  return false;
#endif
}

}  // namespace basal::confinement::testing
