// The hidden commands that turn basal's own command definitions into its reference (reference.h):
//
//   basal __generate man --out DIR     basal(1) and basal-COMMAND(1) pages into DIR
//   basal __generate bash|zsh|fish     a completion script on stdout
//   basal __complete -- WORD...        the candidates for the last WORD (what the scripts ask)
//
// The build runs `__generate` (cmake/install.cmake); shells run `__complete` at each TAB. Neither
// appears in --help or in the list of commands.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace basal::cli {

inline constexpr const char* kCompleteCommand = "__complete";

// Adds the hidden `__generate`; it reads `app` when it runs, so every command added before or
// after this call is in what it writes.
void AddGenerate(CLI::App& app, int& exit_code);

// `basal __complete -- WORD...`: `args` are the words after `__complete`. Prints one candidate a
// line (CompletionLines); reads the store only to list names, never creates or changes it. Exit 0,
// or 2 without the "--".
int CompleteCommand(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace basal::cli
