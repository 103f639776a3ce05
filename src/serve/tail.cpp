// The live tail (tail.h).
#include "serve/tail.h"

#include <utility>

#include "parent/store/owner.h"

namespace basal::serve {

using Json = nlohmann::json;

namespace {

// Past this many activations remembered, the map starts again (they are looked up when missing).
constexpr size_t kMaxKnownActivations = 10'000;
// What an activation_end keeps of an error's message and stack, each.
constexpr size_t kErrorTextBytes = 4096;

std::string Cut(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
  return text.substr(0, cut) + "...";
}

std::string Frame(std::string_view name, const Json& data) {
  std::string out = "event: ";
  out += name;
  out += "\ndata: ";
  // JSON text has no raw line feed (control characters are escaped), so one data line holds it.
  out += data.dump(-1, ' ', false, Json::error_handler_t::replace);
  out += "\n\n";
  return out;
}

Json RunIdJson(int64_t run_id) { return run_id > 0 ? Json(run_id) : Json(nullptr); }

}  // namespace

Tail::Tail(Options options) : o_(std::move(options)) {}

Tail::~Tail() {
  *alive_ = false;
  if (keepalive_) o_.loop.Cancel(*keepalive_);
  auto subs = std::move(subscribers_);
  subscribers_.clear();
  for (auto& [id, s] : subs) s.stream->Close();
}

std::variant<std::shared_ptr<HttpStream>, HttpResponse> Tail::Subscribe(std::optional<std::string> flow,
                                                                        StillAdmitted still_admitted) {
  if (draining_) return JsonError(503, "draining", "basal serve is draining; tail the next instance");
  if (subscribers_.size() >= o_.limits.tail_subscribers) {
    HttpResponse r = JsonError(503, "tail_full",
                               std::to_string(subscribers_.size()) +
                                   " tails are open, the limit (limits.tail_subscribers); close one or retry later");
    r.headers.emplace_back("Retry-After", "5");
    return r;
  }
  const uint64_t id = next_id_++;
  auto stream = std::make_shared<HttpStream>();
  stream->OnClosed([this, id, alive = std::weak_ptr<bool>(alive_)] {
    if (!alive.expired()) Forget(id);
  });
  // A comment first: the client sees the stream open before the first event.
  stream->Write(": basal tail" + (flow ? " of flow " + *flow : std::string()) + "\n\n");
  subscribers_[id] = Subscriber{std::move(flow), stream, 0, std::move(still_admitted)};
  if (!keepalive_) keepalive_ = o_.loop.At(EventLoop::Clock::now() + o_.keepalive, [this] { Keepalive(); });
  return stream;
}

void Tail::Forget(uint64_t id) {
  subscribers_.erase(id);
  if (subscribers_.empty()) run_of_activation_.clear();
}

void Tail::Keepalive() {
  keepalive_.reset();
  // First, streams whose credential was revoked since they opened end, saying why. The notice is
  // written past the buffer's bound if need be (it is small and the last thing the stream gets).
  std::vector<uint64_t> ended;
  for (auto& [id, s] : subscribers_) {
    if (!s.still_admitted) continue;
    if (auto why = s.still_admitted()) {
      s.stream->Write(Frame("closed", Json{{"reason", *why}}));
      ended.push_back(id);
    }
  }
  for (uint64_t id : ended) {
    auto stream = subscribers_[id].stream;
    Forget(id);
    stream->Close();
  }
  for (auto& [id, s] : subscribers_) {
    // Only to an idle stream: one that still holds bytes is not idle, and one that does not read
    // must not be sent more.
    if (s.stream->buffered() == 0) Send(s, ": keepalive\n\n");
  }
  if (!subscribers_.empty())
    keepalive_ = o_.loop.At(EventLoop::Clock::now() + o_.keepalive, [this] { Keepalive(); });
}

void Tail::Drain() {
  draining_ = true;
  auto subs = std::move(subscribers_);
  subscribers_.clear();
  for (auto& [id, s] : subs) s.stream->Close();
}

void Tail::Send(Subscriber& s, const std::string& frame) {
  const size_t cap = o_.limits.tail_buffer_bytes;
  if (s.dropped > 0) {
    const std::string notice = Frame("dropped", Json{{"count", s.dropped}});
    if (s.stream->buffered() + notice.size() + frame.size() > cap) {
      ++s.dropped;
      return;
    }
    s.stream->Write(notice);
    s.dropped = 0;
  } else if (s.stream->buffered() + frame.size() > cap) {
    ++s.dropped;
    return;
  }
  s.stream->Write(frame);
}

void Tail::Publish(const std::string& flow, std::string_view name, const Json& data) {
  std::optional<std::string> frame;  // built once, for the first subscriber that wants it
  for (auto& [id, s] : subscribers_) {
    if (s.flow && *s.flow != flow) continue;
    if (!frame) frame = Frame(name, data);
    Send(s, *frame);
  }
}

int64_t Tail::RunOf(int64_t activation_id) {
  if (auto it = run_of_activation_.find(activation_id); it != run_of_activation_.end()) return it->second;
  const int64_t run = o_.run_of ? o_.run_of(activation_id) : 0;
  if (run_of_activation_.size() >= kMaxKnownActivations) run_of_activation_.clear();
  run_of_activation_[activation_id] = run;
  return run;
}

void Tail::OnActivity(const ActivityEvent& e) {
  if (subscribers_.empty()) return;
  switch (e.kind) {
    case ActivityEvent::Kind::kActivationStarted: {
      if (run_of_activation_.size() >= kMaxKnownActivations) run_of_activation_.clear();
      run_of_activation_[e.activation_id] = e.run_id;
      Publish(e.flow, "activation_start",
              Json{{"activation_id", e.activation_id}, {"run_id", RunIdJson(e.run_id)}, {"flow", e.flow},
                   {"started", UtcText(e.started_unix_us)}});
      return;
    }
    case ActivityEvent::Kind::kActivationEnded: {
      run_of_activation_.erase(e.activation_id);
      Json error = nullptr;
      if (!e.error_json.empty()) {
        error = Json::parse(e.error_json, nullptr, false);
        if (error.is_discarded() || !error.is_object()) error = Json{{"message", Cut(e.error_json, kErrorTextBytes)}};
        for (const char* key : {"message", "stack"})
          if (error.contains(key) && error[key].is_string()) error[key] = Cut(error[key].get<std::string>(), kErrorTextBytes);
      }
      Json data{{"activation_id", e.activation_id},
                {"run_id", RunIdJson(e.run_id)},
                {"flow", e.flow},
                {"outcome", e.outcome},
                {"error", std::move(error)},
                {"ended", UtcText(e.ended_unix_us)},
                {"ms", e.started_unix_us > 0 ? Json(static_cast<double>(e.ended_unix_us - e.started_unix_us) / 1000.0)
                                             : Json(nullptr)}};
      Publish(e.flow, "activation_end", data);
      return;
    }
    case ActivityEvent::Kind::kHostCall: {
      const int64_t run = e.run_id > 0 ? e.run_id : RunOf(e.activation_id);
      Publish(e.flow, "call",
              Json{{"activation_id", e.activation_id},
                   {"run_id", RunIdJson(run)},
                   {"flow", e.flow},
                   {"call_id", e.call_id},
                   {"name", e.name},
                   {"decision", e.decision},
                   {"rule", e.rule},
                   {"state", e.state}});
      return;
    }
  }
}

void Tail::OnLog(const HostCallContext& context, std::string_view level, std::string_view message) {
  if (subscribers_.empty()) return;
  Publish(context.flow, "log",
          Json{{"activation_id", context.activation_id},
               {"run_id", RunIdJson(RunOf(context.activation_id))},
               {"flow", context.flow},
               {"level", std::string(level)},
               {"message", std::string(message)}});
}

}  // namespace basal::serve
