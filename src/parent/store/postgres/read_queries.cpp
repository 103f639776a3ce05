// The PostgreSQL store's reads (see read_queries.h). Every statement runs with search_path = basal.
#include "parent/store/postgres/read_queries.h"

#include <cstdint>
#include <limits>

namespace basal::pg {

const char* const kActivationSelect =
    "SELECT id, flow, source_hash, manifest_hash, "
    "CASE WHEN run_id IS NULL THEN input ELSE coalesce((SELECT r.input FROM runs r WHERE r.id = activations.run_id), '') END, "
    "start_us, end_us, outcome, result, error, coalesce(cpu_us, 0), owner_host, owner_pid, owner_start_ticks, "
    "lease_until_us, logs_dropped, origin, coalesce(approval_id, 0), coalesce(manifest_text_hash, ''), "
    "coalesce(run_id, 0), coalesce(retry_from, 0) FROM activations";

const char* const kCallSelect =
    "SELECT activation_id, call_id, name, args, verdict, rule, reason, effect, state, result, error, start_us, end_us, "
    "coalesce(args_digest, ''), answer_seq, coalesce(replay, '') FROM calls";

const char* const kRunSelect =
    "SELECT id, flow, input, triggered_by, idempotency_key, state, coalesce(activation_id, 0), created_us, started_us, "
    "ended_us, outcome, error, state_detail, durable, coalesce(approval_id, 0), coalesce(source_hash, ''), "
    "coalesce(manifest_hash, ''), coalesce(manifest_text_hash, ''), coalesce(seed, ''), coalesce(clock_us, 0), resumes, "
    "attempt, wake_us, coalesce(waiting_for, ''), coalesce(waiting_key, '') FROM runs";

const char* const kTokenSelect =
    "SELECT id, name, hash, scopes, creator_uid, creator_name, created_us, revoked_us, coalesce(revoker_uid, 0), "
    "coalesce(revoker_name, '') FROM tokens";

namespace {

const char* const kApprovalSelect =
    "SELECT id, kind, name, version, coalesce(source_hash, ''), manifest_text_hash, manifest_hash, approver_uid, "
    "approver_name, approved_us, note, revoked_us, coalesce(revoker_uid, 0), coalesce(revoker_name, ''), "
    "coalesce(revoke_note, '') FROM approvals";

const char* const kResolutionSelect =
    "SELECT seq, run_id, activation_id, call_id, kind, coalesce(value, ''), actor_uid, actor_name, at_us, note "
    "FROM call_resolutions";

const char* const kKvAuditSelect =
    "SELECT seq, at_us, actor_uid, actor_name, reason, namespace, key, op, coalesce(value_sha256, ''), "
    "coalesce(value_bytes, 0), existed FROM kv_audit";

KvAuditEntry ReadKvAudit(const Rows& r, int i) {
  KvAuditEntry e;
  e.seq = r.Int(i, 0);
  e.at_unix_us = r.Int(i, 1);
  e.actor.uid = r.Int(i, 2);
  e.actor.name = r.Text(i, 3);
  e.reason = r.Text(i, 4);
  e.ns = r.Bytes(i, 5);
  e.key = r.Bytes(i, 6);
  e.op = ParseKvAuditOp(r.Text(i, 7)).value_or(KvAuditOp::kPut);
  e.value_sha256 = r.Text(i, 8);
  e.value_bytes = static_cast<uint64_t>(r.Int(i, 9));
  e.existed = r.Bool(i, 10);
  return e;
}

ApprovalRow ReadApprovalRow(const Rows& r, int i) {
  ApprovalRow row;
  row.id = r.Int(i, 0);
  row.kind = ParseApprovalKind(r.Text(i, 1)).value_or(ApprovalKind::kFlow);
  row.name = r.Text(i, 2);
  row.version = r.Int(i, 3);
  row.source_hash = r.Text(i, 4);
  row.manifest_text_hash = r.Text(i, 5);
  row.manifest_hash = r.Text(i, 6);
  row.approver.uid = r.Int(i, 7);
  row.approver.name = r.Text(i, 8);
  row.approved_unix_us = r.Int(i, 9);
  row.note = r.Text(i, 10);
  row.revoked_unix_us = r.IntOrNull(i, 11);
  row.revoker.uid = r.Int(i, 12);
  row.revoker.name = r.Text(i, 13);
  row.revoke_note = r.Text(i, 14);
  return row;
}

CallResolution ReadResolution(const Rows& r, int i) {
  CallResolution c;
  c.seq = r.Int(i, 0);
  c.run_id = r.Int(i, 1);
  c.activation_id = r.Int(i, 2);
  c.call_id = r.Int(i, 3);
  c.kind = ParseResolutionKind(r.Text(i, 4)).value_or(ResolutionKind::kRetry);
  c.value_json = r.Text(i, 5);
  c.actor.uid = r.Int(i, 6);
  c.actor.name = r.Text(i, 7);
  c.at_unix_us = r.Int(i, 8);
  c.note = r.Text(i, 9);
  return c;
}

template <typename Row, typename ReadRow>
std::vector<Row> All(const Rows& r, ReadRow read) {
  std::vector<Row> rows;
  rows.reserve(static_cast<size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i) rows.push_back(read(r, i));
  return rows;
}

}  // namespace

ActivationRow ReadActivationRow(const Rows& r, int i) {
  ActivationRow row;
  row.id = r.Int(i, 0);
  row.flow = r.Text(i, 1);
  row.source_hash = r.Text(i, 2);
  row.manifest_hash = r.Text(i, 3);
  row.input_json = r.Text(i, 4);
  row.start_unix_us = r.Int(i, 5);
  row.end_unix_us = r.IntOrNull(i, 6);
  row.outcome = r.Text(i, 7);
  row.result_json = r.Text(i, 8);
  row.error_json = r.Text(i, 9);
  row.cpu_us = r.Int(i, 10);
  row.owner.host = r.Text(i, 11);
  row.owner.pid = r.Int(i, 12);
  row.owner.start_ticks = r.Int(i, 13);
  row.lease_until_unix_us = r.Int(i, 14);
  row.logs_dropped = r.Int(i, 15);
  row.origin = ParseOrigin(r.Text(i, 16)).value_or(Origin::kUnrecorded);
  row.approval_id = r.Int(i, 17);
  row.manifest_text_hash = r.Text(i, 18);
  row.run_id = r.Int(i, 19);
  row.retry_from_call = r.Int(i, 20);
  return row;
}

// The CHECK constraints keep other texts out; a row changed by hand reads as the safe value.
CallRow ReadCallRow(const Rows& r, int i) {
  CallRow row;
  row.activation_id = r.Int(i, 0);
  row.call_id = r.Int(i, 1);
  row.name = r.Text(i, 2);
  row.args_json = r.Text(i, 3);
  row.decision.verdict = ParseVerdict(r.Text(i, 4)).value_or(Verdict::kDeny);
  row.decision.rule = r.Text(i, 5);
  row.decision.reason = r.Text(i, 6);
  row.effect = ParseEffect(r.Text(i, 7)).value_or(Effect::kExternal);
  row.state = ParseCallState(r.Text(i, 8)).value_or(CallState::kUnknown);
  row.result_json = r.Text(i, 9);
  row.error_json = r.Text(i, 10);
  row.start_unix_us = r.Int(i, 11);
  row.end_unix_us = r.IntOrNull(i, 12);
  row.args_digest = r.Text(i, 13);
  row.answer_seq = r.IntOrNull(i, 14);
  row.replay_json = r.Text(i, 15);
  return row;
}

RunRow ReadRunRow(const Rows& r, int i) {
  RunRow row;
  row.id = r.Int(i, 0);
  row.flow = r.Text(i, 1);
  row.input_json = r.Text(i, 2);
  row.trigger = r.Text(i, 3);
  row.idempotency_key = r.Text(i, 4);
  row.state = ParseRunState(r.Text(i, 5)).value_or(RunState::kEnded);
  row.activation_id = r.Int(i, 6);
  row.created_unix_us = r.Int(i, 7);
  row.started_unix_us = r.IntOrNull(i, 8);
  row.ended_unix_us = r.IntOrNull(i, 9);
  row.outcome = r.Text(i, 10);
  row.error_json = r.Text(i, 11);
  row.state_detail = r.Text(i, 12);
  row.durable = r.Int(i, 13) != 0;
  row.binding.approval_id = r.Int(i, 14);
  row.binding.source_hash = r.Text(i, 15);
  row.binding.manifest_hash = r.Text(i, 16);
  row.binding.manifest_text_hash = r.Text(i, 17);
  row.binding.seed = r.Text(i, 18);
  row.binding.clock_us = r.Int(i, 19);
  row.resumes = r.Int(i, 20);
  row.attempt = r.Int(i, 21);
  row.wake_unix_us = r.IntOrNull(i, 22);
  row.waiting_for = r.Text(i, 23);
  row.waiting_key = r.Text(i, 24);
  return row;
}

TokenRow ReadTokenRow(const Rows& r, int i) {
  TokenRow row;
  row.id = r.Int(i, 0);
  row.name = r.Text(i, 1);
  row.token_hash = r.Text(i, 2);
  row.scopes_json = r.Text(i, 3);
  row.created_by.uid = r.Int(i, 4);
  row.created_by.name = r.Text(i, 5);
  row.created_unix_us = r.Int(i, 6);
  row.revoked_unix_us = r.IntOrNull(i, 7);
  row.revoked_by.uid = r.Int(i, 8);
  row.revoked_by.name = r.Text(i, 9);
  return row;
}

std::optional<int64_t> LimitParam(size_t limit) {
  if (limit > static_cast<size_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(limit);
}

std::vector<StatementDef> ReadStatements() {
  const std::string activations = kActivationSelect;
  const std::string runs = kRunSelect;
  std::vector<StatementDef> defs = {
      {"r_activation", activations + " WHERE id = $1::bigint"},
      {"r_newest", "SELECT * FROM (" + activations + " ORDER BY id DESC LIMIT $1::bigint) a ORDER BY 1"},
      {"r_calls", std::string(kCallSelect) + " WHERE activation_id = $1::bigint ORDER BY seq"},
      {"r_approval", std::string(kApprovalSelect) + " WHERE id = $1::bigint"},
      {"r_versions", std::string(kApprovalSelect) + " WHERE kind = $1::text AND name = $2::text ORDER BY version"},
      {"r_names", std::string(kApprovalSelect) +
                      " WHERE kind = $1::text AND version = (SELECT max(version) FROM approvals b "
                      "WHERE b.kind = $1::text AND b.name = approvals.name) ORDER BY name COLLATE \"C\""},
      {"r_events",
       "SELECT e.seq, e.at_us, e.kind, e.approval_id, a.kind, a.name, a.version, e.actor_uid, e.actor_name, e.detail "
       "FROM approval_events e JOIN approvals a ON a.id = e.approval_id "
       "WHERE a.kind = $1::text AND ($2::text = '' OR a.name = $2::text) ORDER BY e.seq"},
      {"r_text", "SELECT body FROM texts WHERE hash = $1::text"},
      {"r_run", runs + " WHERE id = $1::bigint"},
      {"r_run_activations", activations + " WHERE run_id = $1::bigint ORDER BY id"},
      {"r_run_calls", std::string(kCallSelect) +
                          " WHERE activation_id IN (SELECT id FROM activations WHERE run_id = $1::bigint) "
                          "ORDER BY activation_id, call_id"},
      {"r_resolutions", std::string(kResolutionSelect) + " WHERE run_id = $1::bigint ORDER BY seq"},
      {"r_tokens", std::string(kTokenSelect) + " ORDER BY id"},
      // The newest `limit` of the operator's kv writes, oldest first.
      {"r_kv_audit_all", std::string("SELECT * FROM (") + kKvAuditSelect + " ORDER BY seq DESC LIMIT $1::bigint) a ORDER BY seq"},
      {"r_kv_audit_of", std::string("SELECT * FROM (") + kKvAuditSelect +
                            " WHERE namespace = $1::bytea ORDER BY seq DESC LIMIT $2::bigint) a ORDER BY seq"},
  };
  // One statement per filter of ListRuns, so each is served by its index.
  for (int by_flow = 0; by_flow < 2; ++by_flow) {
    for (int by_state = 0; by_state < 2; ++by_state) {
      std::string sql = runs + " WHERE id < $1::bigint";
      int n = 2;
      if (by_flow) sql += " AND flow = $" + std::to_string(n++) + "::text";
      if (by_state) sql += " AND state = $" + std::to_string(n++) + "::text";
      // The filters without an index of their own are tested on the rows the id order walks (as
      // SQLite's): outcome, trigger (a kind matches KIND and KIND:NAME), creation time, key.
      const std::string outcome = "$" + std::to_string(n++) + "::text";
      const std::string trigger = "$" + std::to_string(n++) + "::text";
      const std::string since = "$" + std::to_string(n++) + "::bigint";
      const std::string key = "$" + std::to_string(n++) + "::text";
      sql += " AND (" + outcome + " = '' OR outcome = " + outcome + ")";
      sql += " AND (" + trigger + " = '' OR triggered_by = " + trigger + " OR (strpos(" + trigger +
             ", ':') = 0 AND left(triggered_by, length(" + trigger + ") + 1) = " + trigger + " || ':'))";
      sql += " AND created_us >= " + since + " AND (" + key + " = '' OR idempotency_key = " + key + ")";
      sql += " ORDER BY id DESC LIMIT $" + std::to_string(n) + "::bigint";
      defs.push_back({"r_list_runs_" + std::to_string(by_flow) + std::to_string(by_state), sql});
    }
  }
  return defs;
}

Result<std::vector<ActivationRow>> JournalReads::Activations(std::optional<int64_t> id, size_t limit) {
  auto rows = id ? Read("r_activation", Params().Int(*id), "cannot read activation " + std::to_string(*id))
                 : Read("r_newest", Params().IntOrNull(LimitParam(limit)), "cannot read activations");
  if (!rows) return rows.error();
  if (id && rows->rows() == 0) {
    return NotFound("has no activation " + std::to_string(*id) + "; `basal journal` lists the recorded ones");
  }
  return All<ActivationRow>(*rows, ReadActivationRow);
}

Result<std::vector<CallRow>> JournalReads::Calls(int64_t activation_id) {
  auto rows = Read("r_calls", Params().Int(activation_id),
                   "cannot read the host calls of activation " + std::to_string(activation_id));
  if (!rows) return rows.error();
  return All<CallRow>(*rows, ReadCallRow);
}

Result<std::optional<ApprovalRow>> JournalReads::Approval(int64_t id) {
  auto rows = Read("r_approval", Params().Int(id), "cannot read approval " + std::to_string(id));
  if (!rows) return rows.error();
  if (rows->rows() == 0) return std::optional<ApprovalRow>();
  return std::optional<ApprovalRow>(ReadApprovalRow(*rows, 0));
}

Result<std::vector<ApprovalRow>> JournalReads::Versions(ApprovalKind kind, const std::string& name) {
  auto rows = Read("r_versions", Params().Text(ApprovalKindName(kind)).Text(name), "cannot read the versions of " + name);
  if (!rows) return rows.error();
  return All<ApprovalRow>(*rows, ReadApprovalRow);
}

Result<std::vector<ApprovalRow>> JournalReads::Names(ApprovalKind kind) {
  auto rows = Read("r_names", Params().Text(ApprovalKindName(kind)),
                   std::string("cannot list the approved ") + ApprovalKindName(kind) + "s");
  if (!rows) return rows.error();
  return All<ApprovalRow>(*rows, ReadApprovalRow);
}

Result<std::vector<ApprovalEvent>> JournalReads::Events(ApprovalKind kind, const std::string& name) {
  auto rows = Read("r_events", Params().Text(ApprovalKindName(kind)).Text(name), "cannot read the approval events");
  if (!rows) return rows.error();
  std::vector<ApprovalEvent> events;
  for (int i = 0; i < rows->rows(); ++i) {
    ApprovalEvent e;
    e.seq = rows->Int(i, 0);
    e.at_unix_us = rows->Int(i, 1);
    e.kind = rows->Text(i, 2);
    e.approval_id = rows->Int(i, 3);
    e.subject = ParseApprovalKind(rows->Text(i, 4)).value_or(ApprovalKind::kFlow);
    e.name = rows->Text(i, 5);
    e.version = rows->Int(i, 6);
    e.actor.uid = rows->Int(i, 7);
    e.actor.name = rows->Text(i, 8);
    e.detail_json = rows->Text(i, 9);
    events.push_back(std::move(e));
  }
  return events;
}

Result<std::optional<std::string>> JournalReads::Text(const std::string& hash) {
  auto rows = Read("r_text", Params().Text(hash), "cannot read the kept text " + hash);
  if (!rows) return rows.error();
  if (rows->rows() == 0) return std::optional<std::string>();
  return std::optional<std::string>(rows->Bytes(0, 0));
}

Result<std::vector<RunRow>> JournalReads::ListRuns(const RunQuery& query) {
  if (query.limit == 0) return std::vector<RunRow>();
  const bool by_flow = !query.flow.empty();
  const bool by_state = query.state.has_value();
  Params p;
  p.Int(query.before_id > 0 ? query.before_id : std::numeric_limits<int64_t>::max());
  if (by_flow) p.Text(query.flow);
  if (by_state) p.Text(RunStateName(*query.state));
  p.Text(query.outcome).Text(query.trigger).Int(query.since_unix_us).Text(query.idempotency_key);
  p.IntOrNull(LimitParam(query.limit));
  auto rows = Read("r_list_runs_" + std::to_string(by_flow) + std::to_string(by_state), p, "cannot list the runs");
  if (!rows) return rows.error();
  return All<RunRow>(*rows, ReadRunRow);
}

Result<std::optional<RunRow>> JournalReads::GetRun(int64_t run_id) {
  auto rows = Read("r_run", Params().Int(run_id), "cannot read run " + std::to_string(run_id));
  if (!rows) return rows.error();
  if (rows->rows() == 0) return std::optional<RunRow>();
  return std::optional<RunRow>(ReadRunRow(*rows, 0));
}

Result<std::vector<ActivationRow>> JournalReads::RunActivations(int64_t run_id) {
  auto rows = Read("r_run_activations", Params().Int(run_id),
                   "cannot read the activations of run " + std::to_string(run_id));
  if (!rows) return rows.error();
  return All<ActivationRow>(*rows, ReadActivationRow);
}

Result<std::vector<CallRow>> JournalReads::RunCalls(int64_t run_id) {
  auto rows = Read("r_run_calls", Params().Int(run_id), "cannot read the host calls of run " + std::to_string(run_id));
  if (!rows) return rows.error();
  return All<CallRow>(*rows, ReadCallRow);
}

Result<std::vector<CallResolution>> JournalReads::Resolutions(int64_t run_id) {
  auto rows = Read("r_resolutions", Params().Int(run_id),
                   "cannot read the resolutions of run " + std::to_string(run_id));
  if (!rows) return rows.error();
  return All<CallResolution>(*rows, ReadResolution);
}

Result<std::vector<TokenRow>> JournalReads::ListTokens() {
  auto rows = Read("r_tokens", Params(), "cannot list the API tokens");
  if (!rows) return rows.error();
  return All<TokenRow>(*rows, ReadTokenRow);
}

Result<std::vector<KvAuditEntry>> JournalReads::KvAudit(const std::optional<std::string>& ns, size_t limit) {
  if (limit == 0) return std::vector<KvAuditEntry>();
  Params p;
  if (ns) p.Bytes(*ns);
  p.IntOrNull(LimitParam(limit));
  auto rows = Read(ns ? "r_kv_audit_of" : "r_kv_audit_all", p, "cannot read the operator's kv writes");
  if (!rows) return rows.error();
  return All<KvAuditEntry>(*rows, ReadKvAudit);
}

}  // namespace basal::pg
