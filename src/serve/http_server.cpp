// libmicrohttpd on the module's loop (see http_server.h). libmicrohttpd runs in its external-epoll
// mode: it keeps an epoll descriptor of its own, which the loop watches; when it is readable, or
// when libmicrohttpd's own timeout is due, the loop calls MHD_run. A request the handler answers
// later is suspended (MHD_suspend_connection) and resumed when its answer comes.
#include "serve/http_server.h"

#include <microhttpd.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>
#include <list>
#include <unordered_set>

#include "parent/loop/event_loop.h"

namespace basal::serve {

namespace {

// Answers this small are sent whatever Options::unsent says (errors, health, a run): the refusal
// itself is one of them.
constexpr size_t kAlwaysSentBytes = 64 << 10;

// One request on a connection (libmicrohttpd's con_cls), from its headers to its answer.
struct Exchange {
  HttpListener::Impl* owner = nullptr;
  MHD_Connection* connection = nullptr;
  HttpRequest request;
  size_t max_body = 0;
  size_t body_seen = 0;        // bytes of body read, kept or not
  bool body_too_large = false;
  bool handed = false;         // given to `handle`
  bool suspended = false;
  std::optional<HttpResponse> answer;  // set by Respond
  std::function<void()> on_gone;       // OnClientGone's: the client left before the answer
  int watched_fd = -1;                 // the connection, watched while suspended for on_gone
  size_t unsent_bytes = 0;             // the answer's body, counted in Options::unsent until completed
  // A streamed answer's body (HttpResponse::stream), and whether the connection is suspended until
  // it has more: a stream with nothing to send costs no CPU.
  std::shared_ptr<HttpStream> stream;
  bool stream_waiting = false;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
};

ssize_t StreamReader(void* cls, uint64_t pos, char* buf, size_t max);  // libmicrohttpd's content reader

// One connection, from its start to its close (libmicrohttpd's socket context): what it waits for
// from the client, and by when.
struct Conn {
  int fd = -1;
  enum class Awaits { kHead, kBody, kNothing } awaits = Awaits::kNothing;  // kNothing: a request is being handled
  EventLoop::Clock::time_point deadline{};
  std::list<Conn*>::iterator in_idle;  // valid while awaits == kHead
  bool closing = false;
  // A Unix socket's peer, read at the connection's first request: the kernel keeps the credentials
  // of connect() for the socket's life (SO_PEERCRED, SO_PEERGROUPS), so every later request on it
  // has the same, and reading them again would be two system calls per request for nothing.
  std::optional<PeerCred> peer;
};

MHD_Result CollectHeader(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto* req = static_cast<HttpRequest*>(cls);
  std::string name = key ? key : "";
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  req->headers.emplace_back(std::move(name), value ? value : "");
  return MHD_YES;
}

MHD_Result CollectQuery(void* cls, MHD_ValueKind, const char* key, const char* value) {
  static_cast<HttpRequest*>(cls)->query.emplace_back(key ? key : "", value ? value : "");
  return MHD_YES;
}

}  // namespace

struct HttpListener::Impl {
  EventLoop* loop = nullptr;
  Options options;
  MHD_Daemon* daemon = nullptr;
  int epoll_fd = -1;
  bool accepting = true;
  std::optional<EventLoop::TimerId> timer;
  std::unordered_set<Exchange*> exchanges;  // every live one (freed by the completed callback)
  size_t pending = 0;
  size_t connections = 0;
  bool run_posted = false;
  bool resumed = false;  // a connection was resumed since the last Run
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  std::unordered_set<Conn*> conns;  // every open connection (freed when libmicrohttpd closes it)
  std::list<Conn*> idle;            // the connections awaiting a request's head, longest first
  std::optional<EventLoop::TimerId> sweep;
  EventLoop::Clock::time_point sweep_at{};
  bool stopping = false;  // in the destructor: libmicrohttpd closes everything, nothing is armed again

  // ---- connections: deadlines, and the reserve

  // How many connections may await a head at once: all on the Unix socket (its peers are the
  // operator's), on TCP all but a reserve of an eighth for clients that send their head at once.
  size_t IdleCap() const {
    if (options.unix_socket) return std::numeric_limits<size_t>::max();
    return std::max<size_t>(1, options.max_connections - options.max_connections / 8);
  }

  static Conn* ConnOf(MHD_Connection* connection) {
    const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? static_cast<Conn*>(info->socket_context) : nullptr;
  }

  void ConnStarted(MHD_Connection* connection, void** socket_context) {
    ++connections;
    const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info) return;
    auto* c = new Conn;
    c->fd = info->connect_fd;
    conns.insert(c);
    *socket_context = c;
    AwaitHead(*c);
  }

  void ConnClosed(void** socket_context) {
    if (connections > 0) --connections;
    auto* c = static_cast<Conn*>(*socket_context);
    if (!c) return;
    if (c->awaits == Conn::Awaits::kHead) idle.erase(c->in_idle);
    conns.erase(c);
    delete c;
    *socket_context = nullptr;
  }

  void Await(Conn& c, Conn::Awaits what, std::chrono::milliseconds within) {
    if (c.awaits == Conn::Awaits::kHead) idle.erase(c.in_idle);
    c.awaits = what;
    if (what == Conn::Awaits::kNothing) return;
    c.deadline = EventLoop::Clock::now() + within;
    ArmSweep(c.deadline);
  }

  // The connection is new, or its last answer went out: a request's head is due. One more such
  // connection than IdleCap closes the one that has waited longest.
  void AwaitHead(Conn& c) {
    if (c.awaits == Conn::Awaits::kHead) idle.erase(c.in_idle);
    c.awaits = Conn::Awaits::kHead;
    c.deadline = EventLoop::Clock::now() + options.header_timeout;
    c.in_idle = idle.insert(idle.end(), &c);
    ArmSweep(c.deadline);
    if (idle.size() > IdleCap()) Close(*idle.front());
  }

  // Closes the connection under libmicrohttpd, which then finds it closed and frees it.
  void Close(Conn& c) {
    if (c.closing || stopping) return;
    c.closing = true;
    if (c.awaits == Conn::Awaits::kHead) idle.erase(c.in_idle);
    c.awaits = Conn::Awaits::kNothing;
    shutdown(c.fd, SHUT_RDWR);
    RunSoon();
  }

  void ArmSweep(EventLoop::Clock::time_point at) {
    if (stopping || (sweep && sweep_at <= at)) return;
    if (sweep) loop->Cancel(*sweep);
    sweep_at = at;
    sweep = loop->At(at, [this] {
      sweep.reset();
      Sweep();
    });
  }

  // Closes every connection past its deadline, and sets the timer for the next deadline.
  void Sweep() {
    const auto now = EventLoop::Clock::now();
    std::optional<EventLoop::Clock::time_point> next;
    std::vector<Conn*> late;
    for (Conn* c : conns) {
      if (c->closing || c->awaits == Conn::Awaits::kNothing) continue;
      if (c->deadline <= now) {
        late.push_back(c);
      } else if (!next || c->deadline < *next) {
        next = c->deadline;
      }
    }
    for (Conn* c : late) Close(*c);
    if (next) ArmSweep(*next);
  }

  // One pass of libmicrohttpd. At max_connections libmicrohttpd takes the listening socket out of
  // its epoll set, and puts it back at the start of the next MHD_run once a connection has closed.
  // Nothing wakes that next run (what waits is in the kernel's backlog, out of its set), so a run
  // that closed a connection is followed by one more; without it the listener stays deaf for good.
  void RunMhd() {
    const size_t before = connections;
    MHD_run(daemon);
    if (connections < before) MHD_run(daemon);
  }

  // libmicrohttpd has work it can do now, without waiting for its descriptors (a timeout of 0).
  bool DueNow() {
    MHD_UNSIGNED_LONG_LONG ms = 0;
    return MHD_get_timeout(daemon, &ms) == MHD_YES && ms == 0;
  }

  // A suspended connection goes on (its answer, more of a stream, or its client gone): libmicrohttpd
  // picks it up at its next run, which the loop runs soon.
  void Resume(Exchange& x) {
    MHD_resume_connection(x.connection);
    resumed = true;
    RunSoon();
  }

  // Runs libmicrohttpd's work and sets the timer it asks for.
  //
  // A resumed connection's answer (a run's, after its commit) takes libmicrohttpd (0.9.75) three
  // passes over the connection, each asking for the next with a timeout of 0: the one that sends it
  // whole in one sendmsg; the one that moves the request from "body ready" to "sent" (the completed
  // callback, the keep-alive reset); and the one that reads the socket it marked readable when it
  // resumed the connection (EAGAIN) and puts the connection back in its epoll set, from which the
  // suspend took it. Those passes run here, at once, instead of each through a timer due now and one
  // more pass of the loop (its timers, posted work and pass end, and an epoll_wait). Bounded: more
  // is left to the timer, as before. The connection put back in the set is writable, and the kernel
  // reports that at once (libmicrohttpd watches it edge-triggered, EPOLLOUT included): its epoll
  // descriptor turns readable for an event it has nothing to do with. After a resume, one more pass
  // takes that event here, in the same epoll_wait that the loop's wake for it would cost, without
  // the loop's own epoll_wait and pass.
  static constexpr int kPassesAtOnce = 3;
  void Run() {
    if (!daemon) return;
    const bool after_resume = resumed;
    resumed = false;
    RunMhd();
    for (int i = 0; i < kPassesAtOnce && DueNow(); ++i) RunMhd();
    if (after_resume) RunMhd();
    if (timer) loop->Cancel(*timer);
    timer.reset();
    MHD_UNSIGNED_LONG_LONG ms = 0;
    if (MHD_get_timeout(daemon, &ms) == MHD_YES) {
      timer = loop->At(EventLoop::Clock::now() + std::chrono::milliseconds(std::min<MHD_UNSIGNED_LONG_LONG>(ms, 60'000)),
                       [this] {
                         timer.reset();
                         Run();
                       });
    }
  }

  // The connection of a suspended request whose handler wants to hear that its client left: the
  // loop watches it for the peer's shutdown (EPOLLRDHUP; a reset comes as EPOLLHUP or EPOLLERR).
  // Only that: bytes the client sends meanwhile stay unread, for libmicrohttpd once resumed.
  void WatchClient(Exchange& x) {
    const MHD_ConnectionInfo* info = MHD_get_connection_info(x.connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info) return;
    const int fd = info->connect_fd;
    auto watched = loop->Watch(fd, EPOLLRDHUP, [this, px = &x, alive = std::weak_ptr<bool>(x.alive)](uint32_t) {
      if (!alive.expired()) ClientGone(*px);
    });
    if (watched) x.watched_fd = fd;
  }

  void UnwatchClient(Exchange& x) {
    if (x.watched_fd < 0) return;
    loop->Unwatch(x.watched_fd);
    x.watched_fd = -1;
  }

  // The client closed its connection before the answer: the handler hears it, and the request
  // ends with 499 (nginx's "client closed request"), which only the metrics see: libmicrohttpd
  // resumes the connection, finds it closed, and frees the exchange.
  void ClientGone(Exchange& x) {
    UnwatchClient(x);
    if (x.stream) {
      // A stream's client left while it waited for more: the producer stops now, and libmicrohttpd,
      // resumed, finds the connection closed and frees the exchange.
      x.stream->Detach();
      if (x.stream_waiting) {
        x.stream_waiting = false;
        Resume(x);
      }
      return;
    }
    if (x.answer) return;
    std::function<void()> gone = std::move(x.on_gone);
    x.on_gone = nullptr;
    if (pending > 0) --pending;
    x.answer = JsonError(499, "client_closed_request", "the client closed its connection before the answer");
    Resume(x);
    if (gone) gone();
  }

  // Run soon, outside whatever callback we are in (libmicrohttpd is not reentrant).
  void RunSoon() {
    if (run_posted) return;
    run_posted = true;
    loop->Post([this, alive = std::weak_ptr<bool>(this->alive)] {
      if (alive.expired()) return;
      run_posted = false;
      Run();
    });
  }

  // Hands x.answer to libmicrohttpd (which copies it; ours is freed) and counts it as unsent until
  // the request completes. An answer that would take the unsent bytes of all listeners past their
  // cap is replaced by a small 503: the client retries, and nobody holds memory for readers that
  // do not read.
  // A streamed answer: its head now, its body as the producer writes it (StreamReader). Not counted
  // in Options::unsent: its producer bounds what it buffers (HttpStream::buffered).
  static void QueueStream(Exchange& x) {
    HttpResponse& r = *x.answer;
    Impl& owner = *x.owner;
    x.stream = std::move(r.stream);
    MHD_Response* resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 << 10, &StreamReader, &x, nullptr);
    if (!resp) {
      x.stream->Detach();
      return;
    }
    if (!r.content_type.empty()) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r.content_type.c_str());
    for (const auto& [k, v] : r.headers) MHD_add_response_header(resp, k.c_str(), v.c_str());
    MHD_queue_response(x.connection, static_cast<unsigned int>(r.status), resp);
    MHD_destroy_response(resp);
    x.stream->SetWake([px = &x, alive = std::weak_ptr<bool>(x.alive)] {
      if (!alive.expired()) px->owner->WakeStream(*px);
    });
    if (owner.options.on_response) owner.options.on_response(x.request, r.status);
  }

  // The producer wrote (or closed): a connection suspended for want of bytes goes on.
  void WakeStream(Exchange& x) {
    if (!x.stream_waiting) return;
    x.stream_waiting = false;
    UnwatchClient(x);
    Resume(x);
  }

  // libmicrohttpd wants more of a stream: what is buffered, the end once it is closed and empty,
  // or nothing now (the connection is suspended, and watched for its client leaving, until a write).
  ssize_t ReadStream(Exchange& x, char* buf, size_t max) {
    if (!x.stream) return MHD_CONTENT_READER_END_OF_STREAM;
    if (const size_t n = x.stream->Take(buf, max); n > 0) return static_cast<ssize_t>(n);
    if (x.stream->closed()) return MHD_CONTENT_READER_END_OF_STREAM;
    x.stream_waiting = true;
    MHD_suspend_connection(x.connection);
    WatchClient(x);
    return 0;
  }

  static void Queue(Exchange& x) {
    HttpResponse& r = *x.answer;
    Impl& owner = *x.owner;
    if (r.stream) return QueueStream(x);
    if (owner.options.unsent && r.body.size() > kAlwaysSentBytes &&
        owner.options.unsent->bytes + r.body.size() > owner.options.unsent->max_bytes) {
      r = JsonError(503, "busy",
                    "this answer (" + std::to_string(r.body.size()) + " bytes) would take the answers not yet sent to "
                    "their clients past limits.max_unsent_bytes (" + std::to_string(owner.options.unsent->max_bytes) +
                    " bytes); retry later, or ask for less (a smaller ?limit=)");
      r.headers.emplace_back("Retry-After", "1");
    }
    MHD_Response* resp = MHD_create_response_from_buffer(r.body.size(), const_cast<char*>(r.body.data()),
                                                         MHD_RESPMEM_MUST_COPY);
    if (!resp) return;
    if (!r.content_type.empty()) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r.content_type.c_str());
    for (const auto& [k, v] : r.headers) MHD_add_response_header(resp, k.c_str(), v.c_str());
    MHD_queue_response(x.connection, static_cast<unsigned int>(r.status), resp);
    MHD_destroy_response(resp);
    if (owner.options.unsent) {
      x.unsent_bytes = r.body.size();
      owner.options.unsent->bytes += x.unsent_bytes;
    }
    if (owner.options.on_response) owner.options.on_response(x.request, r.status);
    r.body = std::string();
  }

  void ReadHead(Exchange& x, const char* url, const char* method) {
    HttpRequest& req = x.request;
    req.listener = options.name;
    req.method = method ? method : "";
    req.path = url ? url : "";
    req.unix_socket = options.unix_socket;
    MHD_get_connection_values(x.connection, MHD_HEADER_KIND, &CollectHeader, &req);
    MHD_get_connection_values(x.connection, MHD_GET_ARGUMENT_KIND, &CollectQuery, &req);
    if (options.unix_socket) {
      req.remote = "unix";
      Conn* c = ConnOf(x.connection);
      if (c && c->peer) {
        req.peer = *c->peer;
        return;
      }
      const MHD_ConnectionInfo* info = MHD_get_connection_info(x.connection, MHD_CONNECTION_INFO_CONNECTION_FD);
      ucred cred{};
      socklen_t len = sizeof cred;
      if (info && getsockopt(info->connect_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        req.peer.known = true;
        req.peer.uid = cred.uid;
        req.peer.gid = cred.gid;
        req.peer.pid = cred.pid;
        gid_t groups[256];
        socklen_t glen = sizeof groups;
        if (getsockopt(info->connect_fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) == 0)
          for (size_t i = 0; i < glen / sizeof(gid_t); ++i) req.peer.groups.push_back(groups[i]);
        if (c) c->peer = req.peer;  // an unreadable peer is read again at the next request
      }
    } else {
      const MHD_ConnectionInfo* info = MHD_get_connection_info(x.connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
      if (info && info->client_addr) {
        char host[INET6_ADDRSTRLEN] = "?";
        int port = 0;
        if (info->client_addr->sa_family == AF_INET) {
          auto* a = reinterpret_cast<const sockaddr_in*>(info->client_addr);
          inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
          port = ntohs(a->sin_port);
          req.remote = std::string(host) + ":" + std::to_string(port);
        } else if (info->client_addr->sa_family == AF_INET6) {
          auto* a = reinterpret_cast<const sockaddr_in6*>(info->client_addr);
          inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
          port = ntohs(a->sin6_port);
          req.remote = "[" + std::string(host) + "]:" + std::to_string(port);
        }
      }
    }
  }

  MHD_Result Access(MHD_Connection* connection, const char* url, const char* method, const char* upload_data,
                    size_t* upload_data_size, void** con_cls) {
    auto* x = static_cast<Exchange*>(*con_cls);
    if (!x) {  // the headers are in
      if (Conn* c = ConnOf(connection)) Await(*c, Conn::Awaits::kBody, options.body_timeout);
      x = new Exchange;
      x->owner = this;
      x->connection = connection;
      exchanges.insert(x);
      *con_cls = x;
      ReadHead(*x, url, method);
      x->max_body = options.max_body_bytes;
      if (options.admit) {
        if (auto refusal = options.admit(x->request, &x->max_body)) {
          x->answer = std::move(*refusal);
          x->handed = true;
          Queue(*x);
          return MHD_YES;
        }
      }
      if (auto length = x->request.Header("content-length")) {
        errno = 0;
        char* end = nullptr;
        const std::string text(*length);
        const unsigned long long n = std::strtoull(text.c_str(), &end, 10);
        if (errno == 0 && end && *end == '\0' && n > x->max_body) {
          x->answer = JsonError(413, "body_too_large",
                                "the request body is " + text + " bytes; this endpoint takes at most " +
                                    std::to_string(x->max_body) + " bytes");
          x->handed = true;
          Queue(*x);
          return MHD_YES;
        }
      }
      return MHD_YES;
    }
    if (x->handed) {  // resumed with its answer, or refused early and still uploading
      if (*upload_data_size != 0) {
        *upload_data_size = 0;  // discard the rest of a refused upload
        return MHD_YES;
      }
      if (x->suspended && x->answer) {
        x->suspended = false;
        Queue(*x);
      }
      return MHD_YES;
    }
    if (*upload_data_size != 0) {
      x->body_seen += *upload_data_size;
      if (x->body_seen > x->max_body) {
        x->body_too_large = true;
        x->request.body.clear();
        x->request.body.shrink_to_fit();
      } else {
        x->request.body.append(upload_data, *upload_data_size);
      }
      *upload_data_size = 0;
      return MHD_YES;
    }
    // The whole request is in.
    x->handed = true;
    if (Conn* c = ConnOf(connection); c && !c->closing) Await(*c, Conn::Awaits::kNothing, {});
    if (x->body_too_large) {
      x->answer = JsonError(413, "body_too_large",
                            "the request body is longer than " + std::to_string(x->max_body) +
                                " bytes, which is what this endpoint takes");
      Queue(*x);
      return MHD_YES;
    }
    ++pending;
    // Answered inside `handle`: queued below, without suspending. Answered later: resumed.
    auto sync_flag = std::make_shared<bool>(true);
    Respond guarded = [sync_flag, this, x, alive = std::weak_ptr<bool>(x->alive)](HttpResponse r) {
      if (alive.expired() || x->answer) return;
      --pending;
      x->answer = std::move(r);
      if (*sync_flag) return;
      UnwatchClient(*x);  // before libmicrohttpd may close the descriptor
      Resume(*x);
    };
    OnClientGone on_client_gone = [x, alive = std::weak_ptr<bool>(x->alive)](std::function<void()> gone) {
      if (!alive.expired()) x->on_gone = std::move(gone);
    };
    options.handle(x->request, std::move(guarded), std::move(on_client_gone));
    *sync_flag = false;
    if (x->answer) {
      Queue(*x);
    } else {
      x->suspended = true;
      MHD_suspend_connection(connection);
      if (x->on_gone) WatchClient(*x);
    }
    return MHD_YES;
  }

  void Completed(MHD_Connection* connection, void** con_cls) {
    if (Conn* c = ConnOf(connection); c && !c->closing) AwaitHead(*c);
    auto* x = static_cast<Exchange*>(*con_cls);
    if (!x) return;
    if (options.unsent) options.unsent->bytes -= std::min(options.unsent->bytes, x->unsent_bytes);
    if (x->handed && !x->answer && pending > 0) --pending;  // the client left before its answer
    UnwatchClient(*x);
    if (x->stream) x->stream->Detach();
    exchanges.erase(x);
    delete x;
    *con_cls = nullptr;
  }
};

namespace {

MHD_Result AccessThunk(void* cls, MHD_Connection* connection, const char* url, const char* method, const char*,
                       const char* upload_data, size_t* upload_data_size, void** con_cls) {
  return static_cast<HttpListener::Impl*>(cls)->Access(connection, url, method, upload_data, upload_data_size,
                                                        con_cls);
}

ssize_t StreamReader(void* cls, uint64_t, char* buf, size_t max) {
  auto* x = static_cast<Exchange*>(cls);
  return x->owner->ReadStream(*x, buf, max);
}

void CompletedThunk(void* cls, MHD_Connection* connection, void** con_cls, MHD_RequestTerminationCode) {
  static_cast<HttpListener::Impl*>(cls)->Completed(connection, con_cls);
}

void ConnectionThunk(void* cls, MHD_Connection* connection, void** socket_context, MHD_ConnectionNotificationCode code) {
  auto* impl = static_cast<HttpListener::Impl*>(cls);
  if (code == MHD_CONNECTION_NOTIFY_STARTED) impl->ConnStarted(connection, socket_context);
  if (code == MHD_CONNECTION_NOTIFY_CLOSED) impl->ConnClosed(socket_context);
}

}  // namespace

HttpListener::HttpListener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<HttpListener>> HttpListener::Start(EventLoop& loop, Options options) {
  auto impl = std::make_unique<Impl>();
  impl->loop = &loop;
  impl->options = std::move(options);
  Impl* raw = impl.get();
  const unsigned int flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
  // On TCP, connections from one client address beyond the cap are closed as soon as accepted.
  MHD_OptionItem per_client[] = {{MHD_OPTION_END, 0, nullptr}, {MHD_OPTION_END, 0, nullptr}};
  if (!raw->options.unix_socket && raw->options.max_connections_per_client > 0)
    per_client[0] = {MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                     static_cast<intptr_t>(raw->options.max_connections_per_client), nullptr};
  raw->daemon = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &AccessThunk, raw,                                            //
      MHD_OPTION_LISTEN_SOCKET, raw->options.listen_fd,                                       //
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned int>(raw->options.max_connections),   //
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned int>(raw->options.idle_timeout.count()),
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<size_t>(64 << 10),                      //
      MHD_OPTION_NOTIFY_COMPLETED, &CompletedThunk, raw,                                      //
      MHD_OPTION_NOTIFY_CONNECTION, &ConnectionThunk, raw,                                    //
      MHD_OPTION_ARRAY, per_client,                                                           //
      MHD_OPTION_END);
  if (!raw->daemon) {
    close(raw->options.listen_fd);
    return MakeError(ErrorCode::kIo, "http listener " + raw->options.name +
                                         ": libmicrohttpd did not start on the socket (it needs epoll and a listening socket)");
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(raw->daemon, MHD_DAEMON_INFO_EPOLL_FD);
  if (!info) {
    MHD_stop_daemon(raw->daemon);
    raw->daemon = nullptr;
    close(raw->options.listen_fd);
    return MakeError(ErrorCode::kInternal, "http listener " + raw->options.name + ": libmicrohttpd has no epoll descriptor");
  }
  raw->epoll_fd = info->epoll_fd;
  if (auto w = loop.Watch(raw->epoll_fd, EPOLLIN, [raw](uint32_t) { raw->Run(); }); !w) {
    MHD_stop_daemon(raw->daemon);
    raw->daemon = nullptr;
    close(raw->options.listen_fd);
    return w.error();
  }
  raw->Run();
  return std::unique_ptr<HttpListener>(new HttpListener(std::move(impl)));
}

void HttpListener::StopAccepting() {
  Impl& m = *impl_;
  if (!m.accepting || !m.daemon) return;
  m.accepting = false;
  const MHD_socket fd = MHD_quiesce_daemon(m.daemon);
  if (fd != MHD_INVALID_SOCKET) close(fd);
  m.Run();
}

size_t HttpListener::pending() const { return impl_->pending; }
size_t HttpListener::connections() const { return impl_->connections; }

HttpListener::~HttpListener() {
  Impl& m = *impl_;
  *m.alive = false;
  m.stopping = true;
  if (m.sweep) m.loop->Cancel(*m.sweep);
  if (!m.daemon) return;
  m.loop->Unwatch(m.epoll_fd);
  if (m.timer) m.loop->Cancel(*m.timer);
  // libmicrohttpd must not be stopped with suspended connections: answer them first.
  for (Exchange* x : m.exchanges) {
    m.UnwatchClient(*x);
    if (x->stream) {
      x->stream->Detach();
      if (x->stream_waiting) {
        x->stream_waiting = false;
        MHD_resume_connection(x->connection);
      }
    }
    if (x->suspended && !x->answer) {
      x->answer = JsonError(503, "shutting_down", "basal serve is stopping; retry against the next instance");
      MHD_resume_connection(x->connection);
    }
  }
  MHD_run(m.daemon);
  const MHD_socket fd = m.accepting ? MHD_quiesce_daemon(m.daemon) : MHD_INVALID_SOCKET;
  MHD_stop_daemon(m.daemon);
  if (fd != MHD_INVALID_SOCKET) close(fd);
  m.daemon = nullptr;
}

}  // namespace basal::serve
