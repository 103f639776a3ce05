// What every `basal` command shares: the one-line error report, the closed set of basal's own
// error kinds, file reading, and the default places (journal, worker binary).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "basal/result.h"
#include "basal/terminal_text.h"

namespace basal::cli {

// Exit codes of every command (docs/cli.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // an activation failed, or basal could not do what was asked
inline constexpr int kExitUsage = 2;   // the command line itself was wrong
// Issue 12 splits kExitFailed (being migrated):
inline constexpr int kExitFlowFailed = 1;   // a flow's activation ended with an outcome other than ok
inline constexpr int kExitBasalFailed = 3;  // basal itself failed: io, manifest, journal, setup
inline constexpr int kExitRefused = 4;      // the approval policy refused: not approved, revoked, ad hoc
                                            // under --require-approval, a review not confirmed

// basal's own error kinds, beside the outcome kinds of outcome.h (OutcomeName):
inline constexpr const char* kKindUsage = "usage";        // a flag or argument is wrong
inline constexpr const char* kKindIo = "io";              // a file could not be read, written or found
inline constexpr const char* kKindManifest = "manifest";  // the module refused the flow or its manifest
inline constexpr const char* kKindJournal = "journal";    // the journal could not be opened or read
inline constexpr const char* kKindSetup = "setup";        // the module could not start (kernel, worker, options)

// Prints `basal: <kind>: <message>` as ONE line on stderr. `message` may quote text a script or a
// worker supplied: it is escaped (EscapeForTerminal, one line), so it cannot forge a line.
void ReportError(std::string_view kind, std::string_view message);
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
// of stdout failed, reports `basal: io: stdout: <strerror>` and returns kExitFailed; else `code`.
//
//   return FinishOutput(RunCommand(options));
int FinishOutput(int code);
// The kind for an error the module returned while opening (journal, io, setup).
const char* KindForOpenError(const Error& error);

Result<std::string> ReadFile(const std::string& path, std::string_view what);
Result<void> WriteFile(const std::string& path, std::string_view data, std::string_view what);

// ${XDG_STATE_HOME:-$HOME/.local/state}/basal/journal.db; creates missing directories 0700.
Result<std::string> DefaultJournalPath();
// The ck-basal-worker beside this binary (readlink /proc/self/exe); must be executable.
Result<std::string> DefaultWorkerPath();
// `path` must name an executable regular file.
Result<void> CheckWorker(const std::string& path);

std::string Basename(const std::string& path);

}  // namespace basal::cli
