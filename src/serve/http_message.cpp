// HTTP requests and answers as basal serve's rooms see them (http_message.h).
#include "serve/http_message.h"

namespace basal::serve {

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
