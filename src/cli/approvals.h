// `basal flow ...` and `basal policy ...`: the operator approves flows (source + manifest) and
// codemode policies (a manifest for agents' scripts), reviews what changed, inspects and revokes
// stored versions (docs/approvals.md). main.cpp adds both subcommands with AddApprovalCommands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "parent/store/store.h"

namespace basal::cli {

struct ApprovalOptions {
  ApprovalKind kind = ApprovalKind::kFlow;
  std::string action;         // approve | list | show | diff | revoke
  std::string name;
  std::string source_path;    // approve (flows)
  std::string manifest_path;  // approve
  std::string note;
  bool yes = false;           // approve: no confirmation asked
  bool source_diff = false;   // approve, diff: the whole line diff
  bool show_source = false;   // show --source
  bool json = false;          // list, show, diff
  int64_t version = 0;        // show, revoke: 0 = the newest
  std::vector<int64_t> versions;  // diff A [B]
  size_t replay = 0;              // approve --replay K: replay the flow's last K durable runs first
  std::string db_path;
};

// Adds `flow` (kind kFlow) or `policy` (kPolicy) with its subcommands; fills `o` when parsed.
// Who runs this command: the real uid and its user name (under sudo, who asked for it too).
Actor CurrentActor();

CLI::App* AddApprovalCommands(CLI::App& app, ApprovalOptions& o, ApprovalKind kind);
// Runs the parsed action of `parent` (the App returned above).
int ApprovalCommand(CLI::App& parent, ApprovalOptions& o);

}  // namespace basal::cli
