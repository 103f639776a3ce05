#include "cli/daemon_client.h"

#include <curl/curl.h>

#include <cstdlib>
#include <memory>

namespace basal::cli {
namespace {

constexpr size_t kMaxReplyBytes = 16u << 20;

size_t Collect(char* data, size_t size, size_t count, void* user) {
  auto* out = static_cast<std::string*>(user);
  if (out->size() + size * count > kMaxReplyBytes) return 0;  // curl fails the transfer
  out->append(data, size * count);
  return size * count;
}

}  // namespace

Result<DaemonReply> DaemonGet(const DaemonAddress& address, const std::string& path, std::chrono::seconds timeout) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) return MakeError(ErrorCode::kInternal, "libcurl could not start a request");
  DaemonReply reply;
  std::string url;
  const std::string where = address.socket.empty() ? address.url : address.socket;
  if (!address.socket.empty()) {
    curl_easy_setopt(curl.get(), CURLOPT_UNIX_SOCKET_PATH, address.socket.c_str());
    url = "http://basal" + path;
  } else {
    if (address.url.rfind("http://", 0) != 0)
      return MakeError(ErrorCode::kInvalidArgument, "--url " + address.url + ": give http://ADDRESS:PORT (loopback)");
    url = address.url + path;
  }
  curl_slist* headers = nullptr;
  std::string auth;
  if (const char* token = std::getenv("BASAL_TOKEN"); token && *token && address.socket.empty()) {
    auth = std::string("Authorization: Bearer ") + token;
    headers = curl_slist_append(headers, auth.c_str());
  }
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl.get(), CURLOPT_NOPROXY, "*");
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT, static_cast<long>(timeout.count()));
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, &Collect);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
  const CURLcode rc = curl_easy_perform(curl.get());
  curl_slist_free_all(headers);
  if (rc != CURLE_OK)
    return MakeError(ErrorCode::kIo, "cannot reach basal serve at " + where + ": " + curl_easy_strerror(rc) +
                                         " (is it running? basal serve --socket PATH)");
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &reply.status);
  return reply;
}

}  // namespace basal::cli
