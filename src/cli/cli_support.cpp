#include "cli/cli_support.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "parent/secrets/secret_store.h"
#include "parent/store/sqlite/sqlite_store.h"
#include "parent/store/locator.h"
#include "protocol/messages.h"

#include "basal_revision.h"  // generated: cmake/revision.cmake

namespace basal::cli {
namespace {

std::string Errno(int err) { return std::strerror(err); }

}  // namespace

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int ExitCodeFor(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk:
      return kExitOk;
    case Outcome::kParked:  // the run goes on later (docs/durable.md)
      return kExitWaiting;
    case Outcome::kJournalError:
    case Outcome::kSpawnFailed:
    case Outcome::kWorkerRefused:
      return kExitBasalFailed;
    default:
      return kExitFlowFailed;
  }
}

int WorseExit(int a, int b) {
  auto rank = [](int code) {
    return code == kExitBasalFailed ? 3 : code == kExitFlowFailed ? 2 : code == kExitWaiting ? 1 : 0;
  };
  return rank(b) > rank(a) ? b : a;
}

int ExitCodeForKind(std::string_view kind) { return kind == kKindUsage ? kExitUsage : kExitBasalFailed; }

void WriteStderr(std::string_view line) {
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

void ReportError(std::string_view kind, std::string_view message) {
  std::string line = "basal: ";
  line += kind;
  line += ": ";
  line += EscapeForTerminal(message, TerminalText::kOneLine);
  line += '\n';
  std::cout.flush();
  WriteStderr(line);
}

int Fail(std::string_view kind, std::string_view message) {
  ReportError(kind, message);
  return ExitCodeForKind(kind);
}

std::string JsonForTerminal(const nlohmann::json& value, int indent) {
  return EscapeForTerminal(value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace),
                           TerminalText::kJson);
}

namespace {
// The first failed write of stdout: its errno, or -1 when the failure left no errno to read.
int stdout_failure = 0;
void NoteStdoutFailure(int err) {
  if (stdout_failure == 0) stdout_failure = err != 0 ? err : -1;
}
}  // namespace

void WriteStdout(std::string_view text) {
  if (text.empty()) return;
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size()) NoteStdoutFailure(errno);
}

void FlushStdout() {
  errno = 0;
  if (std::fflush(stdout) != 0) NoteStdoutFailure(errno);
}

int FinishOutput(int code) {
  FlushStdout();
  errno = 0;
  std::cout.flush();
  if (std::cout.fail()) NoteStdoutFailure(errno);
  // A write that failed earlier, outside WriteStdout, leaves only the stream's error flag (glibc
  // drops the buffer, and errno is long overwritten): still a failure.
  if (std::ferror(stdout)) NoteStdoutFailure(0);
  if (stdout_failure == 0) return code;
  ReportError(kKindIo, stdout_failure > 0 ? "stdout: " + Errno(stdout_failure)
                                          : std::string("stdout: a write failed (its error was not kept)"));
  return kExitBasalFailed;
}

const char* KindForOpenError(const Error& error) {
  switch (error.code) {
    case ErrorCode::kIo:
    case ErrorCode::kNotFound:
      return kKindIo;
    case ErrorCode::kDatabase:
      return kKindJournal;
    case ErrorCode::kInvalidArgument:
      return kKindUsage;
    case ErrorCode::kRefused:
    case ErrorCode::kConflict:
      return "refused";
    case ErrorCode::kSpawn:
    case ErrorCode::kUnsupported:
    case ErrorCode::kInternal:
    case ErrorCode::kUnavailable:
      return kKindSetup;
  }
  return kKindSetup;
}

namespace {

const char* FileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string WhatToGive(std::string_view what) {
  if (what == "inputs") return "give a JSON Lines file, or - to read standard input";
  return "give the " + std::string(what) + "'s file";
}

}  // namespace

Result<std::string> ReadFile(const std::string& path, std::string_view what) {
  auto cannot = [&](int err) {
    return MakeError(ErrorCode::kIo, "cannot read " + std::string(what) + " " + path + ": " + Errno(err));
  };
  auto not_a_file = [&](mode_t mode) {
    return MakeError(ErrorCode::kIo, path + ": is " + FileTypeName(mode) + "; " + WhatToGive(what));
  };
  // stat before open: opening a FIFO waits for a writer, and opening a device can act on it.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return cannot(errno);
  if (!S_ISREG(st.st_mode)) return not_a_file(st.st_mode);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return cannot(errno);
  // The path may have been replaced between stat and open: judge what was opened.
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    return S_ISREG(st.st_mode) ? cannot(err) : not_a_file(st.st_mode);
  }
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return cannot(err);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

Result<void> WriteFile(const std::string& path, std::string_view data, std::string_view what) {
  // POSIX calls, not a stream: every failure keeps its errno, and close() is checked too (a
  // delayed write error, e.g. a full disk on NFS, is reported there).
  auto failed = [&](const char* step, int err) {
    return MakeError(ErrorCode::kIo, "cannot write " + std::string(what) + " " + path + ": " + step + ": " + Errno(err));
  };
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return failed("open", errno);
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      return failed("write", err);
    }
    off += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return failed("close", errno);
  return Ok();
}

Result<std::string> DefaultJournalLocation() {
  // $BASAL_DB names the journal every command uses without --db (the flag wins).
  if (const char* db = std::getenv("BASAL_DB"); db && *db) return std::string(db);
  std::string state;
  // The XDG base-directory rules ignore a relative XDG_STATE_HOME.
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && xdg[0] == '/') {
    state = xdg;
  } else {
    std::string home;
    if (const char* h = std::getenv("HOME"); h && h[0] == '/') {
      home = h;
    } else if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir && pw->pw_dir[0] == '/') {
      home = pw->pw_dir;
    } else {
      return MakeError(ErrorCode::kIo,
                       "no journal location: neither XDG_STATE_HOME nor HOME is an absolute path (pass --db FILE or set BASAL_DB)");
    }
    state = home + "/.local/state";
  }
  return state + "/basal/journal.db";
}

Result<std::string> DefaultJournalPath() {
  auto path = DefaultJournalLocation();
  if (!path) return path.error();
  // $BASAL_DB is the operator's own path: its directory must be there already (nothing is made).
  if (const char* db = std::getenv("BASAL_DB"); db && *db) return path;
  if (auto made = EnsurePrivateDirectory(path->substr(0, path->rfind('/'))); !made) return made.error();
  return path;
}

std::string SecretsDirFor(const std::string& db) {
  auto locator = ParseLocator(db);
  if (locator && locator->kind == StoreKind::kPostgres) {
    auto beside = DefaultJournalLocation();
    // No home at all: a relative "secrets", which the secret store refuses with its own message.
    return beside ? SecretsDirForJournal(*beside) : std::string("secrets");
  }
  return SecretsDirForJournal(db);
}

Result<void> CheckWorker(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return MakeError(ErrorCode::kNotFound, "worker " + path + ": " + Errno(errno) +
                                               " (build ck-basal-worker, or pass --worker PATH)");
  if (!S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0)
    return MakeError(ErrorCode::kIo, "worker " + path + " is not an executable file (pass --worker PATH)");
  return Ok();
}

Result<std::string> DefaultWorkerPath() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0)
    return MakeError(ErrorCode::kIo, std::string("cannot find basal's own binary (readlink /proc/self/exe: ") +
                                         Errno(errno) + "); pass --worker PATH");
  std::string self(buf, static_cast<size_t>(n));
  const size_t slash = self.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : self.substr(0, slash);
  // Beside basal (a build tree, or both binaries copied to one directory), else where
  // `cmake --install` and the package put it: BASAL_WORKER_INSTALL_PATH is relative to basal's
  // directory (src/cli/CMakeLists.txt), "../libexec/basal/ck-basal-worker" for /usr/bin/basal.
  const std::string beside = dir + "/ck-basal-worker";
  const std::string installed = std::filesystem::path(dir + "/" + BASAL_WORKER_INSTALL_PATH).lexically_normal();
  struct stat st {};
  if (::stat(beside.c_str(), &st) != 0 && ::stat(installed.c_str(), &st) == 0) {
    if (auto ok = CheckWorker(installed); !ok) return ok.error();
    return installed;
  }
  if (auto ok = CheckWorker(beside); !ok) {
    return MakeError(ok.error().code, ok.error().message + "; nor is there one at " + installed +
                                          ", where basal's installation puts it");
  }
  return beside;
}

Result<FlowFiles> ReadFlowFiles(const std::string& flow_path, const std::string& manifest_path) {
  FlowFiles f;
  f.flow_path = flow_path;
  f.manifest_path = manifest_path;
  f.name = Basename(flow_path);
  auto source = ReadFile(flow_path, "flow");
  if (!source) return source.error();
  f.source = std::move(*source);
  auto manifest = ReadFile(manifest_path, "manifest");
  if (!manifest) return manifest.error();
  f.manifest_text = std::move(*manifest);
  return f;
}

Result<FlowRef> AddFlowFiles(Module& module, const FlowFiles& files, Profile profile) {
  auto flow = module.AddFlow(files.name, files.source, files.manifest_text, profile);
  // A manifest the module refused is named by its file; any other refusal says what it is itself.
  if (!flow && flow.error().code == ErrorCode::kInvalidArgument)
    return MakeError(flow.error().code, files.manifest_path + ": " + flow.error().message);
  return flow;
}

Profile ParseProfile(const std::string& name) { return name == "codemode" ? Profile::kCodemode : Profile::kFlow; }

int ReportLoadFailure(const std::string& flow_path, const LoadCheck& check) {
  if (check.line > 0) {
    WriteStderr(EscapeForTerminal(flow_path + ":" + std::to_string(check.line) + ": " + check.error_name + ": " +
                                  check.error_message) +
                "\n");
  } else {
    ReportError(OutcomeName(check.outcome), check.message);
    std::string stack = check.stack;
    while (!stack.empty() && stack.back() == '\n') stack.pop_back();
    if (!stack.empty()) WriteStderr("  " + EscapeForTerminal(stack, TerminalText::kLines) + "\n");
  }
  return ExitCodeFor(check.outcome);
}

Result<std::string> WorkerPath(const std::string& option) {
  if (option.empty()) return DefaultWorkerPath();
  if (auto ok = CheckWorker(option); !ok) return ok.error();
  return option;
}

Result<ModuleOptions> ModuleOptionsFor(const std::string& worker_option, const std::string& db_option) {
  ModuleOptions mo;
  auto worker = WorkerPath(worker_option);
  if (!worker) return worker.error();
  mo.worker_path = *worker;
  if (!db_option.empty()) {
    mo.journal_path = db_option;
  } else {
    auto db = DefaultJournalPath();
    if (!db) return db.error();
    mo.journal_path = *db;
  }
  mo.secrets_dir = SecretsDirFor(mo.journal_path);
  return mo;
}

std::string VersionText() {
  // BASAL_VERSION and BASAL_QUICKJS_VERSION come from CMake (src/cli/CMakeLists.txt): the project's
  // version, and the QuickJS release that cmake/quickjs.cmake verified and built into the worker.
  // BASAL_REVISION (basal_revision.h, written by cmake/revision.cmake at each build): "git 93f3991",
  // "git 93f3991+dirty", or why there is none (a source tree without git).
  return std::string("basal ") + BASAL_VERSION + " (" + BASAL_REVISION + ")\nworker engine: QuickJS " +
         BASAL_QUICKJS_VERSION + " (npm qjsc@" + BASAL_QJSC_VERSION + "), worker protocol " +
         std::to_string(protocol::kProtocolVersion) + "\n";
}

ScratchDir::ScratchDir(const char* prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = (tmp && tmp[0] == '/') ? tmp : "/tmp";
  std::string templ = base + "/" + prefix + ".XXXXXX";
  if (::mkdtemp(templ.data())) path_ = templ;
}

ScratchDir::~ScratchDir() {
  if (path_.empty()) return;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) ::unlink((journal() + suffix).c_str());
  ::rmdir(path_.c_str());
}

std::string Basename(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace basal::cli
