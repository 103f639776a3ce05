// The references, measured in the same run as the figures: what the operating system and SQLite
// cost on this machine before basal adds anything.
#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench.h"
#include "parent/store/open.h"
#include "parent/store/sqlite/sqlite_store.h"

namespace basal::bench {
namespace {

[[noreturn]] void ReferencesBenchFatal(const std::string& what) {
  std::fprintf(stderr, "basal-bench: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

bool ReadFull(int fd, char* buf, size_t n) {
  size_t off = 0;
  while (off < n) {
    const ssize_t r = ::read(fd, buf + off, n - off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    off += static_cast<size_t>(r);
  }
  return true;
}

bool WriteFull(int fd, const char* buf, size_t n) {
  size_t off = 0;
  while (off < n) {
    const ssize_t r = ::write(fd, buf + off, n - off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    off += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

void PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof set, &set);
}

Samples PipeRoundTrip(const Options& o, bool cross_cpu) {
  std::fflush(nullptr);  // the child must not flush a copy of our stdio buffers
  int to_child[2], to_parent[2];
  if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(to_parent, O_CLOEXEC) != 0) ReferencesBenchFatal("pipe2");
  const pid_t pid = fork();
  if (pid < 0) ReferencesBenchFatal("fork");
  if (pid == 0) {
    if (cross_cpu) PinTo(1);
    ::close(to_child[1]);  // else the child holds its own EOF off
    ::close(to_parent[0]);
    char buf[64];
    while (ReadFull(to_child[0], buf, sizeof buf) && WriteFull(to_parent[1], buf, sizeof buf)) {
    }
    _exit(0);
  }
  ::close(to_child[0]);
  ::close(to_parent[1]);
  cpu_set_t before;
  if (cross_cpu) {
    (void)sched_getaffinity(0, sizeof before, &before);
    PinTo(0);
  }
  char buf[64];
  std::memset(buf, 'x', sizeof buf);
  const int warmup = 1000, n = o.quick ? 2000 : 20000;
  Samples s;
  for (int i = 0; i < warmup + n; ++i) {
    const auto t0 = Clock::now();
    if (!WriteFull(to_child[1], buf, sizeof buf) || !ReadFull(to_parent[0], buf, sizeof buf)) ReferencesBenchFatal("echo child");
    if (i >= warmup) s.Add(MicrosSince(t0));
  }
  ::close(to_child[1]);
  ::close(to_parent[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (cross_cpu) (void)sched_setaffinity(0, sizeof before, &before);
  return s;
}

Samples SpawnHello(const Options& o) {
  const int warmup = 20, n = o.quick ? 50 : 300;
  Samples s;
  for (int i = 0; i < warmup + n; ++i) {
    const auto t0 = Clock::now();
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) ReferencesBenchFatal("pipe2");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    char* argv[] = {const_cast<char*>(o.hello_path.c_str()), nullptr};
    char* envp[] = {nullptr};
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, o.hello_path.c_str(), &fa, nullptr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    if (rc != 0) {
      errno = rc;
      ReferencesBenchFatal("posix_spawn " + o.hello_path);
    }
    char buf[64];
    std::string got;
    for (;;) {
      const ssize_t r = ::read(out[0], buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got.append(buf, static_cast<size_t>(r));
    }
    ::close(out[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (i >= warmup) s.Add(MicrosSince(t0));
    if (got != "hello\n" || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "basal-bench: %s printed \"%s\", status %d\n", o.hello_path.c_str(), got.c_str(), status);
      std::exit(1);
    }
  }
  return s;
}

std::string FigureStore(const Options& o, const std::string& sqlite_path) {
  if (!o.journal.empty()) return o.journal;
  for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((sqlite_path + suffix).c_str());
  return sqlite_path;
}

CommitSamples JournalCommits(const Options& o) {
  const bool own = o.journal.empty();
  const std::string path = FigureStore(o, o.work_dir + "/reference-journal.db");
  auto store = OpenStore({path, Durability::kNormal});
  if (!store) {
    std::fprintf(stderr, "basal-bench: %s\n", store.error().message.c_str());
    std::exit(1);
  }
  JournalStore& j = (*store)->journal();
  Store& batch = **store;
  // Rows shaped like the ones a trivial activation with one host call writes.
  const std::string hash = "sha256:" + std::string(64, 'a');
  CommitSamples out;
  // A server's commit is a round trip and an fsync there: fewer of them (each store gets its own
  // sample count in the figure's line).
  const int warmup = 200, n = o.quick ? 1000 : (own ? 10000 : 2000);
  for (int i = 0; i < warmup + n; ++i) {
    auto t0 = Clock::now();
    ActivationStart start;
    start.flow = "bench.js";
    start.source_hash = start.manifest_hash = hash;
    start.input_json = "null";
    start.start_unix_us = 1'700'000'000'000'000 + i;
    auto id = j.BeginActivation(start);
    if (!id || !batch.Commit()) ReferencesBenchFatal("journal begin");
    if (i >= warmup) out.begin_activation.Add(MicrosSince(t0));

    t0 = Clock::now();
    CallRecord call{*id, 1, "bench.noop", "null", {Verdict::kAllow, "grants.bench.noop", "granted by manifest"},
                    Effect::kPure, CallState::kAnswered, "null", "", 1, 2};
    if (!j.RecordCall(call) || !batch.Commit()) ReferencesBenchFatal("journal call");
    if (i >= warmup) out.record_call.Add(MicrosSince(t0));

    t0 = Clock::now();
    ActivationEnd end{*id, 1'700'000'000'000'100 + i, Outcome::kOk, "1", "", 12};
    if (!j.EndActivation(end) || !batch.Commit()) ReferencesBenchFatal("journal end");
    if (i >= warmup) out.end_activation.Add(MicrosSince(t0));
  }
  struct stat st {};
  if (::stat((path + "-wal").c_str(), &st) == 0) out.wal_bytes = static_cast<uint64_t>(st.st_size);
  store->reset();
  if (own)
    for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((path + suffix).c_str());
  return out;
}

}  // namespace basal::bench
