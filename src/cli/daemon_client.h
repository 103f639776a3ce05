// Talking to a running `basal serve` from the CLI (`basal health`, `basal journal --follow`,
// `basal tail`, `basal schedule`): over its Unix socket, or over its loopback TCP listener with a
// bearer token (--token-file FILE, else $BASAL_TOKEN). libcurl does the HTTP.
//
//   auto address = ResolveDaemonAddress(o.socket, o.url, o.token_file);  // defaults filled in
//   auto reply = DaemonGet(*address, "/v1/schedules", std::chrono::seconds(30));
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "basal/result.h"

namespace basal::cli {

struct DaemonAddress {
  std::string socket{};  // a Unix socket path, or
  std::string url{};     // "http://127.0.0.1:8470"
  std::string token{};   // TCP: the bearer token ("" : $BASAL_TOKEN, read at each request)
  bool given() const { return !socket.empty() || !url.empty(); }
  std::string where() const { return socket.empty() ? url : socket; }
};

// The daemon to talk to: --socket PATH or --url URL as given (not both); else $BASAL_SOCKET; else
// the socket `basal serve` binds by default ($RUNTIME_DIRECTORY/basal.sock,
// $XDG_RUNTIME_DIR/basal/basal.sock, or as root /run/basal/basal.sock). --token-file FILE holds
// the TCP token (one line; keep it owner-only), instead of $BASAL_TOKEN. Errors are usage errors.
Result<DaemonAddress> ResolveDaemonAddress(const std::string& socket, const std::string& url,
                                           const std::string& token_file);

struct DaemonReply {
  long status = 0;
  std::string body;
};

// GET `path` ("/v1/health"). Errors: the daemon cannot be reached (naming the address), or its
// reply is larger than 16 MiB.
Result<DaemonReply> DaemonGet(const DaemonAddress& address, const std::string& path, std::chrono::seconds timeout);
// POST `path` with a JSON body ("" for none).
Result<DaemonReply> DaemonPost(const DaemonAddress& address, const std::string& path, const std::string& body,
                               std::chrono::seconds timeout);
// GET `path` and hand the body to `on_bytes` as it arrives, until the daemon ends it (Ok) or the
// connection fails. A status other than 200 is an error with the daemon's answer. `on_bytes`
// returns false to stop.
Result<void> DaemonStream(const DaemonAddress& address, const std::string& path,
                          const std::function<bool(std::string_view bytes)>& on_bytes);

// The daemon's JSON error answer as text: "CODE: MESSAGE", else the status and the body (escaped).
std::string DaemonErrorText(const DaemonReply& reply);

}  // namespace basal::cli
