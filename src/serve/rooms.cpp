#include "serve/rooms.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "parent/loop/event_loop.h"
#include "parent/module_host.h"

namespace basal::serve {

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(out.data() + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      std::fprintf(stderr, "basal serve: getrandom failed: %s\n", std::strerror(errno));
      std::abort();
    }
    got += static_cast<size_t>(r);
  }
  return out;
}

Rooms BuildRooms(const RoomsOptions& o) {
  ModuleHost& host = o.module.host();
  EventLoop& loop = host.loop();
  Rooms r;
  r.tail = std::make_unique<Tail>(Tail::Options{
      .loop = loop,
      .limits = o.config.limits,
      .run_of =
          [&host](int64_t activation) -> int64_t {
            auto rows = host.reader().Activations(activation, 1);
            return rows && !rows->empty() ? rows->front().run_id : 0;
          },
  });
  r.queue = std::make_unique<RunQueue>(RunQueue::Options{
      .host = host,
      .metrics = o.metrics,
      .limits = o.config.limits,
      .now_us = o.now_us,
      .flow_for = [&host](const std::string& name) { return host.CurrentFlowForRun(name); },
      .log = o.log,
      .several_hosts = o.several_hosts,
  });
  r.triggers = std::make_unique<Triggers>(Triggers::Options{
      .queue = *r.queue,
      .marks = host.serve(),
      .loop = loop,
      .host = host,
      .metrics = o.metrics,
      .limits = o.config.limits,
      .secrets_dir = o.secrets_dir,
      .now_us = o.now_us,
      .log = o.log,
      .several_hosts = o.several_hosts,
  });
  auto find_token = [&tables = host.serve()](std::string_view hash) { return tables.FindToken(hash); };
  r.console = std::make_unique<Console>(Console::Options{
      .config = o.config.console,
      .find_token = find_token,
      .now_us = o.now_us,
      .random = RandomBytes,
      .loop = loop,
  });
  r.admission = std::make_unique<Admission>(
      o.allowed_gids, find_token, [console = r.console.get()](std::string_view id) { return console->FindSession(id); });
  r.api = std::make_unique<Api>(Api::Options{
      .module = o.module,
      .reader = host.reader(),
      .queue = *r.queue,
      .host = host,
      .triggers = *r.triggers,
      .mcp = o.mcp,
      .tail = *r.tail,
      .console = *r.console,
      .admission = *r.admission,
      .metrics = o.metrics,
      .loop = loop,
      .limits = o.config.limits,
      .ready = o.ready,
      .started_us = o.started_us,
      .now_us = o.now_us,
      .host_id = o.host_id,
  });
  return r;
}

HttpListener::Options ListenerOptionsFor(Api& api, const LimitsConfig& limits, const std::string& name, int listen_fd,
                                         bool unix_socket, std::shared_ptr<UnsentAnswers> unsent) {
  HttpListener::Options lo;
  lo.name = name;
  lo.listen_fd = listen_fd;
  lo.unix_socket = unix_socket;
  lo.max_connections = limits.max_connections;
  lo.max_body_bytes = limits.max_body_bytes;
  lo.header_timeout = limits.header_timeout;
  lo.body_timeout = limits.body_timeout;
  lo.max_connections_per_client = limits.max_connections_per_client;
  lo.unsent = std::move(unsent);
  lo.admit = [&api](const HttpRequest& head, size_t* max_body) { return api.Admit(head, max_body); };
  lo.handle = [&api](const HttpRequest& req, Respond respond, OnClientGone on_client_gone) {
    api.Handle(req, std::move(respond), std::move(on_client_gone));
  };
  lo.on_response = [&api](const HttpRequest& req, int status) { api.Answered(req, status); };
  return lo;
}

}  // namespace basal::serve
