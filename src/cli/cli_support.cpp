#include "cli/cli_support.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "parent/store/sqlite/sqlite_store.h"

namespace basal::cli {
namespace {

std::string Errno(int err) { return std::strerror(err); }

}  // namespace

std::string OneLine(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (static_cast<unsigned char>(c) < 0x20 && c != '\t') {
      out += '?';
    } else {
      out += c;
    }
  }
  return out;
}

void ReportError(std::string_view kind, std::string_view message) {
  std::string line = "basal: ";
  line += kind;
  line += ": ";
  line += OneLine(message);
  line += '\n';
  std::cout.flush();
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
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
    case ErrorCode::kSpawn:
    case ErrorCode::kUnsupported:
    case ErrorCode::kInternal:
    case ErrorCode::kUnavailable:
      return kKindSetup;
  }
  return kKindSetup;
}

Result<std::string> ReadFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    return MakeError(ErrorCode::kIo, "cannot read " + std::string(what) + " " + path + ": " + Errno(err));
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return MakeError(ErrorCode::kIo, "error while reading " + std::string(what) + " " + path);
  return buf.str();
}

Result<void> WriteFile(const std::string& path, std::string_view data, std::string_view what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    const int err = errno;
    return MakeError(ErrorCode::kIo, "cannot write " + std::string(what) + " " + path + ": " + Errno(err));
  }
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.flush();
  if (!out) return MakeError(ErrorCode::kIo, "error while writing " + std::string(what) + " " + path);
  return Ok();
}

Result<std::string> DefaultJournalPath() {
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
                       "no journal location: neither XDG_STATE_HOME nor HOME is an absolute path (pass --db FILE)");
    }
    state = home + "/.local/state";
  }
  const std::string dir = state + "/basal";
  if (auto made = EnsurePrivateDirectory(dir); !made) return made.error();
  return dir + "/journal.db";
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
  std::string worker = dir + "/ck-basal-worker";
  if (auto ok = CheckWorker(worker); !ok) return ok.error();
  return worker;
}

std::string Basename(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace basal::cli
