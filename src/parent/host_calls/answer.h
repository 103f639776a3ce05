// HostCallAnswer: what a built-in host call decided, as a plain value. The built-ins compute an
// answer with a pure function (unit-testable without a module) and a thin handler sends it:
//
//   HostCallAnswer answer = ServeKv(KvOp::kGet, journal, args);
//   std::move(answer).SendTo(reply);
#pragma once

#include <string>
#include <utility>

#include "basal/host_call.h"

namespace basal {

struct HostCallAnswer {
  bool ok = true;
  Json value;                 // when ok
  std::string error_name;     // when not ok: the JS error's name ("TypeError", "HostError")
  std::string error_message;  // when not ok

  static HostCallAnswer Value(Json value) { return HostCallAnswer{true, std::move(value), "", ""}; }
  static HostCallAnswer Failure(std::string name, std::string message) {
    return HostCallAnswer{false, nullptr, std::move(name), std::move(message)};
  }

  void SendTo(HostCallReply& reply) && {
    if (ok) {
      reply.Ok(std::move(value));
    } else {
      reply.Error(std::move(error_name), std::move(error_message));
    }
  }
};

}  // namespace basal
