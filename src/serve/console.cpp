// The web console: its files and its sign-in (console.h, docs/console.md).
#include "serve/console.h"

#include <utility>

#include <nlohmann/json.hpp>

#include "parent/store/owner.h"
#include "serve/console_assets.h"
#include "serve/signature.h"

namespace basal::serve {

using Json = nlohmann::json;

namespace {

// The sign-in's body: {"token": "bsl_..."} and white space.
constexpr size_t kSignInMaxBody = 4096;

std::string_view ContentTypeOf(std::string_view name) {
  auto ends = [&](std::string_view ext) { return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext; };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  return "application/octet-stream";
}

HttpResponse NoStore(HttpResponse r) {
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

}  // namespace

void AddBrowserHeaders(HttpResponse& r, bool page) {
  for (const auto& [name, value] : r.headers)
    if (name == "X-Content-Type-Options") return;  // added already (a console page's own)
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("X-Frame-Options", "DENY");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  r.headers.emplace_back("Cross-Origin-Resource-Policy", "same-origin");
  if (page) {
    r.headers.emplace_back("Content-Security-Policy", std::string(kConsoleCsp));
    r.headers.emplace_back("Cross-Origin-Opener-Policy", "same-origin");
  } else {
    // A JSON or text body is never a document: should a browser open one, it may run nothing.
    r.headers.emplace_back("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'; sandbox");
  }
}

Console::Console(Options options) : o_(std::move(options)), sessions_(o_.random, o_.now_us) {
  sessions_.set_on_end([this](const std::string& id) { Ended(id); });
  SweepEvery(std::chrono::minutes(1));
}

Console::~Console() { o_.loop.Cancel(sweep_timer_); }

void Console::SweepEvery(std::chrono::milliseconds period) {
  sessions_.Sweep(Limits());
  sweep_timer_ = o_.loop.At(EventLoop::Clock::now() + period, [this, period] { SweepEvery(period); });
}

void Console::Ended(const std::string& id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  // Taken out first: a stream's OnClosed (run when the transport lets it go) edits streams_.
  std::vector<std::weak_ptr<HttpStream>> streams = std::move(it->second);
  streams_.erase(it);
  // Closed, the answer ends after what is buffered; the tail's writes to it stop there too.
  for (const auto& weak : streams)
    if (auto stream = weak.lock()) stream->Close();
}

SessionLimits Console::Limits() const {
  return SessionLimits{.max_sessions = o_.config.max_sessions,
                       .idle = o_.config.session_idle,
                       .max_age = o_.config.session_max_age,
                       .max_streams = o_.config.max_streams_per_session};
}

std::optional<HttpResponse> Console::NotServed(const HttpRequest& req) const {
  if (!o_.config.enabled)
    return JsonError(404, "console_not_enabled",
                     "the web console is turned off here (\"console\": {\"enabled\": false} in the config)");
  if (req.unix_socket)
    return JsonError(404, "console_not_on_socket",
                     "the web console is served on the TCP listener only (listen.tcp, signed in with a token): the "
                     "Unix socket has no browser (docs/console.md)");
  return std::nullopt;
}

const ConsoleSession* Console::SessionOf(const HttpRequest& req) {
  auto cookies = req.Header("cookie");
  auto id = cookies ? CookieValue(*cookies, kSessionCookie) : std::nullopt;
  return id ? sessions_.Find(*id, Limits()) : nullptr;
}

HttpResponse Console::File(const HttpRequest& req, std::string_view file) const {
  if (auto no = NotServed(req)) return *no;
  const std::string_view name = file.empty() ? std::string_view("index.html") : file;
  for (const EmbeddedFile& f : ConsoleAssets()) {
    if (f.name != name) continue;
    const std::string etag = "\"" + std::string(f.etag) + "\"";
    HttpResponse r;
    r.content_type = std::string(ContentTypeOf(f.name));
    // Revalidated at every load (a 304 costs a header): a new basal's console is never mixed with
    // an old one's files from the cache.
    r.headers.emplace_back("Cache-Control", "no-cache");
    r.headers.emplace_back("ETag", etag);
    if (auto match = req.Header("if-none-match"); match && *match == etag) {
      r.status = 304;
    } else {
      r.body = std::string(f.bytes);
    }
    AddBrowserHeaders(r, /*page=*/true);
    return r;
  }
  return JsonError(404, "not_found", "the console has no file " + std::string(name).substr(0, 200));
}

HttpResponse Console::SignIn(const HttpRequest& req) {
  if (auto no = NotServed(req)) return *no;
  // Another site's page must not sign this browser in under a token of its choosing: a JSON body
  // is something a page of another origin cannot send without the browser asking first (CORS),
  // which is never granted here; and a browser names the page's origin, which must be this one.
  auto type = req.Header("content-type");
  if (!type || type->substr(0, type->find(';')) != "application/json")
    return JsonError(415, "unsupported_media_type", "sign in with a JSON body: {\"token\": \"bsl_...\"}");
  if (auto origin = req.Header("origin")) {
    auto host = req.Header("host");
    if (!host || (*origin != "http://" + std::string(*host) && *origin != "https://" + std::string(*host)))
      return JsonError(403, "forbidden_origin",
                       "a sign-in comes from the console's own page; Origin \"" + std::string(origin->substr(0, 200)) +
                           "\" is another site's");
  }
  if (req.body.size() > kSignInMaxBody) return JsonError(413, "body_too_large", "a sign-in's body is {\"token\": ...}");
  Json body = Json::parse(req.body, nullptr, false);
  if (!body.is_object() || body.size() != 1 || !body.contains("token") || !body["token"].is_string())
    return JsonError(400, "bad_body", "sign in with {\"token\": \"bsl_...\"}: a token of `basal token create`");
  const std::string token = body["token"].get<std::string>();
  if (!LooksLikeApiToken(token))
    return JsonError(401, "unauthorized", "that is not an API token: they start with bsl_ (basal token create)");
  auto row = o_.find_token(ApiTokenHash(token));
  if (!row) return JsonError(500, "journal", row.error().message);
  if (!*row) return JsonError(401, "unauthorized", "the token is not known or was revoked");
  const Json scopes = Json::parse((*row)->scopes_json, nullptr, false);
  // The console reads runs, flows and schedules on every page.
  if (!ScopeAllows(scopes, "read"))
    return JsonError(403, "forbidden", "token " + (*row)->name +
                                           " lacks the scope \"read\" the console needs (basal token create --scope read)");
  const SessionLimits limits = Limits();
  const ConsoleSession& s = sessions_.Open(ApiTokenHash(token), (*row)->name, limits);
  const bool secure = o_.config.secure_cookie || req.Header("x-forwarded-proto") == std::optional<std::string_view>("https");
  HttpResponse r = JsonResponse(200, Json{{"token", s.token_name},
                                          {"scopes", scopes},
                                          {"csrf_token", s.csrf_token},
                                          {"expires", UtcText(s.created_us + limits.max_age.count() * 1000)}});
  r.headers.emplace_back("Set-Cookie", SessionCookie(s.id, limits.max_age, secure));
  AddBrowserHeaders(r, /*page=*/false);
  return NoStore(std::move(r));
}

HttpResponse Console::Session(const HttpRequest& req) {
  if (auto no = NotServed(req)) return *no;
  const ConsoleSession* s = SessionOf(req);
  if (!s) return JsonError(401, "unauthorized", "not signed in, or the session has expired: sign in with a token");
  // The cookie alone does not say who: it reaches any port of this host (auth.h).
  auto sent = req.Header(kCsrfHeader);
  if (!sent || !ConstantTimeEquals(*sent, s->csrf_token))
    return JsonError(403, "bad_csrf_token", "a console session's requests carry its X-CSRF-Token (the sign-in gave it)");
  auto row = o_.find_token(s->token_hash);
  if (!row) return JsonError(500, "journal", row.error().message);
  if (!*row) {
    sessions_.End(s->id);
    return JsonError(401, "unauthorized", "the token this session was signed in with was revoked: sign in again");
  }
  const SessionLimits limits = Limits();
  HttpResponse r = JsonResponse(
      200, Json{{"token", s->token_name},
                {"scopes", Json::parse((*row)->scopes_json, nullptr, false)},
                {"signed_in", UtcText(s->created_us)},
                {"expires", UtcText(s->created_us + limits.max_age.count() * 1000)},
                {"idle_timeout_ms", limits.idle.count()}});
  AddBrowserHeaders(r, /*page=*/false);
  return NoStore(std::move(r));
}

HttpResponse Console::SignOut(const HttpRequest& req) {
  if (auto no = NotServed(req)) return *no;
  if (const ConsoleSession* s = SessionOf(req)) {
    auto sent = req.Header(kCsrfHeader);
    if (!sent || !ConstantTimeEquals(*sent, s->csrf_token))
      return JsonError(403, "bad_csrf_token", "signing out takes the session's X-CSRF-Token (the console sends it)");
    sessions_.End(s->id);
  }
  HttpResponse r = JsonResponse(200, Json{{"signed_in", false}});
  r.headers.emplace_back("Set-Cookie", SessionCookie("", Limits().max_age, o_.config.secure_cookie));
  AddBrowserHeaders(r, /*page=*/false);
  return NoStore(std::move(r));
}

std::optional<SessionCredential> Console::FindSession(std::string_view id) {
  if (!o_.config.enabled) return std::nullopt;
  const ConsoleSession* s = sessions_.Find(id, Limits());
  if (!s) return std::nullopt;
  SessionCredential credential{s->token_hash, s->csrf_token};
  // A revoked token's session ends here, and its live streams with it (admission then refuses the
  // request, naming the revocation): what it had open stops at its next request, not an hour later.
  if (auto row = o_.find_token(credential.token_hash); row && !*row) sessions_.End(id);
  return credential;
}

std::optional<HttpResponse> Console::OpenStream(const HttpRequest& req, AttachStream* attach) {
  *attach = [](const std::shared_ptr<HttpStream>&) {};
  // A bearer token's stream is bounded by the tail's and the listener's bounds, as any request is.
  if (req.Header("authorization") || req.unix_socket) return std::nullopt;
  const ConsoleSession* s = SessionOf(req);
  if (!s) return std::nullopt;
  const SessionLimits limits = Limits();
  if (!sessions_.OpenStream(s->id, limits)) {
    HttpResponse r = JsonError(429, "too_many_streams",
                               "this console session has " + std::to_string(limits.max_streams) +
                                   " live streams open already (console.max_streams_per_session): close a tab of the "
                                   "console, or wait until one ends");
    r.headers.emplace_back("Retry-After", "5");
    return r;
  }
  *attach = [this, id = s->id](const std::shared_ptr<HttpStream>& stream) {
    if (!stream) return sessions_.CloseStream(id);
    streams_[id].push_back(stream);
    stream->OnClosed([this, id, weak = std::weak_ptr<HttpStream>(stream)] {
      sessions_.CloseStream(id);
      auto it = streams_.find(id);
      if (it == streams_.end()) return;
      std::erase_if(it->second, [&](const std::weak_ptr<HttpStream>& w) {
        return w.expired() || (!w.owner_before(weak) && !weak.owner_before(w));  // gone, or this one
      });
      if (it->second.empty()) streams_.erase(it);
    });
  };
  return std::nullopt;
}

}  // namespace basal::serve
