// Shared by the store tests: temporary directories, and records to write.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "parent/store/store.h"

namespace basal::testing_support {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "basal_store_test.XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string File(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline ActivationStart Start(const std::string& flow = "hello.js", int64_t at = 1000, ActivationOwner owner = {}) {
  ActivationStart s;
  s.flow = flow;
  s.source_hash = "sha256:aa";
  s.manifest_hash = "sha256:bb";
  s.input_json = R"({"n":1})";
  s.start_unix_us = at;
  s.owner = std::move(owner);
  s.lease_until_unix_us = at + 60'000'000;
  return s;
}

// An answered kv.get when allowed; a denied one (born answered) when not.
inline CallRecord Call(int64_t activation, int64_t call_id, bool allowed = true) {
  CallRecord c;
  c.activation_id = activation;
  c.call_id = call_id;
  c.name = "kv.get";
  c.args_json = R"({"namespace":"orders","key":"k)" + std::to_string(call_id) + "\"}";
  c.decision.verdict = allowed ? Verdict::kAllow : Verdict::kDeny;
  c.decision.rule = allowed ? "grants.kv.get" : "no grant";
  c.decision.reason = allowed ? "granted by manifest" : "kv.get is not granted for namespace orders";
  c.effect = Effect::kPure;
  c.state = CallState::kAnswered;
  if (allowed) {
    c.result_json = "null";
  } else {
    c.error_json = R"({"name":"PermissionDenied","message":"denied"})";
  }
  c.start_unix_us = 1100 + call_id;
  c.end_unix_us = 1200 + call_id;
  return c;
}

inline ActivationEnd End(int64_t id, Outcome outcome = Outcome::kOk, int64_t at = 9) {
  ActivationEnd e;
  e.activation_id = id;
  e.end_unix_us = at;
  e.outcome = outcome;
  if (outcome == Outcome::kOk) {
    e.result_json = "1";
  } else {
    e.error_json = R"({"kind":")" + std::string(OutcomeName(outcome)) + R"(","message":"x"})";
  }
  return e;
}

// A run of `flow` requested through the API at `at`; with `key`, the key lasts `key_ttl_us`.
inline NewRun Run(const std::string& flow = "orders", const std::string& input = R"({"n":1})",
                  const std::string& key = "", int64_t at = 1000, int64_t key_ttl_us = 1'000'000) {
  NewRun r;
  r.flow = flow;
  r.input_json = input;
  r.trigger = "api";
  r.idempotency_key = key;
  r.created_unix_us = at;
  r.key_expires_unix_us = at + key_ttl_us;
  return r;
}

// A flow's approval of `source` by alice at `at`, reviewing `reviewed` (0: the first).
inline NewApproval FlowApproval(const std::string& name, const std::string& source, int64_t reviewed,
                                int64_t at = 5000) {
  NewApproval a;
  a.kind = ApprovalKind::kFlow;
  a.name = name;
  a.source = source;
  a.manifest_text = R"({"grants": {}})";
  a.manifest_hash = "sha256:canonical";
  a.approver = {1000, "alice"};
  a.at_unix_us = at;
  a.note = "first review";
  a.reviewed_version = reviewed;
  a.review_json = R"({"first": true})";
  return a;
}

}  // namespace basal::testing_support
