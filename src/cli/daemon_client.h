// Talking to a running `basal serve` from the CLI (`basal health --socket`, `basal journal
// --follow --socket`): one GET at a time over its Unix socket, or over its loopback TCP listener
// with the bearer token from $BASAL_TOKEN. libcurl does the HTTP.
#pragma once

#include <chrono>
#include <string>

#include "basal/result.h"

namespace basal::cli {

struct DaemonAddress {
  std::string socket;  // a Unix socket path, or
  std::string url;     // "http://127.0.0.1:8470"
  bool given() const { return !socket.empty() || !url.empty(); }
};

struct DaemonReply {
  long status = 0;
  std::string body;
};

// GET `path` ("/v1/health"). Errors: the daemon cannot be reached (naming the address), or its
// reply is larger than 16 MiB.
Result<DaemonReply> DaemonGet(const DaemonAddress& address, const std::string& path, std::chrono::seconds timeout);

}  // namespace basal::cli
