// See read_queries.h.
#include "parent/store/sqlite/read_queries.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "parent/store/sqlite/schema.h"

namespace basal::sqlite {

ActivationRow ReadActivationRow(sqlite3_stmt* s) {
  ActivationRow row;
  row.id = sqlite3_column_int64(s, 0);
  row.flow = ColumnText(s, 1);
  row.source_hash = ColumnText(s, 2);
  row.manifest_hash = ColumnText(s, 3);
  row.input_json = ColumnText(s, 4);
  row.start_unix_us = sqlite3_column_int64(s, 5);
  row.end_unix_us = ColumnIntOrNull(s, 6);
  row.outcome = ColumnText(s, 7);
  row.result_json = ColumnText(s, 8);
  row.error_json = ColumnText(s, 9);
  row.cpu_us = sqlite3_column_int64(s, 10);
  row.owner.host = ColumnText(s, 11);
  row.owner.pid = sqlite3_column_int64(s, 12);
  row.owner.start_ticks = sqlite3_column_int64(s, 13);
  row.lease_until_unix_us = sqlite3_column_int64(s, 14);
  row.logs_dropped = sqlite3_column_int64(s, 15);
  row.origin = ParseOrigin(ColumnText(s, 16)).value_or(Origin::kUnrecorded);
  row.approval_id = sqlite3_column_int64(s, 17);
  row.manifest_text_hash = ColumnText(s, 18);
  row.run_id = sqlite3_column_int64(s, 19);
  row.retry_from_call = sqlite3_column_int64(s, 20);
  return row;
}

ApprovalRow ReadApprovalRow(sqlite3_stmt* s) {
  ApprovalRow row;
  row.id = sqlite3_column_int64(s, 0);
  row.kind = ParseApprovalKind(ColumnText(s, 1)).value_or(ApprovalKind::kFlow);
  row.name = ColumnText(s, 2);
  row.version = sqlite3_column_int64(s, 3);
  row.source_hash = ColumnText(s, 4);
  row.manifest_text_hash = ColumnText(s, 5);
  row.manifest_hash = ColumnText(s, 6);
  row.approver.uid = sqlite3_column_int64(s, 7);
  row.approver.name = ColumnText(s, 8);
  row.approved_unix_us = sqlite3_column_int64(s, 9);
  row.note = ColumnText(s, 10);
  row.revoked_unix_us = ColumnIntOrNull(s, 11);
  row.revoker.uid = sqlite3_column_int64(s, 12);
  row.revoker.name = ColumnText(s, 13);
  row.revoke_note = ColumnText(s, 14);
  return row;
}

RunRow ReadRunRow(sqlite3_stmt* s) {
  RunRow row;
  row.id = sqlite3_column_int64(s, 0);
  row.flow = ColumnText(s, 1);
  row.input_json = ColumnText(s, 2);
  row.trigger = ColumnText(s, 3);
  row.idempotency_key = ColumnText(s, 4);
  // The CHECK constraint keeps other texts out; a file changed by hand reads as ended.
  row.state = ParseRunState(ColumnText(s, 5)).value_or(RunState::kEnded);
  row.activation_id = sqlite3_column_int64(s, 6);
  row.created_unix_us = sqlite3_column_int64(s, 7);
  row.started_unix_us = ColumnIntOrNull(s, 8);
  row.ended_unix_us = ColumnIntOrNull(s, 9);
  row.outcome = ColumnText(s, 10);
  row.error_json = ColumnText(s, 11);
  row.state_detail = ColumnText(s, 12);
  row.durable = sqlite3_column_int64(s, 13) != 0;
  row.binding.approval_id = sqlite3_column_int64(s, 14);
  row.binding.source_hash = ColumnText(s, 15);
  row.binding.manifest_hash = ColumnText(s, 16);
  row.binding.manifest_text_hash = ColumnText(s, 17);
  row.binding.seed = ColumnText(s, 18);
  row.binding.clock_us = sqlite3_column_int64(s, 19);
  row.resumes = sqlite3_column_int64(s, 20);
  row.attempt = sqlite3_column_int64(s, 21);
  row.wake_unix_us = ColumnIntOrNull(s, 22);
  row.waiting_for = ColumnText(s, 23);
  row.waiting_key = ColumnText(s, 24);
  return row;
}

TokenRow ReadTokenRow(sqlite3_stmt* s) {
  TokenRow row;
  row.id = sqlite3_column_int64(s, 0);
  row.name = ColumnText(s, 1);
  row.token_hash = ColumnText(s, 2);
  row.scopes_json = ColumnText(s, 3);
  row.created_by.uid = sqlite3_column_int64(s, 4);
  row.created_by.name = ColumnText(s, 5);
  row.created_unix_us = sqlite3_column_int64(s, 6);
  row.revoked_unix_us = ColumnIntOrNull(s, 7);
  row.revoked_by.uid = sqlite3_column_int64(s, 8);
  row.revoked_by.name = ColumnText(s, 9);
  return row;
}

// The CHECK constraints keep other texts out; a file changed by hand reads as the safe value.
CallRow ReadCallRow(sqlite3_stmt* s) {
  CallRow row;
  row.activation_id = sqlite3_column_int64(s, 0);
  row.call_id = sqlite3_column_int64(s, 1);
  row.name = ColumnText(s, 2);
  row.args_json = ColumnText(s, 3);
  row.decision.verdict = ParseVerdict(ColumnText(s, 4)).value_or(Verdict::kDeny);
  row.decision.rule = ColumnText(s, 5);
  row.decision.reason = ColumnText(s, 6);
  row.effect = ParseEffect(ColumnText(s, 7)).value_or(Effect::kExternal);
  row.state = ParseCallState(ColumnText(s, 8)).value_or(CallState::kUnknown);
  row.result_json = ColumnText(s, 9);
  row.error_json = ColumnText(s, 10);
  row.start_unix_us = sqlite3_column_int64(s, 11);
  row.end_unix_us = ColumnIntOrNull(s, 12);
  row.args_digest = ColumnText(s, 13);
  row.answer_seq = ColumnIntOrNull(s, 14);
  row.replay_json = ColumnText(s, 15);
  return row;
}

CallResolution ReadResolution(sqlite3_stmt* s) {
  CallResolution r;
  r.seq = sqlite3_column_int64(s, 0);
  r.run_id = sqlite3_column_int64(s, 1);
  r.activation_id = sqlite3_column_int64(s, 2);
  r.call_id = sqlite3_column_int64(s, 3);
  r.kind = ParseResolutionKind(ColumnText(s, 4)).value_or(ResolutionKind::kRetry);
  r.value_json = ColumnText(s, 5);
  r.actor.uid = sqlite3_column_int64(s, 6);
  r.actor.name = ColumnText(s, 7);
  r.at_unix_us = sqlite3_column_int64(s, 8);
  r.note = ColumnText(s, 9);
  return r;
}

Result<void> ReadQueries::Prepare(sqlite3* db, const std::string& path, int64_t schema_version) {
  db_ = db;
  path_ = path;
  const std::string activations = ActivationSelectSql(schema_version);
  const struct {
    Stmt* stmt;
    std::string sql;
  } rows[] = {
      {&by_id_, activations + " WHERE id=?"},
      {&newest_, "SELECT * FROM (" + activations + " ORDER BY id DESC LIMIT ?) ORDER BY id"},
      // In call id order, straight from UNIQUE (activation_id, call_id) (schema 10 has no index on
      // (activation_id, seq)); Calls() puts them in record order.
      {&calls_of_, CallSelectSql(schema_version) + " WHERE activation_id=? ORDER BY activation_id, call_id"},
  };
  for (const auto& row : rows) {
    const int rc = sqlite::Prepare(db, row.sql, row.stmt);
    if (rc != SQLITE_OK) return DbError(path, db, rc, "cannot prepare \"" + row.sql + "\"");
  }
  has_durable_ = schema_version >= 6;
  if (has_durable_) {
    // Schema 10 indexes a run's activations only when its row may not name them all (listed_by_run,
    // schema.cpp): the others are the one its row names.
    const bool listed = schema_version >= 10;
    const std::string run_activations =
        listed ? activations + " WHERE run_id=?1 AND listed_by_run=1 UNION ALL " + activations +
                     " WHERE id=(SELECT activation_id FROM runs WHERE id=?1) AND run_id=?1 AND listed_by_run IS NULL "
                     "ORDER BY 1"
               : activations + " WHERE run_id=?1 ORDER BY id";
    const std::string run_activation_ids =
        listed ? "SELECT id FROM activations WHERE run_id=?1 AND listed_by_run=1 UNION SELECT activation_id FROM runs "
                 "WHERE id=?1"
               : "SELECT id FROM activations WHERE run_id=?1";
    const struct {
      Stmt* stmt;
      std::string sql;
    } durable[] = {
        {&run_activations_, run_activations},
        {&run_calls_, CallSelectSql(schema_version) + " WHERE activation_id IN (" + run_activation_ids +
                          ") ORDER BY activation_id, call_id"},
        {&resolutions_, std::string(kResolutionSelectSql) + " WHERE run_id=? ORDER BY seq"},
    };
    for (const auto& row : durable) {
      const int rc = sqlite::Prepare(db, row.sql, row.stmt);
      if (rc != SQLITE_OK) return DbError(path, db, rc, "cannot prepare \"" + row.sql + "\"");
    }
  }
  has_kv_audit_ = schema_version >= 7;
  if (has_kv_audit_) {
    // The newest `limit` (by the primary key, or the namespace's index), returned oldest first.
    const std::string select =
        "SELECT seq, at_us, actor_uid, actor_name, reason, namespace, key, op, coalesce(value_sha256, ''), "
        "coalesce(value_bytes, 0), existed FROM kv_audit";
    const struct {
      Stmt* stmt;
      std::string sql;
    } audit[] = {
        {&kv_audit_all_, "SELECT * FROM (" + select + " ORDER BY seq DESC LIMIT ?) ORDER BY seq"},
        {&kv_audit_of_, "SELECT * FROM (" + select + " WHERE namespace=? ORDER BY seq DESC LIMIT ?) ORDER BY seq"},
    };
    for (const auto& row : audit) {
      const int rc = sqlite::Prepare(db, row.sql, row.stmt);
      if (rc != SQLITE_OK) return DbError(path, db, rc, "cannot prepare \"" + row.sql + "\"");
    }
  }
  has_runs_ = schema_version >= 5;
  if (has_runs_) {
    const std::string runs = RunSelectSql(schema_version);
    if (const int rc = sqlite::Prepare(db, runs + " WHERE id=?", &run_by_id_); rc != SQLITE_OK) {
      return DbError(path, db, rc, "cannot prepare the run query");
    }
    if (const int rc = sqlite::Prepare(db, std::string(kTokenSelectSql) + " ORDER BY id", &tokens_); rc != SQLITE_OK) {
      return DbError(path, db, rc, "cannot prepare the token query");
    }
    for (int by_flow = 0; by_flow < 2; ++by_flow) {
      for (int by_state = 0; by_state < 2; ++by_state) {
        // The filters without an index of their own are tested on the rows the id order walks.
        const std::string sql = runs + " WHERE id < ?" + (by_flow ? " AND flow = ?" : "") +
                                (by_state ? " AND state = ?" : "") +
                                " AND (:outcome = '' OR outcome = :outcome)"
                                " AND (:trigger = '' OR triggered_by = :trigger OR (instr(:trigger, ':') = 0 AND"
                                " substr(triggered_by, 1, length(:trigger) + 1) = :trigger || ':'))"
                                " AND created_us >= :since AND (:key = '' OR idempotency_key = :key)"
                                " ORDER BY id DESC LIMIT ?";
        const int rc = sqlite::Prepare(db, sql, &list_runs_[by_flow][by_state]);
        if (rc != SQLITE_OK) return DbError(path, db, rc, "cannot prepare \"" + sql + "\"");
      }
    }
  }
  has_catalog_ = schema_version >= 4;
  if (!has_catalog_) return Ok();
  const struct {
    Stmt* stmt;
    std::string sql;
  } catalog[] = {
      {&approval_, std::string(kApprovalSelectSql) + " WHERE id=?"},
      {&versions_, std::string(kApprovalSelectSql) + " WHERE kind=? AND name=? ORDER BY version"},
      {&newest_version_, std::string(kApprovalSelectSql) + " WHERE kind=? AND name=? ORDER BY version DESC LIMIT 1"},
      {&names_, std::string(kApprovalSelectSql) +
                    " WHERE kind=?1 AND version=(SELECT max(version) FROM approvals b WHERE b.kind=?1 AND b.name=approvals.name)"
                    " ORDER BY name"},
      {&events_,
       "SELECT e.seq, e.at_us, e.kind, e.approval_id, a.kind, a.name, a.version, e.actor_uid, e.actor_name, e.detail "
       "FROM approval_events e JOIN approvals a ON a.id=e.approval_id WHERE a.kind=?1 AND (?2='' OR a.name=?2) "
       "ORDER BY e.seq"},
      {&text_, "SELECT body FROM texts WHERE hash=?"},
  };
  for (const auto& row : catalog) {
    const int rc = sqlite::Prepare(db, row.sql, row.stmt);
    if (rc != SQLITE_OK) return DbError(path, db, rc, "cannot prepare \"" + row.sql + "\"");
  }
  return Ok();
}

Result<std::optional<ApprovalRow>> ReadQueries::Approval(int64_t id) {
  if (!has_catalog_) return std::optional<ApprovalRow>();
  Use use(approval_);
  int rc = Binder(use.get()).Int(id).rc();
  std::optional<ApprovalRow> row;
  if (rc == SQLITE_OK) {
    rc = sqlite3_step(use.get());
    if (rc == SQLITE_ROW) {
      row = ReadApprovalRow(use.get());
      rc = SQLITE_DONE;
    }
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read approval " + std::to_string(id));
  return row;
}

Result<std::vector<ApprovalRow>> ReadQueries::Versions(ApprovalKind kind, const std::string& name) {
  std::vector<ApprovalRow> rows;
  if (!has_catalog_) return rows;
  Use use(versions_);
  int rc = Binder(use.get()).Text(ApprovalKindName(kind)).Text(name).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) rows.push_back(ReadApprovalRow(use.get()));
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read the versions of " + name);
  return rows;
}

Result<std::optional<ApprovalRow>> ReadQueries::NewestVersion(ApprovalKind kind, const std::string& name) {
  if (!has_catalog_) return std::optional<ApprovalRow>();
  Use use(newest_version_);
  int rc = Binder(use.get()).Text(ApprovalKindName(kind)).Text(name).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) return std::optional<ApprovalRow>(ReadApprovalRow(use.get()));
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read the newest version of " + name);
  return std::optional<ApprovalRow>();
}

Result<std::vector<ApprovalRow>> ReadQueries::Names(ApprovalKind kind) {
  std::vector<ApprovalRow> rows;
  if (!has_catalog_) return rows;
  Use use(names_);
  int rc = Binder(use.get()).Text(ApprovalKindName(kind)).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) rows.push_back(ReadApprovalRow(use.get()));
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, std::string("cannot list the approved ") + ApprovalKindName(kind) + "s");
  return rows;
}

Result<std::vector<ApprovalEvent>> ReadQueries::Events(ApprovalKind kind, const std::string& name) {
  std::vector<ApprovalEvent> rows;
  if (!has_catalog_) return rows;
  Use use(events_);
  int rc = Binder(use.get()).Text(ApprovalKindName(kind)).Text(name).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) {
      sqlite3_stmt* s = use.get();
      ApprovalEvent e;
      e.seq = sqlite3_column_int64(s, 0);
      e.at_unix_us = sqlite3_column_int64(s, 1);
      e.kind = ColumnText(s, 2);
      e.approval_id = sqlite3_column_int64(s, 3);
      e.subject = ParseApprovalKind(ColumnText(s, 4)).value_or(ApprovalKind::kFlow);
      e.name = ColumnText(s, 5);
      e.version = sqlite3_column_int64(s, 6);
      e.actor.uid = sqlite3_column_int64(s, 7);
      e.actor.name = ColumnText(s, 8);
      e.detail_json = ColumnText(s, 9);
      rows.push_back(std::move(e));
    }
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read the approval events");
  return rows;
}

Result<std::optional<std::string>> ReadQueries::Text(const std::string& hash) {
  if (!has_catalog_) return std::optional<std::string>();
  Use use(text_);
  int rc = Binder(use.get()).Text(hash).rc();
  std::optional<std::string> text;
  if (rc == SQLITE_OK) {
    rc = sqlite3_step(use.get());
    if (rc == SQLITE_ROW) {
      const void* data = sqlite3_column_blob(use.get(), 0);
      const int n = sqlite3_column_bytes(use.get(), 0);
      text = std::string(static_cast<const char*>(data ? data : ""), static_cast<size_t>(n));
      rc = SQLITE_DONE;
    }
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read the kept text " + hash);
  return text;
}

Result<std::vector<RunRow>> ReadQueries::ListRuns(const RunQuery& query) {
  std::vector<RunRow> rows;
  if (!has_runs_ || query.limit == 0) return rows;
  const bool by_flow = !query.flow.empty();
  const bool by_state = query.state.has_value();
  Use use(list_runs_[by_flow][by_state]);
  Binder bind(use.get());
  bind.Int(query.before_id > 0 ? query.before_id : INT64_MAX);
  if (by_flow) bind.Text(query.flow);
  if (by_state) bind.Text(RunStateName(*query.state));
  bind.Text(query.outcome).Text(query.trigger).Int(query.since_unix_us).Text(query.idempotency_key);
  int rc = bind.Int(LimitParam(query.limit)).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) rows.push_back(ReadRunRow(use.get()));
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot list the runs");
  return rows;
}

Result<std::optional<RunRow>> ReadQueries::GetRun(int64_t run_id) {
  if (!has_runs_) return std::optional<RunRow>();
  Use use(run_by_id_);
  int rc = Binder(use.get()).Int(run_id).rc();
  std::optional<RunRow> row;
  if (rc == SQLITE_OK) {
    rc = sqlite3_step(use.get());
    if (rc == SQLITE_ROW) {
      row = ReadRunRow(use.get());
      rc = SQLITE_DONE;
    }
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read run " + std::to_string(run_id));
  return row;
}

Result<std::vector<TokenRow>> ReadQueries::ListTokens() {
  std::vector<TokenRow> rows;
  if (!has_runs_) return rows;
  Use use(tokens_);
  int rc;
  while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) rows.push_back(ReadTokenRow(use.get()));
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot list the API tokens");
  return rows;
}

Result<std::vector<ActivationRow>> ReadQueries::RunActivations(int64_t run_id) {
  std::vector<ActivationRow> rows;
  if (!has_durable_) return rows;
  Use use(run_activations_);
  int rc = Binder(use.get()).Int(run_id).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) rows.push_back(ReadActivationRow(use.get()));
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read the activations of run " + std::to_string(run_id));
  return rows;
}

Result<std::vector<CallRow>> ReadQueries::RunCalls(int64_t run_id) {
  std::vector<CallRow> rows;
  if (!has_durable_) return rows;
  Use use(run_calls_);
  int rc = Binder(use.get()).Int(run_id).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) rows.push_back(ReadCallRow(use.get()));
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read the host calls of run " + std::to_string(run_id));
  return rows;
}

Result<std::vector<CallResolution>> ReadQueries::Resolutions(int64_t run_id) {
  std::vector<CallResolution> rows;
  if (!has_durable_) return rows;
  Use use(resolutions_);
  int rc = Binder(use.get()).Int(run_id).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) rows.push_back(ReadResolution(use.get()));
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read the resolutions of run " + std::to_string(run_id));
  return rows;
}

Result<std::vector<KvAuditEntry>> ReadQueries::KvAudit(const std::optional<std::string>& ns, size_t limit) {
  std::vector<KvAuditEntry> rows;
  if (!has_kv_audit_ || limit == 0) return rows;
  Use use(ns ? kv_audit_of_ : kv_audit_all_);
  Binder bind(use.get());
  if (ns) bind.Text(*ns);
  int rc = bind.Int(LimitParam(limit)).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) {
      sqlite3_stmt* s = use.get();
      KvAuditEntry e;
      e.seq = sqlite3_column_int64(s, 0);
      e.at_unix_us = sqlite3_column_int64(s, 1);
      e.actor.uid = sqlite3_column_int64(s, 2);
      e.actor.name = ColumnText(s, 3);
      e.reason = ColumnText(s, 4);
      e.ns = ColumnText(s, 5);
      e.key = ColumnText(s, 6);
      e.op = ParseKvAuditOp(ColumnText(s, 7)).value_or(KvAuditOp::kPut);
      e.value_sha256 = ColumnText(s, 8);
      e.value_bytes = static_cast<uint64_t>(sqlite3_column_int64(s, 9));
      e.existed = sqlite3_column_int64(s, 10) != 0;
      rows.push_back(std::move(e));
    }
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read the operator's kv writes");
  return rows;
}

void ReadQueries::Finalize() {
  kv_audit_all_.reset();
  kv_audit_of_.reset();
  run_activations_.reset();
  run_calls_.reset();
  resolutions_.reset();
  run_by_id_.reset();
  tokens_.reset();
  for (auto& by_flow : list_runs_) {
    for (Stmt& stmt : by_flow) stmt.reset();
  }
  approval_.reset();
  versions_.reset();
  newest_version_.reset();
  names_.reset();
  events_.reset();
  text_.reset();
  by_id_.reset();
  newest_.reset();
  calls_of_.reset();
}

Result<std::vector<ActivationRow>> ReadQueries::Activations(std::optional<int64_t> id, size_t limit) {
  std::vector<ActivationRow> rows;
  Use use(id ? by_id_ : newest_);
  int rc = Binder(use.get()).Int(id ? *id : LimitParam(limit)).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) rows.push_back(ReadActivationRow(use.get()));
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read activations");
  if (id && rows.empty()) {
    return JournalError(ErrorCode::kNotFound, path_,
                        "has no activation " + std::to_string(*id) + "; `basal journal` lists the recorded ones");
  }
  return rows;
}

Result<std::vector<CallRow>> ReadQueries::Calls(int64_t activation_id) {
  std::vector<CallRow> rows;
  std::vector<std::pair<int64_t, size_t>> order;  // (seq, index in rows)
  Use use(calls_of_);
  int rc = Binder(use.get()).Int(activation_id).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) {
      order.emplace_back(sqlite3_column_int64(use.get(), kCallSeqColumn), rows.size());
      rows.push_back(ReadCallRow(use.get()));
    }
  }
  if (rc != SQLITE_DONE) {
    return DbError(path_, db_, rc, "cannot read the host calls of activation " + std::to_string(activation_id));
  }
  // Record order. Call id order is record order for calls made one after another; calls in flight
  // at once may be recorded in another order (a pure call is recorded with its answer, and answers
  // come back in any order). Then the rows, all in memory already (one activation's: at most
  // budgets.journal_kb / 128 bytes + 1 records, docs/journal.md) are sorted here instead of by
  // SQLite's sorter, which spilled a large activation's rows to a temporary file.
  if (std::is_sorted(order.begin(), order.end())) return rows;
  std::sort(order.begin(), order.end());
  std::vector<CallRow> sorted;
  sorted.reserve(rows.size());
  for (const auto& [seq, index] : order) sorted.push_back(std::move(rows[index]));
  return sorted;
}

}  // namespace basal::sqlite
