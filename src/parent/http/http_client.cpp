// HttpClient (http_client.h): libcurl's multi-socket interface driven by the parent's EventLoop.
#include "parent/http/http_client.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <mutex>

namespace basal::http {

const char* FailureName(ExchangeResult::Failure failure) {
  using F = ExchangeResult::Failure;
  switch (failure) {
    case F::kNone: return "none";
    case F::kAddressRefused: return "address_refused";
    case F::kTooLarge: return "too_large";
    case F::kTimeout: return "timeout";
    case F::kConnect: return "connect";
    case F::kTls: return "tls";
    case F::kProtocol: return "protocol";
    case F::kCancelled: return "cancelled";
    case F::kOther: return "other";
  }
  return "other";
}

std::string SocketAddress::ToString() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (storage.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&storage);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (storage.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    return "[" + std::string(text) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "(address family " + std::to_string(storage.ss_family) + ")";
}

struct HttpClient::Transfer {
  uint64_t id = 0;
  Exchange exchange;
  Done done;
  CURL* easy = nullptr;
  curl_slist* header_list = nullptr;
  curl_slist* resolve_list = nullptr;
  ExchangeResult result;
  size_t header_bytes = 0;
  bool headers_too_large = false;
  bool body_too_large = false;
  std::string refused;  // why check_address refused the last address curl tried
  char error[CURL_ERROR_SIZE] = {};  // curl's own words for a failure

  ~Transfer() {
    if (easy) curl_easy_cleanup(easy);
    curl_slist_free_all(header_list);
    curl_slist_free_all(resolve_list);
  }
};

namespace {

std::once_flag curl_global_once;

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<HttpClient::Transfer*>(user);
  const size_t n = size * count;
  if (t->result.body.size() + n > t->exchange.max_response_bytes) {
    t->body_too_large = true;
    return 0;  // any count other than n stops the transfer (CURLE_WRITE_ERROR)
  }
  t->result.body.append(data, n);
  return n;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r' || s[e - 1] == '\n')) --e;
  return std::string(s.substr(b, e - b));
}

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<HttpClient::Transfer*>(user);
  const size_t n = size * count;
  t->header_bytes += n;
  if (t->header_bytes > kMaxResponseHeaderBytes) {
    t->headers_too_large = true;
    return 0;
  }
  std::string_view line(data, n);
  if (line.substr(0, 5) == "HTTP/") {
    // A new response (an interim 1xx, or the final one): only the last one's headers count.
    t->result.headers.clear();
    t->result.status_text.clear();
    const size_t sp1 = line.find(' ');
    if (sp1 != std::string_view::npos) {
      const size_t sp2 = line.find(' ', sp1 + 1);
      if (sp2 != std::string_view::npos) t->result.status_text = Trim(line.substr(sp2 + 1));
    }
    return n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return n;  // the blank line, or a folded line
  t->result.headers.emplace_back(Lower(std::string(line.substr(0, colon))), Trim(line.substr(colon + 1)));
  return n;
}

curl_socket_t OnOpenSocket(void* user, curlsocktype purpose, curl_sockaddr* address) {
  auto* t = static_cast<HttpClient::Transfer*>(user);
  if (purpose != CURLSOCKTYPE_IPCXN || address->addrlen > sizeof(sockaddr_storage) ||
      (address->family != AF_INET && address->family != AF_INET6)) {
    t->refused = "basal opens only IPv4 and IPv6 TCP connections";
    return CURL_SOCKET_BAD;
  }
  SocketAddress a;
  std::memcpy(&a.storage, &address->addr, address->addrlen);
  a.length = address->addrlen;
  if (t->exchange.check_address) {
    std::optional<std::string> why;
    try {
      why = t->exchange.check_address(a);
    } catch (...) {
      why = "the address check failed";
    }
    if (why) {
      t->refused = a.ToString() + " " + *why;
      return CURL_SOCKET_BAD;
    }
  }
  return ::socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

ExchangeResult::Failure Classify(CURLcode code) {
  using F = ExchangeResult::Failure;
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT: return F::kTimeout;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING: return F::kConnect;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE: return F::kTls;
    case CURLE_FILESIZE_EXCEEDED: return F::kTooLarge;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_PARTIAL_FILE: return F::kProtocol;
    default: return F::kOther;
  }
}

}  // namespace

HttpClient::HttpClient(EventLoop& loop, Options options)
    : loop_(loop), options_(std::move(options)), alive_(std::make_shared<bool>(true)) {}

HttpClient::~HttpClient() {
  *alive_ = false;
  if (timer_) loop_.Cancel(*timer_);
  for (auto& [id, t] : running_) {
    if (multi_) curl_multi_remove_handle(static_cast<CURLM*>(multi_), t->easy);
  }
  running_.clear();
  queue_.clear();
  for (int fd : watched_) loop_.Unwatch(fd);
  if (multi_) curl_multi_cleanup(static_cast<CURLM*>(multi_));  // may still close sockets (CloseLater)
  if (close_timer_) loop_.Cancel(*close_timer_);
  multi_ = nullptr;  // CloseNow keeps no handle now
  CloseNow();
  for (void* e : spare_easy_) curl_easy_cleanup(static_cast<CURL*>(e));
}

void HttpClient::EnsureMulti() {
  if (multi_) return;
  std::call_once(curl_global_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURLM* m = curl_multi_init();
  if (!m) return;
  curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, &HttpClient::OnSocket);
  curl_multi_setopt(m, CURLMOPT_SOCKETDATA, this);
  curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, &HttpClient::OnTimer);
  curl_multi_setopt(m, CURLMOPT_TIMERDATA, this);
  multi_ = m;
}

uint64_t HttpClient::Start(Exchange exchange, Done done) {
  auto t = std::make_unique<Transfer>();
  t->id = next_id_++;
  t->exchange = std::move(exchange);
  t->done = std::move(done);
  const uint64_t id = t->id;
  if (running_.size() >= options_.max_in_flight) {
    queue_.push_back(std::move(t));
  } else {
    Launch(std::move(t));
  }
  return id;
}

void HttpClient::Abort(uint64_t id) {
  if (auto it = running_.find(id); it != running_.end()) {
    std::unique_ptr<Transfer> t = std::move(it->second);
    running_.erase(it);
    curl_multi_remove_handle(static_cast<CURLM*>(multi_), t->easy);
    ExchangeResult r;
    r.failure = ExchangeResult::Failure::kCancelled;
    r.message = "the request was aborted";
    ScheduleFinish(std::move(t), std::move(r));
    LaunchQueued();
    return;
  }
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if ((*it)->id != id) continue;
    std::unique_ptr<Transfer> t = std::move(*it);
    queue_.erase(it);
    ExchangeResult r;
    r.failure = ExchangeResult::Failure::kCancelled;
    r.message = "the request was aborted before it started";
    ScheduleFinish(std::move(t), std::move(r));
    return;
  }
}

void HttpClient::ScheduleFinish(std::unique_ptr<Transfer> t, ExchangeResult r) {
  // Never call `done` from inside Start, Abort or a curl call: post it to the loop.
  std::shared_ptr<Transfer> held(std::move(t));
  loop_.Post([this, alive = alive_, held, r = std::move(r)]() mutable {
    if (!*alive) return;
    Done done = std::move(held->done);
    if (done) done(std::move(r));
    // The easy handle's cleanup (about 5 us) waits until the answer `done` leads to is out.
    if (!*alive) return;  // `done` destroyed the client: the transfer goes with this lambda
    finished_.push_back(std::move(held));
    ScheduleCleanup();
  });
}

void HttpClient::Launch(std::unique_ptr<Transfer> t) {
  EnsureMulti();
  const auto fail = [&](std::string why) {
    ExchangeResult r;
    r.failure = ExchangeResult::Failure::kOther;
    r.message = std::move(why);
    ScheduleFinish(std::move(t), std::move(r));
  };
  if (!multi_) return fail("libcurl could not start (curl_multi_init failed)");
  if (!spare_easy_.empty()) {
    t->easy = spare_easy_.back();
    spare_easy_.pop_back();
  } else {
    t->easy = curl_easy_init();
    if (t->easy) SetFixedOptions(t->easy);
  }
  if (!t->easy) return fail("libcurl could not start (curl_easy_init failed)");
  CURL* e = t->easy;
  Transfer* raw = t.get();
  const Exchange& x = t->exchange;
  // What differs between exchanges, all of it set for each (a kept handle holds the last one's).
  curl_easy_setopt(e, CURLOPT_URL, x.url.c_str());
  curl_easy_setopt(e, CURLOPT_PRIVATE, raw);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, raw->error);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(x.connect_timeout.count()));
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(x.timeout.count()));
  curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(x.max_response_bytes));
  curl_easy_setopt(e, CURLOPT_WRITEDATA, raw);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, raw);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, raw);
  // The method, from a GET without a body: no custom method, no body, not HEAD (POSTFIELDS sets
  // POST, which HTTPGET then undoes; NOBODY 0 and no upload come with HTTPGET).
  curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, nullptr);
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(-1));
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, nullptr);
  curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  if (x.method == "HEAD") {
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else if (x.method == "GET" && !x.body) {
    // as set above
  } else {
    if (x.body || x.method == "POST" || x.method == "PUT" || x.method == "PATCH") {
      const std::string& body = x.body ? *x.body : std::string();
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, x.body ? x.body->data() : "");
    }
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, x.method.c_str());
  }
  bool has_content_type = false;
  for (const auto& [name, value] : x.headers) {
    // "Name;" is curl's way to send a header with an empty value.
    const std::string line = value.empty() ? name + ";" : name + ": " + value;
    t->header_list = curl_slist_append(t->header_list, line.c_str());
    if (name == "content-type" || name == "Content-Type") has_content_type = true;
  }
  // curl would add "Expect: 100-continue" to large bodies and a form content type to POSTs.
  t->header_list = curl_slist_append(t->header_list, "Expect:");
  if (!has_content_type && x.body) t->header_list = curl_slist_append(t->header_list, "Content-Type:");
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->header_list);
  for (const std::string& entry : x.resolve) t->resolve_list = curl_slist_append(t->resolve_list, entry.c_str());
  curl_easy_setopt(e, CURLOPT_RESOLVE, t->resolve_list);  // none (nullptr) clears the last exchange's

  const uint64_t id = t->id;
  running_.emplace(id, std::move(t));
  if (curl_multi_add_handle(static_cast<CURLM*>(multi_), e) != CURLM_OK) {
    std::unique_ptr<Transfer> back = std::move(running_[id]);
    running_.erase(id);
    ExchangeResult r;
    r.failure = ExchangeResult::Failure::kOther;
    r.message = "libcurl refused the request (curl_multi_add_handle failed)";
    ScheduleFinish(std::move(back), std::move(r));
    return;
  }
  // Adding the handle asked for a 0 ms timeout: the transfer starts now, not in the loop's next
  // pass. Not from inside Drive (a queued exchange launched as another ends): the loop's timer
  // set by OnTimer starts those, so Drive never recurses.
  if (due_now_ && !driving_) Drive(CURL_SOCKET_TIMEOUT, 0);
}

void HttpClient::SetFixedOptions(void* easy) {
  // What every exchange sets alike, set once per easy handle: a kept handle (KeepEasy) is not reset,
  // so these stay, and Launch sets everything that differs between exchanges every time.
  CURL* e = static_cast<CURL*>(easy);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  // Only http and https, and no redirect followed by curl: the host call checks every hop.
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  // Never a proxy from the environment (an empty string disables them all), never .netrc.
  curl_easy_setopt(e, CURLOPT_PROXY, "");
  curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(e, CURLOPT_NETRC, static_cast<long>(CURL_NETRC_IGNORED));
  // Its own connection, closed afterwards: a connection admitted for one rule never carries another's request.
  curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
  curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
  // Nor a TLS session: an easy handle is kept for the next exchange (KeepEasy), and its session
  // cache with it; without it every handshake is a full one, as with a new handle per exchange.
  curl_easy_setopt(e, CURLOPT_SSL_SESSIONID_CACHE, 0L);
  // Decoded bodies (gzip, deflate, br) are what the write callback counts against the limit.
  curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
  curl_easy_setopt(e, CURLOPT_USERAGENT, options_.user_agent.c_str());
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &OnBody);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, &OnOpenSocket);
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, &HttpClient::OnCloseSocket);
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, this);
}

void HttpClient::LaunchQueued() {
  while (running_.size() < options_.max_in_flight && !queue_.empty()) {
    std::unique_ptr<Transfer> t = std::move(queue_.front());
    queue_.pop_front();
    Launch(std::move(t));
  }
}

int HttpClient::OnSocket(void* easy, int fd, int what, void* client, void* /*socketp*/) {
  auto* self = static_cast<HttpClient*>(client);
  if (what == CURL_POLL_REMOVE) {
    if (fd == self->deferred_fd_) {
      self->deferred_fd_ = -1;  // never watched
      return 0;
    }
    if (self->watched_.erase(fd)) {
      ++self->watch_changes_;
      self->loop_.Unwatch(fd);
    }
    return 0;
  }
  uint32_t events = 0;
  if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) events |= EPOLLIN;
  if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) events |= EPOLLOUT;
  if (self->watched_.count(fd)) {
    ++self->watch_changes_;
    self->loop_.Modify(fd, events);
    return 0;
  }
  if (fd == self->deferred_fd_) {
    // The deferred connection is made and curl wants something else of it now: one watch, for that.
    self->deferred_fd_ = -1;
  } else if (events == EPOLLOUT && self->connecting_ < 0) {
    // A connection being made (curl waits for it to become writable): tried again right after this
    // action (SocketAction), since on loopback or a near host it is often made already. Inside an
    // action its watch waits for the action's end (WatchDeferred): by then curl has usually sent
    // the request and wants EPOLLIN instead, which is then the only watch asked for.
    self->connecting_ = fd;
    if (self->in_action_ && self->deferred_fd_ < 0) {
      self->deferred_fd_ = fd;
      self->deferred_easy_ = easy;
      return 0;
    }
  }
  return self->WatchNow(fd, events) ? 0 : -1;
}

bool HttpClient::WatchNow(int fd, uint32_t events) {
  ++watch_changes_;
  auto watched = loop_.Watch(fd, events, [this, fd](uint32_t ready) {
    int flags = 0;
    if (ready & EPOLLIN) flags |= CURL_CSELECT_IN;
    if (ready & EPOLLOUT) flags |= CURL_CSELECT_OUT;
    if (ready & (EPOLLERR | EPOLLHUP)) flags |= CURL_CSELECT_ERR;
    Drive(fd, flags);
  });
  if (watched) watched_.insert(fd);
  return static_cast<bool>(watched);
}

void HttpClient::WatchDeferred() {
  const int fd = deferred_fd_;
  if (fd < 0) return;
  deferred_fd_ = -1;
  void* easy = deferred_easy_;
  deferred_easy_ = nullptr;
  // Still connecting when the action ended: watched for EPOLLOUT as OnSocket would have. A watch
  // the loop refuses ends that transfer (OnSocket's -1 would have stopped the whole multi handle).
  if (!WatchNow(fd, EPOLLOUT)) Fail(easy, "the parent's event loop could not watch the connection");
}

void HttpClient::Fail(void* easy, std::string why) {
  Transfer* raw = nullptr;
  if (!easy || curl_easy_getinfo(static_cast<CURL*>(easy), CURLINFO_PRIVATE, &raw) != CURLE_OK || !raw) return;
  auto it = running_.find(raw->id);
  if (it == running_.end()) return;
  std::unique_ptr<Transfer> t = std::move(it->second);
  running_.erase(it);
  curl_multi_remove_handle(static_cast<CURLM*>(multi_), t->easy);
  ExchangeResult r;
  r.failure = ExchangeResult::Failure::kOther;
  r.message = std::move(why);
  ScheduleFinish(std::move(t), std::move(r));
}

int HttpClient::OnCloseSocket(void* client, int fd) {
  static_cast<HttpClient*>(client)->CloseLater(fd);
  return 0;
}

void HttpClient::CloseLater(int fd) {
  // curl has forgotten the socket (it told OnSocket to stop watching it first); so does the loop.
  if (fd == deferred_fd_) deferred_fd_ = -1;
  if (watched_.erase(fd)) {
    ++watch_changes_;
    loop_.Unwatch(fd);
  }
  closing_.push_back(fd);
  ScheduleCleanup();
}

void HttpClient::ScheduleCleanup() {
  if (close_scheduled_) return;
  close_scheduled_ = true;
  // Work posted now runs later in this pass, before the pass's after_pass (the journal's commit and
  // the answers it releases); a timer that work sets for now is run by the loop's next RunTimers,
  // which comes only after that after_pass. So the sockets close once this pass's answers are out.
  std::weak_ptr<bool> alive = alive_;
  loop_.Post([this, alive] {
    if (auto a = alive.lock(); !a || !*a) return;
    close_timer_ = loop_.At(EventLoop::Clock::now(), [this, alive] {
      if (auto a = alive.lock(); !a || !*a) return;
      close_timer_.reset();
      CloseNow();
    });
  });
}

void HttpClient::CloseNow() {
  close_scheduled_ = false;
  // First the easy handles: a cleanup may still hand curl's socket back (CloseLater), closed below.
  std::vector<std::shared_ptr<Transfer>> finished = std::move(finished_);
  finished_.clear();
  for (auto& t : finished) {
    if (t.use_count() == 1) KeepEasy(*t);
  }
  finished.clear();
  for (int fd : closing_) ::close(fd);
  closing_.clear();
}

void HttpClient::KeepEasy(Transfer& t) {
  // A handle out of the multi (Collect and Abort remove it) whose connection is closed (never
  // reused: CURLOPT_FORBID_REUSE) keeps nothing of its exchange but options: the fixed ones
  // (SetFixedOptions), the same for every exchange, and the last exchange's others, which the next
  // Launch sets again, every one of them. So curl_easy_init and curl_easy_cleanup (about 5 us
  // together) are paid once, not per exchange, and neither are curl_easy_reset and the fixed
  // options' 17 setopts. What pointed into this exchange (its buffers, lists and body, freed with
  // it) is cleared now all the same.
  if (!t.easy || !multi_ || spare_easy_.size() >= kMaxSpareEasy) return;
  CURL* e = static_cast<CURL*>(t.easy);
  curl_easy_setopt(e, CURLOPT_PRIVATE, nullptr);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, nullptr);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, nullptr);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, nullptr);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, nullptr);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(e, CURLOPT_RESOLVE, nullptr);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, nullptr);
  spare_easy_.push_back(t.easy);
  t.easy = nullptr;
}

int HttpClient::OnTimer(void* /*multi*/, long timeout_ms, void* client) {
  auto* self = static_cast<HttpClient*>(client);
  if (self->timer_) {
    self->loop_.Cancel(*self->timer_);
    self->timer_.reset();
  }
  // A client being destroyed arms nothing (removing its transfers makes curl ask for timers from
  // inside the destructor), and the destructor cancels the one it holds: no timer outlives it.
  if (timeout_ms < 0 || !*self->alive_) return 0;
  if (timeout_ms == 0) self->due_now_ = true;  // Launch acts on it at once when it may
  // Only the client captured: the callable fits in std::function's own storage (no allocation for
  // each of the several timers curl asks for per exchange).
  self->timer_ = self->loop_.At(EventLoop::Clock::now() + std::chrono::milliseconds(timeout_ms), [self] {
    self->timer_.reset();
    self->Drive(CURL_SOCKET_TIMEOUT, 0);
  });
  return 0;
}

void HttpClient::Drive(int fd, int curl_events) {
  if (!multi_) return;
  const bool outer = !driving_;
  driving_ = true;
  SocketAction(fd, curl_events);
  Collect();
  if (outer) driving_ = false;
}

void HttpClient::SocketAction(int fd, int curl_events) {
  CURLM* multi = static_cast<CURLM*>(multi_);
  due_now_ = false;
  connecting_ = -1;
  int running = 0;
  const bool outer = !in_action_;
  in_action_ = true;
  curl_multi_socket_action(multi, fd, curl_events, &running);
  // A connect started in that action that completed inside connect() (loopback, a near host)
  // sends its request now rather than after an epoll round. curl looks at the socket itself
  // (poll with no wait, then SO_ERROR), so one still connecting goes on waiting for EPOLLOUT.
  const int fresh = connecting_;
  connecting_ = -1;
  if (fresh >= 0 && (fresh == deferred_fd_ || watched_.count(fresh)))
    curl_multi_socket_action(multi, fresh, CURL_CSELECT_OUT, &running);
  if (!outer) return;
  in_action_ = false;
  WatchDeferred();
}

void HttpClient::Collect() {
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(static_cast<CURLM*>(multi_), &left)) {
    if (msg->msg != CURLMSG_DONE) continue;
    Transfer* raw = nullptr;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &raw);
    const CURLcode code = msg->data.result;
    if (!raw) continue;
    auto it = running_.find(raw->id);
    if (it == running_.end()) continue;
    std::unique_ptr<Transfer> t = std::move(it->second);
    running_.erase(it);
    curl_multi_remove_handle(static_cast<CURLM*>(multi_), t->easy);
    ExchangeResult r = std::move(t->result);
    char* ip = nullptr;
    long port = 0;
    if (curl_easy_getinfo(t->easy, CURLINFO_PRIMARY_IP, &ip) == CURLE_OK && ip && *ip &&
        curl_easy_getinfo(t->easy, CURLINFO_PRIMARY_PORT, &port) == CURLE_OK) {
      const std::string host(ip);
      r.connected = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
    }
    using F = ExchangeResult::Failure;
    if (code == CURLE_OK) {
      long status = 0;
      curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
      r.status = status;
    } else if (t->body_too_large || code == CURLE_FILESIZE_EXCEEDED) {
      r.failure = F::kTooLarge;
      r.message = "the response body is larger than max_response_bytes (" +
                  std::to_string(t->exchange.max_response_bytes) + " bytes)";
    } else if (t->headers_too_large) {
      r.failure = F::kProtocol;
      r.message = "the response headers are larger than " + std::to_string(kMaxResponseHeaderBytes) + " bytes";
    } else if (!t->refused.empty() && (code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST)) {
      r.failure = F::kAddressRefused;
      r.message = t->refused;
    } else {
      r.failure = Classify(code);
      r.message = t->error[0] ? std::string(t->error) : std::string(curl_easy_strerror(code));
      if (r.failure == F::kTimeout) {
        r.message = r.connected.empty() ? "no connection within connect_timeout_ms (" +
                                              std::to_string(t->exchange.connect_timeout.count()) + " ms)"
                                        : "no complete response within timeout_ms (" +
                                              std::to_string(t->exchange.timeout.count()) + " ms)";
      }
    }
    if (!r.ok()) {
      r.status = 0;
      r.status_text.clear();
      r.body.clear();
      r.headers.clear();
    }
    ScheduleFinish(std::move(t), std::move(r));
  }
  LaunchQueued();
}

}  // namespace basal::http
