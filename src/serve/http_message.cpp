// HTTP requests and answers as basal serve's rooms see them (http_message.h).
#include "serve/http_message.h"

#include <algorithm>
#include <cstring>

namespace basal::serve {

bool HttpStream::Write(std::string_view bytes) {
  if (closed_) return false;
  if (bytes.empty()) return true;
  buffer_.append(bytes);
  if (wake_) wake_();
  return true;
}

void HttpStream::Close() {
  if (closed_) return;
  closed_ = true;
  if (wake_) wake_();
}

size_t HttpStream::Take(char* out, size_t max) {
  const size_t n = std::min(max, buffered());
  if (n > 0) std::memcpy(out, buffer_.data() + taken_, n);
  taken_ += n;
  // Compacted once what was taken is at least half of it: each byte is moved at most once more.
  if (taken_ == buffer_.size()) {
    buffer_.clear();
    taken_ = 0;
  } else if (taken_ >= buffer_.size() / 2) {
    buffer_.erase(0, taken_);
    taken_ = 0;
  }
  return n;
}

void HttpStream::Detach() {
  if (detached_) return;
  detached_ = true;
  closed_ = true;
  wake_ = nullptr;
  buffer_.clear();
  buffer_.shrink_to_fit();
  taken_ = 0;
  auto fn = std::move(on_closed_);
  on_closed_ = nullptr;
  if (fn) fn();
}

std::optional<std::string_view> HttpRequest::Header(std::string_view lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return std::string_view(v);
  return std::nullopt;
}

std::optional<std::string_view> HttpRequest::Query(std::string_view name) const {
  for (const auto& [k, v] : query)
    if (k == name) return std::string_view(v);
  return std::nullopt;
}

std::string JsonBody(const nlohmann::json& body) {
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

HttpResponse JsonResponse(int status, const nlohmann::json& body) {
  HttpResponse r;
  r.status = status;
  r.body = JsonBody(body);
  return r;
}

HttpResponse JsonError(int status, std::string_view code, std::string_view message) {
  return JsonResponse(status, nlohmann::json{{"error", {{"code", std::string(code)}, {"message", std::string(message)}}}});
}

}  // namespace basal::serve
