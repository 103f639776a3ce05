// What every `basal` command shares: the one-line error report, the closed set of basal's own
// error kinds, file reading, and the default places (journal, worker binary).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "basal/module.h"
#include "basal/outcome.h"
#include "basal/result.h"
#include "basal/terminal_text.h"

namespace basal::cli {

// Exit codes of every command (docs/cli.md, "Exit codes"): 1 says the flow failed, 3 says basal
// itself did, so a script can tell "look at the flow" from "look at this machine".
inline constexpr int kExitOk = 0;
inline constexpr int kExitFlowFailed = 1;   // an activation ended with an outcome the flow caused or the
                                            // sandbox stopped; `check`: the flow does not load;
                                            // `doctor`: the worker is refused
inline constexpr int kExitUsage = 2;        // the command line itself was wrong
inline constexpr int kExitBasalFailed = 3;  // basal itself failed: io, manifest, journal, setup (and an
                                            // activation that ended journal_error, spawn_failed or
                                            // worker_refused: basal could not run it as it must)
inline constexpr int kExitRefused = 4;      // the approval policy refused: not approved, revoked, ad hoc
                                            // under --require-approval, a review not confirmed
inline constexpr int kExitWaiting = 5;      // a durable run stopped to wait for an operator: a call is in
                                            // doubt (needs_reconciliation; basal run resolve)
// 128 + N: `basal run` stopped on signal N (SIGINT, SIGTERM, SIGHUP).

// The wall clock in microseconds since the epoch: what the commands stamp on what they write
// (approvals, operator kv writes, tokens).
int64_t NowUs();

// The exit code an activation's outcome calls for: 0 for ok; kExitBasalFailed for the outcomes
// that are basal's own failure (journal_error, spawn_failed, worker_refused); else kExitFlowFailed.
int ExitCodeFor(Outcome outcome);
// The worse of two exit codes: kExitBasalFailed over kExitFlowFailed over kExitOk.
int WorseExit(int a, int b);
// The exit code for one of basal's own error kinds below: kExitUsage for kKindUsage, else
// kExitBasalFailed.
int ExitCodeForKind(std::string_view kind);

// basal's own error kinds, beside the outcome kinds of outcome.h (OutcomeName):
inline constexpr const char* kKindUsage = "usage";        // a flag or argument is wrong
inline constexpr const char* kKindIo = "io";              // a file could not be read, written or found
inline constexpr const char* kKindManifest = "manifest";  // the module refused the flow or its manifest
inline constexpr const char* kKindJournal = "journal";    // the journal could not be opened or read
inline constexpr const char* kKindSetup = "setup";        // the module could not start (kernel, worker, options)

// Prints `basal: <kind>: <message>` as ONE line on stderr. `message` may quote text a script or a
// worker supplied: it is escaped (EscapeForTerminal, one line), so it cannot forge a line.
void ReportError(std::string_view kind, std::string_view message);
// ReportError, then the exit code for `kind` (ExitCodeForKind):
//
//   if (!source) return Fail(kKindIo, source.error().message);
int Fail(std::string_view kind, std::string_view message);
// Writes `line` (which must end in a newline and be escaped already) to stderr at once.
void WriteStderr(std::string_view line);
// `value` as JSON for basal's output: compact (indent -1, one line) or pretty. Strings that came
// from a script or a worker keep their value, but what a terminal would act on (DEL, C1 controls,
// bidi characters) is written as \u escapes (EscapeForTerminal, kJson). Every JSON basal prints
// goes through here.
std::string JsonForTerminal(const nlohmann::json& value, int indent = -1);

// basal's own output on stdout. A failed write (a closed pipe: EPIPE, since main ignores SIGPIPE;
// a full disk) is remembered with its errno; the output goes on being attempted.
void WriteStdout(std::string_view text);
// fflush(stdout), a failure remembered as WriteStdout's are: for output that must not wait.
void FlushStdout();
// Called once by main after the command: flushes stdout (C stdio and std::cout) and, if any write
// of stdout failed, reports `basal: io: stdout: <strerror>` and returns kExitBasalFailed; else
// `code`.
//
//   return FinishOutput(RunCommand(options));
int FinishOutput(int code);
// The kind for an error the module returned while opening (journal, io, setup).
const char* KindForOpenError(const Error& error);

// The whole of the regular file at `path`. Anything else is an error naming what it is and what
// to give instead (`flow.js: is a directory; give the flow's file`): a directory, and a FIFO or a
// device, which are never opened in a way that could block. `what`: "flow", "manifest", "inputs".
Result<std::string> ReadFile(const std::string& path, std::string_view what);
Result<void> WriteFile(const std::string& path, std::string_view data, std::string_view what);

// The journal of a command given no --db: $BASAL_DB when set (as given; its directory must exist),
// else ${XDG_STATE_HOME:-$HOME/.local/state}/basal/journal.db, whose missing directories are
// created 0700.
Result<std::string> DefaultJournalPath();
// The same path, creating nothing (for what only reads, if the journal is there: completions).
Result<std::string> DefaultJournalLocation();
// The secrets directory of a store (--db): `secrets/` beside an SQLite journal; for a PostgreSQL
// locator, which has no directory, `secrets/` in the default journal's directory
// (${XDG_STATE_HOME:-$HOME/.local/state}/basal/secrets; docs/postgres.md).
std::string SecretsDirFor(const std::string& db);
// The ck-basal-worker beside this binary (readlink /proc/self/exe), else the installed one
// (../libexec/basal/ck-basal-worker from basal's directory); must be executable.
Result<std::string> DefaultWorkerPath();
// `path` must name an executable regular file.
Result<void> CheckWorker(const std::string& path);

// The flow a command runs or checks, as read from the operator's files, before any module exists.
// One place reads it (ReadFlowFiles) and one approves it into a module (AddFlowFiles), so another
// source of flows (a stored, approved version) is added here once for every command.
struct FlowFiles {
  std::string flow_path;      // as given on the command line
  std::string manifest_path;  // as given on the command line
  std::string name;           // the flow's module name: the flow file's base name
  std::string source;
  std::string manifest_text;
};
// Reads both files (ReadFile); an error is of kind kKindIo.
Result<FlowFiles> ReadFlowFiles(const std::string& flow_path, const std::string& manifest_path);
// Module::AddFlow. A refused manifest (kInvalidArgument: kind kKindManifest) names the manifest
// file; other errors (an ad hoc run refused by policy) come back as the module gave them.
Result<FlowRef> AddFlowFiles(Module& module, const FlowFiles& files, Profile profile);
Profile ParseProfile(const std::string& name);  // "flow" or "codemode" (CLI11 checked it)

// Prints why a flow does not load, and returns the exit code (ExitCodeFor its outcome). A syntax
// error is one line as a compiler writes it, `FLOW:LINE: SyntaxError: message` (FLOW as given on
// the command line); any other failure is `basal: <kind>: <message>`, then the JS stack, if any,
// indented. All of it is the script's or the worker's text: escaped.
int ReportLoadFailure(const std::string& flow_path, const LoadCheck& check);

// --worker PATH (checked), or the default worker when `option` is empty.
Result<std::string> WorkerPath(const std::string& option);

// What `basal run` and `basal mcp` open a module with: the worker (--worker, checked, or beside
// basal), the journal (--db, or the default), and the secrets beside that journal (http.fetch and
// MCP servers read `basal secret set NAME --db` of the same journal). Errors are io errors.
Result<ModuleOptions> ModuleOptionsFor(const std::string& worker_option, const std::string& db_option);

std::string Basename(const std::string& path);

// "basal <version> (git <revision>)" and what the worker embeds (`basal --version`).
std::string VersionText();

// A private temporary directory (mkdtemp under $TMPDIR or /tmp) for a throw-away journal, removed
// with what SQLite put in it (`doctor`, `check`).
class ScratchDir {
 public:
  explicit ScratchDir(const char* prefix);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  bool ok() const { return !path_.empty(); }
  std::string journal() const { return path_ + "/journal.db"; }

 private:
  std::string path_;
};

}  // namespace basal::cli
