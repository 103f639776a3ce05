// The daemon's listening sockets, bound before anything is served (docs/serve.md, "Who may talk to
// it"): the Unix socket (the operator's door: born 0600, or 0660 for listen.allowed_groups; a stale
// one replaced, a live one never) and the optional TCP address (loopback only unless the config
// says allow_non_loopback). Pure set-up: each returns a listening, non-blocking descriptor that
// HttpListener then owns.
//
//   Result<std::vector<gid_t>> groups = ResolveGroups(config.listen.allowed_groups);
//   Result<int> unix_fd = ListenUnix(socket_path, *groups);
//   Result<int> tcp_fd = ListenTcp(config.listen);   // only when listen.tcp is set
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "basal/result.h"
#include "serve/config.h"

namespace basal::serve {

// The ids of listen.allowed_groups; kInvalidArgument naming a group this system does not have.
Result<std::vector<gid_t>> ResolveGroups(const std::vector<std::string>& names);

// Binds the Unix socket: its directory is created 0700 if missing; a stale socket (nobody accepts
// on it) is replaced, a live one is not (kConflict); the socket is 0600, or 0660 owned by the first
// allowed group when `groups` is not empty.
Result<int> ListenUnix(const std::string& path, const std::vector<gid_t>& groups);

// Binds listen.tcp ("127.0.0.1:8470", "[::1]:8470"; names are not resolved). An address that is
// not loopback is kRefused unless listen.allow_non_loopback.
Result<int> ListenTcp(const ListenConfig& listen);

}  // namespace basal::serve
