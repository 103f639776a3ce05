// The http.fetch host call (http_fetch.h): rules and limits from the grant (parent/http/fetch_grant.h),
// the SSRF guard on each connected address (parent/http/address.h), secrets into headers, every
// redirect hop checked again, the transfer on the loop (parent/http/http_client.h).
#include "parent/host_calls/http_fetch.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <strings.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include <deque>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>

#include "parent/http/address.h"
#include "parent/http/fetch_grant.h"
#include "parent/http/http_client.h"
#include "parent/http/redaction.h"
#include "parent/http/url_rule.h"
#include "protocol/messages.h"

namespace basal {
namespace {

// Built once: a std::string this long is an allocation each time it is made.
const std::string kGrantPath = "grants.http.fetch";

// The call's grant, or no constraints: a reference either way. (`g ? *g : Json::object()` is a
// copy of the whole grant tree, made at every call, only to be compared with the memo's.)
const Json& GrantOrNone(const Json* grant) {
  static const Json kNoConstraints = Json::object();
  return grant ? *grant : kNoConstraints;
}

// `bytes` in base64, appended to `out` (no string of its own: a body may be megabytes).
void AppendBase64(std::string& out, std::string_view bytes) {
  const size_t at = out.size();
  out.resize(at + (bytes.size() + 2) / 3 * 4 + 1);
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data() + at),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(at + static_cast<size_t>(n));
}

bool IsRedirect(int64_t status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

std::string LowerAscii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::optional<http::Address> AddressOf(const http::SocketAddress& sa) {
  http::Address a;
  if (sa.storage.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&sa.storage);
    return http::Address::V4(ntohl(in->sin_addr.s_addr));
  }
  if (sa.storage.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&sa.storage);
    a.v6 = true;
    std::memcpy(a.bytes.data(), &in6->sin6_addr, 16);
    return a;
  }
  return std::nullopt;
}

std::string OriginOf(const http::CanonicalUrl& u) { return u.scheme + "://" + u.host + ":" + std::to_string(u.port); }

// A Location header read against the URL that answered with it (RFC 3986 reference resolution,
// by libcurl's URL parser), then canonicalized like any request URL.
Result<http::CanonicalUrl> ResolveReference(const std::string& base, const std::string& location) {
  CURLU* u = curl_url();
  if (!u) return MakeError(ErrorCode::kInternal, "out of memory");
  std::string resolved;
  if (curl_url_set(u, CURLUPART_URL, base.c_str(), 0) == CURLUE_OK &&
      curl_url_set(u, CURLUPART_URL, location.c_str(), CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK) {
    char* text = nullptr;
    if (curl_url_get(u, CURLUPART_URL, &text, 0) == CURLUE_OK && text) resolved = text;
    curl_free(text);
  }
  curl_url_cleanup(u);
  if (resolved.empty()) return MakeError(ErrorCode::kInvalidArgument, "it is not a URL");
  return http::CanonicalizeUrl(resolved);
}

// One entry of the answer's `basal.hops`: what a tree of it held, written straight into the
// answer's text (AppendJson) rather than built as a tree per hop and dumped.
struct HopRecord {
  std::string url;  // redacted
  size_t rule = 0;
  std::optional<std::string> address;  // what curl connected to ("" when it connected nowhere)
  const char* failure = nullptr;       // http::FailureName, or none
  std::optional<int64_t> status;
  std::optional<uint64_t> attempt;
  std::optional<uint64_t> retry_in_ms;

  // The members in the order the tree was dumped in (by name), so the bytes are the same.
  void AppendJson(std::string& out) const {
    char sep = '{';
    const auto key = [&out, &sep](std::string_view name) {
      out += sep;
      sep = ',';
      out += '"';
      out += name;
      out += "\":";
    };
    if (address) {
      key("address");
      protocol::AppendJsonString(out, *address);
    }
    if (attempt) {
      key("attempt");
      out += std::to_string(*attempt);
    }
    if (failure) {
      key("failure");
      protocol::AppendJsonString(out, failure);
    }
    if (retry_in_ms) {
      key("retry_in_ms");
      out += std::to_string(*retry_in_ms);
    }
    key("rule");
    out += std::to_string(rule);
    if (status) {
      key("status");
      out += std::to_string(*status);
    }
    key("url");
    protocol::AppendJsonString(out, url);
    out += '}';
  }
};

// One fetch of one activation, across its redirect hops.
struct Fetch {
  int64_t activation = 0;
  std::shared_ptr<const http::FetchGrant> grant;  // the memo's (http::SharedFetchGrant), not a copy
  http::CanonicalUrl url;  // the current hop's
  std::string method;
  http::HeaderList script_headers;
  std::optional<std::string> body;
  http::RedirectMode redirect = http::RedirectMode::kFollow;
  int hops = 0;
  std::vector<HopRecord> hop_log;
  std::set<std::string> secrets_used;  // their names, which the answer lists
  // Every secret the request carried: whatever of the response or of its errors reaches the flow
  // (and so the journal) goes through it.
  http::SecretRedactor redactor;
  HostCallReply reply;
  uint64_t transfer = 0;  // the HttpClient id of the hop in flight (0: none)
  std::string idempotency_key;  // the journal's, sent in the header a rule names (idempotency_key)
  uint64_t attempt = 1;         // of the current hop, under its rule's "retry"
  explicit Fetch(HostCallReply r) : reply(std::move(r)) {}
  std::string Shown() const { return url.Display(); }
  std::string Redacted(std::string_view text) const { return redactor.Redact(text); }
};

class FetchService : public std::enable_shared_from_this<FetchService> {
 public:
  FetchService(EventLoop& loop, HttpFetchOptions options)
      : loop_(loop),
        options_(std::move(options)),
        client_(loop, {options_.max_in_flight, options_.user_agent}) {}

  void Handle(const HostCallContext& ctx, const Json& args, HostCallReply reply) {
    auto f = std::make_shared<Fetch>(std::move(reply));
    f->activation = ctx.activation_id;
    f->idempotency_key = ctx.idempotency_key;
    // authorize admitted these args against this grant a moment ago: both parse.
    auto grant = http::SharedFetchGrant(GrantOrNone(ctx.grant), kGrantPath);
    if (!grant) return Refuse(*f, "bad_grant", "the grant of http.fetch is invalid: " + grant.error().message);
    f->grant = std::move(*grant);
    auto request = http::SharedFetchArgs(args, f->grant->limits);
    if (!request) return Refuse(*f, "bad_request", request.error().message);
    const http::FetchRequest& r = **request;  // the memo's: copied, since a redirect changes them
    f->url = r.url;
    f->method = r.method;
    f->script_headers = r.headers;
    f->body = r.body;
    f->redirect = r.redirect;

    PerActivation& a = activations_[f->activation];
    if (a.started >= f->grant->limits.max_requests) {
      return Refuse(*f, "too_many_requests",
                    "this activation already made max_requests (" + std::to_string(f->grant->limits.max_requests) +
                        ") fetches; the grant's limits.max_requests bounds them");
    }
    ++a.started;
    if (a.running >= f->grant->limits.max_in_flight) {
      a.waiting.push_back(f);  // its turn comes when one of the activation's fetches ends
      return;
    }
    ++a.running;
    StartHop(f);
  }

  void ActivationEnded(int64_t activation) {
    auto it = activations_.find(activation);
    if (it == activations_.end()) return;
    PerActivation a = std::move(it->second);
    activations_.erase(it);
    for (auto& f : a.waiting) f->reply.Error("TypeError", "fetch " + f->Shown() + " aborted: the activation ended");
    for (auto& [key, pending] : a.retrying) {
      loop_.Cancel(pending.first);
      pending.second->reply.Error("TypeError", pending.second->Redacted("fetch " + pending.second->Shown() +
                                                                         " aborted: the activation ended"));
    }
    for (uint64_t transfer : a.transfers) client_.Abort(transfer);  // each answers when its abort lands
  }

 private:
  struct PerActivation {
    uint64_t started = 0;  // fetches this activation made (max_requests)
    uint64_t running = 0;  // fetches in flight (max_in_flight)
    std::deque<std::shared_ptr<Fetch>> waiting;
    std::set<uint64_t> transfers;
    // Fetches between two attempts (a rule's "retry"), by a key of their own: their timers.
    std::map<uint64_t, std::pair<EventLoop::TimerId, std::shared_ptr<Fetch>>> retrying;
  };

  // Whether the hop that just ended is attempted again: its rule has a "retry", the request is
  // idempotent, attempts are left, and it failed to connect, timed out, or answered a listed
  // status. If so the hop is logged with the wait, and the same request starts again after it.
  bool RetryLater(const std::shared_ptr<Fetch>& f, HopRecord& hop, const http::ExchangeResult& r) {
    const size_t index = hop.rule;
    if (index >= f->grant->rules.size()) return false;
    const http::FetchRule& rule = f->grant->rules[index];
    if (!rule.retry || f->attempt >= rule.retry->max_attempts) return false;
    if (http::RequestEffect(rule, f->method) != Effect::kIdempotent) return false;
    using F = http::ExchangeResult::Failure;
    const bool transient = r.ok() ? std::binary_search(rule.retry->statuses.begin(), rule.retry->statuses.end(), r.status)
                                  : (r.failure == F::kConnect || r.failure == F::kTimeout);
    if (!transient) return false;
    auto a = activations_.find(f->activation);
    if (a == activations_.end()) return false;
    uint64_t delay = rule.retry->DelayBefore(f->attempt + 1);
    if (r.ok()) {
      // Retry-After in seconds (RFC 9110 10.2.3; a date is not honoured): waited, up to max_ms.
      for (const auto& [name, value] : r.headers) {
        if (name != "retry-after" || value.empty() || value.size() > 9 ||
            !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
          continue;
        delay = std::max(delay, std::min<uint64_t>(rule.retry->max_ms, std::stoull(value) * 1000));
      }
    }
    hop.attempt = f->attempt;
    hop.retry_in_ms = delay;
    f->hop_log.push_back(std::move(hop));
    ++f->attempt;
    const uint64_t key = ++retry_keys_;
    std::weak_ptr<FetchService> self = weak_from_this();
    const EventLoop::TimerId timer =
        loop_.At(EventLoop::Clock::now() + std::chrono::milliseconds(delay), [self, activation = f->activation, key] {
          auto s = self.lock();
          if (!s) return;
          auto it = s->activations_.find(activation);
          if (it == s->activations_.end()) return;
          auto pending = it->second.retrying.find(key);
          if (pending == it->second.retrying.end()) return;
          std::shared_ptr<Fetch> next = std::move(pending->second.second);
          it->second.retrying.erase(pending);
          s->StartHop(next);
        });
    a->second.retrying.emplace(key, std::make_pair(timer, f));
    return true;
  }

  void Count(std::string_view kind, std::string_view reason) {
    if (options_.count) options_.count(kind, reason);
  }

  void Refuse(Fetch& f, std::string_view reason, const std::string& message) {
    Count("refusal", reason);
    f.reply.Error("TypeError", f.Redacted("fetch " + f.Shown() + " refused: " + message));
  }

  // The fetch was answered: the activation may start one that waited.
  void Ended(const Fetch& f) {
    auto it = activations_.find(f.activation);
    if (it == activations_.end()) return;
    if (it->second.running > 0) --it->second.running;
    while (it != activations_.end() && !it->second.waiting.empty() &&
           it->second.running < f.grant->limits.max_in_flight) {
      auto next = std::move(it->second.waiting.front());
      it->second.waiting.pop_front();
      ++it->second.running;
      StartHop(next);  // may be answered at once, and end
      it = activations_.find(f.activation);
    }
  }

  void RefuseAndEnd(const std::shared_ptr<Fetch>& f, std::string_view reason, const std::string& message) {
    Refuse(*f, reason, message);
    Ended(*f);
  }

  void StartHop(const std::shared_ptr<Fetch>& f) {
    const http::RuleMatch match = http::MatchRequest(*f->grant, f->url, f->method);
    if (!match.rule) {
      if (f->hops == 0) return RefuseAndEnd(f, "not_granted", match.denial);
      return RefuseAndEnd(f, "redirect_not_granted", "redirect hop " + std::to_string(f->hops) + ": " + match.denial);
    }
    const http::FetchRule& rule = *match.rule;
    const size_t rule_index = static_cast<size_t>(match.rule - f->grant->rules.data());
    if (!http::SecretRefs(rule).empty() && f->url.scheme != "https" && !rule.allow_plain_http) {
      return RefuseAndEnd(f, "plain_http_secret",
                          "rule " + rule.url.text + " would send a secret over plain http; it needs \"allow_plain_http\": true");
    }
    // Parts of a response that echoes a secret are what a flow would join (docs/http.md, threat
    // model): no byte ranges where a rule sends one.
    if (!http::SecretRefs(rule).empty()) {
      for (const auto& [name, value] : f->script_headers) {
        const std::string n = LowerAscii(name);
        if (n == "range" || n == "if-range")
          return RefuseAndEnd(f, "range_with_secret",
                              "rule " + rule.url.text + " sends a secret, and a " + name +
                                  " header is refused under such a rule (the parts of a response that echoes the "
                                  "secret could be joined); fetch the whole resource");
      }
    }
    std::string why;  // the secret store's own words: not set, or unreadable
    auto headers = http::RequestHeaders(rule, f->script_headers, [&](std::string_view secret) -> std::optional<std::string> {
      if (!options_.secret) {
        why = "secret " + std::string(secret) + " is referenced by rule " + rule.url.text +
              " but this basal has no secrets directory";
        return std::nullopt;
      }
      auto v = options_.secret(secret);
      if (!v) {
        why = v.error().message;
        if (why.find(secret) == std::string::npos) why = "secret " + std::string(secret) + ": " + why;
        why += " (rule " + rule.url.text + " names it)";
        return std::nullopt;
      }
      if (f->secrets_used.insert(std::string(secret)).second) f->redactor.Add(secret, *v);
      return std::move(*v);
    });
    if (!headers) return RefuseAndEnd(f, "secret_missing", why.empty() ? headers.error().message : why);
    if (!rule.idempotency_key.empty()) {
      // The rule's header, not the script's: the key is the journal's (the same on every resume).
      std::erase_if(*headers, [&rule](const auto& h) {
        return h.first.size() == rule.idempotency_key.size() &&
               std::equal(h.first.begin(), h.first.end(), rule.idempotency_key.begin(),
                          [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) ==
                                                      std::tolower(static_cast<unsigned char>(b)); });
      });
      headers->emplace_back(rule.idempotency_key, f->idempotency_key);
    }

    http::Exchange x;
    x.url = f->url.url;
    x.method = f->method;
    x.headers = std::move(*headers);
    x.body = f->body;
    x.connect_timeout = std::chrono::milliseconds(f->grant->limits.connect_timeout_ms);
    x.timeout = std::chrono::milliseconds(f->grant->limits.timeout_ms);
    x.max_response_bytes = f->grant->limits.max_response_bytes;
    x.check_address = [networks = rule.allow_networks](const http::SocketAddress& sa) -> std::optional<std::string> {
      const auto address = AddressOf(sa);
      if (!address) return "is not an IPv4 or IPv6 address";
      if (auto why = http::ConnectRefusal(*address, networks)) {
        return "is refused by the SSRF guard: " + *why;  // which names allow_networks, once
      }
      return std::nullopt;
    };
    if (options_.resolve_for_tests && !f->url.host_is_ip()) {
      std::vector<std::string> addrs = options_.resolve_for_tests(f->url.host);
      if (!addrs.empty()) {
        std::string joined;
        for (const auto& a : addrs) joined += (joined.empty() ? "" : ",") + (a.find(':') != std::string::npos ? "[" + a + "]" : a);
        const std::string hp = f->url.host + ":" + std::to_string(f->url.port);
        x.resolve = {"-" + hp, hp + ":" + joined};
      }
    }
    HopRecord hop;
    hop.url = f->Redacted(f->url.url);
    hop.rule = rule_index;
    std::weak_ptr<FetchService> self = weak_from_this();
    f->transfer = client_.Start(std::move(x), [self, f, hop](http::ExchangeResult r) mutable {
      if (auto s = self.lock()) s->OnHop(f, std::move(hop), std::move(r));
    });
    if (auto it = activations_.find(f->activation); it != activations_.end()) it->second.transfers.insert(f->transfer);
  }

  void OnHop(const std::shared_ptr<Fetch>& f, HopRecord hop, http::ExchangeResult r) {
    if (auto it = activations_.find(f->activation); it != activations_.end()) it->second.transfers.erase(f->transfer);
    f->transfer = 0;
    hop.address = r.connected;
    using F = http::ExchangeResult::Failure;
    if (!r.ok()) {
      hop.failure = http::FailureName(r.failure);
      if (r.failure == F::kCancelled) {
        f->hop_log.push_back(std::move(hop));
        f->reply.Error("TypeError", f->Redacted("fetch " + f->Shown() + " aborted: the activation ended"));
        return;  // its activation is gone: nothing waits behind it
      }
      const bool refusal = r.failure == F::kAddressRefused || r.failure == F::kTooLarge;
      Count(refusal ? "refusal" : "failure", http::FailureName(r.failure));
      if (RetryLater(f, hop, r)) return;
      if (f->attempt > 1) hop.attempt = f->attempt;
      f->hop_log.push_back(std::move(hop));
      f->reply.Error("TypeError", f->Redacted("fetch " + f->Shown() + (refusal ? " refused: " : " failed: ") + r.message));
      return Ended(*f);
    }
    hop.status = r.status;
    if (RetryLater(f, hop, r)) return;
    if (f->attempt > 1) hop.attempt = f->attempt;
    f->hop_log.push_back(std::move(hop));
    const auto location =
        std::find_if(r.headers.begin(), r.headers.end(), [](const auto& h) { return h.first == "location"; });
    if (IsRedirect(r.status) && location != r.headers.end() && f->redirect != http::RedirectMode::kManual) {
      if (f->redirect == http::RedirectMode::kError) {
        Refuse(*f, "redirect_refused",
               "the response redirects (status " + std::to_string(r.status) + ") and the request said redirect: \"error\"");
        return Ended(*f);
      }
      const uint64_t max = f->grant->limits.max_redirects;
      if (max > 0) {
        if (static_cast<uint64_t>(f->hops) >= max) {
          Refuse(*f, "too_many_redirects", "more than max_redirects (" + std::to_string(max) + ") redirects");
          return Ended(*f);
        }
        auto next = ResolveReference(f->url.url, location->second);
        if (!next) {
          Refuse(*f, "bad_redirect", "its redirect is not to a URL basal follows: " + next.error().message);
          return Ended(*f);
        }
        // The Fetch standard: 303 becomes GET (HEAD stays), and so do 301 and 302 after a POST;
        // the body and the headers about it go with the method. Credentials the script set do
        // not cross to another origin.
        const bool to_get = (r.status == 303 && f->method != "HEAD") ||
                            ((r.status == 301 || r.status == 302) && f->method == "POST");
        if (to_get) {
          f->method = "GET";
          f->body.reset();
          std::erase_if(f->script_headers, [](const auto& h) {
            const std::string n = LowerAscii(h.first);
            return n == "content-type" || n == "content-encoding" || n == "content-language" || n == "content-location";
          });
        }
        if (OriginOf(*next) != OriginOf(f->url)) {
          std::erase_if(f->script_headers, [](const auto& h) {
            const std::string n = LowerAscii(h.first);
            return n == "authorization" || n == "cookie" || n == "proxy-authorization";
          });
        }
        f->url = std::move(*next);
        ++f->hops;
        f->attempt = 1;  // the next hop's rule may retry it in its turn
        return StartHop(f);
      }
    }
    Answer(*f, std::move(r));
    Ended(*f);
  }

  void Answer(Fetch& f, http::ExchangeResult r) {
    // Secret values never leave the parent: whatever of the response echoes one (the body, the
    // status text, the URL, a header's name or value) gets it replaced, encoded or in parts
    // (parent/http/redaction.h). The hops' URLs were redacted as they were logged.
    const size_t received = r.body.size();
    const std::string body = f.redactor.empty() ? std::move(r.body) : f.Redacted(r.body);
    r.body.clear();
    // A redaction changes the body's length: a Content-Length that counted the server's bytes would
    // contradict the body the flow gets, so it counts the flow's.
    const bool resized = body.size() != received;
    // The answer is written as the text the worker gets (HostCallReply::OkText), its members in the
    // order a tree of it would be dumped in (by name), so the bytes are what they were when it was
    // a tree; the journal's view is made from this text (JournalResultText).
    std::string text;
    text.reserve(256 + body.size() / 3 * 4 + 4 + r.headers.size() * 64);
    text += R"({"basal":{"hops":)";
    text += '[';
    for (size_t i = 0; i < f.hop_log.size(); ++i) {
      if (i > 0) text += ',';
      f.hop_log[i].AppendJson(text);
    }
    text += ']';
    text += R"(,"secrets":[)";
    bool first = true;
    for (const std::string& name : f.secrets_used) {
      if (!first) text += ',';
      first = false;
      protocol::AppendJsonString(text, name);
    }
    const auto append_redacted = [&f, &text](std::string_view s) {
      if (f.redactor.empty()) return protocol::AppendJsonString(text, s);
      protocol::AppendJsonString(text, f.Redacted(s));
    };
    text += R"(]},"body_base64":")";
    AppendBase64(text, body);
    text += R"(","headers":[)";
    first = true;
    for (auto& [n, v] : r.headers) {
      const bool length = resized && n.size() == 14 && strncasecmp(n.c_str(), "content-length", 14) == 0;
      text += first ? "[" : ",[";
      first = false;
      append_redacted(n);
      text += ',';
      if (length) {
        protocol::AppendJsonString(text, std::to_string(body.size()));
      } else {
        append_redacted(v);
      }
      text += ']';
    }
    text += R"(],"redirected":)";
    text += f.hops > 0 ? "true" : "false";
    text += R"(,"status":)";
    text += std::to_string(r.status);
    text += R"(,"status_text":)";
    append_redacted(r.status_text);
    text += R"(,"url":)";
    append_redacted(f.url.url);
    text += '}';
    f.reply.OkText(std::move(text));
  }

  EventLoop& loop_;
  HttpFetchOptions options_;
  http::HttpClient client_;
  uint64_t retry_keys_ = 0;
  std::map<int64_t, PerActivation> activations_;
};

std::string DecodeBase64(std::string_view text) {
  std::string bytes(text.size() / 4 * 3 + 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(bytes.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  size_t pad = 0;
  if (!text.empty() && text.back() == '=') ++pad;
  if (text.size() > 1 && text[text.size() - 2] == '=') ++pad;
  bytes.resize(n < 0 ? 0 : static_cast<size_t>(n) - pad);
  return bytes;
}

// The journal's view of a response: the body as text (bytes that are not UTF-8 are replaced when
// the record is written), beside its size. The call gate caps each journaled value. Built member
// by member: a copy of the whole result would copy the base64 text only to drop it (up to 11 MiB
// for a body at max_response_bytes).
Json JournalResult(const Json& result) {
  auto b = result.find("body_base64");
  if (b == result.end() || !b->is_string()) return result;
  Json view = Json::object();
  for (auto it = result.begin(); it != result.end(); ++it) {
    if (it.key() != "body_base64") view[it.key()] = it.value();
  }
  std::string bytes = DecodeBase64(b->get_ref<const std::string&>());
  view["body_bytes"] = bytes.size();
  view["body"] = std::move(bytes);
  return view;
}

// In `t`, a JSON text (the call gate checked it), the member `"key":"..."` of the top-level object
// whose string value is written without escapes: [where its key's quote is, past its value's closing
// quote). nullopt when there is none, or more than one, or a key is written with escapes (it may
// spell `key`): the caller then reads the text as a tree.
std::optional<std::pair<size_t, size_t>> PlainTopLevelString(std::string_view t, std::string_view key) {
  std::optional<std::pair<size_t, size_t>> found;
  size_t depth = 0;
  bool expect_key = false;  // the next string at depth 1 is a member's name
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '{' || c == '[') {
      ++depth;
      expect_key = c == '{' && depth == 1;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ',') {
      expect_key = depth == 1;
    } else if (c == '"') {
      const size_t begin = i;
      bool escaped = false;
      for (++i; i < t.size() && t[i] != '"'; ++i) {
        if (t[i] == '\\') {
          escaped = true;
          ++i;
        }
      }
      if (!expect_key) continue;
      expect_key = false;
      if (escaped) return std::nullopt;
      if (t.substr(begin + 1, i - begin - 1) != key) continue;
      if (found) return std::nullopt;
      size_t v = i + 1;
      while (v < t.size() && (t[v] == ' ' || t[v] == '\t' || t[v] == '\n' || t[v] == '\r' || t[v] == ':')) ++v;
      if (v >= t.size() || t[v] != '"') return std::nullopt;
      const size_t end = t.find('"', v + 1);
      if (end == std::string_view::npos || t.substr(v + 1, end - v - 1).find('\\') != std::string_view::npos)
        return std::nullopt;
      found = std::make_pair(begin, end + 1);
      i = end;
    }
  }
  return found;
}

// JournalResult from the answer's text, as the text the worker gets (the handler's, FetchService::
// Answer): the member "body_base64" replaced in place by "body" and "body_bytes", which sort where
// it did, so the view is byte for byte the dump of JournalResult's tree. Any other text (no such
// member, or one this reading does not take) goes through the tree.
std::string JournalResultText(std::string_view result_json) {
  const auto member = PlainTopLevelString(result_json, "body_base64");
  if (!member) {
    Json tree;
    std::string error;
    if (!protocol::ParseJsonValue(result_json, tree, error)) throw std::runtime_error(error);
    return protocol::DumpJson(JournalResult(tree));
  }
  const size_t value = result_json.find('"', member->first + 13);  // past "body_base64"
  const std::string_view b64 = result_json.substr(value + 1, member->second - value - 2);
  std::string bytes = DecodeBase64(b64);
  const size_t body_bytes = bytes.size();
  std::string view;
  view.reserve(result_json.size());
  view.append(result_json.substr(0, member->first));
  view += R"("body":)";
  view += protocol::DumpJson(Json(std::move(bytes)));
  view += R"(,"body_bytes":)";
  view += std::to_string(body_bytes);
  view.append(result_json.substr(member->second));
  return view;
}

HostCallSpec MakeSpec() {
  HostCallSpec spec;
  spec.name = "http.fetch";
  spec.needs_grant = true;
  spec.effect = Effect::kExternal;
  spec.check_grant = http::CheckFetchGrant;
  spec.compare_grant = http::CompareFetchGrant;
  spec.authorize = http::AuthorizeFetch;
  spec.journal_result_text = JournalResultText;
  // By the method and the rule that admits it (http::RequestEffect); a request that matches no
  // rule is denied before its effect matters.
  spec.effect_of = [](const Json* grant, const Json& args) {
    auto parsed = http::SharedFetchGrant(GrantOrNone(grant), kGrantPath);
    if (!parsed) return Effect::kExternal;
    auto request = http::SharedFetchArgs(args, (*parsed)->limits);
    if (!request) return Effect::kExternal;
    const http::RuleMatch match = http::MatchRequest(**parsed, (*request)->url, (*request)->method);
    return match.rule ? http::RequestEffect(*match.rule, (*request)->method) : Effect::kExternal;
  };
  spec.handler = [](const HostCallContext&, const Json&, HostCallReply reply) {
    reply.Error("HostError", "http.fetch is not served by this registry (no event loop)");
  };
  return spec;
}

}  // namespace

Result<void> RegisterHttpFetchSpec(HostCallRegistry& registry) { return registry.Register(MakeSpec()); }

Result<void> RegisterHttpFetch(HostCallRegistry& registry, EventLoop& loop, HttpFetchOptions options) {
  auto counter = options.count;
  auto service = std::make_shared<FetchService>(loop, std::move(options));
  HostCallSpec spec = MakeSpec();
  // The gate's decision (AuthorizeFetch), and a denial counted by reason for the health report
  // (the gate counts every denial in denied_calls).
  spec.authorize = [count = counter](const Json& grant, const Json& args) -> std::optional<std::string> {
    std::optional<std::string> denial = http::AuthorizeFetch(grant, args);
    if (!denial || !count) return denial;
    std::string_view reason = "address_refused";  // an IP-literal host the guard refuses
    if (auto parsed = http::ParseFetchGrant(grant, "grants.http.fetch"); !parsed) {
      reason = "bad_grant";
    } else if (auto request = http::ParseFetchArgs(args, parsed->limits); !request) {
      reason = "bad_request";
    } else if (!http::MatchRequest(*parsed, request->url, request->method).rule) {
      reason = "not_granted";
    }
    count("refusal", reason);
    return denial;
  };
  spec.handler = [service](const HostCallContext& ctx, const Json& args, HostCallReply reply) {
    service->Handle(ctx, args, std::move(reply));
  };
  spec.activation_ended = [service](int64_t activation) { service->ActivationEnded(activation); };
  return registry.Register(std::move(spec));
}

}  // namespace basal
