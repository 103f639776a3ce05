// See daemon_client.h.
#include "cli/daemon_client.h"

#include <curl/curl.h>

#include <cstdlib>
#include <memory>

#include <nlohmann/json.hpp>

#include "basal/terminal_text.h"
#include "cli/cli_support.h"
#include "serve/config.h"

namespace basal::cli {
namespace {

constexpr size_t kMaxReplyBytes = 16u << 20;

size_t Collect(char* data, size_t size, size_t count, void* user) {
  auto* out = static_cast<std::string*>(user);
  if (out->size() + size * count > kMaxReplyBytes) return 0;  // curl fails the transfer
  out->append(data, size * count);
  return size * count;
}

using Curl = std::unique_ptr<CURL, void (*)(CURL*)>;
using Headers = std::unique_ptr<curl_slist, void (*)(curl_slist*)>;

// A request to the daemon, set up but not performed; `headers` must outlive it.
Result<Curl> Prepare(const DaemonAddress& address, const std::string& path, Headers& headers) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  Curl curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) return MakeError(ErrorCode::kInternal, "libcurl could not start a request");
  std::string url;
  if (!address.socket.empty()) {
    curl_easy_setopt(curl.get(), CURLOPT_UNIX_SOCKET_PATH, address.socket.c_str());
    url = "http://basal" + path;
  } else {
    if (address.url.rfind("http://", 0) != 0)
      return MakeError(ErrorCode::kInvalidArgument, "--url " + address.url + ": give http://ADDRESS:PORT (loopback)");
    url = address.url + path;
    std::string token = address.token;
    if (token.empty())
      if (const char* env = std::getenv("BASAL_TOKEN"); env && *env) token = env;
    if (!token.empty()) headers.reset(curl_slist_append(headers.release(), ("Authorization: Bearer " + token).c_str()));
  }
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_NOPROXY, "*");
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
  return curl;
}

Error Unreachable(const DaemonAddress& address, CURLcode rc) {
  return MakeError(ErrorCode::kIo, "cannot reach basal serve at " + address.where() + ": " + curl_easy_strerror(rc) +
                                       " (is it running? basal serve --socket PATH; or give --socket PATH or "
                                       "--url URL)");
}

Result<DaemonReply> Exchange(const DaemonAddress& address, const std::string& path, const std::string* body,
                             std::chrono::seconds timeout) {
  Headers headers(nullptr, curl_slist_free_all);
  auto curl = Prepare(address, path, headers);
  if (!curl) return curl.error();
  if (body) {
    headers.reset(curl_slist_append(headers.release(), "Content-Type: application/json"));
    curl_easy_setopt(curl->get(), CURLOPT_POST, 1L);
    curl_easy_setopt(curl->get(), CURLOPT_POSTFIELDS, body->c_str());
    curl_easy_setopt(curl->get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(body->size()));
  }
  DaemonReply reply;
  curl_easy_setopt(curl->get(), CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(curl->get(), CURLOPT_TIMEOUT, static_cast<long>(timeout.count()));
  curl_easy_setopt(curl->get(), CURLOPT_WRITEFUNCTION, &Collect);
  curl_easy_setopt(curl->get(), CURLOPT_WRITEDATA, &reply.body);
  const CURLcode rc = curl_easy_perform(curl->get());
  if (rc != CURLE_OK) return Unreachable(address, rc);
  curl_easy_getinfo(curl->get(), CURLINFO_RESPONSE_CODE, &reply.status);
  return reply;
}

struct StreamState {
  const std::function<bool(std::string_view)>* on_bytes = nullptr;
  CURL* curl = nullptr;
  long status = 0;
  std::string error_body{};  // a refusal's body (not 200), kept up to 64 KiB
  bool stopped = false;
};

size_t Stream(char* data, size_t size, size_t count, void* user) {
  auto* s = static_cast<StreamState*>(user);
  if (s->status == 0) curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &s->status);
  const size_t n = size * count;
  if (s->status != 200) {
    if (s->error_body.size() < (64u << 10)) s->error_body.append(data, n);
    return n;
  }
  if (!(*s->on_bytes)(std::string_view(data, n))) {
    s->stopped = true;
    return 0;
  }
  return n;
}

}  // namespace

Result<DaemonAddress> ResolveDaemonAddress(const std::string& socket, const std::string& url,
                                           const std::string& token_file) {
  if (!socket.empty() && !url.empty()) return MakeError(ErrorCode::kInvalidArgument, "give --socket PATH or --url URL, not both");
  DaemonAddress a{socket, url, ""};
  if (!token_file.empty()) {
    auto text = ReadFile(token_file, "token");
    if (!text) return text.error();
    std::string token = *text;
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) token.pop_back();
    if (token.empty() || token.find_first_of(" \t\r\n") != std::string::npos)
      return MakeError(ErrorCode::kInvalidArgument,
                       "--token-file " + token_file + ": it must hold one token (basal token create prints it)");
    a.token = token;
  }
  if (a.given()) return a;
  if (const char* env = std::getenv("BASAL_SOCKET"); env && *env) {
    a.socket = env;
    return a;
  }
  auto path = serve::ResolveSocketPath(serve::ListenConfig{}, serve::SocketEnvFromProcess());
  if (!path)
    return MakeError(ErrorCode::kInvalidArgument,
                     "no daemon address: give --socket PATH or --url URL, or set BASAL_SOCKET (" + path.error().message +
                         ")");
  a.socket = *path;
  return a;
}

Result<DaemonReply> DaemonGet(const DaemonAddress& address, const std::string& path, std::chrono::seconds timeout) {
  return Exchange(address, path, nullptr, timeout);
}

Result<DaemonReply> DaemonPost(const DaemonAddress& address, const std::string& path, const std::string& body,
                               std::chrono::seconds timeout) {
  return Exchange(address, path, &body, timeout);
}

Result<void> DaemonStream(const DaemonAddress& address, const std::string& path,
                          const std::function<bool(std::string_view bytes)>& on_bytes) {
  Headers headers(nullptr, curl_slist_free_all);
  auto curl = Prepare(address, path, headers);
  if (!curl) return curl.error();
  headers.reset(curl_slist_append(headers.release(), "Accept: text/event-stream"));
  StreamState state;
  state.on_bytes = &on_bytes;
  state.curl = curl->get();
  curl_easy_setopt(curl->get(), CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(curl->get(), CURLOPT_CONNECTTIMEOUT, 10L);
  curl_easy_setopt(curl->get(), CURLOPT_WRITEFUNCTION, &Stream);
  curl_easy_setopt(curl->get(), CURLOPT_WRITEDATA, &state);
  // A stream says something at least every 15 s (a keepalive): one silent for a minute is gone.
  curl_easy_setopt(curl->get(), CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl->get(), CURLOPT_LOW_SPEED_TIME, 60L);
  const CURLcode rc = curl_easy_perform(curl->get());
  if (state.stopped) return Ok();
  if (state.status == 0) curl_easy_getinfo(curl->get(), CURLINFO_RESPONSE_CODE, &state.status);
  if (state.status != 0 && state.status != 200)
    return MakeError(ErrorCode::kIo, DaemonErrorText(DaemonReply{state.status, state.error_body}));
  if (rc != CURLE_OK) return Unreachable(address, rc);
  return Ok();
}

std::string DaemonErrorText(const DaemonReply& reply) {
  auto j = nlohmann::json::parse(reply.body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const auto& e = j["error"];
    return "basal serve answered " + std::to_string(reply.status) + " " +
           EscapeForTerminal(e.value("code", std::string("?"))) + ": " + EscapeForTerminal(e.value("message", std::string()));
  }
  return "basal serve answered " + std::to_string(reply.status) + ": " + EscapeForTerminal(reply.body.substr(0, 2000));
}

}  // namespace basal::cli
