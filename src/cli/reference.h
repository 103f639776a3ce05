// The `basal` command's reference, read from its own CLI11 definitions (main.cpp's App): the man
// pages and the shell completions are made from it, never from a second copy of the commands, so
// a command added to main.cpp has its man page and its completions without anyone editing this.
//
//   CommandDoc basal = DescribeCommand(app);             // visible commands and options only
//   std::vector<ManPage> pages = ManPages(basal, "0.1.0");   // basal.1, basal-run.1, ...
//   Completion c = Complete(basal, {"run", "--durability", ""}, names);  // normal, full
//
// `basal __generate man|bash|zsh|fish` and `basal __complete -- WORD...` (generate_command.cpp)
// are the only callers besides tests; docs/install.md says where the results are installed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

// CLI11 is a large header: only what reads the App (reference.cpp) includes it, so the man page
// and completion writers compile without it.
namespace CLI {
class App;
}  // namespace CLI

namespace basal::cli {

// What the words of an argument are, for the shell to offer. Read from the definition by
// ValueKindsOf (reference.cpp): the type name (FILE, DIR, NAME, COMMAND, ...), the choices of a
// CLI::IsMember check, and for NAME the command it belongs to (flow, policy, secret, token, run).
enum class ValueKind {
  kFile,       // FILE, FILE.jsonl, FLOW.js, PATH: a path the shell completes
  kDirectory,  // DIR
  kUser,       // --worker-user NAME: a user of this system
  kChoice,     // one of ArgumentDoc::choices
  kCommand,    // `basal help COMMAND [SUBCOMMAND]`: a command's path
  kFlow,       // the name of an approved flow, from the store
  kPolicy,     // the name of an approved codemode policy, from the store
  kSecret,     // the name of a stored secret
  kToken,      // the name of an API token, from the store
};

// One option or positional argument, as --help shows it.
struct ArgumentDoc {
  std::vector<std::string> names;     // "-h", "--help"; empty for a positional
  std::string positional;             // a positional's name ("flow"); empty for an option
  std::string type_name;              // "FILE", "NAME|FLOW.js"; without the checks' descriptions
  std::vector<std::string> choices;   // a CLI::IsMember check's set: "normal", "full"
  std::string description;
  bool takes_value = false;           // false: a flag
  bool required = false;
  bool repeatable = false;            // a positional that takes several words, an option given again
  std::vector<ValueKind> kinds;       // what its values are; empty: anything (JSON, TEXT, N, ...)
};

// One command or subcommand: `basal` itself has an empty path.
struct CommandDoc {
  std::vector<std::string> path;  // {"flow", "approve"}
  std::string description;
  std::string footer;             // what --help prints after the options: exit codes, examples
  std::vector<ArgumentDoc> options;
  std::vector<ArgumentDoc> positionals;
  std::vector<CommandDoc> subcommands;  // visible ones, in the order they were added
  bool needs_subcommand = false;

  std::string Name() const;  // "basal flow approve"
  const CommandDoc* Subcommand(std::string_view name) const;
  const ArgumentDoc* Option(std::string_view name) const;  // "--db" or "-h"
};

// `app` and its visible subcommands, recursively. Hidden ones (CLI11's empty group, as the
// test-hooks --worker-arg and `basal __generate` are) are left out, as --help leaves them out.
CommandDoc DescribeCommand(const CLI::App& app);

// ---- man pages (reference_man.cpp) ----

struct ManPage {
  std::string file_name;  // "basal.1", "basal-run.1"
  std::string text;       // roff with the man macros; ASCII only (other characters as \[uXXXX])
};

// basal(1) and one page per command (basal-run(1), basal-flow(1) with its subcommands, ...):
// NAME, SYNOPSIS, DESCRIPTION (the description and the footer's text), ARGUMENTS, OPTIONS,
// COMMANDS, EXAMPLES (the footer's examples), SEE ALSO. `version` goes into the page header. The
// pages name no installation prefix: one build serves `cmake --install` and the package.
std::vector<ManPage> ManPages(const CommandDoc& basal, const std::string& version);

// Text as roff reads it: backslashes doubled as \e, a leading '.' or '\'' guarded, non-ASCII
// characters as \[uXXXX] (so the page renders the same whatever groff's input encoding).
std::string RoffText(std::string_view text);

// ---- completions (reference_completion.cpp) ----

// Where the names of approved flows, policies, secrets and tokens come from: the store, read
// only (generate_command.cpp), or a stand-in in a test. `db` is the --db typed on the command
// line (empty: the default journal); `secrets_dir` the --secrets typed (empty: beside the journal).
class NameSource {
 public:
  virtual ~NameSource() = default;
  virtual std::vector<std::string> Names(ValueKind kind, const std::string& db, const std::string& secrets_dir) = 0;
};

struct Candidate {
  std::string word;
  std::string description;  // for shells that show one (zsh, fish); one line, no tab
};

// What the shell offers for the word under the cursor.
struct Completion {
  std::vector<Candidate> words;  // already filtered by the word's prefix
  bool files = false;            // and the shell's own completion of paths
  bool directories = false;      // of directories
  bool users = false;            // of user names
};

// `words` are the command line after `basal`, the last one the word being completed (maybe
// empty). An option's value may be the next word or follow '=' (`--db=FILE`): then only the value
// is completed, as bash, zsh and fish replace only what follows the '='.
Completion Complete(const CommandDoc& basal, const std::vector<std::string>& words, NameSource& names);

// `basal __complete`'s output: one candidate a line, `WORD\tDESCRIPTION`, then a line `:files`,
// `:dirs` or `:users` for each completion the shell adds itself. No candidate starts with ':'.
std::string CompletionLines(const Completion& completion);

// The completion script for `shell` ("bash", "zsh" or "fish"); it asks `basal __complete` (the
// basal being completed, as typed) for the candidates. Empty for another shell.
std::string CompletionScript(std::string_view shell);

}  // namespace basal::cli
