// `basal secret set NAME | list [--json] | rm NAME`: the operator's secrets (SecretStore,
// src/parent/secrets/secret_store.h), which grant rules name as `${secret:NAME}`.
//
//   printf '%s' "$TOKEN" | basal secret set example_token
//   basal secret list
//   basal secret rm example_token
//
// A value is read from stdin only, never from the command line (argv is readable by every user
// of the machine through /proc/PID/cmdline, and stays in shell history): on a terminal without
// echo, after a prompt on stderr; from a pipe or file, at most kMaxSecretValueBytes and one line
// ending. Nothing about secrets is journaled, and no value is ever printed.
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "cli/cli_support.h"
#include "cli/commands.h"
#include "parent/secrets/secret_store.h"

namespace basal::cli {
namespace {

// basal's own error kind for the secret commands: a secret not stored, or a secrets directory or
// file refused as not owner-only (exit 3, like the other kinds but usage).
constexpr const char* kKindSecret = "secret";

int FailWith(const Error& error) {
  switch (error.code) {
    case ErrorCode::kInvalidArgument:
      return Fail(kKindUsage, error.message);
    case ErrorCode::kIo:
      return Fail(kKindIo, error.message);
    default:
      return Fail(kKindSecret, error.message);
  }
}

Result<std::string> SecretsDir(const SecretOptions& o) {
  if (!o.secrets_dir.empty()) return o.secrets_dir;
  if (!o.db_path.empty()) return SecretsDirFor(o.db_path);
  auto journal = DefaultJournalPath();
  if (!journal) return journal.error();
  return SecretsDirFor(*journal);
}

// A value and one line ending at most: what `echo` and a terminal add. More is refused, so a
// huge stdin is never held (kMaxSecretValueBytes + "\r\n" + the one byte that shows there is more).
constexpr size_t kMaxStdinBytes = kMaxSecretValueBytes + 2;

std::string_view StripOneLineEnding(std::string_view text) {
  if (text.ends_with("\r\n")) return text.substr(0, text.size() - 2);
  if (text.ends_with('\n')) return text.substr(0, text.size() - 1);
  return text;
}

Result<std::string> TooMuch() {
  return MakeError(ErrorCode::kInvalidArgument,
                   "stdin holds more than " + std::to_string(kMaxSecretValueBytes) +
                       " bytes and a line ending; a secret's value is at most " +
                       std::to_string(kMaxSecretValueBytes) + " bytes");
}

// From a pipe or a file: everything up to end of input, bounded.
Result<std::string> ReadPipedValue() {
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeError(ErrorCode::kIo, std::string("cannot read the value from stdin: ") + std::strerror(errno));
    if (n == 0) break;
    if (text.size() + static_cast<size_t>(n) > kMaxStdinBytes) return TooMuch();
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

// The terminal's settings while echo is off, for the signal handler to put back.
termios saved_terminal{};
volatile sig_atomic_t terminal_changed = 0;

void RestoreTerminalAndDie(int sig) {
  if (terminal_changed) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_terminal);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// From a terminal: one line, typed without echo, after a prompt on stderr. A signal that ends
// basal meanwhile (Ctrl-C) first turns echo back on, so the shell is not left without it.
Result<std::string> ReadTypedValue(const std::string& name) {
  if (::tcgetattr(STDIN_FILENO, &saved_terminal) != 0)
    return MakeError(ErrorCode::kIo, std::string("cannot read the terminal's settings: ") + std::strerror(errno));
  constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP};
  struct sigaction old_actions[std::size(kSignals)];
  struct sigaction restore {};
  restore.sa_handler = RestoreTerminalAndDie;
  sigemptyset(&restore.sa_mask);
  for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &restore, &old_actions[i]);
  termios quiet = saved_terminal;
  quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
  quiet.c_lflag |= ECHONL;  // the Enter key still moves to the next line
  // Echo goes off before the prompt appears, so nothing typed after the prompt can be echoed
  // (TCSAFLUSH drops what was typed before it).
  terminal_changed = 1;
  if (::tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet) != 0) {
    const int err = errno;
    terminal_changed = 0;
    for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &old_actions[i], nullptr);
    return MakeError(ErrorCode::kIo, std::string("cannot turn the terminal's echo off: ") + std::strerror(err) +
                                         "; pipe the value in instead");
  }
  WriteStderr("Value of secret " + name + " (typing is not shown; Enter ends it): ");
  std::string text;
  Result<std::string> result = std::string();
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      result = MakeError(ErrorCode::kIo, std::string("cannot read the value from the terminal: ") + std::strerror(errno));
      break;
    }
    if (n == 0) break;
    if (text.size() + static_cast<size_t>(n) > kMaxStdinBytes) {
      result = TooMuch();
      break;
    }
    text.append(buf, static_cast<size_t>(n));
    if (text.back() == '\n') break;  // canonical mode: a read ends at a line's end
  }
  ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_terminal);
  terminal_changed = 0;
  for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &old_actions[i], nullptr);
  if (!result) return result;
  return text;
}

int Set(const SecretOptions& o, const std::string& dir) {
  if (auto ok = ValidateSecretName(o.name); !ok) return FailWith(ok.error());
  const bool typed = ::isatty(STDIN_FILENO) == 1;
  auto read = typed ? ReadTypedValue(o.name) : ReadPipedValue();
  if (!read) return FailWith(read.error());
  const std::string_view value = StripOneLineEnding(*read);
  if (value.empty())
    return Fail(kKindUsage, "no value for secret " + o.name +
                                " on stdin; give it on stdin, e.g. printf '%s' \"$TOKEN\" | basal secret set " +
                                o.name + " (never on the command line)");
  if (auto ok = ValidateSecretValue(o.name, value); !ok) return FailWith(ok.error());
  auto store = SecretStore::Open(dir, /*create=*/true);
  if (!store) return FailWith(store.error());
  if (auto ok = store->Set(o.name, value); !ok) return FailWith(ok.error());
  WriteStdout("stored secret " + o.name + " in " + EscapeForTerminal(dir, TerminalText::kOneLine) + "\n");
  return kExitOk;
}

int List(const SecretOptions& o, const std::string& dir) {
  auto store = SecretStore::Open(dir, /*create=*/false);
  std::vector<std::string> names;
  if (store) {
    auto listed = store->List();
    if (!listed) return FailWith(listed.error());
    names = std::move(*listed);
  } else if (store.error().code != ErrorCode::kNotFound) {
    return FailWith(store.error());
  }
  if (o.json) {
    for (const std::string& name : names) WriteStdout(JsonForTerminal(nlohmann::json{{"name", name}}) + "\n");
    return kExitOk;
  }
  if (names.empty()) {
    WriteStdout("no secret is stored in " + EscapeForTerminal(dir, TerminalText::kOneLine) +
                " (basal secret set NAME stores one)\n");
    return kExitOk;
  }
  std::string out;
  for (const std::string& name : names) out += name + "\n";  // names are [A-Za-z0-9_]: nothing to escape
  WriteStdout(out);
  return kExitOk;
}

int Remove(const SecretOptions& o, const std::string& dir) {
  if (auto ok = ValidateSecretName(o.name); !ok) return FailWith(ok.error());
  auto store = SecretStore::Open(dir, /*create=*/false);
  if (!store) {
    if (store.error().code == ErrorCode::kNotFound)
      return Fail(kKindSecret, "secret " + o.name + " is not stored: " + store.error().message);
    return FailWith(store.error());
  }
  if (auto ok = store->Remove(o.name); !ok) return FailWith(ok.error());
  WriteStdout("removed secret " + o.name + " from " + EscapeForTerminal(dir, TerminalText::kOneLine) + "\n");
  return kExitOk;
}

}  // namespace

int SecretCommand(const SecretOptions& o) {
  auto dir = SecretsDir(o);
  if (!dir) return FailWith(dir.error());
  if (o.action == "set") return Set(o, *dir);
  if (o.action == "list") return List(o, *dir);
  return Remove(o, *dir);
}

}  // namespace basal::cli
