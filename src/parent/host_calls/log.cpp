// The `log` host call (see log.h).
#include "parent/host_calls/log.h"

#include <array>
#include <string>
#include <utility>
#include <vector>

namespace basal {
namespace {

constexpr std::array<std::string_view, 5> kLevels = {"log", "info", "warn", "error", "debug"};

std::string Shown(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 60) + "...";
  return text;
}

HostCallAnswer TypeError(std::string message) { return HostCallAnswer::Failure("TypeError", std::move(message)); }

}  // namespace

HostCallAnswer ServeLog(const HostCallContext& context, const Json& args, const LogSink& sink) {
  if (!args.is_object())
    return TypeError("log: arguments must be an object {level, message} (got " + Shown(args) + ")");
  for (const auto& [key, value] : args.items()) {
    if (key != "level" && key != "message") {
      return TypeError("log: unknown argument " + Json(key).dump(-1, ' ', false, Json::error_handler_t::replace) +
                       " (expected level, message)");
    }
  }
  auto level = args.find("level");
  if (level == args.end() || !level->is_string()) {
    return TypeError("log: \"level\" must be one of log, info, warn, error, debug (got " +
                     (level == args.end() ? std::string("nothing") : Shown(*level)) + ")");
  }
  const std::string& level_text = level->get_ref<const std::string&>();
  bool known = false;
  for (std::string_view candidate : kLevels) known = known || candidate == level_text;
  if (!known)
    return TypeError("log: \"level\" must be one of log, info, warn, error, debug (got " + Shown(*level) + ")");

  auto message = args.find("message");
  if (message == args.end() || !message->is_string()) {
    return TypeError("log: \"message\" must be a string (got " +
                     (message == args.end() ? std::string("nothing") : Shown(*message)) + ")");
  }
  const std::string& text = message->get_ref<const std::string&>();
  if (text.size() <= kLogMessageLimitBytes) {
    sink(context, level_text, text);
  } else {
    size_t cut = kLogMessageLimitBytes;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
    std::string truncated = text.substr(0, cut);
    truncated += " [basal: message truncated, " + std::to_string(text.size()) + " bytes in all, limit " +
                 std::to_string(kLogMessageLimitBytes) + "]";
    sink(context, level_text, truncated);
  }
  return HostCallAnswer::Value(nullptr);
}

Result<void> RegisterLogHostCall(HostCallRegistry& registry, LogSink sink) {
  if (!sink) return MakeError(ErrorCode::kInvalidArgument, "host call \"log\": the log sink is empty");
  HostCallSpec spec;
  spec.name = "log";
  spec.effect = Effect::kPure;  // nothing outside the journal (and the embedder's sink) changes
  spec.needs_grant = false;
  // No check_grant: a manifest may list log only as {}. No authorize: every call is admitted.
  // Its grants are all {}, so two of them always accept the same calls: nothing to report.
  spec.compare_grant = [](const Json&, const Json&) { return std::vector<ConstraintChange>{}; };
  spec.handler = [sink = std::move(sink)](const HostCallContext& context, const Json& args, HostCallReply reply) {
    ServeLog(context, args, sink).SendTo(reply);
  };
  return registry.Register(std::move(spec));
}

}  // namespace basal
