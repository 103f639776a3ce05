// See read_queries.h.
#include "parent/store/sqlite/read_queries.h"

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
  return row;
}

namespace {

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
  return row;
}

}  // namespace

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
      {&calls_of_, CallSelectSql(schema_version) + " WHERE activation_id=? ORDER BY seq"},
  };
  for (const auto& row : rows) {
    const int rc = sqlite::Prepare(db, row.sql, row.stmt);
    if (rc != SQLITE_OK) return DbError(path, db, rc, "cannot prepare \"" + row.sql + "\"");
  }
  return Ok();
}

void ReadQueries::Finalize() {
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
  Use use(calls_of_);
  int rc = Binder(use.get()).Int(activation_id).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) rows.push_back(ReadCallRow(use.get()));
  }
  if (rc != SQLITE_DONE) {
    return DbError(path_, db_, rc, "cannot read the host calls of activation " + std::to_string(activation_id));
  }
  return rows;
}

}  // namespace basal::sqlite
