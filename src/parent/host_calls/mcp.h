// The `mcp.*` host-call family: a downstream MCP server's tools, one host call per tool named
// `mcp.<server>.<tool>` (docs/codemode.md). Registered in every module so that a codemode policy
// that grants them parses everywhere (`basal policy approve`, `basal run --policy`); only
// `basal mcp`, which starts the policy's servers, replaces the handler with one that reaches them.
// Elsewhere a call is answered HostError saying so.
//
// A grant's constraints are argument predicates on the tool's top-level arguments:
//
//   "mcp.fs.read_text_file": {"args": {"path": {"path_under": "/srv/data"}}},
//   "mcp.github.search_issues": {"args": {"repo": {"one_of": ["acme/api", "acme/web"]},
//                                         "q": {"max_length": 200}}},
//   "mcp.fs.*": {}                        // every tool of server fs, any arguments
//
// Predicates (all of an argument's must hold; an argument a predicate names must be present):
//   equals: V            the argument is V (compared as JSON values)
//   one_of: [V, ...]     the argument is one of these
//   prefix: S | [S, ...] a string starting with S (or one of them), compared byte by byte
//   path_under: D | [D, ...]  an absolute path, with no "." or ".." segment, that is D or below D
//                        (after collapsing repeated '/'); symbolic links are the server's to refuse
//   max_length: N        a string of at most N bytes (or an array of at most N items)
//   min: X, max: Y       a number within [X, Y]
#pragma once

#include <optional>
#include <string>

#include "basal/host_call.h"
#include "basal/result.h"

namespace basal {

inline constexpr const char* kMcpFamily = "mcp.*";

// Checks a grant's constraints ({} or {"args": {NAME: {PREDICATE: ...}}}); errors name `path`.
Result<void> CheckMcpGrant(const Json& constraints, const std::string& path);
// nullopt when `args` satisfy the grant's predicates; else the reason, naming the argument.
std::optional<std::string> AuthorizeMcp(const Json& constraints, const Json& args);

// The family's spec with `handler` (effect external: a tool of someone else's may do anything).
HostCallSpec McpFamilySpec(HostCallHandler handler);
// Registers the family with a handler that answers HostError: no downstream server runs here.
Result<void> RegisterMcpHostCalls(HostCallRegistry& registry);

}  // namespace basal
